"""Score a checkpoint on GLUE (or your own suite of tasks): a scorecard of fine-tuning runs.

    python -m bert_tf.run_glue --init_checkpoint=pretrain_out --glue_dir=glue \\
        --output_dir=scorecard --protocol=fixed --learning_rate=5e-5 --seeds=1,2,3

Fine-tunes the checkpoint on each task (GLUE's folder names in --glue_dir: CoLA, SST-2,
MRPC, STS-B, QQP, MNLI, QNLI, RTE; WNLI only when named) with every learning rate and seed,
each run the run_classifier flow in its own folder under --output_dir/runs, then prints and
writes scorecard.md and scorecard.json: per task GLUE's metric (CoLA MCC; SST-2, QNLI, RTE
accuracy; MRPC, QQP F1 and accuracy; STS-B Pearson and Spearman; MNLI matched and mismatched
accuracy) as mean ± std and median over seeds, and the GLUE score (a task with two metrics
counts as their mean).

* --protocol=fixed: one setting for every task (--learning_rate, --train_batch_size,
  --num_train_epochs, --warmup_proportion, --max_seq_length), as Cramming's GLUE-sane.
* --protocol=grid: --learning_rates x --seeds; per task the learning rate with the best mean
  dev score over seeds is kept, as the BERT paper did.
* --max_train_examples=N: a seeded subset of each training set, for screening on a budget
  (the report says so).
* --classifier_readout=pooler|cls|mean: the classification head's sentence vector (the
  pooled [CLS], [CLS] without the pooler, or the mean over the real tokens), for every
  classification task; a suite's task may name its own.
* --classifier_head=auto|bert|electra: BERT's head or ELECTRA's (dense + GELU + dense on
  [CLS]); auto picks electra for an ELECTRA checkpoint, so give electra to score a random
  reference with the same head.
* --reference_checkpoint adds a second row with the identical protocol (`random`: the same
  architecture from random weights, to see what pretraining bought).
* --do_predict: the GLUE server's files from each task's selected run, and submission.zip.
* --suite=FILE: a JSON list of tasks of any kind (classification, tagging, squad, glue)
  instead of GLUE; see `bert_tf.finetune.scorecard.suite`.

Rerunning the same command skips the runs that finished, so a killed scorecard resumes.
"""

from __future__ import annotations

from absl import flags

from bert_tf import install_check
from bert_tf.core import errors
from bert_tf.core.errors import UserError, cli_main
from bert_tf.finetune import cli
from bert_tf.training import distribution_flags

FLAGS = flags.FLAGS
flags.DEFINE_string("init_checkpoint", None,
                    "The model to score: a bert_tf checkpoint or output directory, a Google "
                    "TF1 checkpoint or a Hugging Face directory (none: random weights).")
flags.DEFINE_string("bert_config_file", None,
                    "bert_config.json (default: the one beside --init_checkpoint).")
flags.DEFINE_string("vocab_file", None, "vocab.txt (default: beside --init_checkpoint).")
flags.DEFINE_bool("do_lower_case", True, "Lower-case and strip accents (uncased models).")
flags.DEFINE_string("name", None, "The model's name in the report (default: the checkpoint's "
                    "folder name).")
flags.DEFINE_string("reference_checkpoint", None,
                    "A second model scored with the identical protocol, or `random`: the "
                    "model's architecture from random weights.")
flags.DEFINE_string("reference_name", None, "The reference's name in the report.")
flags.DEFINE_string("glue_dir", None, "GLUE's download: one folder per task (CoLA, SST-2, "
                    "MRPC, STS-B, QQP, MNLI, QNLI, RTE, WNLI, diagnostic).")
flags.DEFINE_list("tasks", [], "GLUE tasks to score (default: every task present, WNLI "
                  "left out as the BERT paper did).")
flags.DEFINE_string("suite", None, "A JSON suite of tasks of any kind instead of GLUE.")
flags.DEFINE_string("output_dir", None, "Runs, scorecard.md, scorecard.json, submission.")
flags.DEFINE_enum("protocol", "fixed", ["fixed", "grid"],
                  "fixed: one setting for every task; grid: the best learning rate per task.")
flags.DEFINE_float("learning_rate", 5e-5, "--protocol=fixed: the learning rate.")
flags.DEFINE_list("learning_rates", ["5e-5", "4e-5", "3e-5", "2e-5"],
                  "--protocol=grid: the learning rates tried (the BERT paper's).")
flags.DEFINE_list("seeds", ["1", "2", "3"], "Fine-tuning seeds.")
flags.DEFINE_integer("train_batch_size", 32, "GLOBAL training batch.")
flags.DEFINE_integer("eval_batch_size", 32, "GLOBAL eval/predict batch.")
flags.DEFINE_float("num_train_epochs", 3.0, "Epochs of fine-tuning.")
flags.DEFINE_float("warmup_proportion", 0.1, "Share of the steps with linear warmup.")
flags.DEFINE_integer("max_seq_length", 128, "Tokens per sequence.")
flags.DEFINE_integer("max_train_examples", 0, "Train on a seeded subset of at most this many "
                     "examples per task (0 = all).")
flags.DEFINE_integer("subset_seed", 0, "Seed of the --max_train_examples subsets.")
flags.DEFINE_bool("do_predict", False, "Write the GLUE server's files and submission.zip.")
flags.DEFINE_bool("keep_checkpoints", False, "Keep every run's fine-tuned checkpoint.")
cli.define_classifier_readout_flag()
cli.define_classifier_head_flag()
distribution_flags.define_flags()


def _numbers(name: str, values, kind):
    try:
        return tuple(kind(v) for v in values)
    except ValueError:
        raise UserError(f"--{name}: expected {kind.__name__}s, got {','.join(values)}") from None


def _config():
    import os

    from bert_tf.finetune.scorecard.scorecard import ScorecardConfig
    from bert_tf.finetune.scorecard.scorecard_runs import Model, Protocol

    lrs = ((FLAGS.learning_rate,) if FLAGS.protocol == "fixed"
           else _numbers("learning_rates", FLAGS.learning_rates, float))
    protocol = Protocol(
        name=FLAGS.protocol, learning_rates=lrs, seeds=_numbers("seeds", FLAGS.seeds, int),
        train_batch_size=FLAGS.train_batch_size, eval_batch_size=FLAGS.eval_batch_size,
        num_train_epochs=FLAGS.num_train_epochs, warmup_proportion=FLAGS.warmup_proportion,
        max_seq_length=FLAGS.max_seq_length, max_train_examples=FLAGS.max_train_examples,
        subset_seed=FLAGS.subset_seed, classifier_readout=FLAGS.classifier_readout,
        classifier_head=FLAGS.classifier_head)
    init = FLAGS.init_checkpoint or ""
    name = FLAGS.name or (os.path.basename(os.path.normpath(init)) if init else "random")
    model = Model(name, init, FLAGS.bert_config_file or "", FLAGS.vocab_file or "",
                  FLAGS.do_lower_case)
    models = [model]
    ref = FLAGS.reference_checkpoint
    if ref:
        if ref == "random":  # the scorecard takes config and vocab from the model's
            models.append(Model(FLAGS.reference_name or "random", "", model.bert_config_file,
                                model.vocab_file, FLAGS.do_lower_case))
        else:
            models.append(Model(FLAGS.reference_name
                                or os.path.basename(os.path.normpath(ref)), ref, "", "",
                                FLAGS.do_lower_case))
    return ScorecardConfig(
        output_dir=FLAGS.output_dir or "", models=tuple(models), protocol=protocol,
        glue_dir=FLAGS.glue_dir or "", tasks=tuple(FLAGS.tasks), suite_file=FLAGS.suite or "",
        do_predict=FLAGS.do_predict, keep_checkpoints=FLAGS.keep_checkpoints,
        distribution=distribution_flags.config_from_flags())


@cli_main
def main(argv) -> None:
    if len(argv) > 1:
        raise UserError(f"unexpected arguments: {' '.join(argv[1:])}")
    from bert_tf.finetune.scorecard import scorecard

    scorecard.run(_config())


def console_main() -> None:
    """The `bert-tf-glue` console script."""
    errors.run_app(main, preflight=install_check.problems)


if __name__ == "__main__":
    console_main()
