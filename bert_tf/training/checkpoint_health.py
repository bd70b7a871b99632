"""Which checkpoints are good: retention until the losses vouch for them, the record of it
beside the checkpoints, and what a divergence stop leaves on disk.

A checkpoint is good only if the loss of its state was seen healthy: the state saved at
step s gives the loss of step s + 1, which the trainer sees one host loop later
(`bert_tf.training.health`). Three things follow.

- Retention. Until the detector vouches for the newest checkpoint, rotation must not delete
  the good one before it: the trainer's checkpoint manager keeps `EXTRA_CHECKPOINTS` more
  than `keep_checkpoint_max`, and `CheckpointRetention` deletes those only once the detector
  vouches for the newest state (no step a later window could date a spike at is above the
  bar), or when the run ends.
- The record. Each time the detector vouches for a checkpoint, the chief writes its step to
  `checkpoint_health.json` in output_dir (atomically: a preempted or killed run leaves the
  old record or the new one). A rerun reads it, so that a checkpoint which an earlier run
  saved but never saw a loss of (a preemption save, or a directory an older version wrote,
  which has no record) is never called good: on resume its first loss judges it, and only
  then. Every worker computes the same step from the same all-reduced losses; only the chief
  writes.
- The stop (`stop_message`, chief only). The last good checkpoint becomes the latest of the
  index, so that a rerun resumes from it; the condemned checkpoints (states at the first bad
  step - 1 or later, written before the losses that condemn them came in) are deleted; with
  no good checkpoint the index is removed, so that a rerun starts from the initial weights
  and never from a diverged state. The index is rewritten (atomically, by TensorFlow) before
  any file is deleted: a stop killed halfway leaves files out of the index, never an index
  naming a condemned state.
"""

from __future__ import annotations

import json
import os
from typing import Optional, Sequence

from bert_tf.core import fileio
from bert_tf.training.health import Divergence, step_of

HEALTH_FILE = "checkpoint_health.json"
INDEX_FILE = "checkpoint"  # tf.train.CheckpointManager's index of output_dir


def read_vouched_step(output_dir: str) -> int:
    """The newest step whose checkpoint a run saw a healthy loss of; -1 if none recorded."""
    path = os.path.join(output_dir, HEALTH_FILE)
    try:
        with fileio.open_file(path, "r") as f:
            return int(json.load(f)["vouched_step"])
    except (OSError, ValueError, KeyError, TypeError):
        # No record (a new run, or an older version's directory): nothing is vouched for.
        return -1


def write_vouched_step(output_dir: str, step: int) -> None:
    with fileio.atomic_output(os.path.join(output_dir, HEALTH_FILE), "wb") as f:
        f.write((json.dumps({"vouched_step": step}) + "\n").encode("utf-8"))


def rewrite_index(output_dir: str, state, paths: Sequence[str]) -> None:
    """Rewrites output_dir's index to list `paths` (of `state`'s), the last one the latest.

    With their timestamps: a checkpoint manager that reads an index without them takes
    every checkpoint in it for one to preserve, and drops it from its list (and from the
    index it writes next) while leaving its files on disk.
    """
    import tensorflow as tf

    stamps = dict(zip(state.all_model_checkpoint_paths, state.all_model_checkpoint_timestamps))
    tf.compat.v1.train.update_checkpoint_state(
        output_dir, paths[-1], list(paths),
        all_model_checkpoint_timestamps=[stamps[path] for path in paths] if len(stamps) == len(
            state.all_model_checkpoint_paths) else None,
        last_preserved_timestamp=state.last_preserved_timestamp or None)


def delete_checkpoint(prefix: str) -> None:
    """Deletes a checkpoint's files (`<prefix>.index`, `<prefix>.data-*`)."""
    import tensorflow as tf  # here: the record itself does not need TensorFlow

    for path in tf.io.gfile.glob(prefix + ".index") + tf.io.gfile.glob(prefix + ".data-*"):
        tf.io.gfile.remove(path)


class CheckpointRetention:
    """Keeps the checkpoints beyond `keep` until the newest is vouched for; records it.

    The trainer's checkpoint manager keeps keep + EXTRA_CHECKPOINTS checkpoints; call
    `saved` after each save, `vouched` after each loop that the detector vouches for
    (`DivergenceDetector.vouches`) and `finished` at the end of a run: the oldest checkpoints
    beyond `keep` are then deleted (the manager would delete them at a later save anyway, so
    its own list and the index stay consistent).

    Args:
        output_dir: the run's checkpoints.
        keep: keep_checkpoint_max.
        write: delete and record (the chief worker only; the others keep no checkpoint).
        start_step: the step the run resumed at (0: a new run). A resumed checkpoint that
            no run vouched for yet (`read_vouched_step`) waits for its first loss.
    """

    def __init__(self, output_dir: str, keep: int, write: bool, start_step: int = 0):
        self.output_dir = output_dir
        self.keep = keep
        self._write = write
        # A record above the resumed step is of states no longer on the trajectory.
        self.vouched_step = min(read_vouched_step(output_dir), start_step) if start_step else -1
        # The newest checkpoint still waiting for its next loss (a resumed, unvouched one).
        self._newest = start_step if start_step > max(self.vouched_step, 0) else None

    def saved(self, step: int) -> None:
        """A checkpoint of `step` was saved (its loss is still to come)."""
        self._newest = step

    def vouched(self) -> None:
        """The newest checkpoint's state gave a healthy loss."""
        if self._newest is None:
            return
        self.vouched_step, self._newest = self._newest, None
        if self._write:
            write_vouched_step(self.output_dir, self.vouched_step)
            self._trim()

    def finished(self) -> None:
        """The run ended: back to `keep` (the last checkpoint stays unvouched)."""
        if self._write:
            self._trim()

    def _trim(self) -> None:
        import tensorflow as tf

        state = tf.train.get_checkpoint_state(self.output_dir)
        paths = list(state.all_model_checkpoint_paths) if state else []
        if len(paths) <= self.keep:
            return
        for old in paths[:-self.keep]:
            delete_checkpoint(old)
        rewrite_index(self.output_dir, state, paths[-self.keep:])


def stop_message(divergence: Divergence, output_dir: str, write: bool,
                 vouched_step: Optional[int] = None) -> str:
    """Leaves output_dir as a rerun must find it (module doc); returns the one line.

    Args:
        divergence: why the run stops.
        output_dir: the run's checkpoints.
        write: rewrite the index and delete (the chief worker only).
        vouched_step: `CheckpointRetention.vouched_step` (None: read the record).
    """
    import tensorflow as tf  # here: the record itself does not need TensorFlow

    if vouched_step is None:
        vouched_step = read_vouched_step(output_dir)
    state = tf.train.get_checkpoint_state(output_dir)
    checkpoints = list(state.all_model_checkpoint_paths) if state else []
    good = divergence.last_good_checkpoint(checkpoints, vouched_step)
    if write:
        index = os.path.join(output_dir, INDEX_FILE)
        if good:
            kept = [path for path in checkpoints if step_of(path) <= step_of(good)]
            if kept != checkpoints or good != state.model_checkpoint_path:
                rewrite_index(output_dir, state, kept)
        elif tf.io.gfile.exists(index):
            tf.io.gfile.remove(index)
        for path in divergence.condemned(checkpoints):
            delete_checkpoint(path)
    return divergence.message(checkpoints, vouched_step)
