"""The tf.data input pipeline for pretraining: TFRecords in the original schema -> batches.

Reads the records of `data_tools.create_pretraining_data` and of the original
google-research `create_pretraining_data.py` alike (`bert_tf.core.schema`; v1 or v2 feature names,
plain or GZIP), and yields dicts with the v1 names, int32 ids and float32 weights:

    input_ids, input_mask, segment_ids   [batch, max_seq_length]          int32
    masked_lm_positions, masked_lm_ids   [batch, max_predictions_per_seq] int32
    masked_lm_weights                    [batch, max_predictions_per_seq] float32
    next_sentence_labels                 [batch, 1]                       int32
    doc_ids, position_ids                [batch, max_seq_length]          int32 (packed rows)

Training: files sharded per input pipeline, shuffled every epoch, read in parallel
(deterministic interleave), repeated, records shuffled, batched, checked, prefetched. Eval:
the same without shuffle and repeat (the trainer bounds it by steps). With a fixed seed the
batch sequence is always the same, and the iterator can be saved with `tf.train.Checkpoint`
or fast-forwarded with `skip`, so a resumed run follows the same trajectory.

Bad input is reported before training starts where possible
(`bert_tf.data.input_validation.validate_input_files` reads the first record of every file);
out-of-range ids and masked positions in later records fail inside the graph
(`check_batch`, every batch) with a message naming the file and record, which
`input_validation.user_error_from` turns into a `UserError`. A damaged record in the middle
of a file (bad checksum, truncated file) ends the run the same way, naming the file and the
record (`read_files`), or, with `skip_corrupt_records`, is skipped and counted
(`bert_tf.data.corrupt_records.CorruptRecords`).
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import tensorflow as tf

from bert_tf.core import schema, tfrecord_format
from bert_tf.data import dynamic_masking, record_positions
from bert_tf.data.input_config import InputConfig, InputFiles
from bert_tf.data.input_validation import (
    INPUT_ERROR_PREFIX,
    TOKEN_FEATURES,
    read_past_damage,
    validate_input_files,
)


def parse_batch(serialized: tf.Tensor, config: InputConfig, use_v2_feature_names: bool,
                packed: bool = False) -> Dict[str, tf.Tensor]:
    """Parses a batch of serialized examples into v1-named int32/float32 features.

    Args:
        serialized: [batch] tf.string records.
        config: gives the feature lengths.
        use_v2_feature_names: the names stored in the files.
        packed: packed rows: doc_ids and position_ids too.

    Returns:
        {v1 name: [batch, length]} with int64 cast to int32 (TPUs want int32) and float32
        weights.
    """
    spec = schema.parsing_spec(config.max_seq_length, config.max_predictions_per_seq,
                               use_v2_feature_names, packed)
    parsed = tf.io.parse_example(serialized, spec)
    features = {}
    for name, value in parsed.items():
        if value.dtype == tf.int64:
            value = tf.cast(value, tf.int32)
        features[schema.canonical_name(name)] = value
    return features


def check_batch(features: Dict[str, tf.Tensor], vocab_size: int,
                max_seq_length: Optional[int] = None,
                origins: Optional[Tuple[tf.Tensor, tf.Tensor, tf.Tensor]] = None
                ) -> Dict[str, tf.Tensor]:
    """In-graph range checks of every record of a batch: token ids in [0, vocab_size) and
    masked_lm_positions in [0, max_seq_length) (a gather out of range silently reads 0 on
    TPU/GPU). A few vectorized reductions per batch.

    Args:
        features: a parsed batch (v1 names).
        vocab_size: token ids must be below it.
        max_seq_length: positions must be below it (None: not checked).
        origins: (paths [num_files] string, file index [batch] int32, record index in its
            file [batch] int64) to name the first bad record; None names none.

    Returns:
        The features, with the checks as control dependencies.

    Raises (when the batch is evaluated):
        tf.errors.InvalidArgumentError whose message holds INPUT_ERROR_PREFIX and a one-line
        description of the first bad record.
    """
    problems = []  # (bad values [batch, n] bool, values, description)
    for name in TOKEN_FEATURES:
        ids = features[name]
        problems.append((ids >= vocab_size, ids,
                         f"{name} has token id {{}} >= --vocab_size={vocab_size}",
                         " (was the data written with another vocab?)"))
        problems.append((ids < 0, ids, f"{name} has negative token id {{}}", ""))
    if max_seq_length is not None:
        positions = features[schema.MASKED_LM_POSITIONS]
        problems.append(((positions < 0) | (positions >= max_seq_length), positions,
                         f"{schema.MASKED_LM_POSITIONS} has position {{}} outside "
                         f"[0, --max_seq_length={max_seq_length})", ""))
    checks = [_check(bad, values, what, hint, origins) for bad, values, what, hint in problems]
    with tf.control_dependencies(checks):
        return {name: tf.identity(value) for name, value in features.items()}


def _check(bad: tf.Tensor, values: tf.Tensor, what: str, hint: str,
           origins: Optional[Tuple[tf.Tensor, tf.Tensor, tf.Tensor]]) -> tf.Tensor:
    """An op failing with a message about the first bad value when any of `bad` is True;
    the message is built only then."""

    def fail():
        row = tf.argmax(tf.cast(tf.reduce_any(bad, axis=1), tf.int32), output_type=tf.int32)
        col = tf.argmax(tf.cast(bad[row], tf.int32), output_type=tf.int32)
        head, tail = what.split("{}")
        parts = [INPUT_ERROR_PREFIX + " " + head, tf.strings.as_string(values[row, col]), tail]
        if origins is not None:
            paths, file_index, record_index = origins
            parts += [" in record ", tf.strings.as_string(record_index[row]),
                      " (counting from 0) of ",
                      tf.gather(paths, file_index[row])]
        assertion = tf.debugging.Assert(False, [tf.strings.join(parts + [hint])])
        with tf.control_dependencies([assertion]):
            return tf.constant(False)

    return tf.cond(tf.reduce_any(bad), fail, lambda: tf.constant(True))


# TFRecord framing bytes around each record: length, its CRC, then the data's CRC.
_FRAME_OVERHEAD = tfrecord_format.HEADER_BYTES + tfrecord_format.FOOTER_BYTES
# Records per block of a file's reader (see read_files).
_READ_BLOCK = 64


def read_files(files: tf.data.Dataset, config: InputConfig, inputs: InputFiles,
               num_files: int) -> tf.data.Dataset:
    """Reads the files' records in parallel (deterministic interleave), each with its origin.

    TensorFlow's reader ends a file at a damaged frame. Each file is read with
    `ignore_errors`, in blocks followed by an empty end marker, and a scan adds up the bytes
    its records take in the file; at the marker they must equal the file's frame bytes
    (`InputFiles.frame_bytes`). A file that ended early stops the run with
    INPUT_ERROR_PREFIX and "corrupted input TFRecord <path> (<kind>): record <k> (byte <b>)"
    (user_error_from adds the host's diagnosis), or, with skip_corrupt_records, is recorded
    in `config.corrupt_records` and reading goes on.

    Args:
        files: (path, compression, frame bytes, index into inputs.files) per file.
        config: the input settings.
        inputs: the resolved files.
        num_files: files in `files` (for the interleave's cycle length).

    Returns:
        A dataset of (record string, file index int32, record index in its file int64).
    """
    table = None
    if config.skip_corrupt_records:
        table = config.corrupt_records.table(inputs.files, inputs.compressions)

    # Plain graph code, as every tf.data function here: autograph (which tf.data applies to
    # them by default) would convert it again at every start of a run.
    @tf.autograph.experimental.do_not_convert
    def read(path, compression, frame_bytes, index):
        # In blocks, so that the accounting costs a few ops per block, not per record; an
        # empty block marks the end of the file (a real block is never empty).
        blocks = read_past_damage(path, compression).batch(_READ_BLOCK).concatenate(
            tf.data.Dataset.from_tensors(tf.zeros([0], tf.string)))

        def at_end(offset, count):
            # gzip's trailer holds the decompressed size mod 2^32.
            read = tf.where(tf.equal(compression, "GZIP"), offset % (1 << 32), offset)
            sound = (frame_bytes < 0) | tf.equal(read, frame_bytes)
            if table is None:
                kind = tf.where(tf.equal(compression, "GZIP"), "GZIP", "plain")
                message = tf.strings.join([
                    INPUT_ERROR_PREFIX, " corrupted input TFRecord ", path, " (", kind,
                    "): record ", tf.strings.as_string(count), " (byte ",
                    tf.strings.as_string(offset), ") is damaged"])
                return tf.cond(sound, lambda: tf.constant(True), lambda: _fail(message))

            def record_damage():
                key = tf.cast(index, tf.int64)
                passes = table.lookup(key)[0]
                insert = table.insert(key, tf.stack([passes + 1, offset]))
                with tf.control_dependencies([insert]):
                    return tf.constant(True)

            return tf.cond(sound, lambda: tf.constant(True), record_damage)

        def account(state, block):
            offset, count = state
            n = tf.size(block, out_type=tf.int64)
            checked = tf.cond(tf.equal(n, 0), lambda: at_end(offset, count),
                              lambda: tf.constant(True))
            size = tf.reduce_sum(tf.cast(tf.strings.length(block), tf.int64) + _FRAME_OVERHEAD)
            with tf.control_dependencies([checked]):
                record_index = count + tf.range(n)
            return (offset + size, count + n), (block, tf.fill([n], index), record_index)

        counted = blocks.scan((tf.constant(0, tf.int64), tf.constant(0, tf.int64)), account)
        return counted.unbatch()

    return files.interleave(
        read,
        cycle_length=min(config.cycle_length, num_files),
        block_length=1,
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )


def _fail(message: tf.Tensor) -> tf.Tensor:
    assertion = tf.debugging.Assert(False, [message])
    with tf.control_dependencies([assertion]):
        return tf.constant(False)


def shard_mode(num_files: int, input_context: Optional[tf.distribute.InputContext]) -> str:
    """'none', 'files' (>= one file per pipeline) or 'records' (fewer files than pipelines)."""
    if input_context is None or input_context.num_input_pipelines <= 1:
        return "none"
    return "files" if num_files >= input_context.num_input_pipelines else "records"


def _shuffled_records(config: InputConfig, inputs: InputFiles, mode: str, pipeline_id: int,
                      num_pipelines: int) -> tf.data.Dataset:
    """This pipeline's records: in training, files shuffled per epoch, repeated, through a
    shuffle buffer; in eval, one pass in file order. (record, file index, record index)."""
    files = tf.data.Dataset.from_tensor_slices((
        list(inputs.files), list(inputs.compressions),
        tf.constant(inputs.frame_bytes_or_unchecked(), tf.int64),
        tf.range(len(inputs.files), dtype=tf.int32)))
    if mode == "files":
        files = files.shard(num_pipelines, pipeline_id)
    num_files = (len(inputs.files[pipeline_id::num_pipelines]) if mode == "files"
                 else len(inputs.files))
    if config.is_training:
        # Same seed on every pipeline: with record sharding they must agree on the order.
        files = files.shuffle(num_files, seed=config.seed, reshuffle_each_iteration=True)
    records = read_files(files, config, inputs, num_files)
    if mode == "records":
        records = records.shard(num_pipelines, pipeline_id)
    if config.is_training:
        # Repeat after the interleave, so each epoch reads every record exactly once and a
        # new file order is drawn per epoch; the record shuffle then spans epoch boundaries.
        records = records.repeat()
        records = records.shuffle(config.shuffle_buffer_size,
                                  seed=config.seed + 1 + pipeline_id,
                                  reshuffle_each_iteration=True)
    return records


def make_pretraining_dataset(
    config: InputConfig, input_context: Optional[tf.distribute.InputContext] = None,
    first_batch: int = 0,
) -> tf.data.Dataset:
    """Builds the pretraining dataset.

    Sharding across input pipelines (hosts/workers), from `input_context`:
      - at least as many files as pipelines: each pipeline reads the files
        `files[input_pipeline_id::num_input_pipelines]` (cheap, the usual case);
      - fewer files: every pipeline reads all files in the same order (file shuffling uses
        the same seed everywhere) and keeps every num_input_pipelines-th record.
    Either way the shards are disjoint and together cover the data (with record sharding in
    training, within each epoch: the file order, hence the split, changes between epochs).

    Training with `config.input_position == "arithmetic"` reads in the order of
    `bert_tf.data.record_positions` (seeded file order, window shuffle) instead of a shuffle
    buffer, and can start at any batch without reading the ones before.

    Args:
        config: the input settings; batch_size is per replica.
        input_context: from `strategy.distribute_datasets_from_function`, or None.
        first_batch: the batch of this pipeline to start at (arithmetic positions only;
            masks drawn by dynamic masking follow the batch number, so they match too).

    Returns:
        A dataset of feature dicts (see the module docstring); shapes are fully static when
        drop_remainder is True.

    Raises:
        UserError: bad patterns or files (see validate_input_files).
    """
    inputs = config.resolved_files or validate_input_files(config)
    mode = shard_mode(len(inputs.files), input_context)
    num_pipelines = input_context.num_input_pipelines if input_context else 1
    pipeline_id = input_context.input_pipeline_id if input_context else 0

    if first_batch and not config.arithmetic_position:
        raise ValueError("first_batch needs a training input with an arithmetic position")
    if config.arithmetic_position:
        records = record_positions.positioned_records(
            config, inputs, read_files, pipeline_id, num_pipelines, mode == "records",
            first_batch * config.batch_size)
    else:
        records = _shuffled_records(config, inputs, mode, pipeline_id, num_pipelines)
    batches = records.batch(config.batch_size, drop_remainder=config.drop_remainder)

    masking = config.masking
    v2 = inputs.use_v2_feature_names
    base_seed = tf.constant([config.seed, pipeline_id], tf.int64)

    paths = tf.constant(list(inputs.files))

    @tf.autograph.experimental.do_not_convert  # plain graph code, as `read` above
    def to_features(index: tf.Tensor, batch) -> Dict[str, tf.Tensor]:
        serialized, file_index, record_index = batch
        parsed = parse_batch(serialized, config, v2, inputs.packed)
        features = check_batch(parsed, config.vocab_size, config.max_seq_length,
                               (paths, file_index, record_index))
        if masking is not None and config.is_training:
            # One stateless seed per batch: reproducible, and fresh for every epoch.
            seed = tf.random.experimental.stateless_fold_in(base_seed, index)
            features = dynamic_masking.remask_batch(features, seed, masking)
        elif masking is not None:  # eval: each record's own mask, the same at every pass
            features = dynamic_masking.remask_records(features, config.seed, file_index,
                                                      record_index, masking)
        return features

    dataset = batches.enumerate(start=first_batch).map(
        to_features, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
    ).prefetch(tf.data.AUTOTUNE)
    options = tf.data.Options()
    options.deterministic = True
    if config.skip_corrupt_records:
        # The skipped-records table is state outside the pipeline: an iterator checkpoint
        # leaves it out (the count is this process's) instead of refusing to save.
        options.experimental_external_state_policy = (
            tf.data.experimental.ExternalStatePolicy.WARN)
    if input_context is not None:
        # Sharded here by hand; stop tf.distribute from sharding it again. (Without a
        # context, `experimental_distribute_dataset` may still auto-shard it across workers.)
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return dataset.with_options(options)
