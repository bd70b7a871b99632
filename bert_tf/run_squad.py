"""Fine-tune for extractive question answering on SQuAD v1.1 / v2.0 (the original run_squad).

    python -m bert_tf.run_squad --train_file=train-v1.1.json --predict_file=dev-v1.1.json \\
        --init_checkpoint=pretrain_out --output_dir=squad_out --do_train --do_predict

Contexts longer than --max_seq_length are cut into windows --doc_stride tokens apart (never
truncated); each answer is scored from the window where it has the most context. Writes
predictions.json, nbest_predictions.json (and null_odds.json with
--version_2_with_negative), and eval_results.txt with exact_match and f1 as the official
evaluation scripts compute them whenever --predict_file has answers (v2.0: also HasAns_f1,
NoAns_f1, best_f1 and best_f1_thresh).
"""

from __future__ import annotations

from absl import flags

from bert_tf import finetune_main
from bert_tf.finetune import cli

FLAGS = flags.FLAGS
cli.define_common_flags(max_seq_length=384, learning_rate=3e-5, train_batch_size=12)
flags.DEFINE_string("train_file", None, "SQuAD JSON for training.")
flags.DEFINE_string("predict_file", None, "SQuAD JSON to predict (and score, with answers).")
flags.DEFINE_bool("version_2_with_negative", False, "SQuAD 2.0: questions may have no answer.")
flags.DEFINE_float("null_score_diff_threshold", 0.0,
                   "v2.0: predict no answer when null score - best span score exceeds this.")
flags.DEFINE_integer("doc_stride", 128, "Tokens between the starts of context windows.")
flags.DEFINE_integer("max_query_length", 64, "Question tokens kept at most.")
flags.DEFINE_integer("n_best_size", 20, "Candidates per window and in nbest_predictions.json.")
flags.DEFINE_integer("max_answer_length", 30, "Longest answer, in tokens.")


def _task():
    from bert_tf.finetune.squad.squad_task import SquadSettings, SquadTask

    return SquadTask(SquadSettings(
        train_file=FLAGS.train_file or "", predict_file=FLAGS.predict_file or "",
        version_2_with_negative=FLAGS.version_2_with_negative,
        null_score_diff_threshold=FLAGS.null_score_diff_threshold,
        doc_stride=FLAGS.doc_stride, max_query_length=FLAGS.max_query_length,
        n_best_size=FLAGS.n_best_size, max_answer_length=FLAGS.max_answer_length,
        do_lower_case=FLAGS.do_lower_case))


# The `bert-tf-squad` console script is console_main.
main, console_main = finetune_main.entry_points(_task, __name__)


if __name__ == "__main__":
    console_main()
