"""Training progress: console lines and TensorBoard summaries.

The trainer hands over the global sums of every train-loop call (`add`) and asks at each
loop boundary whether a report is due (`due`): after the first loop of the run, then every
`log_every_n_steps` steps or every `report_seconds` (30 s) of wall time, whichever comes first.
The host only sees loop boundaries, so with `steps_per_loop` > 1 the first line comes after
the first loop and a time-based line at the first boundary after 30 s. Each report turns
the sums of the steps since the last one into

    step 200/1000 | loss 6.912345 | mlm_loss 6.21 mlm_acc 0.0912 | nsp_loss 0.69 nsp_acc 0.512
        | lr 1.00e-04 | 54.3 examples/s | eta 0:04:55

on the console (absl logging, INFO) and scalars of the same under `output_dir/train` (eval
results under `output_dir/eval`). Only the chief worker writes summaries.
"""

from __future__ import annotations

import datetime
import os
import time
from typing import Any, Callable, Dict, Optional, Sequence

import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf.training import losses, train_loop

# Console abbreviations of the metric names.
_SHORT = {
    "masked_lm_loss": "mlm_loss",
    "masked_lm_accuracy": "mlm_acc",
    "next_sentence_loss": "nsp_loss",
    "next_sentence_accuracy": "nsp_acc",
    "discriminator_loss": "disc_loss",  # ELECTRA's (its masked_lm_* are the generator's)
    "discriminator_accuracy": "disc_acc",
}


def _scalar_metadata():
    # What TensorBoard's scalar plugin writes; built from TF's own protos so that logging
    # does not need the tensorboard package (TensorFlow no longer installs it).
    from tensorflow.core.framework import summary_pb2

    return summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"),
        data_class=summary_pb2.DATA_CLASS_SCALAR,
    )


def write_scalar(name: str, value: float, step: int) -> None:
    """Writes one scalar summary to the default writer (readable by TensorBoard)."""
    tf.summary.write(name, tf.constant(value, tf.float32), step=step,
                     metadata=_scalar_metadata())


def format_eta(seconds: float) -> str:
    if not np.isfinite(seconds) or seconds < 0:
        return "?"
    return str(datetime.timedelta(seconds=int(round(seconds))))


# Wall-time interval of the progress lines when log_every_n_steps is not reached first: a
# CPU run of a base-size model takes minutes per 100 steps, and a silent console looks hung.
REPORT_SECONDS = 30.0


class ProgressLogger:
    """Accumulates per-step results and reports them at logging boundaries.

    Args:
        output_dir: the run's output directory (summaries go to its train/ and eval/).
        total_steps: num_train_steps, for the ETA.
        global_batch_size: examples per step (all replicas and micro-batches).
        write_summaries: False on non-chief workers.
        log_every_n_steps: `due` at (the first loop boundary past) every multiple of it.
        report_seconds: `due` after this much wall time since the last report (0 or less:
            no time-based reports).
        clock: monotonic seconds (injectable for tests).
        skipped_records: returns the input records skipped so far (--skip_corrupt_records),
            shown in every line; None shows nothing.
        metrics_fn: global sums -> metrics (the task objective's `metrics`; default:
            pretraining's).
        seconds_left: returns the training seconds left of a --max_train_minutes budget;
            the ETA is the sooner of the steps' and the budget's end.
    """

    def __init__(self, output_dir: str, total_steps: int, global_batch_size: int,
                 write_summaries: bool = True, log_every_n_steps: int = 100,
                 report_seconds: float = REPORT_SECONDS,
                 clock: Callable[[], float] = time.monotonic,
                 skipped_records: Optional[Callable[[], int]] = None,
                 metrics_fn: Optional[Callable[[Dict[str, float]], Dict[str, Any]]] = None,
                 seconds_left: Optional[Callable[[], float]] = None):
        self.total_steps = total_steps
        self._metrics_fn = metrics_fn or losses.metrics_from_sums
        self._skipped_records = skipped_records
        self._seconds_left = seconds_left
        self.global_batch_size = global_batch_size
        self.log_every_n_steps = log_every_n_steps
        self.report_seconds = report_seconds
        self._clock = clock
        self._last_step: Optional[int] = None  # no report yet in this run
        self._last_time = 0.0
        self._train_writer = None
        self._eval_writer = None
        self._output_dir = output_dir
        self._write = write_summaries
        self._reset()

    def due(self, step: int) -> bool:
        """Whether a report is due at `step` (a loop boundary).

        True at the first boundary of the run (so a slow run shows a line after its first
        step, not after log_every_n_steps), then at the first boundary at or past each
        multiple of log_every_n_steps, or once report_seconds of wall time have passed since
        the last report.
        """
        if not self._losses:
            return False
        if self._last_step is None:
            return True
        if step // self.log_every_n_steps > self._last_step // self.log_every_n_steps:
            return True  # crossed a multiple of N: lines at steps 100, 200, ... also on resume
        return self.report_seconds > 0 and self._clock() - self._last_time >= self.report_seconds

    def _reset(self) -> None:
        self._sums: Dict[str, float] = {}
        self._losses: list = []
        self._seconds = 0.0

    def add(self, losses: Sequence[float], sums: Dict[str, float], seconds: float) -> None:
        """Adds the results of one train_loop call.

        Args:
            losses: the objective of each step run.
            sums: their global sums (see losses.sum_keys).
            seconds: wall time of the call; throughput counts training time only, not
                checkpoint saves or logging.
        """
        self._losses.extend(float(x) for x in np.asarray(losses).reshape(-1))
        self._sums = train_loop.add_sums(self._sums, sums)
        self._seconds += seconds

    def report(self, step: int, learning_rate: float) -> Optional[Dict[str, float]]:
        """Logs and summarizes the steps added since the last report.

        Args:
            step: the global step reached.
            learning_rate: the current learning rate.

        Returns:
            The reported values, or None if there was nothing to report.
        """
        if not self._losses:
            return None
        first = self._last_step is None
        self._last_step, self._last_time = step, self._clock()
        elapsed = max(self._seconds, 1e-9)
        steps = len(self._losses)
        values = {k: float(v) for k, v in self._metrics_fn(self._sums).items()}
        task_keys = sorted(k for k in values if k != "loss")
        # The mean of the per-step objectives (each step's loss over its own global batch).
        values["loss"] = float(np.mean(self._losses))
        values["learning_rate"] = float(learning_rate)
        values["examples_per_second"] = steps * self.global_batch_size / elapsed
        steps_per_second = steps / elapsed
        eta = (self.total_steps - step) / steps_per_second if steps_per_second > 0 else np.inf
        if self._seconds_left is not None:  # a --max_train_minutes budget ends it sooner
            eta = min(eta, max(0.0, self._seconds_left()))
        parts = [f"step {step}/{self.total_steps}", f"loss {values['loss']:.6f}"]
        if "masked_lm_loss" not in values:  # a fine-tuning task: its own metrics by name
            parts.append(" ".join(f"{k} {values[k]:.4f}" for k in task_keys))
        else:
            parts.append(" ".join(f"{_SHORT[k]} {values[k]:.4f}"
                                  for k in ("masked_lm_loss", "masked_lm_accuracy")))
        if "next_sentence_loss" in values:
            nsp = [f"{_SHORT[k]} {values[k]:.4f}"
                   for k in ("next_sentence_loss", "next_sentence_accuracy")]
            parts.append(" ".join(nsp))
        if "discriminator_loss" in values:
            parts.append(" ".join(f"{_SHORT[k]} {values[k]:.4f}"
                                  for k in ("discriminator_loss", "discriminator_accuracy")))
        speed = f"{values['examples_per_second']:.1f} examples/s"
        if first:
            speed += " (incl. graph tracing)"  # the first call builds the tf.function
        parts += [f"lr {learning_rate:.3e}", speed, f"eta {format_eta(eta)}"]
        if self._skipped_records is not None:
            values["skipped_records"] = float(self._skipped_records())
            parts.append(f"skipped {int(values['skipped_records'])} corrupt records")
        logging.info(" | ".join(parts))
        if self._write:
            if self._train_writer is None:
                self._train_writer = tf.summary.create_file_writer(
                    os.path.join(self._output_dir, "train"))
            with self._train_writer.as_default(step=step):
                for key, value in values.items():
                    write_scalar(key, value, step)
            self._train_writer.flush()
        self._reset()
        return values

    def report_eval(self, results: Dict[str, float]) -> None:
        """Logs eval results and writes them as summaries under output_dir/eval."""
        logging.info("eval: %s", ", ".join(f"{k} = {v:.6g}" for k, v in results.items()))
        if not self._write:
            return
        if self._eval_writer is None:
            self._eval_writer = tf.summary.create_file_writer(
                os.path.join(self._output_dir, "eval"))
        step = int(results.get("global_step", 0))
        with self._eval_writer.as_default(step=step):
            for key, value in results.items():
                if key != "global_step":
                    write_scalar(key, value, step)
        self._eval_writer.flush()

    def close(self) -> None:
        for writer in (self._train_writer, self._eval_writer):
            if writer is not None:
                writer.close()
