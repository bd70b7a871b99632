"""Held-out evaluation during training (`--eval_every_n_steps`) and its record, eval_history.jsonl.

`PeriodicEval` tells the trainer where its loops must end so that evaluations land on the
multiples of N, times them, and records each one. The trainer evaluates with the same eval
step as the end-of-training eval, on a fresh iterator of the eval input (the same batches
every time), with the model in inference mode: no dropout mask is drawn and the training
input iterator, the step and the optimizer are untouched, so a run follows the same
trajectory with and without periodic evaluation.

The record, `output_dir/eval_history.jsonl`, is a public format: one JSON object per line
and per evaluation, appended as it happens (the chief worker writes it):

    {"step": 2000, "masked_lm_accuracy": 0.412, "masked_lm_loss": 3.21,
     "next_sentence_accuracy": 0.87, "next_sentence_loss": 0.31, "loss": 3.52,
     "train_seconds": 812.4, "start_step": 0,
     "sums": {"mlm_weighted_ce": ..., "mlm_weight": 2534.0, "mlm_correct": ...,
              "num_examples": 160.0, ...}}

- `step`: the global step evaluated (a multiple of N);
- the metrics of the task's objective (pretraining: the keys above; next_sentence_* only
  with NSP; fine-tuning tasks: their own), the same figures as eval_results.txt;
- `train_seconds`: wall time since this process started training at `start_step`, without
  the periodic evaluations (a resumed run counts from its own start, hence `start_step`);
- `sums`: the global sums the metrics come from (`Objective.sum_keys`); for pretraining
  `mlm_weight` is the number of masked positions evaluated, `num_examples` the examples. A
  vector sum (`Objective.sum_shapes`, e.g. ELECTRA's AUC histograms) is a list.

The file is strict JSON (a non-finite figure is written as null). Reading it needs no
TensorFlow.

Lines are written whole and flushed one at a time, so a crash can leave at most a torn last
line; the next write starts a new line after it. `read_eval_history` skips torn lines and,
where a resumed run evaluated a step again (it had been evaluated after the checkpoint the
run resumed from), keeps the later record.
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import Callable, Dict, List, Mapping, Tuple

from absl import logging

from bert_tf.core import fileio

EVAL_HISTORY_FILE = "eval_history.jsonl"
# steps_to_next when evaluation is off: beyond any run.
_NEVER = 1 << 62


def append_record(path: str, record: Mapping[str, object]) -> None:
    """Appends one JSON object as a line of `path` (created if missing).

    Local files are appended to and flushed to disk; a remote object store cannot append,
    so there the file is rewritten whole under a temporary name (it holds one short line
    per evaluation).
    """
    line = json.dumps(record) + "\n"
    if fileio.is_remote(path):
        old = ""
        if fileio.exists(path):
            with fileio.open_file(path, "r") as f:
                old = f.read()
        if old and not old.endswith("\n"):
            old += "\n"
        with fileio.atomic_output(path, "w") as f:
            f.write(old + line)
        return
    with open(path, "ab+") as f:
        # A torn last line (a crash mid-write) stays on a line of its own.
        if f.tell() > 0:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                f.write(b"\n")
        f.write(line.encode("utf-8"))
        f.flush()
        os.fsync(f.fileno())


def read_eval_history(path: str) -> List[Dict[str, object]]:
    """The evaluations recorded in an eval_history.jsonl, one dict per step, by step.

    Args:
        path: the file, or the run's output_dir.

    Returns:
        The records (see the module docstring), in increasing step order; for a step
        recorded twice (a resumed run), the later record. Torn or unreadable lines are
        skipped. [] when the file does not exist.
    """
    if fileio.isdir(path):
        path = os.path.join(path, EVAL_HISTORY_FILE)
    if not fileio.exists(path):
        return []
    with fileio.open_file(path, "r") as f:
        text = f.read()
    by_step: Dict[int, Dict[str, object]] = {}
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line torn by a crash
        if isinstance(record, dict) and isinstance(record.get("step"), int):
            by_step[record["step"]] = record
    return [by_step[step] for step in sorted(by_step)]


def _plain(value) -> object:
    """A sum as a float, or as a list of floats when it is a vector (`sum_shapes`)."""
    if getattr(value, "ndim", 0):
        return [float(x) for x in value.reshape(-1)]
    return float(value)


def _finite(values: Mapping[str, object]) -> Dict[str, object]:
    # Strict JSON has no NaN or Infinity: a non-finite figure is written as null.
    def finite(value):
        if isinstance(value, list):
            return [finite(x) for x in value]
        return value if math.isfinite(value) else None

    return {key: finite(value) for key, value in values.items()}


def format_line(step: int, metrics: Mapping[str, float], examples: float) -> str:
    """The console line of one evaluation, e.g.
    `eval at step 2000 (160 examples): masked_lm_accuracy 0.4120 | masked_lm_loss 3.2100`."""
    parts = [f"{key} {metrics[key]:.4f}" for key in sorted(metrics) if key != "loss"]
    parts.append(f"loss {metrics['loss']:.4f}")
    return f"eval at step {step} ({int(examples)} examples): " + " | ".join(parts)


class PeriodicEval:
    """Schedules, times and records the evaluations of one training process.

    Args:
        output_dir: eval_history.jsonl and the `eval/` summaries go here.
        every_n_steps: evaluate at every multiple of this step; 0: never.
        start_step: the step this process started training at.
        write: write the history and summaries (the chief worker only).
        clock: monotonic seconds (injectable for tests).
    """

    def __init__(self, output_dir: str, every_n_steps: int, start_step: int, write: bool,
                 clock: Callable[[], float] = time.monotonic):
        if every_n_steps < 0:
            raise ValueError(f"every_n_steps must be >= 0, got {every_n_steps}")
        self.output_dir = output_dir
        self.path = os.path.join(output_dir, EVAL_HISTORY_FILE)
        self.every_n_steps = every_n_steps
        self.start_step = start_step
        self._write = write
        self._clock = clock
        self._started = clock()
        self._eval_seconds = 0.0
        self._writer = None

    def steps_to_next(self, step: int) -> int:
        """Steps from `step` to the next evaluation, where the trainer ends its loop (a
        number beyond any run when off)."""
        if not self.every_n_steps:
            return _NEVER
        return self.every_n_steps - step % self.every_n_steps

    def due(self, step: int) -> bool:
        """Whether to evaluate at `step` (a loop boundary of this process)."""
        return bool(self.every_n_steps) and step > self.start_step and (
            step % self.every_n_steps == 0)

    def run(self, step: int, evaluate: Callable[[], Tuple[Mapping[str, float],
                                                          Mapping[str, float], int]]
            ) -> Dict[str, float]:
        """Evaluates at `step`: one console line, the summaries and the history record.

        Args:
            step: the global step reached.
            evaluate: returns (metrics {name: value} with "loss", global sums {key: value},
                batches evaluated).

        Returns:
            The metrics.
        """
        began = self._clock()
        metrics, sums, batches = evaluate()
        finished = self._clock()
        train_seconds = began - self._started - self._eval_seconds
        self._eval_seconds += finished - began
        metrics = {key: float(value) for key, value in metrics.items()
                   if key != "global_step"}
        sums = {key: _plain(value) for key, value in sums.items()}
        logging.info("%s (%d batches, %.1f s)",
                     format_line(step, metrics, sums.get("num_examples", 0)), batches,
                     finished - began)
        if self._write:
            self._summarize(step, metrics)
            record: Dict[str, object] = {"step": int(step), **_finite(metrics),
                                         "train_seconds": round(train_seconds, 3),
                                         "start_step": int(self.start_step),
                                         "sums": _finite(sums)}
            append_record(self.path, record)
        return metrics

    def _summarize(self, step: int, metrics: Mapping[str, float]) -> None:
        # The end-of-training eval's run directory and tags (progress.ProgressLogger), so
        # that TensorBoard draws the periodic and final evaluations as one curve beside the
        # training curves of `train/`.
        import tensorflow as tf  # here: reading the history must not need TensorFlow

        from bert_tf.training import progress

        if self._writer is None:
            self._writer = tf.summary.create_file_writer(os.path.join(self.output_dir, "eval"))
        with self._writer.as_default(step=step):
            for key, value in metrics.items():
                progress.write_scalar(key, value, step)
        self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
