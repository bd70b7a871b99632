"""Arithmetic input positions: a training order that is a function of the seed, the epoch and
the record number, so that a run reopens its input at any step without reading what it
consumed. This is how a resumed run finds its place where tf.data's iterator cannot be saved
(TPUStrategy, whose distributed iterator feeds the cores); `--input_position=arithmetic`
selects it under any strategy.

Each input pipeline (one per host or worker) reads, in epoch e:
- its files in a seeded order, a stateless permutation of (seed, e): the same on every
  pipeline, so that record sharding (fewer files than pipelines: each pipeline keeps every
  P-th record) splits one stream;
- one file after another, the stream cut into windows of `shuffle_buffer_size` records, each
  window permuted by a stateless permutation of (seed, pipeline, e, window).
A pipeline with n records per epoch has, after q records, reached epoch q // n, window
(q % n) // W and offset (q % n) % W. It reopens there from the files' record counts: it
enters the file that holds the window's first record, reads past that file's earlier
records (at most one file), and drops the window's first `offset` records (fewer than W).
Nothing before is read, and the order after is the uninterrupted run's.

The window shuffle replaces the iterator mode's shuffle buffer: records get mixed within W
consecutive records, as they do in a buffer of W. Both create_pretraining_data scripts
shuffle the instances across the whole output before writing, so a seeded file order and a
window shuffle are enough.

Record counts: TFRecords have no index, so each file's records are counted once, in
parallel (`count_records`), and kept in a JSON cache keyed by path and file size, written
under a temporary name and renamed. A resume reads the cache instead of the data.
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Dict, List, Sequence, Tuple

import tensorflow as tf
from absl import logging

from bert_tf.core import fileio
from bert_tf.core.errors import UserError
from bert_tf.data.input_config import InputConfig, InputFiles
from bert_tf.data.input_validation import read_past_damage, validate_input_files

# Under a run's output_dir: the record count of every input file.
COUNTS_FILE = "input_record_counts.json"
_COUNTS_FORMAT = 1


def count_files(files: Sequence[str], compressions: Sequence[str]) -> List[int]:
    """The readable records of each file, read in parallel by tf.data (as the pipeline reads
    them: TensorFlow's reader, which ends a file at a damaged record)."""

    @tf.autograph.experimental.do_not_convert  # plain graph code (no conversion per run)
    def count(path, compression):
        return read_past_damage(path, compression).batch(1024).reduce(
            tf.constant(0, tf.int64), lambda n, block: n + tf.size(block, out_type=tf.int64))

    paths = tf.data.Dataset.from_tensor_slices((list(files), list(compressions)))
    counts = paths.map(count, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return [int(n) for n in counts.as_numpy_iterator()]


def _load_cache(path: str) -> Dict[str, List[int]]:
    """{file path: [size in bytes, records]} from the cache at `path`; {} when there is none
    or it cannot be read (then the files are counted again)."""
    if not path or not fileio.exists(path):
        return {}
    try:
        with fileio.open_file(path) as f:
            cached = json.load(f)
        if cached.get("format") == _COUNTS_FORMAT:
            return dict(cached["files"])
    except (ValueError, KeyError, TypeError, OSError, tf.errors.OpError) as e:
        logging.warning("ignoring the record-count cache %s (%s): counting again", path, e)
    return {}


def count_records(inputs: InputFiles, cache_path: str = "") -> Tuple[int, ...]:
    """The number of records in each of `inputs.files`, from the cache at `cache_path` where
    it holds the file at its current size, else counted (and the cache rewritten).

    Raises:
        UserError: the cache cannot be written.
    """
    sizes = fileio.map_files(fileio.size, inputs.files)
    cached = _load_cache(cache_path)
    known = {path: cached[path][1] for path, size in zip(inputs.files, sizes)
             if path in cached and cached[path][0] == size}
    missing = [i for i, path in enumerate(inputs.files) if path not in known]
    if missing:
        began = time.perf_counter()
        counted = count_files([inputs.files[i] for i in missing],
                               [inputs.compressions[i] for i in missing])
        known.update({inputs.files[i]: n for i, n in zip(missing, counted)})
        logging.info("counted the records of %d input file(s) (%.1f MB): %d records in %.1f s",
                     len(missing), sum(sizes[i] for i in missing) / 1e6, sum(counted),
                     time.perf_counter() - began)
        if cache_path:
            entries = dict(cached)
            entries.update({path: [size, known[path]] for path, size in zip(inputs.files, sizes)})
            with fileio.atomic_output(cache_path, "w") as f:
                json.dump({"format": _COUNTS_FORMAT, "files": entries}, f, indent=0)
    return tuple(known[path] for path in inputs.files)


def with_counts(config: InputConfig, cache_path: str = "") -> InputConfig:
    """`config` with `record_counts` filled in (see count_records), for an arithmetic
    position; unchanged otherwise."""
    if not config.arithmetic_position:
        return config
    inputs = config.resolved_files or validate_input_files(config)
    return dataclasses.replace(config, resolved_files=inputs,
                               record_counts=count_records(inputs, cache_path))


def _permutation(size: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    """A stateless random permutation of range(size) [size] int32 (a stable argsort of
    uniform draws)."""
    draws = tf.random.stateless_uniform(tf.reshape(size, [1]), seed=seed)
    return tf.argsort(draws, stable=True)


def positioned_records(config: InputConfig, inputs: InputFiles, read_files,
                       pipeline_id: int, num_pipelines: int, shard_records: bool,
                       first_record: int) -> tf.data.Dataset:
    """This pipeline's training records from its `first_record`-th on, without reading the
    ones before (see the module docstring), repeated over epochs without end.

    Args:
        config: the input settings, with record_counts.
        inputs: the resolved files.
        read_files: `input_pipeline.read_files` (it checks each file's framing and gives each
            record its origin).
        pipeline_id, num_pipelines: this pipeline and how many there are.
        shard_records: every pipeline reads all files and keeps every num_pipelines-th record
            (fewer files than pipelines); otherwise pipeline i reads files i::num_pipelines.
        first_record: records this pipeline has already consumed.

    Returns:
        A dataset of (record string, file index int32, record index in its file int64).

    Raises:
        UserError: no record counts, or this pipeline has no records.
    """
    if config.record_counts is None or len(config.record_counts) != len(inputs.files):
        raise UserError("an arithmetic input position needs the record count of every input "
                        "file (bert_tf.data.record_positions.with_counts)")
    own = (list(range(len(inputs.files))) if shard_records
           else list(range(pipeline_id, len(inputs.files), num_pipelines)))
    counts = [config.record_counts[i] for i in own]
    stride = num_pipelines if shard_records else 1
    total = sum(counts)
    offset = pipeline_id if shard_records else 0
    per_epoch = max(0, (total - offset + stride - 1) // stride)
    if per_epoch == 0:
        raise UserError(f"input pipeline {pipeline_id} of {num_pipelines} has no records to "
                        f"read: {len(own)} file(s) with {total} records in all")
    window = config.shuffle_buffer_size
    epoch0, in_epoch = divmod(first_record, per_epoch)
    window0, skip = divmod(in_epoch, window)

    frame_bytes = inputs.frame_bytes_or_unchecked()
    columns = (tf.constant([inputs.files[i] for i in own]),
               tf.constant([inputs.compressions[i] for i in own]),
               tf.constant([frame_bytes[i] for i in own], tf.int64),
               tf.constant(own, tf.int32))
    counts_t = tf.constant(counts, tf.int64)
    sequential = dataclasses.replace(config, cycle_length=1)
    base_seed = tf.constant([config.seed, pipeline_id], tf.int64)

    # Plain graph code, not converted by autograph (see input_pipeline.read_files).
    @tf.autograph.experimental.do_not_convert
    def epoch_records(epoch: tf.Tensor, first_window: tf.Tensor) -> tf.data.Dataset:
        # The same file order on every pipeline (seed and epoch only).
        order = _permutation(len(own), tf.stack([tf.constant(config.seed, tf.int64), epoch]))
        sizes = tf.gather(counts_t, order)
        ends = tf.cumsum(sizes)
        start = first_window * window * stride  # the window's first record in the stream
        first_file = tf.searchsorted(ends, tf.reshape(start, [1]), side="right")[0]
        in_file = start - (ends[first_file] - sizes[first_file])
        files = tf.data.Dataset.from_tensor_slices(
            tuple(tf.gather(column, order[first_file:]) for column in columns))
        records = read_files(files, sequential, inputs, 1).skip(in_file)
        if shard_records:
            records = records.shard(num_pipelines, pipeline_id)
        epoch_seed = tf.random.experimental.stateless_fold_in(base_seed, epoch)

        @tf.autograph.experimental.do_not_convert
        def shuffle(index, batch):
            seed = tf.random.experimental.stateless_fold_in(epoch_seed, index)
            permutation = _permutation(tf.shape(batch[0])[0], seed)
            return tuple(tf.gather(part, permutation) for part in batch)

        windows = records.batch(window).enumerate(start=first_window)
        return windows.map(shuffle).unbatch()

    first = epoch_records(tf.constant(epoch0, tf.int64), tf.constant(window0, tf.int64))
    later = tf.data.Dataset.counter(epoch0 + 1).flat_map(
        tf.autograph.experimental.do_not_convert(
            lambda epoch: epoch_records(epoch, tf.constant(0, tf.int64))))
    return first.concatenate(later).skip(skip)
