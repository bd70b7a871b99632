"""The training input's position, saved with the checkpoint so that a resumed run starts at
once (O(1) in the step reached) on the same trajectory.

tf.data iterators can be saved in a `tf.train.Checkpoint` (file offsets, shuffle buffer,
prefetched batches), but tf.distribute's distributed iterators cannot (TF 2.21). So wherever
one input pipeline feeds all replicas of its process (default, OneDevice and Mirrored
strategies, and every worker of MultiWorkerMirroredStrategy), `TrainInput` reads that
pipeline with a plain tf.data iterator and deals each step's batches to the local replicas
itself, in the order a distributed iterator would (local replica r gets the r-th batch of
the step), and saves the iterator:

- one worker: under "input" in the training checkpoint;
- several workers: only the chief's checkpoint is kept, so every worker also writes its own
  iterator, `output_dir/input_positions/worker-<w>-of-<n>/ckpt-<step>` (a CheckpointManager
  per worker: the files appear whole, under a temporary name renamed at the end, and the
  same number of them is kept). A worker restores its own file only when it exists for the
  step resumed and its layout (workers, this worker's index, replicas, batch shapes) is
  this run's; otherwise that worker alone skips the consumed batches. Either way it reaches
  the same position, since the pipeline is deterministic, so workers need not agree.

Why per-worker iterator files by default rather than an arithmetic position (a file order
and in-file order that are functions of seed, epoch and step, the data reopened at a computed
record; `bert_tf.data.record_positions`, `--input_position=arithmetic`):
- it needs each file's record count: TFRecords have no index, so the first run counts them
  (one parallel pass over the data, then cached in output_dir);
- TFRecords cannot be opened at a record number, so the reopened pipeline reads past the
  earlier records of the file it enters (at most one file). TensorFlow's reader can start at
  a byte offset only through the raw TFRecordDatasetV2 op, which TF 2.21 cannot serialize
  (its graph definition drops the offsets), and a gzip file cannot be entered mid-way;
- its window shuffle is another input order than the shuffle buffer's, which existing runs
  and their checkpoints follow.

TPUStrategy is where the arithmetic position is needed: it feeds its cores through
tf.distribute's multi-device iterator (infeed prefetched on the devices), which cannot be
saved, and the host's Python cannot see each input host's position. `run_pretraining`'s
`--input_position=auto` chooses it there. The trainer then reopens every pipeline at the
step's batch (`trainer.Trainer.distribute_dataset`), and `TrainInput` is not used. A
checkpoint without a usable saved iterator (another layout, an older checkpoint) is resumed
by skipping the consumed batches: one log line says so.

The saved state holds the shuffle buffer's records (about shuffle_buffer_size x the record
size, e.g. 10,000 x ~0.5 KB for seq 128) and the prefetched batches;
`benchmarks/pretraining/bench_resume.py` prints its size. tf.data's symbolic checkpointing,
which would store only file offsets, does not support shuffle.
"""

from __future__ import annotations

import os
from typing import Callable, Optional

import tensorflow as tf

from bert_tf.core import fileio
from bert_tf.training import checkpointing, distribution

INPUT_ROOT = "input"
# The checkpoint key of the input layout string (see TrainInput._layout).
_LAYOUT_KEY = f"{INPUT_ROOT}/layout/.ATTRIBUTES/VARIABLE_VALUE"
# Under output_dir: each worker's input positions when there are several workers.
POSITIONS_DIR = "input_positions"


def unsupported_reason(strategy: tf.distribute.Strategy) -> Optional[str]:
    """Why the input position of `strategy`'s runs cannot be saved; None if it can."""
    if distribution.is_tpu_strategy(strategy):
        return "TPUStrategy feeds its cores through tf.distribute's distributed iterator"
    if isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy):
        return "ParameterServerStrategy is not supported"
    return None


def arithmetic(dataset_fn) -> bool:
    """Whether `dataset_fn` reopens its input at any batch (a third argument: the batch of
    each pipeline to start at; `bert_tf.data.record_positions`) instead of being skipped or
    restored from a saved iterator."""
    return bool(getattr(dataset_fn, "arithmetic_position", False))


def positions_dir(output_dir: str, worker_index: int, num_workers: int) -> str:
    """Where worker `worker_index` of `num_workers` saves its input positions."""
    return os.path.join(output_dir, POSITIONS_DIR, f"worker-{worker_index}-of-{num_workers}")


def saved_layout(path: str) -> Optional[str]:
    """The input layout saved with the input position in checkpoint `path`.

    What a resumed run compares with its own before restoring the saved iterator, e.g.
    "worker 0 of 2, 2 replica(s), per-replica batches {...}" (the worker part only with
    several workers; then `path` is one of `positions_dir`'s checkpoints).

    Args:
        path: a checkpoint prefix (".../ckpt-<step>").

    Returns:
        The layout string, or None if the checkpoint holds no input position (saved by a
        strategy whose input cannot be saved, `unsupported_reason`, or by the chief of
        several workers, whose training checkpoint leaves the positions to each worker).
    """
    reader = tf.train.load_checkpoint(path)
    if not reader.has_tensor(_LAYOUT_KEY):
        return None
    saved = reader.get_tensor(_LAYOUT_KEY)
    return saved.decode("utf-8") if isinstance(saved, bytes) else str(saved)


@tf.function(autograph=False)  # the loop written out: no conversion per run
def _advance(iterator, num_elements: tf.Tensor) -> None:
    """Reads and drops `num_elements` elements of `iterator`."""

    def drop_one(i):
        next(iterator)
        return (i + 1,)

    tf.while_loop(lambda i: i < num_elements, drop_one,
                  (tf.zeros([], num_elements.dtype),))


def left_out(train_input: Optional["TrainInput"], problem: Optional[str]) -> tuple:
    """The roots of the training checkpoint not to restore: ("input",) unless it holds this
    process's usable input position."""
    if train_input is not None and train_input.checkpoint_objects() and not problem:
        return ()
    return (INPUT_ROOT,)


class TrainInput:
    """The training batches of one process, with a position that can be checkpointed.

    `next(train_input)` (inside a tf.function) gives one step's per-replica batches.

    Args:
        strategy: a strategy for which `unsupported_reason` is None.
        dataset_fn: (input context, per-replica batch size) -> dataset of batches.
        per_replica_batch: examples per replica per step (micro-batches included).
        output_dir: the run's output directory (with several workers, each worker's
            positions go under it).
        max_to_keep: positions kept per worker (as many as checkpoints).
    """

    def __init__(self, strategy: tf.distribute.Strategy,
                 dataset_fn: Callable[[tf.distribute.InputContext, int], tf.data.Dataset],
                 per_replica_batch: int, output_dir: str = "", max_to_keep: int = 5):
        self.strategy = strategy
        self.num_replicas = strategy.num_replicas_in_sync
        self.worker_index, self.num_workers = distribution.worker_info(strategy)
        # MultiWorkerMirroredStrategy gives every worker the same number of replicas; this
        # worker's are numbered from first_replica on in the replica group.
        self.local_replicas = self.num_replicas // self.num_workers
        self.first_replica = self.worker_index * self.local_replicas
        self._dataset_fn = dataset_fn
        self._per_replica_batch = per_replica_batch
        # Saved as the checkpoint's "input": the iterator and what its batches look like.
        self.state = tf.Module(name="train_input")
        self.state.iterator = self._make_iterator()
        self.state.layout = tf.Variable(self._layout(), trainable=False, name="input_layout")
        self._own = None
        if self.num_workers > 1:
            directory = positions_dir(output_dir, self.worker_index, self.num_workers)
            fileio.makedirs(directory)
            checkpointing.remove_stale_temporaries(directory)
            self._own_checkpoint = tf.train.Checkpoint(**{INPUT_ROOT: self.state})
            self._own = tf.train.CheckpointManager(
                self._own_checkpoint, directory, max_to_keep=max_to_keep, checkpoint_name="ckpt")

    def _make_iterator(self):
        context = tf.distribute.InputContext(
            num_input_pipelines=self.num_workers, input_pipeline_id=self.worker_index,
            num_replicas_in_sync=self.num_replicas)
        with tf.device("/cpu:0"):
            return iter(self._dataset_fn(context, self._per_replica_batch))

    def _layout(self) -> str:
        spec = self.state.iterator.element_spec
        workers = (f"worker {self.worker_index} of {self.num_workers}, "
                   if self.num_workers > 1 else "")
        return (f"{workers}{self.num_replicas} replica(s), per-replica batches "
                f"{tf.nest.map_structure(lambda s: (s.shape.as_list(), s.dtype.name), spec)}")

    def checkpoint_objects(self) -> dict:
        """{"input": what to save with the training checkpoint}; {} with several workers,
        whose positions are saved by `save_own` instead."""
        return {INPUT_ROOT: self.state} if self._own is None else {}

    def _own_path(self, checkpoint_path: str) -> str:
        return os.path.join(self._own.directory, f"ckpt-{checkpointing.step_of(checkpoint_path)}")

    def saved_state_problem(self, path: str) -> Optional[str]:
        """Why the input position saved with checkpoint `path` cannot be used (None: it can)."""
        if self._own is not None:
            path = self._own_path(path)
            if not tf.io.gfile.exists(path + ".index"):
                return f"worker {self.worker_index} saved no input position at this step"
        saved = saved_layout(path)
        if saved is None:
            return "the checkpoint has no input position"
        if saved != self.state.layout.numpy().decode("utf-8"):
            return f"the input layout changed (saved: {saved})"
        return None

    def save_own(self, step: int) -> None:
        """With several workers, saves this worker's position at `step` (else a no-op)."""
        if self._own is not None:
            self._own.save(checkpoint_number=step)

    def resume_at(self, step: int, checkpoint_path: str, problem: Optional[str]) -> None:
        """Positions the input at `step`, restored from checkpoint_path: from this worker's
        saved position when `problem` is None (with one worker the training checkpoint has
        restored it already), else by reading and dropping the batches before it."""
        if problem:
            # Not `dataset.skip`: the iterator saved later must be one of the same dataset as
            # a fresh run's, or the next resume could not restore it.
            with tf.device("/cpu:0"):
                _advance(self.state.iterator, tf.constant(step * self.local_replicas, tf.int64))
        elif self._own is not None:
            self._own_checkpoint.restore(self._own_path(checkpoint_path)).assert_consumed()

    def __iter__(self):
        return self

    def __next__(self):
        """One step's batches: the r-th batch of the step for local replica r."""
        batches = [next(self.state.iterator) for _ in range(self.local_replicas)]
        if self.num_replicas == 1:
            return batches[0]
        return self.strategy.experimental_distribute_values_from_function(
            lambda context: batches[context.replica_id_in_sync_group - self.first_replica])
