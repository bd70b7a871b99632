"""Tests of data_tools.records.example_codec against TensorFlow's own protobuf serialisation."""

import collections

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.core import schema
from data_tools.records.example_codec import encode_examples, example_bytes

SEQ, PRED = 16, 4


def _features(n=30, seed=0):
    rng = np.random.default_rng(seed)
    return {
        schema.INPUT_IDS: rng.integers(0, 30522, (n, SEQ)),
        schema.INPUT_MASK: rng.integers(0, 2, (n, SEQ)),
        schema.SEGMENT_IDS: rng.integers(0, 2, (n, SEQ)),
        schema.MASKED_LM_POSITIONS: rng.integers(0, SEQ, (n, PRED)),
        # Up to 2^31: 5-byte varints.
        schema.MASKED_LM_IDS: rng.integers(0, 2**31, (n, PRED)),
        schema.MASKED_LM_WEIGHTS: rng.random((n, PRED)).astype(np.float32),
        schema.NEXT_SENTENCE_LABELS: rng.integers(0, 2, (n, 1)),
    }


def _tf_example(features, i, v2=False):
    feats = collections.OrderedDict()
    for f in schema.FEATURES:
        values = features[f.name][i]
        name = schema.stored_name(f.name, v2)
        if f.dtype == "float32":
            feats[name] = tf.train.Feature(float_list=tf.train.FloatList(value=values))
        else:
            feats[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=values))
    return tf.train.Example(features=tf.train.Features(feature=feats))


@pytest.mark.parametrize("v2", [False, True])
def test_bytes_equal_deterministic_protobuf_serialisation(v2):
    features = _features()
    got = example_bytes(features, SEQ, PRED, use_v2_feature_names=v2)
    for i, record in enumerate(got):
        assert record == _tf_example(features, i, v2).SerializeToString(deterministic=True)


def test_parse_back_with_from_string_and_parse_single_example():
    features = _features(n=8, seed=3)
    for i, record in enumerate(example_bytes(features, SEQ, PRED)):
        ex = tf.train.Example.FromString(record).features.feature
        assert list(ex[schema.INPUT_IDS].int64_list.value) == features[schema.INPUT_IDS][i].tolist()
        assert list(ex[schema.MASKED_LM_IDS].int64_list.value) == \
            features[schema.MASKED_LM_IDS][i].tolist()
        np.testing.assert_array_equal(np.array(ex[schema.MASKED_LM_WEIGHTS].float_list.value,
                                               np.float32), features[schema.MASKED_LM_WEIGHTS][i])
        parsed = tf.io.parse_single_example(record, schema.parsing_spec(SEQ, PRED))
        for name, values in features.items():
            np.testing.assert_array_equal(parsed[name].numpy(), values[i])


def test_small_hand_built_example():
    # One instance, every value < 128: payloads are single bytes. Key order is sorted.
    one = {
        schema.INPUT_IDS: np.array([[101, 7, 102]]), schema.INPUT_MASK: np.array([[1, 1, 1]]),
        schema.SEGMENT_IDS: np.array([[0, 0, 0]]), schema.MASKED_LM_POSITIONS: np.array([[1]]),
        schema.MASKED_LM_IDS: np.array([[7]]),
        schema.MASKED_LM_WEIGHTS: np.array([[1.0]], np.float32),
        schema.NEXT_SENTENCE_LABELS: np.array([[0]]),
    }
    record = encode_examples(one, 3, 1).row(0)
    # The first map entry is input_ids: key "input_ids" then Feature{int64_list{value: 3 bytes}}.
    entry = b"\x0a\x09input_ids" + b"\x12\x07" + b"\x1a\x05" + b"\x0a\x03" + bytes([101, 7, 102])
    assert record[3:3 + 2 + len(entry)] == b"\x0a" + bytes([len(entry)]) + entry
    # Example.features (field 1): tag 0x0a, then the body length as a 2-byte varint.
    body = len(record) - 3
    assert body >= 128 and record[:3] == bytes([0x0A, 0x80 | (body & 0x7F), body >> 7])


def test_wrong_shape_is_rejected():
    features = _features(n=2)
    features[schema.INPUT_MASK] = features[schema.INPUT_MASK][:, :5]
    with pytest.raises(ValueError, match="input_mask"):
        encode_examples(features, SEQ, PRED)
