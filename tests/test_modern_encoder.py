"""Tests for the modern encoder: modern_config, modern_layout, rotary, modern_encoder,
modern_head, modern_weights (transformers' ModernBERT itself: test_hf_modernbert.py)."""

import dataclasses
import glob
import json
import os

import numpy as np
import pytest
import tensorflow as tf
from _pretraining_helpers import REPO_ROOT, TINY_BERT

from bert_tf.core.errors import UserError
from bert_tf.interop.model_files import expected_shapes
from bert_tf.modeling import modern_config, modern_layout, rotary, weight_map
from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.encoder import BertEncoder
from bert_tf.modeling.modern_encoder import ModernEncoder, build_encoder
from bert_tf.modeling.pretraining_model import BertPretrainingModel

MODERN = {**TINY_BERT, "num_hidden_layers": 3, "hidden_act": "geglu", "type_vocab_size": 0,
          "position_embedding_type": "rope", "rope_theta": 160000.0,
          "local_rope_theta": 10000.0, "pre_layer_norm": True, "norm_eps": 1e-5,
          "use_bias": False, "global_attn_every_n_layers": 3, "local_attention_window": 4}


def _inputs(lengths=(16, 9), seq=16, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, TINY_BERT["vocab_size"], (len(lengths), seq)).astype(np.int32)
    mask = (np.arange(seq)[None] < np.array(lengths)[:, None]).astype(np.int32)
    return {"input_ids": ids * mask, "input_mask": mask,
            "segment_ids": (np.arange(seq)[None] >= 5).astype(np.int32) * mask}


# ------------------------------------------------------------------ config


def test_bert_configs_stay_bert():
    """Every BERT config of configs/ is not modern and writes no new key."""
    for path in glob.glob(str(REPO_ROOT / "configs" / "bert_config_*.json")):
        config = BertConfig.from_json_file(path)
        assert not modern_config.is_modern(config), path
        with open(path) as f:
            assert set(config.to_dict()) == set(json.load(f)), path


@pytest.mark.parametrize("name,params", [
    ("modernbert_base", 149_655_232), ("cramming_bert", 120_284_672),
    ("modernbert_mini", 11_025_210), ("modernbert_tiny", 4_347_450)])
def test_modern_configs(name, params):
    config = BertConfig.from_json_file(os.path.join(REPO_ROOT, "configs", f"{name}.json"))
    assert modern_config.is_modern(config)
    shapes = expected_shapes(config, use_nsp=False)
    assert sum(int(np.prod(s)) for s in shapes.values()) == params
    assert BertConfig.from_dict(config.to_dict()) == config


@pytest.mark.parametrize("change,message", [
    ({"position_embedding_type": "alibi"}, "position_embedding_type must be one of absolute, rope"),
    ({"rope_theta": -1.0}, "rope_theta must be a positive number"),
    ({"norm_eps": 0}, "norm_eps must be a positive number"),
    ({"use_bias": 0}, "use_bias must be true or false"),
    ({"local_attention_window": None}, "global_attn_every_n_layers=3 needs local_attention_window"),
    ({"global_attn_every_n_layers": 1}, "local_attention_window applies only with"),
    ({"local_attention_window": 1}, "local_attention_window must be an integer >= 2"),
    ({"position_embedding_type": "absolute"}, "rope_theta and local_rope_theta apply only"),
    ({"num_attention_heads": 4, "hidden_size": 36}, "needs an even head size"),
    ({"type_vocab_size": -1}, "type_vocab_size must be positive"),
])
def test_bad_modern_configs(change, message):
    with pytest.raises(UserError, match="^cfg: ") as e:
        BertConfig.from_dict({**MODERN, **change}, source="cfg")
    assert message in str(e.value) and "\n" not in str(e.value)


# ------------------------------------------------------------------ RoPE and the window


def test_rotary_matches_formula():
    """RoPE by hand: pairs (x_k, x_{k+d/2}) rotated by the angle p * theta^(-2k/d)."""
    d, theta = 8, 100.0
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 1, 5, d)).astype(np.float32)
    positions = np.arange(5)[None]
    got = rotary.rotate(tf.constant(x), *rotary.cos_sin(positions,
                                                         rotary.inverse_frequencies(d, theta)))
    want = np.empty_like(x)
    for p in range(5):
        for k in range(d // 2):
            a = p * theta ** (-2 * k / d)
            x1, x2 = x[0, 0, p, k], x[0, 0, p, k + d // 2]
            want[0, 0, p, k] = x1 * np.cos(a) - x2 * np.sin(a)
            want[0, 0, p, k + d // 2] = x2 * np.cos(a) + x1 * np.sin(a)
    np.testing.assert_allclose(got.numpy(), want, atol=1e-5)


def test_window_and_padding_bias():
    """Window 4: a query sees keys at distance <= 2 (transformers' local_attention // 2)."""
    mask = np.array([[1, 1, 1, 1, 1, 0]], np.int32)
    bias = rotary.attention_bias(tf.range(6)[None], mask, 4, tf.float32).numpy()[0, 0]
    allowed = bias == 0
    want = (np.abs(np.arange(6)[:, None] - np.arange(6)[None]) <= 2) & (mask[0][None] == 1)
    np.testing.assert_array_equal(allowed, want)
    assert rotary.attention_bias(tf.range(6)[None], None, None, tf.float32) is None


# ------------------------------------------------------------------ the encoder


@pytest.fixture(scope="module")
def modern_model():
    tf.keras.utils.set_random_seed(0)
    return BertPretrainingModel(BertConfig.from_dict(MODERN), use_nsp=True)


def test_weight_map_matches_layout(modern_model):
    mapping = weight_map.pretraining_weight_map(modern_model)
    shapes = modern_layout.expected_shapes(modern_model.config, use_nsp=True)
    assert list(mapping) == list(shapes)
    assert {n: w.shape for n, w in mapping.items()} == shapes
    # Every variable exactly once.
    assert len({id(w.variable) for w in mapping.values()}) == len(modern_model.weights)
    assert "layer_0/attention/layer_norm/gamma" not in shapes  # ModernBERT's Identity
    assert "layer_1/attention/layer_norm/beta" not in shapes  # no biases


def test_head_logits_equal_call(modern_model):
    """encode_at (the last block on the query rows only) gives call's values, window too."""
    inputs = {**_inputs(), "masked_lm_positions": np.array([[1, 7, 15], [0, 3, 8]], np.int32)}
    full = modern_model(inputs)
    heads = modern_model.head_logits(inputs)
    np.testing.assert_allclose(heads["mlm_logits"], full["mlm_logits"], atol=1e-5)
    np.testing.assert_allclose(heads["nsp_logits"], full["nsp_logits"], atol=1e-5)
    # No pooler: pooled_output is the [CLS] hidden state.
    np.testing.assert_array_equal(full["pooled_output"], full["sequence_output"][:, 0])


def test_padding_does_not_change_real_positions(modern_model):
    encoder = modern_model.encoder
    long = _inputs(lengths=(9,), seq=16)
    short = {k: v[:, :9] for k, v in long.items()}
    other = dict(long, input_ids=np.where(long["input_mask"] == 1, long["input_ids"], 7))
    a = encoder(long)["sequence_output"].numpy()[:, :9]
    np.testing.assert_allclose(a, encoder(short)["sequence_output"].numpy(), atol=1e-5)
    np.testing.assert_allclose(a, encoder(other)["sequence_output"].numpy()[:, :9], atol=1e-6)


def test_post_ln_modern_encoder_equals_bert():
    """With BERT's block (post-LN, biases, learned positions, segments) and an untied
    decoder, the modern encoder computes BertEncoder's outputs from the same weights."""
    config = BertConfig.from_dict({**TINY_BERT, "num_hidden_layers": 2,
                                   "tie_word_embeddings": False})
    assert modern_config.is_modern(config)
    tf.keras.utils.set_random_seed(1)
    modern = build_encoder(config)
    bert = build_encoder(dataclasses.replace(config, tie_word_embeddings=True))
    assert isinstance(modern, ModernEncoder) and isinstance(bert, BertEncoder)
    values = weight_map.get_weights(weight_map.encoder_weight_map(bert))
    for i in range(2):
        p = f"layer_{i}/attention"
        for part in ("kernel", "bias"):
            values[f"{p}/qkv/{part}"] = np.concatenate(
                [values.pop(f"{p}/{n}/{part}") for n in ("query", "key", "value")], axis=-1)
    values.pop("pooler/kernel"), values.pop("pooler/bias")
    weight_map.set_weights(weight_map.encoder_weight_map(modern), values)
    inputs = _inputs()
    real = inputs["input_mask"].astype(bool)
    np.testing.assert_allclose(modern(inputs)["sequence_output"].numpy()[real],
                               bert(inputs)["sequence_output"].numpy()[real], atol=2e-5)


def test_untied_decoder_and_round_trip_through_canonical_names():
    config = BertConfig.from_dict({**MODERN, "tie_word_embeddings": False, "use_bias": True})
    tf.keras.utils.set_random_seed(2)
    model = BertPretrainingModel(config, use_nsp=False)
    mapping = weight_map.pretraining_weight_map(model)
    assert list(mapping) == list(expected_shapes(config, use_nsp=False))
    rng = np.random.default_rng(0)
    values = {n: rng.standard_normal(w.shape).astype(np.float32) for n, w in mapping.items()}
    weight_map.set_weights(mapping, values)
    got = weight_map.get_weights(weight_map.pretraining_weight_map(model))
    for name in values:
        np.testing.assert_array_equal(got[name], values[name])
    # The decoder is its own matrix: logits = transform(h) @ output_weights^T + bias.
    inputs = {**_inputs(), "masked_lm_positions": np.array([[2], [3]], np.int32)}
    head = model.mlm_head
    hidden = model.encoder(_inputs())["sequence_output"].numpy()
    rows = hidden[np.arange(2), [2, 3]][:, None]
    transformed = head.transform_layer_norm(head.act(head.transform(rows))).numpy()
    want = transformed @ values["mlm/output_weights"].T + values["mlm/output_bias"]
    np.testing.assert_allclose(model(inputs)["mlm_logits"].numpy(), want, atol=1e-4)


def test_gradients_reach_every_weight(modern_model):
    inputs = {**_inputs(), "masked_lm_positions": np.array([[1, 2], [3, 4]], np.int32)}
    with tf.GradientTape() as tape:
        out = modern_model.head_logits(inputs, training=True)
        loss = tf.reduce_sum(out["mlm_logits"] ** 2) + tf.reduce_sum(out["nsp_logits"] ** 2)
    grads = tape.gradient(loss, modern_model.trainable_weights)
    assert all(g is not None for g in grads)
    assert all(float(tf.reduce_max(tf.abs(tf.convert_to_tensor(g)))) > 0 for g in grads)


def test_config_round_trip(modern_model):
    encoder = modern_model.encoder
    clone = ModernEncoder.from_config(encoder.get_config())
    assert clone.config == encoder.config
    assert [w.shape for w in clone.weights] == [w.shape for w in encoder.weights]


def test_bert_encoder_refuses_modern_keys():
    """A model that builds BertEncoder directly names the keys it would have ignored."""
    with pytest.raises(UserError) as e:
        BertEncoder(BertConfig.from_dict(MODERN))
    assert str(e.value) == (
        "this model does not support the modern encoder's bert_config keys yet: "
        "position_embedding_type, rope_theta, local_rope_theta, pre_layer_norm, norm_eps, "
        "use_bias, global_attn_every_n_layers, local_attention_window, hidden_act, "
        "type_vocab_size")
