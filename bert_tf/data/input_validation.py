"""Checks pretraining TFRecord inputs before training, and explains input failures during it.

`validate_input_files` reads the first record of every file eagerly (plain Python framing via
`bert_tf.core.tfrecord_format`, so the TensorFlow runtime is not started before the trainer
configures its devices) and checks the schema: every feature present with the right kind and
length, token ids below vocab_size, one feature naming (v1 or v2) across files. Later records
are checked in the graph (`input_pipeline.check_batch`); their failures carry
`INPUT_ERROR_PREFIX`, and `user_error_from` turns them, corrupted files and schema mismatches
into one-line `UserError`s.
"""

from __future__ import annotations

import gzip
import logging
import re
import zlib
from typing import List, Optional, Tuple

import tensorflow as tf

from bert_tf.core import errors, fileio, schema, tfrecord_format
from bert_tf.core.errors import UserError
from bert_tf.data.corrupt_records import count_lost_records
from bert_tf.data.input_config import InputConfig, InputFiles

INPUT_ERROR_PREFIX = "bert_tf input:"

_GZIP_MAGIC = b"\x1f\x8b\x08"  # gzip header + deflate method byte
# Features whose values are token ids, checked against vocab_size.
TOKEN_FEATURES = (schema.INPUT_IDS, schema.MASKED_LM_IDS)


def detect_compression(path: str) -> str:
    """Returns "GZIP" if the file starts with gzip's magic bytes, else "" (plain TFRecord)."""
    try:
        with fileio.open_file(path, "rb") as f:
            return _compression_of(f.read(len(_GZIP_MAGIC)))
    except Exception as e:  # OSError locally, tf.errors.* for gs://
        raise UserError(f"cannot read {path}: {errors.reason(e)}") from None


def _compression_of(head: bytes) -> str:
    return "GZIP" if head == _GZIP_MAGIC else ""


def read_first_record(path: str, compression: str) -> Optional[bytes]:
    """The first record of a TFRecord file, checksums verified; None if it has no records.

    Plain Python (framing: uint64 length, masked CRC of the length, data, masked CRC of the
    data), so that validating the input does not start the TensorFlow runtime: the trainer
    checks its input before it configures devices (e.g. splits the CPU into replicas).

    Args:
        path: the file.
        compression: "GZIP", "" or "auto" (from the file's first bytes).

    Raises:
        UserError: unreadable, not a TFRecord file, truncated, corrupted, or not gzip when
            told so.
    """
    return _read_head(path, compression)[1]


def _read_head(path: str, compression: str, first_record: bool = True
               ) -> Tuple[str, Optional[bytes], int]:
    """(the file's compression, its first record or None, its frame bytes), opening the file
    once; the record is not read (None) unless `first_record`."""
    head = b""
    try:
        with fileio.open_file(path, "rb") as raw:
            head = raw.read(len(_GZIP_MAGIC))
            if compression == "auto":
                compression = _compression_of(head)
            raw.seek(0, 2)
            size = raw.tell()
            if compression == "GZIP":
                # gzip's trailer ends with the decompressed size mod 2^32 (RFC 1952).
                raw.seek(max(size - 4, 0))
                size = int.from_bytes(raw.read(4), "little")
            record = None
            if first_record:
                raw.seek(0)
                f = gzip.GzipFile(fileobj=raw) if compression == "GZIP" else raw
                record = tfrecord_format.read_frame(f)
            return compression, record, size
    except tfrecord_format.FrameError as e:
        problem = f"first record: {e}"
    except (OSError, EOFError, zlib.error, tf.errors.OpError) as e:  # BadGzipFile is OSError
        if not head:  # Failed to open or read at all.
            raise UserError(f"cannot read {path}: {errors.reason(e)}") from None
        problem = errors.reason(e)
    hint = ""
    if compression == "" and _compression_of(head) == "GZIP":
        hint = " (a gzip file read with compression='')"
    raise UserError(f"{path} is not a TFRecord file or is corrupted{hint}: {problem}")


def _first_example(path: str, compression: str
                   ) -> Tuple[str, Optional[tf.train.Example], int]:
    """(compression, the first record as a tf.train.Example or None if it has no records,
    the frame bytes)."""
    compression, record, size = _read_head(path, compression)
    if record is None:
        return compression, None, size
    try:
        return compression, tf.train.Example.FromString(record), size
    except Exception as e:  # google.protobuf.message.DecodeError
        raise UserError(f"{path}: the first record is not a tf.train.Example "
                        f"({errors.reason(e)})") from None


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


def _check_example(example: tf.train.Example, path: str, config: InputConfig, v2: bool,
                   packed: bool = False) -> None:
    """Checks names, kinds, lengths and token id ranges of one record against the config."""
    present = example.features.feature
    length_flags = {
        "seq": f"--max_seq_length={config.max_seq_length}",
        "pred": f"--max_predictions_per_seq={config.max_predictions_per_seq}",
    }
    for feature in schema.features_of(packed):
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
        if feature.name in TOKEN_FEATURES and values:
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
    all files use the same feature names and set (packed rows or not). Files without records
    are skipped with a warning.

    Args:
        config: the input settings.

    Returns:
        The files with their compression and the feature naming to parse them with.

    Raises:
        UserError: one line naming the file and the feature at fault.
    """
    files = fileio.expand_patterns(config.input_patterns, what="input_file")
    fixed_v2 = None if config.use_v2_feature_names == "auto" else bool(config.use_v2_feature_names)
    # Many files on gs:// are slow to open one after the other: read them in threads, each
    # opened once for its compression and first record. Errors surface in file order.
    if config.validate_files:
        heads = fileio.map_files(lambda path: _first_example(path, config.compression), files)
    else:
        # Unvalidated: the compressions, and the first example only where the naming needs
        # it (the first non-empty file); the feature set is then detected from it too.
        heads = fileio.map_files(
            lambda path: _read_head(path, config.compression, first_record=False), files)
        for i in range(len(files) if fixed_v2 is None else 0):
            heads[i] = _first_example(files[i], heads[i][0])
            if heads[i][1] is not None:
                break
    v2, detected_from = fixed_v2, None
    fixed_packed = None if config.packed == "auto" else bool(config.packed)
    packed, packed_from = fixed_packed, None
    kept: List[Tuple[str, str, int]] = []
    for path, (compression, example, size) in zip(files, heads):
        if example is None:
            if config.validate_files:
                logging.warning("%s %s has no records; skipping it", INPUT_ERROR_PREFIX, path)
            else:
                kept.append((path, compression, size))
            continue
        file_v2 = _detect_v2(example, path)
        if v2 is None:
            v2, detected_from = file_v2, path
        elif fixed_v2 is None and file_v2 != v2:
            raise UserError(
                f"{path} uses {'v2' if file_v2 else 'v1'} feature names but {detected_from} "
                f"uses {'v2' if v2 else 'v1'}: mixed naming in one input"
            )
        file_packed = schema.DOC_IDS in example.features.feature
        if packed is None:
            packed, packed_from = file_packed, path
        elif file_packed != packed:
            kinds = {True: "packed rows (doc_ids)", False: "unpacked rows"}
            other = (f"{packed_from} holds {kinds[packed]}" if fixed_packed is None
                     else f"packed={fixed_packed} was given")
            raise UserError(f"{path} holds {kinds[file_packed]} but {other}: one feature set "
                            "per input")
        if config.validate_files:
            _check_example(example, path, config, v2, packed)
        kept.append((path, compression, size))
    if not kept or v2 is None:
        raise UserError(f"--input_file={config.input_patterns}: every matching file is empty")
    return InputFiles(tuple(p for p, _, _ in kept), tuple(c for _, c, _ in kept), bool(v2),
                      tuple(n for _, _, n in kept), packed=bool(packed))


# The pipeline's message for a file that ended early (input_pipeline.read_files).
_DAMAGE = re.compile(
    r"corrupted input TFRecord (.+?) \((GZIP|plain)\): record (\d+) \(byte (\d+)\)")


def _with_damage(message: str) -> str:
    """Adds the host's diagnosis to a damaged-file message: what is wrong, records lost."""
    match = _DAMAGE.match(message)
    if not match:
        return message
    path, kind, record, offset = match.groups()
    lost, problem = count_lost_records(path, "GZIP" if kind == "GZIP" else "", int(offset))
    if not lost and kind == "GZIP":
        # Nothing damaged after all: the trailer's size is not the whole file's content.
        return (f"{path}: its gzip trailer does not give the {offset} bytes of records it "
                f"holds: several gzip streams concatenated? Recompress it as one stream (the "
                f"trailer's size is how damaged records are found)")
    return (f"corrupted input TFRecord {path}: record {record} (counting from 0, at byte "
            f"{offset}): {problem or 'damaged'}; {lost} record(s) from there to the end of "
            f"the file cannot be read (--skip_corrupt_records skips them and goes on)")


def read_past_damage(path: tf.Tensor, compression: tf.Tensor) -> tf.data.Dataset:
    """TensorFlow's reader of one TFRecord file, ending the file at a damaged record instead
    of failing (`ignore_errors`), and failing at once on a file it cannot open (deleted or
    moved since validation, no permission), which `ignore_errors` would retry for ever:
    the file is opened once without it, reading one raw byte. For use in tf.data functions;
    the failure (NotFoundError, PermissionDeniedError) becomes one line in `user_error_from`.

    Returns:
        A dataset of the file's record strings up to its first damaged record.
    """
    opened = tf.data.FixedLengthRecordDataset(path, 1).take(1).filter(lambda _: False)
    records = tf.data.TFRecordDataset(path, compression_type=compression).ignore_errors()
    return opened.concatenate(records)


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
            message = line[start + len(INPUT_ERROR_PREFIX):].strip()
            if line[:start].endswith("["):  # tf.debugging.Assert prints its data in [...]
                message = message[:message.rfind("]")] if "]" in message else message
            return UserError(_with_damage(message))
    if isinstance(error, tf.errors.DataLossError):
        return UserError(f"corrupted input TFRecord: {errors.reason(error)}")
    if isinstance(error, (tf.errors.NotFoundError, tf.errors.PermissionDeniedError)):
        return UserError(f"cannot read an input TFRecord: {errors.reason(error)}")
    # tf.io.parse_example on a record of other lengths or without a feature.
    match = re.search(r"Key: (\w+), Index: \d+\.\s+(.*?)(\n|$)", text)
    if isinstance(error, tf.errors.InvalidArgumentError) and match:
        return UserError(f"an input record does not match the schema: feature {match.group(1)}: "
                         f"{' '.join(match.group(2).split())} (check --max_seq_length and "
                         f"--max_predictions_per_seq)")
    return None
