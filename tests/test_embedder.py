"""Tests for bert_tf.finetune.retrieval.embedder: the pooled vector of the encoder's own
sequence output for each pooling, cls from the [CLS] row alone, and the config round trip."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from _pretraining_helpers import SEQ, VOCAB, tiny_bert_config

from bert_tf.finetune.retrieval import pooling
from bert_tf.finetune.retrieval.embedder import BertEmbedder


@pytest.fixture(scope="module")
def inputs():
    rng = np.random.default_rng(0)
    lengths = np.array([SEQ, 5, 2])
    mask = (np.arange(SEQ)[None, :] < lengths[:, None]).astype(np.int32)
    return {"input_ids": rng.integers(5, VOCAB, size=(3, SEQ)).astype(np.int32) * mask,
            "input_mask": mask, "segment_ids": np.zeros((3, SEQ), np.int32),
            "label_ids": np.zeros(3, np.int32)}  # extra keys are ignored


@pytest.fixture(scope="module")
def embedder():
    keras.utils.set_random_seed(0)
    return BertEmbedder(tiny_bert_config(), pooling="mean")


@pytest.mark.parametrize("mode", pooling.POOLING_MODES)
def test_pools_the_encoders_sequence_output(embedder, inputs, mode):
    embedder.pooling.mode = mode  # the same weights under each pooling
    try:
        out = keras.ops.convert_to_numpy(embedder(inputs)["embedding"])
    finally:
        embedder.pooling.mode = "mean"
    sequence = embedder.encoder({k: inputs[k] for k in ("input_ids", "input_mask",
                                                        "segment_ids")})["sequence_output"]
    expected = keras.ops.convert_to_numpy(pooling.pool(sequence, inputs["input_mask"], mode))
    assert out.shape == (3, 32) and out.dtype == np.float32
    np.testing.assert_allclose(out, expected, atol=2e-6)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-6)


def test_config_round_trip(embedder, inputs):
    clone = BertEmbedder.from_config(embedder.get_config())
    clone(inputs)
    clone.set_weights(embedder.get_weights())
    assert (clone.pooling.mode, clone.pooling.normalize) == ("mean", True)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(clone(inputs)["embedding"]),
                                  keras.ops.convert_to_numpy(embedder(inputs)["embedding"]))
