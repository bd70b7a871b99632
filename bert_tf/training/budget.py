"""The training clock: the seconds a run has spent training, and its progress against a budget.

`--max_train_minutes` is the run's training-time budget: the learning-rate schedule reaches
its end (`end_lr`) when either the steps (`num_train_steps`) or this budget are used up, and
the run stops there, whichever comes first:

    progress = min(1, max(step / num_train_steps, trained_seconds / (60 * max_train_minutes)))

What counts as training time: the wall time of the train calls only, as the host sees it
(`preemption.HostLoop` reads a monotonic clock before each call and after its losses reached
the host). Start-up, restoring, the cross-worker agreement, progress reports, checkpoint saves
and evaluation fall between calls and do not count. Nor does tracing: the first call of each
process traces and compiles the step (seconds on a CPU, minutes with XLA on a TPU), so its
steps are counted at the pace of the next call instead of at its own time.

The seconds live in a `tf.Variable` (`TrainingClock.variable`), saved in every checkpoint of
a budgeted run, so a resumed run continues the clock where the checkpoint left it. The host
adds each call's time between calls and the learning-rate schedule reads the variable inside
the compiled step: its value changes without retracing anything. The variable is float32
(TPU variables cannot be float64); the host keeps the float64 sum and assigns it whole, so
the rounding does not accumulate. With several workers, every worker adds the CHIEF's call
time (agreed in `HostLoop`'s all-reduce), so all hold the same clock and the same learning
rate, and stop at the same step.

The clock grows by one call (about 2 s, `preemption.TARGET_CALL_SECONDS`) at a time, so the
learning rate follows the time budget in steps of one call (2 s of the 6-minute decay of
configs/budget.flags), and the run ends at most one call past its budget.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf.training.checkpoint_paths import SavedObjectGraph

# The clock's name in a training checkpoint (`tf.train.Checkpoint(trained_seconds=...)`).
CHECKPOINT_KEY = "trained_seconds"


class TrainingClock:
    """Seconds spent in train calls over the whole run, against a budget.

    Create it under the training strategy's scope (its variable is then mirrored, and lives
    on the TPU under TPUStrategy), before the optimizer whose schedule reads it.

    Args:
        max_train_minutes: the training-time budget, > 0.
    """

    def __init__(self, max_train_minutes: float):
        if not max_train_minutes > 0:
            raise ValueError(f"max_train_minutes must be > 0, got {max_train_minutes}")
        self.max_train_minutes = float(max_train_minutes)
        self.budget_seconds = 60.0 * self.max_train_minutes
        self.variable = tf.Variable(
            0.0, dtype=tf.float32, trainable=False, name=CHECKPOINT_KEY,
            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        self._seconds = 0.0

    @property
    def seconds(self) -> float:
        """The training seconds so far, as the variable holds them."""
        return float(np.float32(self._seconds))

    @property
    def spent(self) -> bool:
        """Whether the budget is used up (the value the schedule reads, not the host's sum)."""
        return self.seconds >= self.budget_seconds

    def sync(self) -> None:
        """Takes the host's sum from the variable; call after restoring a checkpoint."""
        self._seconds = float(self.variable.numpy())

    def resume(self, checkpoint: Optional[str], saved: bool) -> None:
        """Takes the seconds of the `checkpoint` restored (None: a fresh run at 0 s), and
        says where the clock starts; `saved`: whether the checkpoint held the clock."""
        self.sync()
        if checkpoint and not saved:
            logging.warning("%s has no training clock (saved without --max_train_minutes): "
                            "the --max_train_minutes budget starts at 0 s here", checkpoint)
        elif checkpoint:
            logging.info("training clock resumed at %.3f s of %.0f s", self.seconds,
                         self.budget_seconds)

    def spent_at_start(self, step: int) -> bool:
        """Whether a run (re)starting at `step` finds the budget spent; says so if it does."""
        if self.spent:
            logging.info("--max_train_minutes=%g already spent (%.1f s trained) at step %d",
                         self.max_train_minutes, self.seconds, step)
        return self.spent

    def log_end(self, step: int, learning_rate: float) -> None:
        """The clock and the learning rate where training ended (benchmarks read this line)."""
        logging.info("training clock %.2f s of the %.0f s budget at step %d; learning rate "
                     "%.6e", self.seconds, self.budget_seconds, step, learning_rate)

    def add(self, seconds: float) -> bool:
        """Adds the training time of one call (the chief's, with several workers).

        Returns:
            Whether the budget is now used up.
        """
        self._seconds += seconds
        self.variable.assign(self._seconds)
        return self.spent

    def fraction(self) -> tf.Tensor:
        """The budget used, a float32 scalar in [0, 1], read in the graph.

        Exactly 1 once the budget is used up, so the schedule ends exactly at its end_lr.
        """
        seconds = tf.cast(self.variable, tf.float32)
        budget = tf.constant(self.budget_seconds, tf.float32)
        return tf.where(seconds >= budget, tf.constant(1.0), seconds / budget)


def training_progress(step: tf.Tensor, num_train_steps: int,
                      clock: Optional[TrainingClock] = None) -> tf.Tensor:
    """The fraction of the run done: by steps, or by the clock's budget if further.

    Args:
        step: float32 scalar, optimizer steps done.
        num_train_steps: the run's steps.
        clock: the training clock of a budgeted run, or None (steps only).

    Returns:
        float32 scalar in [0, 1].
    """
    total = tf.cast(num_train_steps, tf.float32)
    progress = tf.minimum(step, total) / total
    if clock is not None:
        progress = tf.maximum(progress, clock.fraction())
    return progress


def trainer_clock(max_train_minutes: float, clock: Optional[TrainingClock]
                  ) -> Optional[TrainingClock]:
    """The clock a trainer with `max_train_minutes` counts on: `clock` if given (the one its
    optimizer's schedule reads), else a new one if there is a budget (call under the
    strategy's scope), else None.

    Raises:
        ValueError: `clock` has another budget.
    """
    if clock is None:
        return TrainingClock(max_train_minutes) if max_train_minutes else None
    if clock.max_train_minutes != max_train_minutes:
        raise ValueError(f"the clock's budget ({clock.max_train_minutes} min) is not "
                         f"max_train_minutes={max_train_minutes}")
    return clock


def clock_checkpoint_objects(clock: Optional[TrainingClock]) -> dict:
    """What a training checkpoint holds of the clock: its variable, if the run has a budget."""
    return {CHECKPOINT_KEY: clock.variable} if clock is not None else {}


def clock_left_out(clock: Optional[TrainingClock], latest: Optional[str]) -> tuple:
    """Checkpoint roots a restore leaves alone: the clock when this run has none (a budgeted
    checkpoint resumed without --max_train_minutes), or when the checkpoint has none (saved
    without a budget: the clock then starts at 0 s, which the caller should say)."""
    if clock is None:
        return (CHECKPOINT_KEY,)
    if latest and CHECKPOINT_KEY not in SavedObjectGraph(latest).root_names():
        return (CHECKPOINT_KEY,)
    return ()
