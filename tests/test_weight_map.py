"""Tests for bert_tf.modeling.weight_map: canonical names, shapes and the round trip."""

from __future__ import annotations

import _reference_bert as ref
import keras
import numpy as np
import pytest

from bert_tf.core.errors import UserError
from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.encoder import BertEncoder
from bert_tf.modeling.pretraining_model import BertPretrainingModel, dummy_pretraining_inputs
from bert_tf.modeling.weight_map import (
    encoder_weight_map,
    get_weights,
    pretraining_weight_map,
    set_weights,
)

CONFIG = BertConfig(
    vocab_size=50, hidden_size=24, num_hidden_layers=2, num_attention_heads=3,
    intermediate_size=40, max_position_embeddings=12, type_vocab_size=2,
)


def reference_weights(seed: int, with_heads: bool = True):
    c = CONFIG
    return ref.random_weights(
        np.random.default_rng(seed), c.vocab_size, c.hidden_size, c.num_hidden_layers,
        c.intermediate_size, c.max_position_embeddings, c.type_vocab_size, with_heads,
    )


@pytest.fixture(scope="module")
def model():
    return BertPretrainingModel(CONFIG)


def test_names_and_shapes_are_canonical(model):
    wm = encoder_weight_map(model.encoder)
    expected = reference_weights(0, with_heads=False)
    assert list(wm) == list(expected)  # same names, same order
    for name, value in expected.items():
        assert wm[name].shape == value.shape, name
    assert len(wm) == 5 + 16 * CONFIG.num_hidden_layers + 2


@pytest.mark.parametrize("use_nsp", [True, False])
def test_map_covers_every_trainable_variable_once(use_nsp):
    m = BertPretrainingModel(CONFIG, use_nsp=use_nsp)
    wm = pretraining_weight_map(m)
    mapped = [id(w.variable) for w in wm.values()]
    assert len(mapped) == len(set(mapped))
    assert set(mapped) == {id(v) for v in m.trainable_weights}
    assert ("nsp/kernel" in wm) == use_nsp
    enc = encoder_weight_map(m.encoder)
    assert {id(w.variable) for w in enc.values()} == {id(v) for v in m.encoder.trainable_weights}


def test_attention_reshape_groups_columns_by_head(model):
    wm = encoder_weight_map(model.encoder)
    values = reference_weights(1)
    set_weights(pretraining_weight_map(model), values)
    heads, size = CONFIG.num_attention_heads, CONFIG.hidden_size // CONFIG.num_attention_heads
    query = keras.ops.convert_to_numpy(wm["layer_1/attention/query/kernel"].variable)
    assert query.shape == (CONFIG.hidden_size, heads, size)
    canonical = values["layer_1/attention/query/kernel"]
    for h in range(heads):
        np.testing.assert_array_equal(query[:, h, :], canonical[:, h * size:(h + 1) * size])
    bias = keras.ops.convert_to_numpy(wm["layer_1/attention/key/bias"].variable)
    np.testing.assert_array_equal(bias[2], values["layer_1/attention/key/bias"][2 * size:])
    output = keras.ops.convert_to_numpy(wm["layer_0/attention/output/kernel"].variable)
    assert output.shape == (heads, size, CONFIG.hidden_size)
    np.testing.assert_array_equal(
        output[1], values["layer_0/attention/output/kernel"][size:2 * size, :]
    )


def test_round_trip_between_models(model):
    values = reference_weights(2)
    set_weights(pretraining_weight_map(model), values)
    got = get_weights(pretraining_weight_map(model))
    assert list(got) == list(values)
    for name in values:
        np.testing.assert_array_equal(got[name], values[name], err_msg=name)
    # A second model loaded from the first's canonical weights computes the same outputs.
    other = BertPretrainingModel(CONFIG)
    set_weights(pretraining_weight_map(other), got)
    inputs = dummy_pretraining_inputs(batch_size=2, seq_len=6, num_predictions=3)
    inputs["input_ids"] = np.arange(12, dtype=np.int32).reshape(2, 6)
    inputs["masked_lm_positions"] = np.array([[1, 2, 0], [5, 3, 4]], np.int32)
    a, b = model(inputs), other(inputs)
    for key in ("mlm_logits", "nsp_logits", "pooled_output"):
        np.testing.assert_array_equal(
            keras.ops.convert_to_numpy(a[key]), keras.ops.convert_to_numpy(b[key])
        )


def test_tied_embedding_is_one_variable(model):
    wm = pretraining_weight_map(model)
    assert model.mlm_head.token_embedding is model.encoder.token_embedding
    assert "mlm/output_weights" not in wm
    assert wm["embeddings/word_embeddings"].variable is model.encoder.token_embedding.embeddings


def test_errors_leave_the_model_untouched(model):
    wm = pretraining_weight_map(model)
    before = get_weights(wm)
    good = reference_weights(3)
    missing = {k: v for k, v in good.items() if k != "pooler/bias"}
    with pytest.raises(UserError, match=r"ckpt: 1 weight\(s\) missing, first: pooler/bias"):
        set_weights(wm, missing, source="ckpt")
    with pytest.raises(UserError, match="unexpected weight.*first: extra/kernel"):
        set_weights(wm, dict(good, **{"extra/kernel": np.zeros(3)}))
    bad_shape = dict(good)
    bad_shape["layer_1/intermediate/kernel"] = good["layer_1/intermediate/kernel"].T
    with pytest.raises(UserError, match=r"layer_1/intermediate/kernel has shape \(40, 24\)"):
        set_weights(wm, bad_shape)
    after = get_weights(wm)
    for name in before:
        np.testing.assert_array_equal(before[name], after[name], err_msg=name)


def test_non_strict_sets_a_subset(model):
    wm = pretraining_weight_map(model)
    before = get_weights(wm)
    new_bias = np.full([CONFIG.vocab_size], 0.5, np.float32)
    set_weights(wm, {"mlm/output_bias": new_bias, "ignored/name": np.zeros(1)}, strict=False)
    after = get_weights(wm)
    np.testing.assert_array_equal(after["mlm/output_bias"], new_bias)
    np.testing.assert_array_equal(after["pooler/kernel"], before["pooler/kernel"])


def test_encoder_alone_round_trip():
    encoder = BertEncoder(CONFIG)
    values = reference_weights(4, with_heads=False)
    set_weights(encoder_weight_map(encoder), values)
    got = get_weights(encoder_weight_map(encoder))
    for name in values:
        np.testing.assert_array_equal(got[name], values[name], err_msg=name)
