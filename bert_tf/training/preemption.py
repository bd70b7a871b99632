"""Preemption at step granularity: the train loop runs as host calls of a few seconds each.

A spot VM or preemptible TPU gets about 30 s between SIGTERM and the end. A Python signal
handler runs only when the main thread is back in Python, i.e. between tf.function calls, so
with `steps_per_loop=1000` (base.flags) in one call the notice would be read only after the
whole loop (minutes for BERT-Base on a v3-8) and the checkpoint never written.

`HostLoop` runs each loop of the trainer (steps_per_loop steps, ended by the logging and
checkpoint cadence, which do not change) as several calls of the same tf.function. Their
size adapts so that one call takes about `TARGET_CALL_SECONDS` (2 s): the first call (it
traces) runs 1 step, then the size follows the measured time per step, at most doubling
from one call to the next. The step count is a tensor argument, so no size retraces. After
each call the host looks at the stop request (SIGTERM), and the trainer saves the step
reached and stops: within about one call of the signal. A host round trip costs
milliseconds, so calls of 2 s keep what steps_per_loop saves (under 1 % more host time).

Several workers (MultiWorkerMirroredStrategy): a preemption notice may reach one worker
only, and every worker must run the same calls (their steps are collectives), stop at the
same step and take part in the same save. So after each call the workers agree in one
all-reduce of four numbers: the sum of their stop requests (any worker stops all), the
chief's proposed size of the next call (every worker runs the chief's size), whether the
chief's other time limit (`time_up`) is reached, and the chief's training time of the call,
which every worker adds to its training clock (`bert_tf.training.budget`, the
`--max_train_minutes` budget): each worker's own time could end its loop at another step
than the others' (the collectives would then hang) and give it another learning rate. The
run logs
the agreement's cost when it ends (measured by `benchmarks/pretraining/bench_preemption.py`: see
docs/results/pretraining.md).

After the save the entry points end the process at once (`errors.exit_at_once`):
TensorFlow's teardown (the tf.data iterator waits for its autotuning thread) can take longer
than a preempted VM has left.

TPUStrategy takes the same path (one client: no agreement needed); it cannot be run here.

The first call of a run traces the step, compiles it (minutes with XLA on a TPU) and runs one
step, so a notice during it would be read too late. Nothing has been trained since the last
checkpoint then, so with one client `exit_before_first_step` ends the process at once: a
thread reads the signal from `signal.set_wakeup_fd`, which the C-level handler writes while
the main thread is still inside TensorFlow. Several workers keep the agreement above (one
worker leaving alone would stall the others' collectives).

Why not `tf.distribute.experimental.PreemptionCheckpointHandler`: it checks for the signal
only between calls too (its `run` counts calls and wants single-step functions), so it
would not remove the host-loop problem by itself; on Cloud TPU and GCE CPU VMs (the
platforms of base.flags) it does nothing but log a warning (TF 2.21 `failure_handling.py`);
it adds its own run-counter variable to the checkpoint and restores the latest checkpoint
itself, outside our strict restore (`CheckpointSaver.restore_latest`: nothing missing,
nothing extra, one-line errors) and our input-position handling (`resume`); and it saves
with its own step semantics (calls of `run`, not optimizer steps) and then exits through
its own `exit_fn`. Our `CheckpointSaver` already writes complete checkpoints only, numbered
by the global step, with the saved tf.data iterator; the agreement above is the part of it
we need, and is one small collective.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf.core import errors
from bert_tf.training import train_loop

# Wall time aimed at per host call: short against a 30 s preemption notice, long against a
# host round trip (milliseconds, also on TPU).
TARGET_CALL_SECONDS = 2.0
# Proposals travel as float32 (exact up to 2**24); no loop is anywhere near this long.
_MAX_CALL_STEPS = 1 << 20

# (number of steps) -> (losses float32 [steps run], {key: float32 scalar sums}); it may run
# fewer steps than asked (a non-finite loss ends the call).
TrainCall = Callable[[int], Tuple[tf.Tensor, Dict[str, tf.Tensor]]]


def next_call_steps(steps: int, seconds: float, current: int,
                    target_seconds: float = TARGET_CALL_SECONDS) -> int:
    """The size of the next call after a call of `steps` steps took `seconds`.

    Args:
        steps: steps the last call ran (> 0).
        seconds: its wall time.
        current: the size allowed for the last call (it may have run fewer, at a loop's end).
        target_seconds: the wall time aimed at.

    Returns:
        target_seconds / (seconds per step), rounded down, at least 1 and at most twice
        `current` (a first measurement that came out too fast cannot overshoot).
    """
    per_step = max(seconds, 1e-9) / steps
    fitting = int(target_seconds / per_step)
    return max(1, min(fitting, 2 * current, _MAX_CALL_STEPS))


class HostLoop:
    """Runs train loops as host calls of about `target_seconds`, stopping when asked.

    Args:
        strategy: the training strategy (its collectives carry the agreement).
        num_workers: worker processes in the cluster (1: no agreement needed).
        stop_requested: whether this process was asked to stop (e.g. SIGTERM received).
        time_up: whether a time limit is reached (the chief's answer counts); the loop in
            progress still runs its steps.
        target_seconds: wall time aimed at per call.
        clock: seconds, monotonic (injectable for tests).
        on_first_call: called after the first call (it traced the step).
        count_seconds: adds a call's training time to the training clock and returns
            whether its budget is spent (`budget.TrainingClock.add`); given the chief's
            time, so every worker's clock stays the same. A spent budget ends the loop in
            progress after the call and sets `time_up`. The first call's time (tracing and
            compiling) is not counted: its steps are counted at the second call's pace.
    """

    def __init__(self, strategy: tf.distribute.Strategy, num_workers: int,
                 stop_requested: Callable[[], bool],
                 time_up: Callable[[], bool] = lambda: False,
                 target_seconds: float = TARGET_CALL_SECONDS,
                 clock: Callable[[], float] = time.perf_counter,
                 on_first_call: Callable[[], None] = lambda: None,
                 count_seconds: Optional[Callable[[float], bool]] = None):
        self._clock = clock
        self._count_seconds = count_seconds
        self.budget_spent = False  # the training clock's budget, as of the last call
        self._untimed_steps = 0  # steps of the first (tracing) call, not yet counted
        self._on_first_call = on_first_call
        self._strategy = strategy
        self._num_workers = num_workers
        self._stop_requested = stop_requested
        self._time_up = time_up
        self.time_up = False  # the chief's time limit is reached, as of the last call
        self._target = target_seconds
        self._call_steps = 1  # the first call traces: measure before growing
        self.stopped = False  # some worker asked to stop; all workers agree on it
        self.calls = 0
        self._train_seconds = 0.0
        self._agree_seconds = 0.0  # after the first agreement (which traces)
        self._agreements = 0
        self.agree = (tf.function(self._all_reduce, autograph=False) if num_workers > 1
                      else None)

    def _all_reduce(self, local: tf.Tensor) -> tf.Tensor:
        """float32 [n] (stop request, proposed size, time up, call seconds) -> (sum of
        requests, then the chief's values of the others)."""

        def replica_fn(value):
            ctx = tf.distribute.get_replica_context()
            # Replica 0 is on the chief: only its proposal counts, on every worker.
            first = tf.cast(tf.equal(ctx.replica_id_in_sync_group, 0), tf.float32)
            mask = tf.concat([[1.0], tf.fill(tf.shape(value) - 1, first)], axis=0)
            return ctx.all_reduce(tf.distribute.ReduceOp.SUM, value * mask)

        result = self._strategy.run(replica_fn, args=(local,))
        return self._strategy.experimental_local_results(result)[0]

    def run(self, train_call: TrainCall, num_steps: int
            ) -> Tuple[np.ndarray, Dict[str, np.ndarray], float]:
        """Runs up to `num_steps` steps; fewer when a stop is agreed, the training clock's
        budget is spent, or a loss is non-finite.

        Returns:
            (losses: float32 [steps run]; their global sums {key: float64 scalar}; the wall
            time of the calls, without the agreement).
        """
        losses: List[np.ndarray] = []
        sums: Dict[str, np.ndarray] = {}
        seconds, done = 0.0, 0
        while done < num_steps and not self.stopped and not self.budget_spent:
            steps = min(self._call_steps, num_steps - done)
            began = self._clock()
            call_losses, call_sums = train_call(steps)
            call_losses = call_losses.numpy()  # waits for the call to finish
            elapsed = self._clock() - began
            losses.append(call_losses)
            sums = train_loop.add_sums(sums, train_loop.to_numpy(call_sums))
            seconds += elapsed
            done += len(call_losses)
            self.calls += 1
            if self.calls == 1:
                self._on_first_call()
                logging.info("first train call (graph tracing and 1 step) took %.1f s; then "
                             "calls of about %g s, between which SIGTERM is answered",
                             elapsed, self._target)
            if len(call_losses) < steps:
                break  # a non-finite loss (the same on every worker): the caller stops
            self._after_call(steps, elapsed)
        self._train_seconds += seconds
        merged = np.concatenate(losses) if losses else np.zeros([0], np.float32)
        return merged, sums, seconds

    def _training_seconds(self, steps: int, seconds: float) -> float:
        """The training time of a call: the first call of the process traced and compiled
        the step, so it counts 0 and its steps are added at the second call's pace."""
        if self.calls == 1:
            self._untimed_steps = steps
            return 0.0
        counted = seconds * (steps + self._untimed_steps) / steps
        self._untimed_steps = 0
        return counted

    def _after_call(self, steps: int, seconds: float) -> None:
        proposal = next_call_steps(steps, seconds, self._call_steps, self._target)
        requested, time_up = bool(self._stop_requested()), bool(self._time_up())
        trained = self._training_seconds(steps, seconds)
        if self.agree is None:
            self._call_steps, self.stopped, self.time_up = proposal, requested, time_up
        else:
            began = self._clock()
            agreed = self.agree(tf.constant(
                [float(requested), float(proposal), float(time_up), trained], tf.float32))
            total_requests, chief_proposal, chief_time_up, trained = agreed.numpy().tolist()
            self.time_up = chief_time_up > 0
            if self._agreements:
                self._agree_seconds += self._clock() - began
            self._agreements += 1
            self._call_steps = max(1, int(chief_proposal))
            self.stopped = total_requests > 0
        if self._count_seconds is not None:
            # The chief's time on every worker: the same clock, learning rate and last step.
            self.budget_spent = bool(self._count_seconds(trained))
            self.time_up = self.time_up or self.budget_spent

    def log_summary(self) -> None:
        """Logs the number of calls and, with several workers, what agreeing cost."""
        if not self.calls:
            return
        if self.agree is None or self._agreements < 2:
            logging.info("%d train calls", self.calls)
            return
        # The first agreement traces its function; the cost per call is measured after it.
        logging.info("%d train calls; cross-worker stop agreement %.2f ms per call, %.2f%% of "
                     "the training time", self.calls,
                     1e3 * self._agree_seconds / (self._agreements - 1),
                     100 * self._agree_seconds / max(self._train_seconds, 1e-9))


@contextlib.contextmanager
def exit_before_first_step(message: str, code: int) -> Iterator[Callable[[], None]]:
    """Until the returned `disarm` is called, SIGTERM ends the process at once with
    `message` and exit `code` (`errors.exit_at_once`), even while the main thread is inside
    a TensorFlow call. For the first train call of a one-client run: nothing to save yet.

    Needs a Python handler for SIGTERM (`checkpointing.sigterm_requests`): Python writes the
    signal number to the wakeup fd only for signals it handles. Outside the main thread
    nothing is installed.
    """
    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    armed = threading.Event()
    armed.set()
    previous = signal.set_wakeup_fd(write_end)

    def watch() -> None:
        while True:
            got = os.read(read_end, 64)
            if not got:  # disarmed: the write end is closed
                return
            if signal.SIGTERM in got and armed.is_set():
                errors.exit_at_once(message, code)

    watcher = threading.Thread(target=watch, name="sigterm-before-first-step", daemon=True)
    watcher.start()

    def disarm() -> None:
        if not armed.is_set():  # already disarmed
            return
        armed.clear()
        signal.set_wakeup_fd(previous)
        os.close(write_end)
        watcher.join()
        os.close(read_end)

    try:
        yield disarm
    finally:
        disarm()
