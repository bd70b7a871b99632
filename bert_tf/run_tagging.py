"""Fine-tune for token tagging: NER, POS, chunking (CoNLL files).

    python -m bert_tf.run_tagging --train_file=train.conll --eval_file=dev.conll \\
        --init_checkpoint=pretrain_out --output_dir=ner_out --do_train --do_eval

A CoNLL file has a token and its tag in the first and last columns, a blank line between
sentences; -DOCSTART- lines are skipped and tags (BIO, IOB1, IOB2, ...) are used as given.
Each word's label goes on its first WordPiece; longer sentences are split into overlapping
windows, never cut. Writes eval_results.txt (entity-level eval_precision, eval_recall,
eval_f1 as seqeval computes them, eval_accuracy over words, eval_loss), the dev predictions,
and with --do_predict test_predictions.conll.
"""

from __future__ import annotations

from absl import flags

from bert_tf import finetune_main
from bert_tf.finetune import cli

FLAGS = flags.FLAGS
cli.define_common_flags(max_seq_length=128, learning_rate=5e-5, train_batch_size=32)
flags.DEFINE_string("train_file", None, "CoNLL training file.")
flags.DEFINE_string("eval_file", None, "CoNLL dev file (with tags).")
flags.DEFINE_string("predict_file", None, "CoNLL (or one-token-per-line) file to tag.")


def _task():
    from bert_tf.finetune.tagging.tagging_task import TaggingSettings, TaggingTask

    return TaggingTask(TaggingSettings(train_file=FLAGS.train_file or "",
                                       eval_file=FLAGS.eval_file or "",
                                       predict_file=FLAGS.predict_file or ""))


# The `bert-tf-tag` console script is console_main.
main, console_main = finetune_main.entry_points(_task, __name__)


if __name__ == "__main__":
    console_main()
