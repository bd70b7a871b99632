"""Tests for bert_tf.modeling.pretraining_model: end-to-end numerics, options, saving, training."""

from __future__ import annotations

import os

import _reference_bert as ref
import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.encoder import BertEncoder
from bert_tf.modeling.pretraining_model import BertPretrainingModel, dummy_pretraining_inputs
from bert_tf.modeling.weight_map import get_weights, pretraining_weight_map, set_weights
from bert_tf.training import losses

TOL = 1e-4


def config_for(act: str = "gelu", **overrides) -> BertConfig:
    values = dict(
        vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=16, type_vocab_size=2, hidden_act=act,
    )
    values.update(overrides)
    return BertConfig(**values)


def load_random(model: BertPretrainingModel, seed: int):
    c = model.config
    w = ref.random_weights(
        np.random.default_rng(seed), c.vocab_size, c.hidden_size, c.num_hidden_layers,
        c.intermediate_size, c.max_position_embeddings, c.type_vocab_size,
        with_heads=True,
    )
    if not model.use_nsp:
        w = {k: v for k, v in w.items() if not k.startswith("nsp/")}
    set_weights(pretraining_weight_map(model), w)
    return w


def padded_batch(rng: np.random.Generator, config: BertConfig, lengths, seq_len, num_pred):
    """Pipeline-like batch: padding after each length, masked positions sorted, zero-padded."""
    batch = len(lengths)
    mask = (np.arange(seq_len)[None] < np.asarray(lengths)[:, None]).astype(np.int32)
    ids = rng.integers(5, config.vocab_size, (batch, seq_len)).astype(np.int32) * mask
    segments = np.zeros_like(ids)
    positions = np.zeros((batch, num_pred), np.int32)
    weights = np.zeros((batch, num_pred), np.float32)
    for b, n in enumerate(lengths):
        k = min(num_pred, max(1, n // 3))
        chosen = np.sort(rng.choice(np.arange(1, n), size=k, replace=False)) if n > 1 else [0]
        positions[b, : len(chosen)] = chosen
        weights[b, : len(chosen)] = 1.0
        segments[b, n // 2 : n] = 1
    masked_ids = np.take_along_axis(ids, positions, axis=1)
    return {
        "input_ids": ids, "input_mask": mask, "segment_ids": segments,
        "masked_lm_positions": positions, "masked_lm_ids": masked_ids * (weights > 0),
        "masked_lm_weights": weights,
        "next_sentence_labels": rng.integers(0, 2, (batch, 1)).astype(np.int32),
    }


@pytest.mark.parametrize("act", ["gelu", "gelu_approximate"])
def test_all_outputs_match_numpy_reference(act):
    config = config_for(act)
    model = BertPretrainingModel(config)
    w = load_random(model, seed=1)
    batch = padded_batch(np.random.default_rng(2), config, lengths=[12, 7, 3], seq_len=12,
                         num_pred=4)
    out = model(batch)
    seq, pooled = ref.encoder_forward(
        w, batch["input_ids"], batch["input_mask"], batch["segment_ids"],
        config.num_hidden_layers, config.num_attention_heads, act,
    )
    expected = {
        "sequence_output": seq,
        "pooled_output": pooled,
        "mlm_logits": ref.mlm_logits(w, seq, batch["masked_lm_positions"], act),
        "nsp_logits": ref.nsp_logits(w, pooled),
    }
    assert set(out) == set(expected)
    for key, value in expected.items():
        got = keras.ops.convert_to_numpy(out[key])
        assert got.shape == value.shape, key
        diff = np.abs(got - value).max()
        assert diff < TOL, (key, diff)
    assert out["mlm_logits"].dtype == "float32" and out["nsp_logits"].dtype == "float32"


def test_no_nsp_builds_no_head():
    config = config_for()
    model = BertPretrainingModel(config, use_nsp=False)
    assert model.nsp_head is None
    assert not any(v.path.startswith("nsp") for v in model.weights)
    out = model(dummy_pretraining_inputs())
    assert set(out) == {"mlm_logits", "sequence_output", "pooled_output"}
    with_nsp = BertPretrainingModel(config)
    assert len(with_nsp.trainable_weights) == len(model.trainable_weights) + 2


def test_extra_keys_and_int64_inputs_are_accepted():
    config = config_for()
    model = BertPretrainingModel(config)
    batch = padded_batch(np.random.default_rng(3), config, [8, 5], 8, 3)
    as_int64 = {k: tf.constant(v, tf.int64 if v.dtype == np.int32 else tf.float32)
                for k, v in batch.items()}
    a = model(batch)["mlm_logits"]
    b = model(as_int64)["mlm_logits"]
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b))


def test_encoder_is_shared_and_usable_alone():
    config = config_for()
    model = BertPretrainingModel(config)
    assert isinstance(model.encoder, BertEncoder)
    batch = padded_batch(np.random.default_rng(4), config, [6], 6, 2)
    full = model(batch)
    alone = model.encoder({k: batch[k] for k in ("input_ids", "input_mask", "segment_ids")})
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(full["pooled_output"]),
        keras.ops.convert_to_numpy(alone["pooled_output"]),
    )


def test_config_round_trip_and_keras_file(tmp_path):
    config = config_for("gelu_approximate")
    model = BertPretrainingModel(config, use_nsp=False, name="pt")
    w = load_random(model, seed=5)
    clone = BertPretrainingModel.from_config(model.get_config())
    assert clone.config == config and clone.use_nsp is False and clone.name == "pt"
    path = os.fspath(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert isinstance(loaded, BertPretrainingModel) and loaded.nsp_head is None
    got = get_weights(pretraining_weight_map(loaded))
    for name, value in w.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)
    # Still tied after loading.
    assert loaded.mlm_head.token_embedding is loaded.encoder.token_embedding


def test_training_reduces_loss_on_a_fixed_batch():
    # End to end: model -> per-example losses -> global reduction -> gradients -> update.
    config = config_for(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    keras.utils.set_random_seed(6)
    model = BertPretrainingModel(config)
    batch = padded_batch(np.random.default_rng(7), config, [10, 8, 6, 10], 10, 3)
    optimizer = keras.optimizers.Adam(learning_rate=3e-3)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            outputs = model(batch, training=True)
            terms = losses.compute_loss_terms(outputs, batch)
            sums = terms.local_sums()
            loss = losses.reduce_pretraining_losses(
                terms, sums["mlm_weight"], sums["num_examples"]
            )["loss"]
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    first = float(step())
    # Initial MLM loss of a fresh model is about ln(vocab); NSP about ln 2.
    assert abs(first - (np.log(config.vocab_size) + np.log(2))) < 0.5, first
    for _ in range(25):
        last = float(step())
    assert last < 0.5 * first, (first, last)


def test_xla_compiled_forward_matches_eager():
    # TPUs run the model through XLA; the graph must compile and compute the same values.
    config = config_for(num_hidden_layers=1)
    model = BertPretrainingModel(config)
    load_random(model, seed=8)
    batch = padded_batch(np.random.default_rng(9), config, [9, 4], 9, 3)
    compiled = tf.function(lambda b: model(b, training=False), jit_compile=True)
    eager = model(batch)
    for key, value in compiled(batch).items():
        np.testing.assert_allclose(
            keras.ops.convert_to_numpy(value), keras.ops.convert_to_numpy(eager[key]),
            atol=1e-4, err_msg=key,
        )


@pytest.mark.parametrize("layers,use_nsp", [(1, True), (3, True), (2, False)])
def test_head_logits_match_reference_and_compute_fewer_rows(layers, use_nsp):
    # The trainer's path: the last block runs only at [CLS] and the masked positions.
    config = config_for(num_hidden_layers=layers)
    model = BertPretrainingModel(config, use_nsp=use_nsp)
    w = load_random(model, seed=10)
    batch = padded_batch(np.random.default_rng(11), config, lengths=[12, 7, 3], seq_len=12,
                         num_pred=4)
    seen = []
    last_dense = model.encoder.transformer_layers[-1]._feedforward_intermediate_dense
    full_call = last_dense.call
    last_dense.call = lambda x: (seen.append(tuple(x.shape)), full_call(x))[1]
    out = model.head_logits(batch)
    assert seen == [(3, 1 + 4, config.hidden_size)]  # 5 rows per example, not 12
    seq, pooled = ref.encoder_forward(
        w, batch["input_ids"], batch["input_mask"], batch["segment_ids"],
        config.num_hidden_layers, config.num_attention_heads, "gelu",
    )
    expected = {"mlm_logits": ref.mlm_logits(w, seq, batch["masked_lm_positions"], "gelu")}
    if use_nsp:
        expected["nsp_logits"] = ref.nsp_logits(w, pooled)
    assert set(out) == set(expected)
    for key, value in expected.items():
        got = keras.ops.convert_to_numpy(out[key])
        assert got.shape == value.shape and got.dtype == np.float32, key
        assert np.abs(got - value).max() < TOL, key


@pytest.mark.parametrize("jit_compile", [False, True])
def test_head_logits_gradients_equal_the_full_model(jit_compile):
    # Without dropout the sparse last block is the same function of every weight.
    config = config_for(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = BertPretrainingModel(config)
    load_random(model, seed=12)
    batch = padded_batch(np.random.default_rng(13), config, [10, 8, 6, 3], 10, 3)

    def gradients(forward):
        with tf.GradientTape() as tape:
            terms = losses.compute_loss_terms(forward(batch, training=True), batch)
            sums = terms.local_sums()
            loss = losses.reduce_pretraining_losses(
                terms, sums["mlm_weight"], sums["num_examples"])["loss"]
        return loss, tape.gradient(loss, model.trainable_variables)

    full_loss, full = tf.function(lambda: gradients(model), jit_compile=jit_compile)()
    loss, sparse = tf.function(lambda: gradients(model.head_logits),
                               jit_compile=jit_compile)()
    np.testing.assert_allclose(float(loss), float(full_loss), rtol=1e-6)
    for variable, g_full, g in zip(model.trainable_variables, full, sparse):
        g_full, g = tf.convert_to_tensor(g_full).numpy(), tf.convert_to_tensor(g).numpy()
        assert np.abs(g_full).max() > 0, variable.path
        np.testing.assert_allclose(g, g_full, atol=1e-5, rtol=1e-4, err_msg=variable.path)
