"""Serialises batches of instances as `tf.train.Example` protobuf bytes, without TensorFlow.

The wire format is small enough to write by hand:

    Example   { Features features = 1; }
    Features  { map<string, Feature> feature = 1; }   # each entry: {key = 1; value = 2}
    Feature   { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3; }
    Int64List { repeated int64 value = 1 [packed]; }   # varints
    FloatList { repeated float value = 1 [packed]; }   # little-endian float32

Map entries are written in sorted key order, which is what protobuf's deterministic
serialisation does, so the bytes equal `example.SerializeToString(deterministic=True)`.
Feature names, dtypes and lengths come from `bert_tf.core.schema`.

Why by hand: it keeps TensorFlow out of the data job's workers (importing it costs each
worker seconds) and it encodes several times faster than `tf.train.Example` protobufs, with
the same bytes (docs/results/data-jobs.md). Keep it only while both still hold;
`tests/test_example_codec.py` pins the bytes to TensorFlow's serialisation.
"""

from __future__ import annotations

from typing import List, Mapping

import numpy as np

from bert_tf.core import schema
from data_tools.records.byte_rows import (
    Part,
    Rows,
    concat_rows,
    encode_varints,
    fixed_width,
    part_lengths,
    varint_length,
)

_TAG_FIELD1_LEN = b"\x0a"  # field 1, wire type 2 (length-delimited)
_TAG_FIELD2_LEN = b"\x12"  # field 2, wire type 2
_TAG_FIELD3_LEN = b"\x1a"  # field 3, wire type 2
_FEATURE_TAG = {"int64": _TAG_FIELD3_LEN, "float32": _TAG_FIELD2_LEN}


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _varint_part(values: np.ndarray) -> Part:
    """Per-row varint of a per-row length; a constant when every row has the same value."""
    values = np.asarray(values, dtype=np.int64)
    if values.size and (values == values[0]).all():
        return _varint_bytes(int(values[0]))
    return encode_varints(values[:, None])


def _merge_constants(parts: List[Part]) -> List[Part]:
    merged: List[Part] = []
    for p in parts:
        if isinstance(p, bytes) and merged and isinstance(merged[-1], bytes):
            merged[-1] = merged[-1] + p
        elif not (isinstance(p, bytes) and not p):
            merged.append(p)
    return merged


def encode_examples(
    features: Mapping[str, np.ndarray],
    max_seq_length: int,
    max_predictions_per_seq: int,
    use_v2_feature_names: bool = False,
    packed: bool = False,
) -> Rows:
    """Serialised `tf.train.Example`s, one per row of the feature arrays.

    Args:
        features: v1 feature name -> array [num_rows, length] (lengths as in `bert_tf.core.schema`):
            int arrays for int64 features (values >= 0), float arrays for float features.
        max_seq_length: the length of the "seq" features.
        max_predictions_per_seq: the length of the "pred" features.
        use_v2_feature_names: store `input_word_ids` / `input_type_ids` (see schema).
        packed: the packed MLM-only feature set (`doc_ids`, `position_ids` as well).

    Returns:
        `Rows`: row i is the serialised Example of instance i.

    Raises:
        ValueError: a feature is missing or has the wrong shape.
    """
    layout = {
        schema.canonical_name(stored): (stored, dtype, length)
        for stored, dtype, length in schema.feature_layout(
            max_seq_length, max_predictions_per_seq, use_v2_feature_names, packed)
    }
    missing = set(layout) - set(features)
    if missing:
        raise ValueError(f"missing features: {sorted(missing)}")
    num_rows = int(next(iter(features.values())).shape[0])
    entries: List[Part] = []
    # Sorted by the stored key, as protobuf's deterministic map serialisation.
    for v1_name, (stored, dtype, length) in sorted(layout.items(), key=lambda kv: kv[1][0]):
        array = np.asarray(features[v1_name])
        if array.shape != (num_rows, length):
            raise ValueError(
                f"feature {v1_name} has shape {array.shape}, expected {(num_rows, length)}")
        if dtype == "int64":
            payload = encode_varints(array)
        else:
            payload = fixed_width(array.astype("<f4"))
        n_payload = part_lengths(payload, num_rows)
        # Int64List / FloatList: {value = 1, packed}
        len_list = 1 + varint_length(n_payload) + n_payload
        # Feature: {int64_list = 3 | float_list = 2}
        len_feature = 1 + varint_length(len_list) + len_list
        key = stored.encode("utf-8")
        key_prefix = _TAG_FIELD1_LEN + _varint_bytes(len(key)) + key + _TAG_FIELD2_LEN
        len_entry = len(key_prefix) + varint_length(len_feature) + len_feature
        entries += [
            _TAG_FIELD1_LEN, _varint_part(len_entry),  # Features.feature (map entry)
            key_prefix, _varint_part(len_feature),  # entry.key, entry.value
            _FEATURE_TAG[dtype], _varint_part(len_list),  # Feature.<kind>_list
            _TAG_FIELD1_LEN, _varint_part(n_payload),  # <kind>List.value (packed)
            payload,
        ]
    body_len = sum(part_lengths(p, num_rows) for p in entries)
    parts = _merge_constants([_TAG_FIELD1_LEN, _varint_part(body_len)] + entries)
    return concat_rows(parts, num_rows)


def example_bytes(
    features: Mapping[str, np.ndarray],
    max_seq_length: int,
    max_predictions_per_seq: int,
    use_v2_feature_names: bool = False,
    packed: bool = False,
) -> List[bytes]:
    """`encode_examples` as a list of bytes objects (convenient for tests and small batches)."""
    return encode_examples(features, max_seq_length, max_predictions_per_seq,
                           use_v2_feature_names, packed).to_list()

