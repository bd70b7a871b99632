"""The flags the three fine-tuning entry points share, and their common main.

Only the `python -m` entry points (bert_tf.run_classifier, run_tagging, run_squad; run_glue
for `--classifier_readout`) import this module: it defines absl flags, which are parsed
there and turned at once into a frozen `runner.FinetuneConfig`. Names are the original
release's where it had the flag.
"""

from __future__ import annotations

from typing import Callable, Mapping, Optional

from absl import flags, logging

from bert_tf.core import errors
from bert_tf.core.errors import UserError
from bert_tf.training import distribution_flags

FLAGS = flags.FLAGS
# What an entry point runs: {flag: help}. run_rerank names its evaluation --do_rerank.
RUN_MODES = {"do_train": "Fine-tune.", "do_eval": "Evaluate on the dev data.",
             "do_predict": "Predict on the test data."}


def define_common_flags(max_seq_length: int = 128, learning_rate: float = 5e-5,
                        train_batch_size: int = 32, eval_batch_size: int = 8,
                        run_modes: Mapping[str, str] = RUN_MODES) -> None:
    """Defines the model, run, recipe and hardware flags (call once, at import).

    Args:
        max_seq_length, learning_rate, train_batch_size, eval_batch_size: the defaults.
        run_modes: the --do_* flags {name: help}: do_train and one evaluation flag, and
            optionally do_predict (`config_from_flags` reads them).
    """
    flags.DEFINE_string("bert_config_file", None,
                        "bert_config.json (default: the one beside --init_checkpoint).")
    flags.DEFINE_string("vocab_file", None, "vocab.txt (default: beside --init_checkpoint).")
    flags.DEFINE_bool("do_lower_case", True, "Lower-case and strip accents (uncased models).")
    flags.DEFINE_string("init_checkpoint", None,
                        "A bert_tf checkpoint or output directory, a Google TF1 checkpoint or a "
                        "Hugging Face directory (the format is detected).")
    flags.DEFINE_string("output_dir", None, "Checkpoints, eval results and predictions.")
    for name, help_text in run_modes.items():
        flags.DEFINE_bool(name, False, help_text)
    flags.DEFINE_integer("train_batch_size", train_batch_size, "GLOBAL training batch.")
    flags.DEFINE_integer("eval_batch_size", eval_batch_size, "GLOBAL eval/predict batch.")
    flags.DEFINE_float("learning_rate", learning_rate, "Peak learning rate (AdamW).")
    flags.DEFINE_float("num_train_epochs", 3.0, "Epochs of fine-tuning.")
    flags.DEFINE_float("warmup_proportion", 0.1, "Share of the steps with linear warmup.")
    flags.DEFINE_float("weight_decay_rate", 0.01, "Decoupled weight decay (not on LayerNorm "
                       "and biases).")
    flags.DEFINE_float("clip_norm", 1.0, "Global-norm gradient clipping (0 = off).")
    flags.DEFINE_integer("max_seq_length", max_seq_length, "Tokens per sequence.")
    flags.DEFINE_integer("seed", 12345, "Seeds the head's initialization, dropout and order.")
    distribution_flags.define_flags()
    flags.DEFINE_integer("save_checkpoints_steps", 1000, "Checkpoint every N steps and at "
                         "the end.")
    flags.DEFINE_integer("keep_checkpoint_max", 1, "Recent checkpoints to keep.")
    flags.DEFINE_integer("steps_per_loop", 1, "Train steps between progress and checkpoint "
                         "checks (run in calls of about 2 s).")
    flags.DEFINE_integer("log_every_n_steps", 100, "Progress line every N steps (and 30 s).")
    flags.DEFINE_integer("max_steps_per_run", 0, "Stop after N steps with a checkpoint.")
    flags.DEFINE_string("export_dir", None, "Also write a serving SavedModel (raw text in) "
                        "there.")


# bert_tf.finetune.heads.READOUTS, spelt out: defining a flag must not import Keras.
READOUTS = ("pooler", "cls", "mean")


def define_classifier_readout_flag() -> None:
    """--classifier_readout: the sentence vector the classification head reads."""
    flags.DEFINE_enum("classifier_readout", "pooler", list(READOUTS),
                      "The classifier's input: pooler = the pooled [CLS] output (BERT's head; "
                      "its pooler is trained only by NSP), cls = the [CLS] row of the "
                      "sequence output without the pooler, mean = the mean of the sequence "
                      "output over the real tokens.")


def define_classifier_head_flag() -> None:
    """--classifier_head: BERT's classification head or ELECTRA's."""
    flags.DEFINE_enum("classifier_head", "auto", ["auto", "bert", "electra", "modernbert"],
                      "The classification head: bert = dropout + dense on the "
                      "--classifier_readout vector; electra = ELECTRA's head, dense + GELU + "
                      "dense on the [CLS] row (no pooler); modernbert = ModernBERT's head, "
                      "dense + GELU + LayerNorm + dense on [CLS] (or the token mean with "
                      "--classifier_readout=mean), its dense and norm from the MLM head; "
                      "auto = modernbert for a modern encoder, electra when "
                      "--init_checkpoint is an ELECTRA discriminator, else bert.")


def config_from_flags(eval_mode: str = "do_eval"):
    """The frozen `runner.FinetuneConfig` of the parsed flags.

    Args:
        eval_mode: the flag that sets `do_eval` (run_rerank: "do_rerank").

    Raises:
        UserError: no run mode given (named by the entry point's own flags).
    """
    from bert_tf.finetune.runner import FinetuneConfig

    modes = ["--" + name for name in ("do_train", eval_mode, "do_predict") if name in FLAGS]
    if not any(FLAGS[name[2:]].value for name in modes):  # as FinetuneConfig says it
        raise UserError(f"at least one of {', '.join(modes[:-1])} or {modes[-1]} must be true")
    return FinetuneConfig(
        output_dir=FLAGS.output_dir or "", bert_config_file=FLAGS.bert_config_file or "",
        vocab_file=FLAGS.vocab_file or "", do_lower_case=FLAGS.do_lower_case,
        init_checkpoint=FLAGS.init_checkpoint or "", do_train=FLAGS.do_train,
        do_eval=FLAGS[eval_mode].value,
        do_predict="do_predict" in FLAGS and FLAGS.do_predict,
        train_batch_size=FLAGS.train_batch_size, eval_batch_size=FLAGS.eval_batch_size,
        learning_rate=FLAGS.learning_rate, num_train_epochs=FLAGS.num_train_epochs,
        warmup_proportion=FLAGS.warmup_proportion, weight_decay_rate=FLAGS.weight_decay_rate,
        clip_norm=FLAGS.clip_norm, max_seq_length=FLAGS.max_seq_length, seed=FLAGS.seed,
        distribution=distribution_flags.config_from_flags(),
        save_checkpoints_steps=FLAGS.save_checkpoints_steps,
        keep_checkpoint_max=FLAGS.keep_checkpoint_max, steps_per_loop=FLAGS.steps_per_loop,
        log_every_n_steps=FLAGS.log_every_n_steps, max_steps_per_run=FLAGS.max_steps_per_run,
        export_dir=FLAGS.export_dir or "")


def run_main(argv, make_task: Callable[[], object],
             export_fn: Callable[[str, str, object], None],
             eval_mode: Optional[str] = None) -> None:
    """The body of every entry point's main: flags -> configs -> runner.run, exit codes.

    Args:
        argv: what absl left after parsing.
        make_task: builds the task from the task's own flags.
        export_fn: (fine-tuned output_dir, export_dir, model in memory) -> writes the serving
            SavedModel (`bert_tf.export.task_serving.export_finetuned`).
        eval_mode: the entry point's evaluation flag (None: --do_eval).
    """
    if len(argv) > 1:
        raise UserError(f"unexpected arguments: {' '.join(argv[1:])}")
    logging.set_verbosity(logging.INFO)
    config = config_from_flags(eval_mode or "do_eval")
    task = make_task()
    from bert_tf.finetune import runner
    from bert_tf.training.checkpointing import Terminated

    try:
        outcome = runner.run(config, task)
    except Terminated as e:
        errors.exit_at_once(str(e), errors.EXIT_TERMINATED)  # the checkpoint is written and closed
    if config.export_dir and outcome.is_chief:
        # bert_tf.finetune may not import bert_tf.export (data flows one way): the entry
        # point, which may import both, passes the exporter in.
        export_fn(config.output_dir, config.export_dir, outcome.model)
