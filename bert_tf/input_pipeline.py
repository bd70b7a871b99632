"""The tf.data input pipeline for pretraining: TFRecords in the original schema -> batches.

Reads the records of `data_tools.create_pretraining_data` and of the original
google-research `create_pretraining_data.py` alike (`bert_tf.schema`; v1 or v2 feature names,
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

Bad input is reported before training starts where possible (`validate_input_files` reads the
first record of every file); out-of-range ids in later records fail inside the graph with a
message starting with `INPUT_ERROR_PREFIX`, which `user_error_from` turns into a `UserError`.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import gzip
import logging
import re
import struct
import zlib
from typing import Dict, List, Optional, Tuple, Union

import tensorflow as tf

from bert_tf import dynamic_masking, fileio, schema
from bert_tf.errors import UserError

# In-graph checks start their message with this, so the trainer can recognise them.
INPUT_ERROR_PREFIX = "bert_tf input:"

_GZIP_MAGIC = b"\x1f\x8b\x08"  # gzip header + deflate method byte
_COMPRESSIONS = ("auto", "", "GZIP")
# Features whose values are token ids, checked against vocab_size.
_TOKEN_FEATURES = (schema.INPUT_IDS, schema.MASKED_LM_IDS)


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
        dynamic_masking: draw fresh masks each epoch (training only; eval keeps the stored
            masks so that its losses stay comparable between runs).
        masked_lm_prob: fraction of tokens masked by dynamic masking.
        mask_token_id, cls_token_id, sep_token_id, pad_token_id: special ids for it.
        drop_remainder: drop the last partial batch, giving fully static shapes (use True for
            training; for eval False keeps every example).
        validate_files: read the first record of each file before building the pipeline.
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
    dynamic_masking: bool = False
    masked_lm_prob: float = 0.15
    mask_token_id: int = 103
    cls_token_id: int = 101
    sep_token_id: int = 102
    pad_token_id: int = 0
    drop_remainder: bool = True
    validate_files: bool = True

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
        if self.dynamic_masking:
            self.masking_config()  # validates the masking settings now

    def masking_config(self) -> dynamic_masking.MaskingConfig:
        return dynamic_masking.MaskingConfig(
            vocab_size=self.vocab_size,
            max_predictions_per_seq=self.max_predictions_per_seq,
            masked_lm_prob=self.masked_lm_prob,
            mask_token_id=self.mask_token_id,
            cls_token_id=self.cls_token_id,
            sep_token_id=self.sep_token_id,
            pad_token_id=self.pad_token_id,
        )


@dataclasses.dataclass(frozen=True)
class InputFiles:
    """The resolved input: files, the compression of each, and the feature naming."""

    files: Tuple[str, ...]
    compressions: Tuple[str, ...]
    use_v2_feature_names: bool


def detect_compression(path: str) -> str:
    """Returns "GZIP" if the file starts with gzip's magic bytes, else "" (plain TFRecord)."""
    try:
        with fileio.open_file(path, "rb") as f:
            head = f.read(len(_GZIP_MAGIC))
    except Exception as e:  # OSError locally, tf.errors.* for gs://
        raise UserError(f"cannot read {path}: {_reason(e)}") from None
    return "GZIP" if head == _GZIP_MAGIC else ""


def _reason(e: BaseException) -> str:
    text = getattr(e, "message", None) or str(e) or type(e).__name__
    return text.strip().splitlines()[0]


def _crc32c_table() -> List[int]:
    table = []
    for i in range(256):
        crc = i
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC32C_TABLE = _crc32c_table()


def masked_crc32c(data: bytes) -> int:
    """The TFRecord checksum: CRC-32C (Castagnoli), rotated and offset ("masked")."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def read_first_record(path: str, compression: str) -> Optional[bytes]:
    """The first record of a TFRecord file, checksums verified; None if it has no records.

    Plain Python (framing: uint64 length, masked CRC of the length, data, masked CRC of the
    data), so that validating the input does not start the TensorFlow runtime: the trainer
    checks its input before it configures devices (e.g. splits the CPU into replicas).

    Raises:
        UserError: not a TFRecord file, truncated, corrupted, or not gzip when told so.
    """
    try:
        with fileio.open_file(path, "rb") as raw:
            f = gzip.GzipFile(fileobj=raw) if compression == "GZIP" else raw
            header = f.read(12)
            if not header:
                return None
            problem = "truncated record header"
            if len(header) == 12:
                length, length_crc = struct.unpack("<QI", header)
                problem = "bad length checksum"
                if masked_crc32c(header[:8]) == length_crc:
                    data, footer = f.read(length), f.read(4)
                    if len(footer) == 4 and struct.unpack("<I", footer)[0] == masked_crc32c(data):
                        return data
                    problem = "first record truncated or corrupted"
    except (OSError, EOFError, zlib.error, tf.errors.OpError) as e:  # BadGzipFile is OSError
        problem = _reason(e)
    hint = ""
    if compression == "" and detect_compression(path) == "GZIP":
        hint = " (a gzip file read with compression='')"
    raise UserError(f"{path} is not a TFRecord file or is corrupted{hint}: {problem}")


def _first_example(path: str, compression: str) -> Optional[tf.train.Example]:
    """The first record of a file as a tf.train.Example, None if the file has no records."""
    record = read_first_record(path, compression)
    if record is None:
        return None
    try:
        return tf.train.Example.FromString(record)
    except Exception as e:  # google.protobuf.message.DecodeError
        raise UserError(f"{path}: the first record is not a tf.train.Example ({_reason(e)})") from None


def _detect_v2(example: tf.train.Example, path: str) -> bool:
    names = example.features.feature
    if schema.V2_NAMES[schema.INPUT_IDS] in names:
        return True
    if schema.INPUT_IDS in names:
        return False
    raise UserError(
        f"{path} has neither {schema.INPUT_IDS} nor {schema.V2_NAMES[schema.INPUT_IDS]}: "
        f"not a BERT pretraining file (features: {', '.join(sorted(names)) or 'none'})"
    )


def _check_example(example: tf.train.Example, path: str, config: InputConfig, v2: bool) -> None:
    """Checks names, kinds, lengths and token id ranges of one record against the config."""
    present = example.features.feature
    length_flags = {
        "seq": f"--max_seq_length={config.max_seq_length}",
        "pred": f"--max_predictions_per_seq={config.max_predictions_per_seq}",
    }
    for feature in schema.FEATURES:
        name = schema.stored_name(feature.name, v2)
        if name not in present:
            other = schema.stored_name(feature.name, not v2)
            hint = ""
            if other != name and other in present:
                hint = f" (it has {other}: set --use_v2_feature_names={not v2})"
            raise UserError(f"{path} has no feature {name}{hint}")
        kind = "float_list" if feature.dtype == "float32" else "int64_list"
        if present[name].WhichOneof("kind") != kind:
            raise UserError(
                f"{name} in {path} is a {present[name].WhichOneof('kind')}, expected {kind}"
            )
        values = getattr(present[name], kind).value
        expected = schema.feature_length(feature, config.max_seq_length,
                                         config.max_predictions_per_seq)
        if len(values) != expected:
            flag = length_flags.get(feature.length, f"the schema's {expected}")
            raise UserError(f"{name} has length {len(values)} in {path} but {flag}")
        if feature.name in _TOKEN_FEATURES and values:
            bad = max(values) if max(values) >= config.vocab_size else min(values)
            if not 0 <= bad < config.vocab_size:
                raise UserError(
                    f"{name} in {path} has token id {bad}, outside --vocab_size="
                    f"{config.vocab_size} (was the file written with another vocab?)"
                )
        if feature.name == schema.MASKED_LM_POSITIONS and values:
            if min(values) < 0 or max(values) >= config.max_seq_length:
                bad = min(values) if min(values) < 0 else max(values)
                raise UserError(
                    f"{name} in {path} has position {bad} outside "
                    f"--max_seq_length={config.max_seq_length}"
                )


def validate_input_files(config: InputConfig) -> InputFiles:
    """Expands the patterns and checks the first record of every file, eagerly.

    Checks that each file is a TFRecord (plain or GZIP), that every feature of the schema is
    present with the expected kind and length, that token ids are below vocab_size, and that
    all files use the same feature names. Files without records are skipped with a warning.

    Args:
        config: the input settings.

    Returns:
        The files with their compression and the feature naming to parse them with.

    Raises:
        UserError: one line naming the file and the feature at fault.
    """
    files = fileio.expand_patterns(config.input_patterns, what="input_file")
    # Many files on gs:// are slow to open one after the other: read them in threads.
    # Errors surface in file order (map yields results in order).
    compressions = _map_files(lambda path: (
        detect_compression(path) if config.compression == "auto" else config.compression), files)
    fixed_v2 = None if config.use_v2_feature_names == "auto" else bool(config.use_v2_feature_names)
    if config.validate_files:
        examples = _map_files(lambda i: _first_example(files[i], compressions[i]),
                              range(len(files)))
    else:
        # Unvalidated: read only what the naming needs (the first non-empty file).
        examples = [None] * len(files)
        for i in range(len(files) if fixed_v2 is None else 0):
            examples[i] = _first_example(files[i], compressions[i])
            if examples[i] is not None:
                break
    v2, detected_from = fixed_v2, None
    kept: List[Tuple[str, str]] = []
    for path, compression, example in zip(files, compressions, examples):
        if example is None:
            if config.validate_files:
                logging.warning("%s %s has no records; skipping it", INPUT_ERROR_PREFIX, path)
            else:
                kept.append((path, compression))
            continue
        file_v2 = _detect_v2(example, path)
        if v2 is None:
            v2, detected_from = file_v2, path
        elif fixed_v2 is None and file_v2 != v2:
            raise UserError(
                f"{path} uses {'v2' if file_v2 else 'v1'} feature names but {detected_from} "
                f"uses {'v2' if v2 else 'v1'}: mixed naming in one input"
            )
        if config.validate_files:
            _check_example(example, path, config, v2)
        kept.append((path, compression))
    if not kept or v2 is None:
        raise UserError(f"--input_file={config.input_patterns}: every matching file is empty")
    return InputFiles(tuple(p for p, _ in kept), tuple(c for _, c in kept), bool(v2))


def _map_files(fn, items) -> list:
    items = list(items)
    if len(items) <= 1:
        return [fn(item) for item in items]
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(16, len(items))) as pool:
        return list(pool.map(fn, items))


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
    for name in _TOKEN_FEATURES:
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


def user_error_from(error: BaseException) -> Optional[UserError]:
    """Turns a tf.data failure caused by bad input into a one-line UserError (else None).

    For the trainer: `except tf.errors.OpError as e: raise user_error_from(e) or e`.
    """
    if not isinstance(error, tf.errors.OpError):
        return None
    text = getattr(error, "message", "") or str(error)
    for line in text.splitlines():
        start = line.find(INPUT_ERROR_PREFIX)
        if start >= 0:
            return UserError(line[start + len(INPUT_ERROR_PREFIX):].strip())
    if isinstance(error, tf.errors.DataLossError):
        return UserError(f"corrupted input TFRecord: {_reason(error)}")
    # tf.io.parse_example on a record of other lengths or without a feature.
    match = re.search(r"Key: (\w+), Index: \d+\.\s+(.*?)(\n|$)", text)
    if isinstance(error, tf.errors.InvalidArgumentError) and match:
        return UserError(f"an input record does not match the schema: feature {match.group(1)}: "
                         f"{' '.join(match.group(2).split())} (check --max_seq_length and "
                         f"--max_predictions_per_seq)")
    return None


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
    inputs = validate_input_files(config)
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

    remask = config.dynamic_masking and config.is_training
    masking = config.masking_config() if remask else None
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
