"""Training checkpoints: save, resume, and warm-start from another run.

A training checkpoint holds everything a run needs to continue exactly where it stopped:

    model      the pre-training model's variables
    optimizer  its slots (Adam moments, ...), iteration counter and loss scale
    step       the global step (int64)
    rng        Keras seed-generator states (dropout); Keras does not track them itself
    input      the tf.data iterator's position, where possible (`bert_tf.training.resume`;
               with several workers each worker saves its own beside the checkpoint)

Restoring is strict: every variable must be in the checkpoint with its shape, and the
checkpoint must hold nothing else (`compare_with_checkpoint`), else a one-line UserError.

`tf.train.CheckpointManager` writes them as `output_dir/ckpt-<step>` (TensorFlow writes
`<prefix>_temp/` and renames, and updates the `checkpoint` index file atomically).
`deferred_interrupts` keeps Ctrl-C from landing in the middle of a save, so a run never
leaves a half-written checkpoint behind; `sigterm_requests` turns SIGTERM (a preemption
notice) into a request the trainer honours after its current host call, a few seconds at
most, on every worker (`bert_tf.training.preemption`): save, then stop.

Under MultiWorkerMirroredStrategy every worker takes part in a save; the chief writes to
output_dir and the others to a scratch directory they delete at once. All workers restore
from the chief's checkpoint (their variables are identical).

`warm_start` loads only model weights (`init_checkpoint`), e.g. phase 2 at sequence length
512 from a phase-1 run, and reports variables that were missing or unused.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import os
import re
import shutil
import signal
import threading
from typing import Callable, Iterator, List, Optional, Sequence

import tensorflow as tf
from absl import logging

from bert_tf.core import errors, fileio
from bert_tf.core.errors import UserError
from bert_tf.training.checkpoint_paths import (
    SavedObjectGraph,
    checkpoint_variable_paths,
    compare_with_checkpoint,
    model_variable_paths,
    short_list,
)

_CKPT_PREFIX = "ckpt"


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Delays SIGINT (Ctrl-C) until the block ends, then raises KeyboardInterrupt.

    Only the main thread can install signal handlers; elsewhere this is a no-op.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: List[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received:
        raise KeyboardInterrupt


class Terminated(Exception):
    """Training stopped on SIGTERM after saving a checkpoint; the message says where."""


@contextlib.contextmanager
def sigterm_requests() -> Iterator[List[int]]:
    """Records SIGTERM (preemption notice) instead of dying, while the block runs.

    Yields:
        A list that gets the signal number when SIGTERM arrives; the caller checks it between
        its calls of the train step, saves and stops. Outside the main thread nothing is
        installed.
    """
    received: List[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))
    try:
        yield received
    finally:
        signal.signal(signal.SIGTERM, previous)


def seed_state_variables(model) -> list:
    """Keras seed-generator state variables of `model` (dropout RNG), in a stable order.

    `keras.Layer.variables` includes them but `tf.train.Checkpoint` does not track seed
    generators, so without this a resumed run would draw different dropout masks.
    """
    weight_ids = {id(v) for v in model.weights}
    return [v for v in model.variables if id(v) not in weight_ids]


def worker_checkpoint_dir(output_dir: str, worker_index: int) -> str:
    """Where worker `worker_index` writes checkpoints (non-chief: scratch, deleted at once)."""
    if worker_index == 0:
        return output_dir
    return os.path.join(output_dir, "tmp_worker_checkpoints", f"worker-{worker_index}")


def step_of(checkpoint_path: str) -> int:
    """The step number of a `.../ckpt-<step>` prefix (-1 if it does not follow the pattern)."""
    match = re.search(r"-(\d+)$", checkpoint_path)
    return int(match.group(1)) if match else -1


def remove_stale_temporaries(directory: str) -> None:
    """Deletes leftovers of a save that was killed hard (`ckpt-N_temp/`, `checkpoint.tmp*`)."""
    if fileio.is_remote(directory):
        pattern_dirs = tf.io.gfile.glob(os.path.join(directory, f"{_CKPT_PREFIX}-*_temp"))
        for path in pattern_dirs:
            tf.io.gfile.rmtree(path)
        return
    for path in glob.glob(os.path.join(directory, f"{_CKPT_PREFIX}-*_temp")):
        shutil.rmtree(path, ignore_errors=True)
    for path in glob.glob(os.path.join(directory, "checkpoint.tmp*")):
        with contextlib.suppress(OSError):
            os.remove(path)


class CheckpointSaver:
    """Saves and restores the full training state of one worker.

    Args:
        output_dir: the run's output directory.
        checkpoint: a `tf.train.Checkpoint` over model, optimizer, step, rng.
        step: the global step variable (int64 scalar), used to number checkpoints.
        max_to_keep: how many recent checkpoints to keep.
        worker_index: this worker's index (0 = chief).
        also_save: called with the step after each save (e.g. a worker's own input position).
    """

    def __init__(
        self,
        output_dir: str,
        checkpoint: tf.train.Checkpoint,
        step: tf.Variable,
        max_to_keep: int = 5,
        worker_index: int = 0,
        also_save: Optional[Callable[[int], None]] = None,
    ):
        self.output_dir = output_dir
        self.worker_index = worker_index
        self.directory = worker_checkpoint_dir(output_dir, worker_index)
        fileio.makedirs(self.directory)
        remove_stale_temporaries(self.directory)
        self._checkpoint = checkpoint
        self._step = step
        self._restored: Optional[str] = None
        self._also_save = also_save
        self._manager = tf.train.CheckpointManager(
            checkpoint,
            self.directory,
            max_to_keep=max_to_keep,
            checkpoint_name=_CKPT_PREFIX,
            step_counter=step,
        )

    @property
    def latest(self) -> Optional[str]:
        """The latest checkpoint saved or restored, as the chief wrote it (in output_dir)."""
        latest = self._manager.latest_checkpoint
        if latest is None:
            return self._restored  # (a non-chief worker's own directory is empty)
        if self.worker_index != 0:
            # A non-chief worker's own copy is deleted at once (see `save`).
            return os.path.join(self.output_dir, os.path.basename(latest))
        return latest

    def save(self) -> str:
        """Saves at the current step; Ctrl-C during the write is handled after it completes.

        Returns:
            The checkpoint prefix written, e.g. `output_dir/ckpt-1000`.
        """
        step = int(self._step.numpy())
        if self.latest and step_of(self.latest) == step:
            return self.latest  # Already saved at this step (e.g. the end of an interval).
        with deferred_interrupts():
            path = self._manager.save(checkpoint_number=step)
            if self.worker_index != 0:
                # Non-chief workers only take part in the save; the chief's copy is the one.
                tf.io.gfile.rmtree(self.directory)
                path = os.path.join(self.output_dir, os.path.basename(path))
            if self._also_save is not None:
                self._also_save(step)
        return path

    def restore_latest(self, without: Sequence[str] = ()) -> Optional[int]:
        """Restores the latest checkpoint of this run, if any.

        Every worker reads the chief's latest checkpoint in output_dir. Every variable of
        every object must be restored, and the checkpoint must hold nothing else.

        Args:
            without: root objects of the checkpoint (e.g. "input") to leave as they are,
                whether the checkpoint has them or not.

        Returns:
            The restored step, or None if the run starts from scratch.

        Raises:
            UserError: the checkpoint does not fit this model and optimizer.
        """
        path = tf.train.latest_checkpoint(self.output_dir)
        if path is None:
            return None
        children = tf.train.TrackableView.children(self._checkpoint)
        roots = {name: obj for name, obj in children.items()
                 if name not in without and name != "save_counter"}

        def fail(reason: str) -> UserError:
            return UserError(
                f"cannot resume from {path}: it does not match this model and optimizer "
                f"({reason}); use a new --output_dir, or --init_checkpoint to start from its "
                "weights only")

        saved = SavedObjectGraph(path)
        mismatch = compare_with_checkpoint(saved, roots)
        extra = saved.root_names() - set(roots) - set(without) - {"save_counter"}
        if extra:
            mismatch = dataclasses.replace(
                mismatch, unexpected=mismatch.unexpected + tuple(sorted(extra)))
        if mismatch:
            raise fail(mismatch.describe())
        try:
            if without:
                # The checkpoint may hold the objects left out: match ours, ignore those.
                status = tf.train.Checkpoint(**roots).restore(path)
                status.assert_existing_objects_matched()
                status.expect_partial()
            else:
                self._checkpoint.restore(path).assert_consumed()
        except (AssertionError, ValueError, tf.errors.OpError) as e:
            raise fail(errors.reason(e)) from None
        self._restored = path
        return int(self._step.numpy())


def resolve_checkpoint(path: str, what: str = "init_checkpoint") -> str:
    """Turns a checkpoint prefix or a directory (-> its latest checkpoint) into a prefix.

    Raises:
        UserError: nothing readable at `path`.
    """
    if fileio.isdir(path):
        latest = tf.train.latest_checkpoint(path)
        if latest is None:
            raise UserError(f"--{what}={path}: the directory has no checkpoint")
        return latest
    if not tf.io.gfile.exists(path + ".index"):
        raise UserError(f"--{what}={path}: no checkpoint there (expected {path}.index)")
    return path


@dataclasses.dataclass(frozen=True)
class WarmStartReport:
    """Outcome of `warm_start`; variables are named by their object path, e.g.
    "model/encoder/token_embedding/_embeddings".

    Attributes:
        checkpoint: the prefix read.
        restored: model variables that were loaded.
        missing: model variables not in the checkpoint (they keep their initial values).
        unused: checkpoint model variables this model has no place for.
    """

    checkpoint: str
    restored: tuple
    missing: tuple
    unused: tuple


def warm_start(model, init_checkpoint: str, root_name: str = "model") -> WarmStartReport:
    """Loads model weights (only) from a training checkpoint of this package.

    The optimizer, the step and the input position are not touched. Variables are matched by
    their object path under `root_name` ("model" in our training checkpoints).

    Args:
        model: a built Keras model.
        init_checkpoint: a checkpoint prefix, or a directory (its latest checkpoint).
        root_name: the name the model has in the checkpoint.

    Returns:
        What was restored, missing and unused; missing/unused are also logged.

    Raises:
        UserError: no checkpoint, no model variables in it, or shapes that differ.
    """
    path = resolve_checkpoint(init_checkpoint)
    saved = checkpoint_variable_paths(path, root_name)
    if not saved:
        raise UserError(
            f"--init_checkpoint={init_checkpoint}: no '{root_name}' variables in {path} (is it a "
            "bert_tf training checkpoint? Convert Google checkpoints first)"
        )
    ours = model_variable_paths(root_name, model)
    restored = sorted(set(ours) & set(saved))
    missing = sorted(set(ours) - set(saved))
    unused = sorted(set(saved) - set(ours))
    mismatched = [
        f"{k} {saved[k]} vs {list(ours[k].shape)}"
        for k in restored
        if saved[k] != list(ours[k].shape)
    ]
    if mismatched:
        raise UserError(
            f"--init_checkpoint={init_checkpoint}: {len(mismatched)} variable(s) have other "
            f"shapes in the checkpoint, e.g. {mismatched[0]}"
        )
    if not restored:
        raise UserError(f"--init_checkpoint={init_checkpoint}: no variable of this model in {path}")
    tf.train.Checkpoint(**{root_name: model}).read(path).expect_partial()
    report = WarmStartReport(path, tuple(restored), tuple(missing), tuple(unused))
    log_warm_start(report)
    return report


def log_warm_start(report: WarmStartReport) -> None:
    logging.info(
        "init_checkpoint %s: restored %d variables", report.checkpoint, len(report.restored)
    )
    if report.missing:
        logging.warning(
            "init_checkpoint: %d model variables NOT in the checkpoint (left at their initial "
            "values): %s", len(report.missing), short_list(report.missing)
        )
    if report.unused:
        logging.warning(
            "init_checkpoint: %d checkpoint variables UNUSED by this model: %s",
            len(report.unused), short_list(report.unused)
        )
