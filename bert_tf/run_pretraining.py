"""Pre-train BERT: `python -m bert_tf.run_pretraining --flagfile=configs/base.flags`.

The flags of google-research/bert's run_pretraining.py keep their names and meanings
(train_batch_size is the GLOBAL batch; eval_input_file defaults to input_file, as the original
evaluated on its training input), plus distribution, precision and loop settings. Flags are
read only here and turned at once into frozen configs (`RunConfig`), which the library takes.

Every check that can fail on user input runs before training starts and ends the run with a
one-line `error: ...` and a non-zero exit.

Run health: `--eval_every_n_steps=N` evaluates `--max_eval_steps` batches of
`--eval_input_file` at every multiple of N (a console line, `eval/` summaries and a line of
`output_dir/eval_history.jsonl`, read by `bert_tf.training.eval_history.read_eval_history`).
A NaN/Inf loss, a loss above 3 x what uniform guesses of the heads cost + 5 (from step 2,
warmup included), or after warmup a loop's loss above `--divergence_threshold` times its
recent level, stops the run with one `error:` line naming the step, the last good checkpoint
(kept; or that there is none) and what to try (`bert_tf.training.health`). With
`--dynamic_masking`, masked-LM evaluation (periodic and `--do_eval`) masks each eval record
once at 15% with a fixed seed, whatever `--masked_lm_prob` is, so runs compare; on static
records it uses the records' own masks.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import TYPE_CHECKING, Callable, Optional

from absl import flags, logging

from bert_tf import install_check
from bert_tf.core import errors, fileio
from bert_tf.core.errors import UserError, cli_main
from bert_tf.training import distribution_flags, objective_flags

if TYPE_CHECKING:  # these modules import TensorFlow; flag errors should not wait for it
    from bert_tf.data.input_config import InputConfig
    from bert_tf.interop.continued_pretraining import PretrainingStart
    from bert_tf.modeling.config import BertConfig
    from bert_tf.training.distribution import DistributionConfig
    from bert_tf.training.electra_objective import ElectraConfig
    from bert_tf.training.optimization import OptimizerConfig
    from bert_tf.training.trainer import TrainerConfig

FLAGS = flags.FLAGS

# --- the original run_pretraining.py flags
flags.DEFINE_string("bert_config_file", None, "bert_config.json of the model to pre-train "
                    "(default with --init_checkpoint: the checkpoint's own config, in any "
                    "format).")
flags.DEFINE_string("input_file", None, "Training TFRecords: comma-separated files or globs.")
flags.DEFINE_string("eval_input_file", None, "Eval TFRecords; defaults to --input_file.")
flags.DEFINE_string("output_dir", None, "Checkpoints, summaries and eval_results.txt go here.")
flags.DEFINE_string("init_checkpoint", None, "Warm-start model weights (only) from this "
                    "checkpoint or directory: bert_tf, Google TF1 or Hugging Face.")
flags.DEFINE_integer("max_seq_length", 128, "Sequence length of the TFRecords.")
flags.DEFINE_integer("max_predictions_per_seq", 20,
                     "Masked positions per sequence in the TFRecords.")
flags.DEFINE_bool("do_train", False, "Train.")
flags.DEFINE_bool("do_eval", False, "Evaluate (after training, if --do_train).")
flags.DEFINE_integer("train_batch_size", 32,
                     "GLOBAL training batch (all replicas and micro-batches).")
flags.DEFINE_integer("eval_batch_size", 8, "GLOBAL eval batch.")
flags.DEFINE_float("learning_rate", 5e-5, "Peak learning rate.")
flags.DEFINE_integer("num_train_steps", 100000, "Optimizer steps.")
flags.DEFINE_integer("num_warmup_steps", 10000, "Linear warmup steps.")
flags.DEFINE_integer("save_checkpoints_steps", 1000, "Checkpoint every this many steps.")
flags.DEFINE_integer("max_eval_steps", 100, "Eval batches at most.")

# --- ours
distribution_flags.define_flags()
objective_flags.define_flags()
flags.DEFINE_integer("steps_per_loop", 1,
                     "Train steps between progress and checkpoint checks (use ~1000 on TPU); "
                     "run in calls of about 2 s, so that SIGTERM is answered within seconds.")
flags.DEFINE_integer("gradient_accumulation_steps", 1,
                     "Micro-batches summed per optimizer step (train_batch_size is their total).")
flags.DEFINE_enum("optimizer", "adamw", ["adamw", "lamb"], "Optimizer.")
flags.DEFINE_float("end_lr", 0.0, "Learning rate at the end of the schedule's decay.")
flags.DEFINE_enum("lr_schedule", "linear", ["linear", "wsd"],
                  "linear: the original warmup + linear decay over the whole run. wsd: "
                  "warmup-stable-decay, the peak rate held, then a 1-sqrt decay over the last "
                  "--decay_proportion of the run. With --max_train_minutes both end their "
                  "decay when the time budget is spent, if the steps were not.")
flags.DEFINE_float("decay_proportion", 0.2,
                   "--lr_schedule=wsd: the final fraction of the run (steps or time budget) "
                   "over which the rate decays to --end_lr.")
flags.DEFINE_float("weight_decay_rate", 0.01, "Decoupled weight decay.")
flags.DEFINE_float("clip_norm", 1.0, "Global-norm gradient clipping (0 = off).")
flags.DEFINE_bool("adam_bias_correction", True,
                  "AdamW with bias-corrected moments; false = the original BERT update exactly "
                  "(stable only with long warmups such as the original 10k steps).")
flags.DEFINE_bool("no_nsp", False, "Train the masked LM only (no next-sentence head).")
flags.DEFINE_bool("dynamic_masking", False,
                  "Draw fresh masks every epoch instead of the stored ones (needs --vocab_file).")
flags.DEFINE_string("vocab_file", None,
                    "The TFRecords' WordPiece vocabulary: --dynamic_masking reads [MASK], [CLS], "
                    "[SEP], [PAD] from it; extending --init_checkpoint's resizes its embeddings.")
flags.DEFINE_integer("train_only_new_embeddings_steps", 0,
                     "With an extended --vocab_file: the first N steps train only the new "
                     "vocabulary rows (every other weight frozen), then all weights train.")
flags.DEFINE_float("masked_lm_prob", 0.15, "Fraction of tokens --dynamic_masking predicts.")
flags.DEFINE_bool("do_whole_word_mask", False,
                  "--dynamic_masking masks whole words (the '##' pieces of --vocab_file join the "
                  "word before them), as create_pretraining_data's flag of the same name.")
flags.DEFINE_integer("max_ngram_size", 1,
                     "As create_pretraining_data's flag; --dynamic_masking supports only 1 (it "
                     "refuses n-gram spans rather than drop them).")
flags.DEFINE_bool("skip_corrupt_records", False,
                  "Go on past a damaged input record (TensorFlow's reader then skips the rest "
                  "of its file for that pass) instead of stopping; the progress lines and the "
                  "end of the run report how many records were skipped.")
flags.DEFINE_enum("input_position", "auto", ["auto", "iterator", "arithmetic"],
                  "How a resumed run finds its place in the training input. iterator: a "
                  "shuffle buffer, the tf.data iterator saved with each checkpoint. arithmetic: "
                  "a seeded file order and a window shuffle, reopened at a computed record "
                  "(each file's records are counted once, cached in --output_dir). auto: "
                  "arithmetic under TPUStrategy (its iterator cannot be saved), else iterator.")
flags.DEFINE_integer("seed", 12345, "Seeds initialization, dropout, shuffling and dynamic masks.")
flags.DEFINE_integer("log_every_n_steps", 100,
                     "Progress line every N steps; also after the first loop and every 30 s "
                     "(at loop boundaries).")
flags.DEFINE_integer("keep_checkpoint_max", 5,
                     "Recent checkpoints to keep; up to 3 more until the losses after the "
                     "newest vouch for it (see --divergence_threshold).")
flags.DEFINE_integer("max_steps_per_run", 0,
                     "Stop this process after N steps with a checkpoint (0 = no limit); rerun "
                     "with the same --output_dir to continue.")
flags.DEFINE_integer("eval_every_n_steps", 0,
                     "Evaluate --max_eval_steps batches of --eval_input_file every N training "
                     "steps (0 = off): a console line, eval/ summaries and a line of "
                     "eval_history.jsonl in --output_dir.")
flags.DEFINE_float("divergence_threshold", 2.0,
                   "Stop the run when, after --num_warmup_steps, a loop's mean loss exceeds "
                   "this factor times its recent level (median of the last 10 loops) and is "
                   "1 nat above it (a loop of under 3 steps: the median of the last 3 step "
                   "losses); 0 = off. A NaN or Inf loss always stops it, and so does a loss "
                   "above 3 x the loss of uniform guesses + 5 (ln vocab_size, + ln 2 with NSP).")
flags.DEFINE_float("max_train_minutes", 0,
                   "Training-time budget of the run (0 = none): minutes of train calls, summed "
                   "over resumes (start-up, graph tracing, checkpoint saves and eval do not "
                   "count). The learning-rate schedule finishes its decay when it is spent "
                   "(or at --num_train_steps, if first), and training stops there with a "
                   "checkpoint; eval still runs. Where it stops depends on the machine.")


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Everything a run needs, built from the flags once.

    Attributes:
        bert_config: the model hyper-parameters.
        trainer: the loop settings.
        optimizer: the optimizer settings.
        distribution: strategy, precision, XLA.
        train_input: the training input (None without do_train).
        eval_input: the eval input (None without do_eval or eval_every_n_steps).
        do_train, do_eval: what to run.
        input_position: --input_position ("auto" is resolved once the strategy exists).
        start: where --init_checkpoint starts the run, in which vocabulary (None without it).
        electra: ELECTRA's settings with --objective=electra, else None (BERT).
    """

    bert_config: "BertConfig"
    trainer: "TrainerConfig"
    optimizer: "OptimizerConfig"
    distribution: "DistributionConfig"
    train_input: Optional["InputConfig"]
    eval_input: Optional["InputConfig"]
    do_train: bool
    do_eval: bool
    input_position: str = "auto"
    start: Optional["PretrainingStart"] = None
    electra: Optional["ElectraConfig"] = None


def _required(name: str) -> str:
    value = getattr(FLAGS, name)
    if not value:
        raise UserError(f"--{name} is required")
    return value


def _bert_config() -> "BertConfig":
    """--bert_config_file, else the config of --init_checkpoint (any format)."""
    from bert_tf.modeling.config import BertConfig  # no TensorFlow import

    if FLAGS.bert_config_file:
        return BertConfig.from_json_file(FLAGS.bert_config_file)
    if not FLAGS.init_checkpoint:
        raise UserError("--bert_config_file is required (with --init_checkpoint, the "
                        "checkpoint's own config is the default)")
    from bert_tf.interop import formats

    return formats.read_config(formats.detect_format(FLAGS.init_checkpoint),
                               FLAGS.init_checkpoint)


def config_from_flags() -> RunConfig:
    """Turns the parsed flags into frozen configs, checking everything checkable up front.

    Raises:
        UserError: a missing or inconsistent flag, an unreadable file, a bad config.
    """
    # Checks that need no TensorFlow first, so that they answer at once.
    if not (FLAGS.do_train or FLAGS.do_eval):
        raise UserError("at least one of --do_train or --do_eval must be true")
    output_dir = _required("output_dir")
    bert_config = _bert_config()
    bert_config.check_seq_length(FLAGS.max_seq_length)
    if not FLAGS.learning_rate > 0:
        raise UserError(f"--learning_rate must be positive, got {FLAGS.learning_rate}")
    electra = objective_flags.config_from_flags(bert_config)
    from bert_tf.interop import continued_pretraining  # any format; an extended --vocab_file

    bert_config, start = (bert_config, None) if electra else continued_pretraining.plan(
        FLAGS.init_checkpoint, FLAGS.vocab_file, bert_config, FLAGS.bert_config_file or "",
        FLAGS.train_only_new_embeddings_steps)

    from bert_tf.data import input_validation
    from bert_tf.data.input_config import EVAL_MASKING_SEED, InputConfig, eval_masking
    from bert_tf.training import optimization, trainer

    masking = objective_flags.masking_from_flags(bert_config)  # None: the stored masks
    if FLAGS.eval_every_n_steps and not FLAGS.do_train:
        raise UserError("--eval_every_n_steps applies only with --do_train")
    # Periodic or final evaluation; with --dynamic_masking it masks too (at 15%).
    evaluates = FLAGS.do_eval or FLAGS.eval_every_n_steps > 0

    def input_config(patterns: str, is_training: bool, what: str):
        config = InputConfig(
            input_patterns=patterns,
            batch_size=1,  # per replica; the trainer sets it from the global batch
            max_seq_length=FLAGS.max_seq_length,
            max_predictions_per_seq=FLAGS.max_predictions_per_seq,
            vocab_size=bert_config.vocab_size,
            is_training=is_training,
            # Eval masks dynamically at one fixed rate and seed (see input_config).
            masking=masking if is_training or masking is None else eval_masking(masking),
            seed=FLAGS.seed if is_training else EVAL_MASKING_SEED,
            drop_remainder=is_training,
            skip_corrupt_records=FLAGS.skip_corrupt_records,
        )
        try:
            files = input_validation.validate_input_files(config)
        except UserError as e:
            # The pipeline names its own settings; say which flag or file they came from.
            message = str(e).replace("--input_file", f"--{what}").replace(
                "--vocab_size", "vocab_size of --bert_config_file")
            raise UserError(message) from None
        if files.packed and electra is None and not FLAGS.no_nsp:  # its NSP labels are all 0
            raise UserError(f"--{what} holds packed rows (--feature_set=packed_mlm, masked LM "
                            "only): add --no_nsp")
        return dataclasses.replace(config, resolved_files=files)

    train_input = eval_input = None
    if FLAGS.do_train:
        train_input = input_config(_required("input_file"), True, "input_file")
    if evaluates:
        what = "eval_input_file" if FLAGS.eval_input_file else "input_file"
        eval_input = input_config(FLAGS.eval_input_file or _required("input_file"), False, what)
        if not FLAGS.eval_input_file or set(eval_input.resolved_files.files) & set(
                train_input.resolved_files.files if train_input else ()):
            logging.warning("%s reads training files (%s): its figures measure "
                            "memorisation, not generalisation; give held-out records with "
                            "--eval_input_file",
                            "--do_eval" if FLAGS.do_eval else "--eval_every_n_steps",
                            "no --eval_input_file" if not
                            FLAGS.eval_input_file else "--eval_input_file overlaps --input_file")

    dist = distribution_flags.config_from_flags()
    optimizer = optimization.OptimizerConfig(
        optimizer=FLAGS.optimizer,
        learning_rate=FLAGS.learning_rate,
        num_train_steps=FLAGS.num_train_steps,
        num_warmup_steps=FLAGS.num_warmup_steps,
        end_lr=FLAGS.end_lr,
        weight_decay_rate=FLAGS.weight_decay_rate,
        clip_norm=FLAGS.clip_norm or None,
        adam_bias_correction=FLAGS.adam_bias_correction,
        lr_schedule=FLAGS.lr_schedule,
        decay_proportion=FLAGS.decay_proportion,
    )
    if FLAGS["decay_proportion"].present and FLAGS.lr_schedule != "wsd":
        raise UserError("--decay_proportion applies only with --lr_schedule=wsd")
    train = trainer.TrainerConfig(
        output_dir=output_dir,
        train_batch_size=FLAGS.train_batch_size,
        eval_batch_size=FLAGS.eval_batch_size,
        num_train_steps=FLAGS.num_train_steps,
        save_checkpoints_steps=FLAGS.save_checkpoints_steps,
        keep_checkpoint_max=FLAGS.keep_checkpoint_max,
        steps_per_loop=FLAGS.steps_per_loop,
        gradient_accumulation_steps=FLAGS.gradient_accumulation_steps,
        log_every_n_steps=FLAGS.log_every_n_steps,
        max_eval_steps=FLAGS.max_eval_steps,
        max_steps_per_run=FLAGS.max_steps_per_run,
        max_train_minutes=FLAGS.max_train_minutes,
        init_checkpoint=FLAGS.init_checkpoint or "",
        use_nsp=not FLAGS.no_nsp and electra is None,
        seed=FLAGS.seed,
        dtype_policy=FLAGS.dtype_policy,
        num_warmup_steps=FLAGS.num_warmup_steps,
        divergence_threshold=FLAGS.divergence_threshold,
        eval_every_n_steps=FLAGS.eval_every_n_steps,
    )
    fileio.check_writable_dir(output_dir)
    return RunConfig(bert_config, train, optimizer, dist, train_input, eval_input,
                     FLAGS.do_train, FLAGS.do_eval, FLAGS.input_position, start, electra)


def run(config: RunConfig, wall_clock: Callable[[], float] = time.perf_counter
        ) -> Optional[dict]:
    """Runs training and/or evaluation as configured.

    Args:
        config: the run's settings.
        wall_clock: seconds, monotonic, that the train calls are timed with (the
            --max_train_minutes budget counts them; `trainer.Trainer`). Tests pass a fake one.

    Returns:
        The eval results, if evaluated.
    """
    from bert_tf.interop import electra_warm_start
    from bert_tf.training import budget, distribution, optimization, trainer

    strategy = distribution.create_strategy(config.distribution)
    use_xla = distribution.resolve_use_xla(config.distribution, strategy)
    logging.info("strategy %s with %d replica(s), dtype policy %s, XLA %s",
                 "default (one CPU)" if distribution.is_default_strategy(strategy)
                 else type(strategy).__name__, strategy.num_replicas_in_sync,
                 config.distribution.dtype_policy, "on" if use_xla else "off")
    trainer_config = dataclasses.replace(config.trainer, use_xla=use_xla)
    if config.do_train and distribution.is_chief(strategy):
        config.bert_config.to_json_file(os.path.join(trainer_config.output_dir, "bert_config.json"))
        if config.start is not None:
            config.start.write_vocab(trainer_config.output_dir)
    clock = None
    if trainer_config.max_train_minutes:
        with strategy.scope():  # the schedule reads it in the step: a mirrored variable
            clock = budget.TrainingClock(trainer_config.max_train_minutes)
    runner = trainer.Trainer(
        trainer_config, strategy,
        optimizer_fn=lambda: optimization.create_optimizer(config.optimizer, clock=clock),
        wall_clock=wall_clock,
        clock=clock, **objective_flags.trainer_args(config.bert_config, config.electra,
                                                    trainer_config.use_nsp, trainer_config.seed),
        **(config.start.trainer_args(eval_only=not config.do_train) if config.start
           else electra_warm_start.trainer_args(trainer_config.init_checkpoint,
                                                config.electra.init_discriminator_only)
           if config.electra else {}),  # ELECTRA from transformers, google-research/electra
        # or, --init_discriminator_only, a BERT encoder
    )
    eval_input = config.eval_input
    if eval_input is not None and distribution.is_tpu_strategy(strategy):
        # TPUs need static shapes: the last partial eval batch is dropped.
        eval_input = dataclasses.replace(eval_input, drop_remainder=True)
    if config.do_train:
        runner.train(trainer.pretraining_dataset_fn(_positioned(config, strategy)),
                     trainer.pretraining_dataset_fn(eval_input) if eval_input else None)
        _report_skipped("training", config.train_input)
    if config.do_eval:
        results = runner.evaluate(trainer.pretraining_dataset_fn(eval_input))
        _report_skipped("eval", config.eval_input)
        return results
    return None


def _positioned(config: RunConfig, strategy) -> "InputConfig":
    """The training input with --input_position resolved, and with each file's record count
    when the position is arithmetic (cached in output_dir)."""
    from bert_tf.data import record_positions
    from bert_tf.training import distribution

    position = config.input_position
    if position == "auto":
        position = "arithmetic" if distribution.is_tpu_strategy(strategy) else "iterator"
    train_input = dataclasses.replace(config.train_input, input_position=position)
    cache = os.path.join(config.trainer.output_dir, record_positions.COUNTS_FILE)
    return record_positions.with_counts(train_input, cache)


def _report_skipped(what: str, input_config: "InputConfig") -> None:
    """The --skip_corrupt_records count of one input, at the end of its use."""
    if input_config.corrupt_records is not None:
        logging.info("%s input: %s", what, input_config.corrupt_records.summary())


@cli_main
def main(argv) -> None:
    if len(argv) > 1:
        raise UserError(f"unexpected arguments: {' '.join(argv[1:])}")
    logging.set_verbosity(logging.INFO)
    config = config_from_flags()
    from bert_tf.training.checkpointing import Terminated

    try:
        run(config)
    except Terminated as e:
        # Preempted (SIGTERM): a checkpoint was saved; the rerun continues on the same
        # trajectory (errors.EXIT_TERMINATED says why 143).
        errors.exit_at_once(str(e), errors.EXIT_TERMINATED)


def console_main() -> None:
    """The `bert-tf-pretrain` console script (and `python -m bert_tf.run_pretraining`)."""
    errors.run_app(main, preflight=install_check.problems)


if __name__ == "__main__":
    console_main()
