"""Tests for bert_tf.modeling.heads: the tied MLM head and the NSP head."""

from __future__ import annotations

import _reference_bert as ref
import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.pretraining_model import BertPretrainingModel
from bert_tf.modeling.weight_map import pretraining_weight_map, set_weights

CONFIG = BertConfig(
    vocab_size=61, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
    intermediate_size=48, max_position_embeddings=10, type_vocab_size=2,
)


def load(model: BertPretrainingModel, seed: int):
    c = model.config
    w = ref.random_weights(
        np.random.default_rng(seed), c.vocab_size, c.hidden_size, c.num_hidden_layers,
        c.intermediate_size, c.max_position_embeddings, c.type_vocab_size,
    )
    set_weights(pretraining_weight_map(model), w)
    return w


def call_heads(model: BertPretrainingModel, hidden: np.ndarray, positions: np.ndarray):
    mlm = model.mlm_head(tf.constant(hidden), mask_positions=tf.constant(positions))
    nsp = model.nsp_head(tf.constant(hidden[:, 0]))
    return keras.ops.convert_to_numpy(mlm), keras.ops.convert_to_numpy(nsp), mlm, nsp


@pytest.mark.parametrize("act", ["gelu", "gelu_approximate", "relu"])
def test_heads_match_reference(act):
    config = BertConfig(**dict(CONFIG.to_dict(), hidden_act=act))
    model = BertPretrainingModel(config)
    w = load(model, seed=1)
    rng = np.random.default_rng(2)
    hidden = rng.standard_normal((3, 7, config.hidden_size)).astype(np.float32)
    # Repeated positions and the zero padding of masked_lm_positions are legal.
    positions = np.array([[1, 4, 6, 0], [2, 2, 0, 0], [0, 0, 0, 0]], np.int32)
    mlm, nsp, _, _ = call_heads(model, hidden, positions)
    expected = ref.mlm_logits(w, hidden.astype(np.float64), positions, act)
    assert mlm.shape == (3, 4, config.vocab_size)
    assert np.abs(mlm - expected).max() < 1e-4
    np.testing.assert_allclose(nsp, ref.nsp_logits(w, hidden[:, 0].astype(np.float64)),
                               atol=1e-5)
    # Rows gathered from the same position are identical.
    np.testing.assert_array_equal(mlm[1, 0], mlm[1, 1])


def test_mlm_output_is_tied_to_word_embeddings():
    model = BertPretrainingModel(CONFIG)
    load(model, seed=3)
    hidden = np.random.default_rng(4).standard_normal((1, 5, CONFIG.hidden_size)).astype(np.float32)
    positions = np.array([[1, 3]], np.int32)
    before, _, _, _ = call_heads(model, hidden, positions)
    table = model.encoder.token_embedding.embeddings
    new_table = keras.ops.convert_to_numpy(table).copy()
    new_table[17] += 1.0  # change one vocabulary row only
    table.assign(new_table)
    after, _, _, _ = call_heads(model, hidden, positions)
    changed = np.abs(after - before).max(axis=(0, 1)) > 1e-4
    assert changed.tolist() == [i == 17 for i in range(CONFIG.vocab_size)]


def test_gradient_reaches_embedding_rows_through_the_output_layer():
    # A vocabulary row never used as input gets a gradient only through the tied output.
    model = BertPretrainingModel(CONFIG)
    inputs = {
        "input_ids": np.array([[1, 2, 3, 4]], np.int32),
        "input_mask": np.ones((1, 4), np.int32),
        "segment_ids": np.zeros((1, 4), np.int32),
        "masked_lm_positions": np.array([[2]], np.int32),
    }
    with tf.GradientTape() as tape:
        logits = model(inputs)["mlm_logits"]
        loss = tf.reduce_sum(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=[[40]], logits=logits)
        )
    grad = tape.gradient(loss, model.encoder.token_embedding.embeddings)
    grad = keras.ops.convert_to_numpy(tf.convert_to_tensor(grad))
    assert np.abs(grad[40]).max() > 1e-4
    assert np.abs(grad[50]).max() > 0  # every row is in the softmax


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_logits_are_float32_under_mixed_precision(policy):
    previous = keras.config.dtype_policy()
    keras.mixed_precision.set_dtype_policy(policy)
    try:
        model = BertPretrainingModel(CONFIG)
    finally:
        keras.mixed_precision.set_dtype_policy(previous)
    w = load(model, seed=5)
    hidden = np.random.default_rng(6).standard_normal((2, 5, CONFIG.hidden_size))
    compute = policy.split("_")[1]
    positions = np.array([[1, 2], [3, 4]], np.int32)
    mlm, nsp, mlm_t, nsp_t = call_heads(model, hidden.astype(compute), positions)
    assert mlm_t.dtype == "float32" and nsp_t.dtype == "float32"
    expected = ref.mlm_logits(w, hidden.astype(compute).astype(np.float64), positions, "gelu")
    # Only the tied matmul's inputs are rounded to the compute dtype; the result is float32.
    rel = np.abs(mlm - expected).max() / np.abs(expected).max()
    assert rel < (2e-2 if compute == "bfloat16" else 2e-3), rel
