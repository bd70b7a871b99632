"""Fine-tune for sentence(-pair) classification or regression (the original run_classifier).

    python -m bert_tf.run_classifier --task_name=sst2 --data_dir=glue/SST-2 \\
        --init_checkpoint=pretrain_out --output_dir=sst2_out --do_train --do_eval

GLUE tasks (cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte, wnli) read their TSV layouts;
`--task_name=tsv|csv|jsonl` reads train/dev/test files of your own with --text_column,
--text_pair_column and --label_column. Writes eval_results.txt (eval_accuracy, eval_loss,
eval_f1 for binary tasks, eval_mcc for CoLA, eval_pearson/eval_spearman for regression) and,
with --do_predict, test_results.tsv (per-class probabilities and the label string).
"""

from __future__ import annotations

from absl import flags

from bert_tf import finetune_main
from bert_tf.finetune import cli

FLAGS = flags.FLAGS
cli.define_common_flags(max_seq_length=128, learning_rate=5e-5, train_batch_size=32)
flags.DEFINE_string("task_name", None, "A GLUE task name, or tsv / csv / jsonl.")
flags.DEFINE_string("data_dir", None, "Directory of train/dev/test files.")
flags.DEFINE_string("text_column", None, "tsv/csv/jsonl: the column of the (first) text.")
flags.DEFINE_string("text_pair_column", None, "tsv/csv/jsonl: the column of the second text.")
flags.DEFINE_string("label_column", None, "tsv/csv/jsonl: the column of the label.")
flags.DEFINE_bool("regression", False, "tsv/csv/jsonl: float labels, MSE loss.")
flags.DEFINE_string("eval_split", "dev", "The split --do_eval scores (MNLI: dev_mismatched too).")
cli.define_classifier_readout_flag()
cli.define_classifier_head_flag()


def _task():
    from bert_tf.core.errors import UserError
    from bert_tf.finetune.classification.classification_task import (
        ClassificationSettings,
        ClassificationTask,
    )

    if not FLAGS.task_name:
        raise UserError("--task_name is required")
    if not FLAGS.data_dir:
        raise UserError("--data_dir is required")
    return ClassificationTask(ClassificationSettings(
        task_name=FLAGS.task_name, data_dir=FLAGS.data_dir,
        text_column=FLAGS.text_column or "", text_pair_column=FLAGS.text_pair_column or "",
        label_column=FLAGS.label_column or "", regression=FLAGS.regression,
        eval_split=FLAGS.eval_split, classifier_readout=FLAGS.classifier_readout,
        classifier_head=FLAGS.classifier_head))


# The `bert-tf-classify` console script is console_main.
main, console_main = finetune_main.entry_points(_task, __name__)


if __name__ == "__main__":
    console_main()
