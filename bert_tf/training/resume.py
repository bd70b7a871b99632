"""The training input's position, saved with the checkpoint so that a resumed run starts at
once (O(1) in the step reached) on the same trajectory.

tf.data iterators can be saved in a `tf.train.Checkpoint` (file offsets, shuffle buffer,
prefetched batches), but tf.distribute's distributed iterators cannot (TF 2.21). So where
one input pipeline feeds all replicas of this process (default, OneDevice and Mirrored
strategies, one worker), `TrainInput` reads the pipeline with a plain tf.data iterator and
deals each step's batches to the replicas itself, in the order a distributed iterator would
(replica r gets the r-th batch of the step), and saves that iterator under "input" in the
checkpoint.

Elsewhere (TPUStrategy feeds its cores through a multi-device iterator; with several workers
only the chief's checkpoint is kept, not every worker's position), and when resuming from a
checkpoint without a usable input position, the run falls back to skipping the batches
already consumed (`trainer.Trainer.distribute_dataset`), which reads them again: one log
line says so.

The saved state holds the shuffle buffer's records (about shuffle_buffer_size x the record
size, e.g. 10,000 x ~0.5 KB for seq 128) and the prefetched batches; `benchmarks/bench_resume.py`
prints its size. tf.data's symbolic checkpointing, which would store only file offsets,
does not support shuffle.
"""

from __future__ import annotations

from typing import Callable, Optional

import tensorflow as tf

from bert_tf.training import distribution

INPUT_ROOT = "input"
# The checkpoint key of the input layout string (see TrainInput.layout).
_LAYOUT_KEY = f"{INPUT_ROOT}/layout/.ATTRIBUTES/VARIABLE_VALUE"


def unsupported_reason(strategy: tf.distribute.Strategy) -> Optional[str]:
    """Why the input position of `strategy`'s runs cannot be saved; None if it can."""
    if distribution.is_tpu_strategy(strategy):
        return "TPUStrategy feeds its cores through tf.distribute's distributed iterator"
    if distribution.worker_info(strategy)[1] > 1:
        return "with several workers only the chief's checkpoint is kept"
    if isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy):
        return "ParameterServerStrategy is not supported"
    return None


class TrainInput:
    """The training batches of one process, with a position that can be checkpointed.

    `next(train_input)` (inside a tf.function) gives one step's per-replica batches.

    Args:
        strategy: a strategy for which `unsupported_reason` is None.
        dataset_fn: (input context, per-replica batch size) -> dataset of batches.
        per_replica_batch: examples per replica per step (micro-batches included).
    """

    def __init__(self, strategy: tf.distribute.Strategy,
                 dataset_fn: Callable[[tf.distribute.InputContext, int], tf.data.Dataset],
                 per_replica_batch: int):
        self.strategy = strategy
        self.num_replicas = strategy.num_replicas_in_sync
        self._dataset_fn = dataset_fn
        self._per_replica_batch = per_replica_batch
        # Saved as the checkpoint's "input": the iterator and what its batches look like.
        self.state = tf.Module(name="train_input")
        self.state.iterator = self._make_iterator(0)
        self.state.layout = tf.Variable(self._layout(), trainable=False, name="input_layout")

    def _make_iterator(self, skip_steps: int):
        context = tf.distribute.InputContext(
            num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=self.num_replicas)
        with tf.device("/cpu:0"):
            dataset = self._dataset_fn(context, self._per_replica_batch)
            if skip_steps:
                dataset = dataset.skip(skip_steps * self.num_replicas)
            return iter(dataset)

    def _layout(self) -> str:
        spec = self.state.iterator.element_spec
        return (f"{self.num_replicas} replica(s), per-replica batches "
                f"{tf.nest.map_structure(lambda s: (s.shape.as_list(), s.dtype.name), spec)}")

    def checkpoint_objects(self) -> dict:
        """{"input": what to save with the training checkpoint}."""
        return {INPUT_ROOT: self.state}

    def saved_state_problem(self, path: str) -> Optional[str]:
        """Why checkpoint `path`'s input position cannot be used (None: it can)."""
        reader = tf.train.load_checkpoint(path)
        if not reader.has_tensor(_LAYOUT_KEY):
            return "the checkpoint has no input position"
        saved = reader.get_tensor(_LAYOUT_KEY)
        saved = saved.decode("utf-8") if isinstance(saved, bytes) else str(saved)
        if saved != self.state.layout.numpy().decode("utf-8"):
            return f"the input layout changed (saved: {saved})"
        return None

    def skip_to(self, step: int) -> None:
        """Repositions the input at `step` by reading and dropping the batches before it."""
        self.state.iterator = self._make_iterator(step)

    def __iter__(self):
        return self

    def __next__(self):
        """One step's batches: the r-th batch of the step for replica r."""
        batches = [next(self.state.iterator) for _ in range(self.num_replicas)]
        if self.num_replicas == 1:
            return batches[0]
        return self.strategy.experimental_distribute_values_from_function(
            lambda context: batches[context.replica_id_in_sync_group])
