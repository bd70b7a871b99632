"""The one training driver of pretraining and fine-tuning: model and optimizer under a
strategy, the train loop, eval, predict (its settings: `trainer_config`).

    trainer = Trainer(TrainerConfig(output_dir=...), strategy, model_fn, optimizer_fn)
    trainer.train(pretraining_dataset_fn(train_input_config))
    trainer.evaluate(pretraining_dataset_fn(eval_input_config))

A custom loop rather than `keras.Model.fit`: it reduces the losses over the global batch
exactly (`bert_tf.training.train_loop`), accumulates gradients, runs `steps_per_loop` steps
between logging and saves (in calls of ~2 s, `bert_tf.training.preemption`), and resumes a
killed run on the same trajectory: model, optimizer, step, dropout RNG and each worker's
input position (`checkpointing`, `resume`; where none was saved, the input skips the batches).

Failure handling: bad input found inside the graph becomes a one-line `UserError`; a
diverged loss (`health`) stops the run with a `UserError` naming the step, without saving it,
and leaves the last good checkpoint as the one a rerun resumes from (`checkpoint_health`);
Ctrl-C stops at once and leaves only complete checkpoints; SIGTERM (a preempted VM; to any
worker) saves the step reached after the current call, on every worker, and stops.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from typing import Callable, Dict, Optional

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf.core import errors
from bert_tf.core.errors import UserError
from bert_tf.data import input_config, input_pipeline, input_validation
from bert_tf.training import (
    budget,
    checkpoint_health,
    checkpoint_paths,
    checkpointing,
    distribution,
    eval_history,
    health,
    objectives,
    preemption,
    resume,
    train_loop,
)
from bert_tf.training.new_rows_only import NewRowsOnly
from bert_tf.training.progress import ProgressLogger
from bert_tf.training.results import (  # noqa: F401 (part of this module's API)
    EVAL_RESULTS_FILE,
    format_eval_results,
    write_eval_results,
)
from bert_tf.training.trainer_config import (  # noqa: F401 (part of this module's API)
    DatasetFn,
    TrainerConfig,
    TrainResult,
)


def pretraining_dataset_fn(config: input_config.InputConfig) -> DatasetFn:
    """A DatasetFn reading TFRecords with `config` (its batch_size is replaced per call)."""

    def dataset_fn(context: tf.distribute.InputContext, per_replica_batch: int,
                   first_batch: int = 0) -> tf.data.Dataset:
        return input_pipeline.make_pretraining_dataset(
            dataclasses.replace(config, batch_size=per_replica_batch), context, first_batch)

    # For the progress lines (--skip_corrupt_records).
    dataset_fn.skipped_records = config.corrupt_records and config.corrupt_records.count
    # Reopened at a batch (the third argument) on resume; see resume.arithmetic.
    dataset_fn.arithmetic_position = config.arithmetic_position
    return dataset_fn


class Trainer:
    """Builds model and optimizer under `strategy` and runs training and evaluation.

    Args:
        config: the run settings.
        strategy: from `distribution.create_strategy`.
        model_fn: builds the pre-training model (called once, under the strategy scope,
            after seeding Keras' random state with config.seed).
        optimizer_fn: builds the Keras optimizer (under the scope); wrapped in a
            LossScaleOptimizer for mixed_float16.
        objective: what is minimised and reported (default: pretraining's MLM + NSP, with
            NSP as config.use_nsp says); fine-tuning tasks pass their own.
        warm_start_fn: called with the model to load initial weights when output_dir has no
            checkpoint to resume from (default: restore config.init_checkpoint, a bert_tf
            checkpoint, by object graph).
        clock: the `budget.TrainingClock` of config.max_train_minutes that the optimizer's
            schedule reads, made under the scope (default: the trainer makes its own).
        wall_clock: seconds, monotonic, that the train calls are timed with: the
            --max_train_minutes clock counts them and the calls' size follows them
            (`preemption.HostLoop`). Tests pass a fake one to drive the budget.
        new_rows: the first steps train only the new vocabulary rows (`new_rows_only`).
    """

    def __init__(self, config: TrainerConfig, strategy: tf.distribute.Strategy,
                 model_fn: Callable[[], keras.Model], optimizer_fn: Callable[[], object],
                 objective: Optional[objectives.Objective] = None,
                 warm_start_fn: Optional[Callable[[keras.Model], None]] = None,
                 clock: Optional[budget.TrainingClock] = None,
                 new_rows: Optional[NewRowsOnly] = None,
                 wall_clock: Callable[[], float] = time.perf_counter):
        self.config = config
        self.objective = objective  # (default: made below, with the model's vocabulary size)
        self.warm_start_fn = warm_start_fn
        self.wall_clock = wall_clock
        self.strategy = strategy
        self.num_replicas = strategy.num_replicas_in_sync
        # Check the batch sizes before building anything.
        self.micro_batch_size = distribution.per_replica_batch_size(
            config.train_batch_size, self.num_replicas, config.gradient_accumulation_steps)
        self.eval_batch_per_replica = distribution.per_replica_batch_size(
            config.eval_batch_size, self.num_replicas, what="eval_batch_size")
        self.worker_index, self.num_workers = distribution.worker_info(strategy)
        self.is_chief = self.worker_index == 0
        distribution.set_dtype_policy(config.dtype_policy)
        with strategy.scope():
            keras.utils.set_random_seed(config.seed)
            self.model = model_fn()
            if self.objective is None:
                self.objective = objectives.PretrainingObjective(
                    config.use_nsp, getattr(getattr(self.model, "config", None), "vocab_size",
                                            None))
            self.optimizer = distribution.wrap_optimizer(optimizer_fn(), config.dtype_policy)
            # Slots exist before any restore, so a checkpoint fills them instead of deferring.
            self.optimizer.build(self.model.trainable_variables)
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step",
                                    aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
            self.clock = budget.trainer_clock(config.max_train_minutes, clock)  # None: no budget
        self.steps = train_loop.StepFunctions(
            self.model, self.optimizer, strategy, self.step, self.objective,
            accumulation_steps=config.gradient_accumulation_steps, use_xla=config.use_xla,
            xla_optimizer=(train_loop.xla_optimizer_pays(config.num_train_steps)
                           if config.xla_optimizer is None else config.xla_optimizer),
            new_rows=new_rows)
        self._trained = False

    def distribute_dataset(self, dataset_fn: DatasetFn, per_replica_batch: int,
                           skip_steps: int = 0):
        """The distributed dataset, at `skip_steps` steps' worth of batches.

        A step takes one batch per replica and a pipeline (one per worker or host) feeds
        num_replicas / num_pipelines replicas: resuming at step s starts every pipeline that
        many batches times s in, by reopening the input there when its position is
        arithmetic, else by skipping them (the deterministic input continues where it was).
        """

        def per_pipeline(context: tf.distribute.InputContext) -> tf.data.Dataset:
            batches = skip_steps * (context.num_replicas_in_sync // context.num_input_pipelines)
            if resume.arithmetic(dataset_fn):
                return dataset_fn(context, per_replica_batch, batches)
            return dataset_fn(context, per_replica_batch).skip(batches)

        return self.strategy.distribute_datasets_from_function(per_pipeline)

    def learning_rate(self) -> float:
        lr = self.optimizer.learning_rate
        return float(lr() if callable(lr) else lr)

    def _call(self, fn, *args):
        """Runs a step function, turning bad-input failures from tf.data into UserError."""
        try:
            return fn(*args)
        except tf.errors.OpError as e:
            error = input_validation.user_error_from(e)
            if error is not None:
                raise error from None
            raise

    # ------------------------------------------------------------------ training

    def _restore_training_state(self, dataset_fn: DatasetFn):
        """Sets up the checkpoint saver and the input, resuming from the latest checkpoint.

        Returns:
            (the checkpoint saver; the input iterator, positioned at the start step; the
            start step).
        """
        cfg = self.config
        per_replica_batch = self.micro_batch_size * cfg.gradient_accumulation_steps
        arithmetic = resume.arithmetic(dataset_fn)
        unsupported = None if arithmetic else resume.unsupported_reason(self.strategy)
        # More until the losses after the newest vouch for it (checkpoint_health).
        keep = cfg.keep_checkpoint_max + health.EXTRA_CHECKPOINTS
        train_input = None if arithmetic or unsupported else resume.TrainInput(
            self.strategy, dataset_fn, per_replica_batch, cfg.output_dir, keep)
        checkpoint = tf.train.Checkpoint(
            model=self.model, optimizer=self.optimizer, step=self.step,
            rng=checkpointing.seed_state_variables(self.model),
            **(train_input.checkpoint_objects() if train_input else {}),
            **budget.clock_checkpoint_objects(self.clock))
        saver = checkpointing.CheckpointSaver(
            cfg.output_dir, checkpoint, self.step, keep, self.worker_index,
            also_save=train_input.save_own if train_input else None)
        latest = tf.train.latest_checkpoint(cfg.output_dir)
        problem = unsupported
        if latest and train_input:
            problem = train_input.saved_state_problem(latest)
        no_clock = budget.clock_left_out(self.clock, latest)
        restored = saver.restore_latest(without=resume.left_out(train_input, problem) + no_clock)
        if self.clock is not None:
            self.clock.resume(saver.latest if restored is not None else None, not no_clock)
        if restored is None:
            if self.warm_start_fn is not None:
                self.warm_start_fn(self.model)
            elif cfg.init_checkpoint:
                checkpointing.warm_start(self.model, cfg.init_checkpoint)
        else:
            logging.info("resuming from %s at step %d", saver.latest, restored)
        start = int(self.step.numpy())
        if start and arithmetic:
            logging.info("input reopened at step %d from its record counts", start)
        elif start and problem:
            logging.info("input position not restored (%s): skipping the %d steps' batches "
                         "already consumed", problem, start)
        if train_input is None:  # The position is a function of the step (distribute_dataset).
            return saver, iter(self.distribute_dataset(dataset_fn, per_replica_batch, start)), start
        if start:
            train_input.resume_at(start, latest, problem)
        return saver, train_input, start

    def train(self, dataset_fn: DatasetFn,
              eval_dataset_fn: Optional[DatasetFn] = None) -> TrainResult:
        """Trains to `num_train_steps`, resuming from the latest checkpoint in output_dir.

        Evaluates `eval_dataset_fn` (if given) every eval_every_n_steps (`eval_history`).

        Returns:
            The steps run and their losses.

        Raises:
            UserError: bad input, a checkpoint that does not fit, or a diverged loss.
            KeyboardInterrupt: on Ctrl-C (only complete checkpoints remain).
            checkpointing.Terminated: on SIGTERM to any worker (a preempted VM), after the
                current call (seconds) and a checkpoint of the step reached.
        """
        cfg = self.config
        saver, iterator, start = self._restore_training_state(dataset_fn)
        stop = cfg.num_train_steps
        if cfg.max_steps_per_run:
            stop = min(stop, start + cfg.max_steps_per_run)
        if cfg.xla_optimizer is None:
            # The compile pays back over the steps this process runs, not the whole plan: a
            # resume near the end, or a short --max_steps_per_run slice, keeps graph mode.
            self.steps.set_xla_optimizer(train_loop.xla_optimizer_pays(stop - start))
        if self.clock is not None and start < stop and self.clock.spent_at_start(start):
            stop = start
        progress = ProgressLogger(cfg.output_dir, cfg.num_train_steps, cfg.train_batch_size,
                                  self.is_chief, cfg.log_every_n_steps,
                                  skipped_records=getattr(dataset_fn, "skipped_records", None),
                                  metrics_fn=self.objective.metrics,
                                  seconds_left=self.clock and (
                                      lambda: self.clock.budget_seconds - self.clock.seconds))
        all_losses = []
        step, last_report = start, None
        detector = health.DivergenceDetector(cfg.divergence_threshold, cfg.num_warmup_steps,
                                             uniform_loss=self.objective.uniform_loss)
        retention = checkpoint_health.CheckpointRetention(
            cfg.output_dir, cfg.keep_checkpoint_max, self.is_chief, start)
        periodic = eval_history.PeriodicEval(cfg.output_dir, cfg.eval_every_n_steps if
                                             eval_dataset_fn else 0, start, self.is_chief)
        if start >= cfg.num_train_steps:
            logging.info("already trained to step %d (num_train_steps=%d)", start, stop)
        before_first = (f"stopped by SIGTERM at step {start} before its first train call ended: "
                        f"nothing to save since {saver.latest or 'the start'}; rerun with the "
                        "same output_dir to continue")
        with checkpointing.sigterm_requests() as sigterm, (
                preemption.exit_before_first_step(before_first, errors.EXIT_TERMINATED)
                if self.num_workers == 1 else contextlib.nullcontext(lambda: None)) as disarm:
            host_loop = preemption.HostLoop(
                self.strategy, self.num_workers, lambda: bool(sigterm), on_first_call=disarm,
                clock=self.wall_clock, count_seconds=self.clock.add if self.clock else None)
            logging.info("training steps %d to %d (the first call traces the step)",
                         start + 1, stop)
            try:
                while step < stop:
                    to_save = cfg.save_checkpoints_steps - step % cfg.save_checkpoints_steps
                    n = min(cfg.steps_per_loop, stop - step, to_save, periodic.steps_to_next(step))
                    step_losses, sums, seconds = host_loop.run(
                        lambda k: self._call(self.steps.train_loop, iterator, tf.constant(k)), n)
                    progress.add(step_losses, sums, seconds)
                    all_losses.append(step_losses)
                    diverged = detector.observe(step + 1, step_losses)
                    if diverged:  # (decided alike on every worker: the losses are reduced)
                        raise health.Diverged(checkpoint_health.stop_message(
                            diverged, cfg.output_dir, self.is_chief, retention.vouched_step),
                            diverged)
                    if detector.vouches():  # the newest checkpoint's state gave healthy losses
                        retention.vouched()
                    step = int(self.step.numpy())
                    if host_loop.time_up and step < stop:  # the chief's clock, agreed
                        logging.info("--max_train_minutes=%g reached at step %d: saving a "
                                     "checkpoint and stopping training (%.2f s trained)",
                                     cfg.max_train_minutes, step, self.clock.seconds)
                        stop = step
                    if host_loop.stopped:
                        stop = step  # Preemption notice (to any worker): save now and stop.
                    if progress.due(step) or step == stop:
                        last_report = progress.report(step, self.learning_rate())
                    if step % cfg.save_checkpoints_steps == 0 or step == stop:
                        path = saver.save()
                        retention.saved(step)
                        logging.info("saved checkpoint %s", path)
                    if periodic.due(step) and not host_loop.stopped:
                        metrics = periodic.run(step, lambda: self._eval_results(eval_dataset_fn))
                        for note in self.objective.eval_notes(metrics):
                            logging.warning("step %d: %s", step, note)
            finally:
                host_loop.log_summary()
                progress.close()
                periodic.close()
        if self.clock is not None:
            self.clock.log_end(step, self.learning_rate())
        if host_loop.stopped:
            raise checkpointing.Terminated(
                f"stopped by SIGTERM at step {step} with checkpoint {saver.latest}; rerun with "
                "the same output_dir to continue")
        retention.finished()  # back to keep_checkpoint_max
        self._trained = True
        run_losses = np.concatenate(all_losses) if all_losses else np.zeros([0], np.float32)
        return TrainResult(start, step, run_losses, last_report)

    # ------------------------------------------------------------------ evaluation

    def restore_for_eval(self) -> None:
        """Loads the weights to evaluate when this process did not train them.

        The latest checkpoint in output_dir, else init_checkpoint (through `warm_start_fn`
        when given: any format), else (with a warning) the freshly initialized model. Every
        model variable must be in the checkpoint, with its shape: evaluating partly random
        weights would report meaningless figures.

        Raises:
            UserError: the checkpoint does not match this model.
        """
        latest = tf.train.latest_checkpoint(self.config.output_dir)
        if latest:
            checkpoint_paths.read_strictly(latest, {"model": self.model, "step": self.step})
            logging.info("evaluating %s (step %d)", latest, int(self.step.numpy()))
        elif self.warm_start_fn is not None:  # another format, or a resized vocabulary
            self.warm_start_fn(self.model)
            logging.info("evaluating the weights of %s", self.config.init_checkpoint)
        elif self.config.init_checkpoint:
            path = checkpointing.resolve_checkpoint(self.config.init_checkpoint)
            checkpoint_paths.read_strictly(path, {"model": self.model})
            logging.info("evaluating the weights of %s", path)
        else:
            logging.warning("no checkpoint in %s: evaluating the untrained model",
                            self.config.output_dir)

    def evaluate(self, dataset_fn: DatasetFn, max_steps: Optional[int] = None) -> Dict[str, float]:
        """Evaluates up to max_eval_steps batches; writes output_dir/eval_results.txt.

        Args:
            dataset_fn: the eval input (one pass; it may end before max_steps).
            max_steps: overrides config.max_eval_steps.

        Returns:
            {"masked_lm_accuracy", "masked_lm_loss", ("next_sentence_accuracy",
            "next_sentence_loss",) "loss", "global_step"}.
        """
        if not self._trained:
            self.restore_for_eval()
        results, sums, batches = self._eval_results(dataset_fn, max_steps)
        logging.info("evaluated %d batches (%d examples)", batches, int(sums["num_examples"]))
        logger = ProgressLogger(self.config.output_dir, 0, 0, write_summaries=self.is_chief)
        logger.report_eval(results)
        logger.close()
        if self.is_chief:
            write_eval_results(os.path.join(self.config.output_dir, EVAL_RESULTS_FILE), results)
        return results

    def _eval_results(self, dataset_fn: DatasetFn, max_steps: Optional[int] = None):
        """(metrics with "global_step", global sums, batches) of one pass over dataset_fn."""
        iterator = iter(self.distribute_dataset(dataset_fn, self.eval_batch_per_replica))
        max_steps = self.config.max_eval_steps if max_steps is None else max_steps
        batches, sums = self._call(self.steps.eval_loop, iterator, tf.constant(max_steps))
        sums = train_loop.to_numpy(sums)
        if int(batches) == 0 or sums["num_examples"] == 0:
            raise UserError("eval input is empty: no batch to evaluate")
        results = {k: float(v) for k, v in self.objective.metrics(sums).items()}
        results["global_step"] = int(self.step.numpy())
        return results, sums, int(batches)

    def predict(self, dataset_fn: DatasetFn, num_batches: int) -> Dict[str, np.ndarray]:
        """Per-example predictions (`Objective.predictions`) of `num_batches` global batches.

        The input must yield `num_batches` full global batches of `eval_batch_size` (pad the
        last one; TPUs need static shapes). Uses the weights in memory (after `train` or
        `restore_for_eval`).

        Returns:
            {name: array [num_batches * eval_batch_size, ...]}, batches in input order.
        """
        iterator = iter(self.distribute_dataset(dataset_fn, self.eval_batch_per_replica))
        parts: Dict[str, list] = {}
        for _ in range(num_batches):
            out = self._call(self.steps.predict_step, iterator)
            for name, value in out.items():
                parts.setdefault(name, []).append(value.numpy())
        return {name: np.concatenate(values) for name, values in parts.items()}
