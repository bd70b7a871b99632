"""The tf.data input pipeline for pretraining: TFRecords in the original schema -> batches.

Reads the records of `data_tools.create_pretraining_data` and of the original
google-research `create_pretraining_data.py` alike (`bert_tf.data.schema`; v1 or v2 feature names,
plain or GZIP), and yields dicts with the v1 names, int32 ids and float32 weights:

    input_ids, input_mask, segment_ids   [batch, max_seq_length]          int32
    masked_lm_positions, masked_lm_ids   [batch, max_predictions_per_seq] int32
    masked_lm_weights                    [batch, max_predictions_per_seq] float32
    next_sentence_labels                 [batch, 1]                       int32

Training: files sharded per input pipeline, shuffled every epoch, read in parallel
(deterministic interleave), repeated, records shuffled, batched, checked, prefetched. Eval:
the same without shuffle and repeat (the trainer bounds it by steps). With a fixed seed the
batch sequence is always the same, and the iterator can be saved with `tf.train.Checkpoint`
or fast-forwarded with `skip`, so a resumed run follows the same trajectory.

Bad input is reported before training starts where possible
(`bert_tf.data.input_validation.validate_input_files` reads the first record of every file);
out-of-range ids in later records fail inside the graph (`check_batch`) with a message that
`input_validation.user_error_from` turns into a `UserError`.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Optional, Union

import tensorflow as tf

from bert_tf.data import dynamic_masking, schema
from bert_tf.data.input_validation import (
    INPUT_ERROR_PREFIX,
    TOKEN_FEATURES,
    InputFiles,
    validate_input_files,
)
from bert_tf.errors import UserError

_COMPRESSIONS = ("auto", "", "GZIP")


@dataclasses.dataclass(frozen=True)
class InputConfig:
    """Settings of the pretraining input pipeline.

    Attributes:
        input_patterns: comma-separated globs of TFRecord files (`gs://` allowed).
        batch_size: examples per batch PER REPLICA (the global batch divided by replicas).
        max_seq_length: length of input_ids/input_mask/segment_ids in the files.
        max_predictions_per_seq: length of the masked_lm_* features in the files.
        vocab_size: every token id must be below it.
        is_training: shuffle + repeat (True) or one ordered pass (False).
        seed: drives file order, record shuffling and dynamic masks.
        shuffle_buffer_size: records in the shuffle buffer (training).
        cycle_length: files read in parallel.
        compression: "auto" (detect gzip from each file's magic bytes), "" or "GZIP".
        use_v2_feature_names: "auto" (detect from the first record), True or False.
        masking: draw fresh masks each epoch with these settings (dynamic masking); None
            keeps the stored masks. Training only: eval keeps the stored masks so that its
            losses stay comparable between runs.
        drop_remainder: drop the last partial batch, giving fully static shapes (use True for
            training; for eval False keeps every example).
        validate_files: read the first record of each file before building the pipeline.
        resolved_files: the result of `validate_input_files(config)` when the caller already
            has it, so that building the pipeline (once per input pipeline, for train and
            eval) does not expand the globs and read every file's first record again.
    """

    input_patterns: str
    batch_size: int
    max_seq_length: int
    max_predictions_per_seq: int
    vocab_size: int
    is_training: bool = True
    seed: int = 12345
    shuffle_buffer_size: int = 10000
    cycle_length: int = 8
    compression: str = "auto"
    use_v2_feature_names: Union[str, bool] = "auto"
    masking: Optional[dynamic_masking.MaskingConfig] = None
    drop_remainder: bool = True
    validate_files: bool = True
    resolved_files: Optional[InputFiles] = None

    def __post_init__(self) -> None:
        for name in ("batch_size", "max_seq_length", "vocab_size", "shuffle_buffer_size",
                     "cycle_length"):
            if getattr(self, name) <= 0:
                raise UserError(f"--{name} must be positive, got {getattr(self, name)}")
        if not 0 <= self.max_predictions_per_seq <= self.max_seq_length:
            raise UserError(
                f"--max_predictions_per_seq={self.max_predictions_per_seq} must be in "
                f"[0, --max_seq_length={self.max_seq_length}]"
            )
        if self.compression.lower() == "gzip":  # data_tools' --output_compression spelling
            object.__setattr__(self, "compression", "GZIP")
        if self.compression not in _COMPRESSIONS:
            raise UserError(f"compression must be one of {_COMPRESSIONS}, got {self.compression!r}")
        if self.use_v2_feature_names not in ("auto", True, False):
            raise UserError(
                f"use_v2_feature_names must be 'auto', True or False, got "
                f"{self.use_v2_feature_names!r}"
            )
        masking = self.masking
        if masking is not None:
            if masking.vocab_size > self.vocab_size:
                raise UserError(f"masking.vocab_size={masking.vocab_size} exceeds "
                                f"vocab_size={self.vocab_size}")
            if masking.max_predictions_per_seq != self.max_predictions_per_seq:
                raise UserError(
                    f"masking.max_predictions_per_seq={masking.max_predictions_per_seq} differs "
                    f"from max_predictions_per_seq={self.max_predictions_per_seq}")


def parse_batch(serialized: tf.Tensor, config: InputConfig, use_v2_feature_names: bool
                ) -> Dict[str, tf.Tensor]:
    """Parses a batch of serialized examples into v1-named int32/float32 features.

    Args:
        serialized: [batch] tf.string records.
        config: gives the feature lengths.
        use_v2_feature_names: the names stored in the files.

    Returns:
        {v1 name: [batch, length]} with int64 cast to int32 (TPUs want int32) and float32
        weights.
    """
    spec = schema.parsing_spec(config.max_seq_length, config.max_predictions_per_seq,
                               use_v2_feature_names)
    parsed = tf.io.parse_example(serialized, spec)
    features = {}
    for name, value in parsed.items():
        if value.dtype == tf.int64:
            value = tf.cast(value, tf.int32)
        features[schema.canonical_name(name)] = value
    return features


def check_batch(features: Dict[str, tf.Tensor], vocab_size: int) -> Dict[str, tf.Tensor]:
    """In-graph range check of the token ids of a batch (every record, not only the first).

    Fails with tf.errors.InvalidArgumentError whose message starts with INPUT_ERROR_PREFIX and
    names the feature.
    """
    checks = []
    for name in TOKEN_FEATURES:
        ids = features[name]
        checks.append(tf.debugging.assert_less(
            ids, tf.cast(vocab_size, ids.dtype),
            message=f"{INPUT_ERROR_PREFIX} {name} has a token id >= --vocab_size={vocab_size} "
                    f"(was the data written with another vocab?)",
            summarize=8))
        checks.append(tf.debugging.assert_non_negative(
            ids, message=f"{INPUT_ERROR_PREFIX} {name} has a negative token id", summarize=8))
    with tf.control_dependencies(checks):
        return {name: tf.identity(value) for name, value in features.items()}


def _shard_mode(num_files: int, input_context: Optional[tf.distribute.InputContext]) -> str:
    """'none', 'files' (>= one file per pipeline) or 'records' (fewer files than pipelines)."""
    if input_context is None or input_context.num_input_pipelines <= 1:
        return "none"
    return "files" if num_files >= input_context.num_input_pipelines else "records"


def make_pretraining_dataset(
    config: InputConfig, input_context: Optional[tf.distribute.InputContext] = None
) -> tf.data.Dataset:
    """Builds the pretraining dataset.

    Sharding across input pipelines (hosts/workers), from `input_context`:
      - at least as many files as pipelines: each pipeline reads the files
        `files[input_pipeline_id::num_input_pipelines]` (cheap, the usual case);
      - fewer files: every pipeline reads all files in the same order (file shuffling uses
        the same seed everywhere) and keeps every num_input_pipelines-th record.
    Either way the shards are disjoint and together cover the data (with record sharding in
    training, within each epoch: the file order, hence the split, changes between epochs).

    Args:
        config: the input settings; batch_size is per replica.
        input_context: from `strategy.distribute_datasets_from_function`, or None.

    Returns:
        A dataset of feature dicts (see the module docstring); shapes are fully static when
        drop_remainder is True.

    Raises:
        UserError: bad patterns or files (see validate_input_files).
    """
    inputs = config.resolved_files or validate_input_files(config)
    mode = _shard_mode(len(inputs.files), input_context)
    num_pipelines = input_context.num_input_pipelines if input_context else 1
    pipeline_id = input_context.input_pipeline_id if input_context else 0

    files = tf.data.Dataset.from_tensor_slices((list(inputs.files), list(inputs.compressions)))
    if mode == "files":
        files = files.shard(num_pipelines, pipeline_id)
    num_files = len(inputs.files[pipeline_id::num_pipelines]) if mode == "files" else len(inputs.files)
    if config.is_training:
        # Same seed on every pipeline: with record sharding they must agree on the order.
        files = files.shuffle(num_files, seed=config.seed, reshuffle_each_iteration=True)
    records = files.interleave(
        lambda path, compression: tf.data.TFRecordDataset(path, compression_type=compression),
        cycle_length=min(config.cycle_length, num_files),
        block_length=1,
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    if mode == "records":
        records = records.shard(num_pipelines, pipeline_id)
    if config.is_training:
        # Repeat after the interleave, so each epoch reads every record exactly once and a
        # new file order is drawn per epoch; the record shuffle then spans epoch boundaries.
        records = records.repeat()
        records = records.shuffle(config.shuffle_buffer_size,
                                  seed=config.seed + 1 + pipeline_id,
                                  reshuffle_each_iteration=True)
    batches = records.batch(config.batch_size, drop_remainder=config.drop_remainder)

    masking = config.masking if config.is_training else None
    v2 = inputs.use_v2_feature_names
    base_seed = tf.constant([config.seed, pipeline_id], tf.int64)

    def to_features(index: tf.Tensor, serialized: tf.Tensor) -> Dict[str, tf.Tensor]:
        features = check_batch(parse_batch(serialized, config, v2), config.vocab_size)
        if masking is not None:
            # One stateless seed per batch: reproducible, and fresh for every epoch.
            seed = tf.random.experimental.stateless_fold_in(base_seed, index)
            features = dynamic_masking.remask_batch(features, seed, masking)
        return features

    dataset = batches.enumerate().map(
        to_features, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
    ).prefetch(tf.data.AUTOTUNE)
    options = tf.data.Options()
    options.deterministic = True
    if input_context is not None:
        # Sharded here by hand; stop tf.distribute from sharding it again. (Without a
        # context, `experimental_distribute_dataset` may still auto-shard it across workers.)
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return dataset.with_options(options)
