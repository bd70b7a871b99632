"""Tests for bert_tf.finetune.retrieval.pooling: mean, cls and max pooling and L2
normalisation against NumPy references of sentence-transformers' arithmetic, the layer's
config, and reading sentence-transformers pooling configs."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from bert_tf.core.errors import UserError
from bert_tf.finetune.retrieval import pooling

RNG = np.random.default_rng(0)
SEQUENCE = RNG.standard_normal((4, 5, 3)).astype(np.float32) * 3
# Rows of 5, 2 and 1 real tokens, and one of none (sentence-transformers' clamps make it
# zeros for mean, -1e9 for max).
MASK = np.array([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 0, 0, 0, 0], [0, 0, 0, 0, 0]], np.int32)


def reference(sequence, mask, mode, normalize):
    m = mask[:, :, None].astype(np.float64)
    x = sequence.astype(np.float64)
    if mode == "mean":
        v = (x * m).sum(1) / np.maximum(m.sum(1), 1e-9)
    elif mode == "max":
        v = np.where(m > 0, x, -1e9).max(1)
    else:
        v = x[:, 0]
    if normalize:
        v = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
    return v


@pytest.mark.parametrize("mode", pooling.POOLING_MODES)
@pytest.mark.parametrize("normalize", [True, False])
def test_matches_the_numpy_reference(mode, normalize):
    out = keras.ops.convert_to_numpy(pooling.pool(SEQUENCE, MASK, mode, normalize))
    assert out.dtype == np.float32 and out.shape == (4, 3)
    np.testing.assert_allclose(out, reference(SEQUENCE, MASK, mode, normalize),
                               rtol=1e-6, atol=1e-6)


def test_hand_values_and_padding_ignored():
    sequence = np.array([[[1.0, 2.0], [3.0, -4.0], [100.0, 100.0]]], np.float32)
    mask = np.array([[1, 1, 0]], np.int32)
    mean = keras.ops.convert_to_numpy(pooling.pool(sequence, mask, "mean", normalize=False))
    np.testing.assert_allclose(mean, [[2.0, -1.0]])
    big = keras.ops.convert_to_numpy(pooling.pool(sequence, mask, "max", normalize=False))
    np.testing.assert_allclose(big, [[3.0, 2.0]])
    unit = keras.ops.convert_to_numpy(pooling.pool(sequence, mask, "mean"))
    np.testing.assert_allclose(unit, [[2 / 5 ** 0.5, -1 / 5 ** 0.5]], rtol=1e-6)
    cls = keras.ops.convert_to_numpy(pooling.pool(sequence, mask, "cls", normalize=False))
    np.testing.assert_allclose(cls, [[1.0, 2.0]])


def test_layer_computes_in_float32_and_round_trips_its_config():
    layer = pooling.Pooling("max", normalize=False, name="pool")
    out = layer(SEQUENCE.astype(np.float16), MASK)
    assert keras.ops.convert_to_numpy(out).dtype == np.float32
    clone = pooling.Pooling.from_config(layer.get_config())
    assert (clone.mode, clone.normalize, clone.name) == ("max", False, "pool")
    np.testing.assert_allclose(keras.ops.convert_to_numpy(clone(SEQUENCE, MASK)),
                               reference(SEQUENCE, MASK, "max", False), rtol=1e-6)
    with pytest.raises(ValueError, match="unknown pooling mode 'sum'"):
        pooling.Pooling("sum")


@pytest.mark.parametrize("config, mode", [
    ({"word_embedding_dimension": 384, "pooling_mode_cls_token": False,
      "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False,
      "pooling_mode_mean_sqrt_len_tokens": False}, "mean"),  # all-MiniLM-L6-v2's
    ({"word_embedding_dimension": 8}, "mean"),  # sentence-transformers' defaults
    ({"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}, "cls"),
    ({"pooling_mode": "MAX", "pooling_mode_mean_tokens": True}, "max"),  # the string wins
])
def test_reads_sentence_transformers_configs(config, mode):
    assert pooling.mode_from_sentence_transformers(config) == mode


@pytest.mark.parametrize("config, expected", [
    ({"pooling_mode_lasttoken": True, "pooling_mode_mean_tokens": False},
     "1_Pooling/config.json: pooling mode 'lasttoken' is not supported (bert_tf pools with "
     "mean, cls, max)"),
    ({"pooling_mode_cls_token": True},
     "1_Pooling/config.json: pooling modes cls, mean at once: bert_tf pools with exactly one "
     "of mean, cls, max"),
    ({"pooling_mode_mean_tokens": False},
     "1_Pooling/config.json: no pooling mode on: bert_tf pools with exactly one of mean, "
     "cls, max"),
])
def test_refuses_pooling_it_cannot_honour(config, expected):
    with pytest.raises(UserError) as info:
        pooling.mode_from_sentence_transformers(config, "1_Pooling/config.json")
    assert str(info.value) == expected
