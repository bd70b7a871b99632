"""tf.data input of fine-tuning: in-memory feature arrays -> the trainer's `DatasetFn`s.

Fine-tuning sets fit in memory (SST-2's 67k sentences at length 128 take 100 MB), so the
featurizers' NumPy arrays become constants of the input graph and batches are gathered by
index. Training order: epoch e visits the examples in a permutation seeded by (seed, e)
(`tf.random.experimental.stateless_shuffle`), epochs follow each other without end, and each
input pipeline (one per worker) takes every k-th index. So the order is a function of the
seed alone, the tf.data iterator's saved state is a few integers (no shuffle buffer), and a
resumed run continues exactly where it stopped.

Padding: the featurizers pad every row to --max_seq_length, which TPUs need (static shapes).
Elsewhere a training batch is cut to its longest row, rounded up to a multiple of
`TRIM_MULTIPLE` (`trim_keys`: the arrays with one entry per position). The padded positions
are masked out of attention and carry no loss, so the cut changes no value, only the work:
most on short texts such as tweets (docs/results/finetuning.md gives the cut per task). The
multiple
bounds the distinct shapes a step sees (at most max_seq_length / 8). SQuAD keeps the full
length: its span softmax covers the padding, as in the original run_squad.

Prediction: the arrays are padded to whole global batches (TPUs need static shapes) with
rows whose "example_index" is -1; the objectives ignore those rows and the host drops them.
"""

from __future__ import annotations

import math
from typing import Dict, Mapping, Sequence

import numpy as np
import tensorflow as tf

from bert_tf.finetune.objectives import EXAMPLE_INDEX
from bert_tf.training.trainer import DatasetFn

# Trimmed batch lengths are multiples of this (see the module docstring).
TRIM_MULTIPLE = 8


def _select(arrays: Mapping[str, np.ndarray], keys: Sequence[str]) -> Dict[str, np.ndarray]:
    return {k: np.asarray(arrays[k]) for k in keys if k in arrays}


def trim_batch(batch: Dict[str, tf.Tensor], trim_keys: Sequence[str]
               ) -> Dict[str, tf.Tensor]:
    """`batch` with the arrays named in `trim_keys` cut to the longest row's length.

    Args:
        batch: {name: [batch, max_seq_length, ...] or [batch, ...]}; "input_mask" [batch,
            max_seq_length] marks the real positions (1) of each row. Grouped rows (the
            listwise reranker's) have one more leading axis: [batch, group, max_seq_length,
            ...], "input_mask" [batch, group, max_seq_length].
        trim_keys: the per-position arrays to cut (the axis after the mask's leading ones).

    Returns:
        The batch, the `trim_keys` arrays [batch, (group,) length, ...] with length the
        longest row's count of real positions rounded up to a multiple of TRIM_MULTIPLE (at
        most max_seq_length); the other arrays as they were.
    """
    mask = batch["input_mask"]
    longest = tf.reduce_max(tf.reduce_sum(tf.cast(mask > 0, tf.int32), axis=-1))
    length = tf.minimum(tf.shape(mask)[-1],
                        (longest + TRIM_MULTIPLE - 1) // TRIM_MULTIPLE * TRIM_MULTIPLE)
    if mask.shape.rank == 3:
        return {k: (v[:, :, :length] if k in trim_keys else v) for k, v in batch.items()}
    return {k: (v[:, :length] if k in trim_keys else v) for k, v in batch.items()}


def train_dataset_fn(arrays: Mapping[str, np.ndarray], keys: Sequence[str],
                     seed: int, trim_keys: Sequence[str] = ()) -> DatasetFn:
    """Endless seeded epochs over `arrays` (the model inputs and labels named in `keys`).

    Args:
        arrays: {name: array [num_examples, ...]}.
        keys: the arrays the model and the loss read.
        seed: the run's seed; epoch e's order is a function of (seed, e).
        trim_keys: per-position arrays cut to each batch's longest row (`trim_batch`);
            empty keeps every batch at the featurizers' length.
    """
    data = _select(arrays, keys)
    n = len(next(iter(data.values())))

    def dataset_fn(context: tf.distribute.InputContext, per_replica_batch: int
                   ) -> tf.data.Dataset:
        tensors = {k: tf.constant(v) for k, v in data.items()}

        # Plain graph code: not converted by autograph at every start of a run.
        @tf.autograph.experimental.do_not_convert
        def epoch(e):
            order = tf.random.experimental.stateless_shuffle(
                tf.range(n, dtype=tf.int64), seed=tf.stack([tf.constant(seed, tf.int64), e]))
            return tf.data.Dataset.from_tensor_slices(order)

        indices = tf.data.Dataset.range(2**62).flat_map(epoch)
        if context.num_input_pipelines > 1:
            indices = indices.shard(context.num_input_pipelines, context.input_pipeline_id)
        batches = indices.batch(per_replica_batch, drop_remainder=True)

        @tf.autograph.experimental.do_not_convert
        def gather(idx):
            batch = {k: tf.gather(t, idx) for k, t in tensors.items()}
            return trim_batch(batch, trim_keys) if trim_keys else batch

        return batches.map(gather, num_parallel_calls=tf.data.AUTOTUNE,
                           deterministic=True).prefetch(2)

    return dataset_fn


def padded_predict_arrays(arrays: Mapping[str, np.ndarray], keys: Sequence[str],
                          global_batch: int) -> Dict[str, np.ndarray]:
    """`arrays` padded with copies of row 0 to whole global batches, plus "example_index"."""
    data = _select(arrays, keys)
    n = len(next(iter(data.values())))
    total = max(1, math.ceil(n / global_batch)) * global_batch
    out = {}
    for k, v in data.items():
        pad = np.repeat(v[:1] if n else np.zeros((1,) + v.shape[1:], v.dtype), total - n, axis=0)
        out[k] = np.concatenate([v, pad])
    out[EXAMPLE_INDEX] = np.concatenate([np.arange(n, dtype=np.int32),
                                         np.full(total - n, -1, np.int32)])
    return out


def predict_dataset_fn(padded: Mapping[str, np.ndarray]) -> DatasetFn:
    """One ordered pass over `padded` (from `padded_predict_arrays`)."""

    def dataset_fn(context: tf.distribute.InputContext, per_replica_batch: int
                   ) -> tf.data.Dataset:
        ds = tf.data.Dataset.from_tensor_slices(dict(padded))
        if context.num_input_pipelines > 1:
            ds = ds.shard(context.num_input_pipelines, context.input_pipeline_id)
        return ds.batch(per_replica_batch, drop_remainder=True).prefetch(2)

    return dataset_fn


def num_predict_batches(padded: Mapping[str, np.ndarray], global_batch: int) -> int:
    return len(padded[EXAMPLE_INDEX]) // global_batch


def in_input_order(predictions: Mapping[str, np.ndarray], num_examples: int
                   ) -> Dict[str, np.ndarray]:
    """Predictions sorted by example index, padding rows dropped.

    Raises:
        RuntimeError: an example is missing or repeated (a sharding bug, not user input).
    """
    index = np.asarray(predictions[EXAMPLE_INDEX])
    keep = np.flatnonzero(index >= 0)
    order = keep[np.argsort(index[keep], kind="stable")]
    if not np.array_equal(index[order], np.arange(num_examples)):
        raise RuntimeError(f"predictions cover {len(order)} rows for {num_examples} examples")
    return {k: np.asarray(v)[order] for k, v in predictions.items() if k != EXAMPLE_INDEX}
