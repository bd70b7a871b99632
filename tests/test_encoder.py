"""Tests for bert_tf.modeling.encoder: numerics against a NumPy BERT and keras-hub."""

from __future__ import annotations

import os

import _reference_bert as ref
import keras
import keras_hub
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.modeling import activations
from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.encoder import BertEncoder, BertTransformerBlock, WordEmbedding
from bert_tf.modeling.weight_map import encoder_weight_map, get_weights, set_weights

TOL = 1e-4


def tiny_config(**overrides) -> BertConfig:
    values = dict(
        vocab_size=101,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=16,
        type_vocab_size=3,
    )
    values.update(overrides)
    return BertConfig(**values)


def random_inputs(rng: np.random.Generator, lengths, seq_len: int, config: BertConfig):
    """A batch with real tokens up to each length and padding (id 0, mask 0) after it."""
    batch = len(lengths)
    ids = rng.integers(1, config.vocab_size, size=(batch, seq_len)).astype(np.int32)
    segments = rng.integers(0, config.type_vocab_size, size=(batch, seq_len)).astype(np.int32)
    mask = (np.arange(seq_len)[None, :] < np.asarray(lengths)[:, None]).astype(np.int32)
    return {"input_ids": ids * mask, "input_mask": mask, "segment_ids": segments * mask}


def load_random_weights(encoder: BertEncoder, seed: int):
    c = encoder.config
    weights = ref.random_weights(
        np.random.default_rng(seed), c.vocab_size, c.hidden_size, c.num_hidden_layers,
        c.intermediate_size, c.max_position_embeddings, c.type_vocab_size, with_heads=False,
    )
    set_weights(encoder_weight_map(encoder), weights)
    return weights


@pytest.fixture(scope="module", params=["gelu_exact", "gelu"])
def encoder_and_weights(request):
    encoder = BertEncoder(tiny_config(hidden_act=request.param))
    return encoder, load_random_weights(encoder, seed=1)


def test_matches_numpy_reference_with_padding(encoder_and_weights):
    encoder, weights = encoder_and_weights
    c = encoder.config
    inputs = random_inputs(np.random.default_rng(2), lengths=[11, 5, 1], seq_len=11, config=c)
    out = encoder(inputs, training=False)
    seq, pooled = ref.encoder_forward(
        weights, inputs["input_ids"], inputs["input_mask"], inputs["segment_ids"],
        c.num_hidden_layers, c.num_attention_heads, c.hidden_act,
    )
    seq_diff = np.abs(keras.ops.convert_to_numpy(out["sequence_output"]) - seq)
    mask = inputs["input_mask"].astype(bool)
    # Padded positions are computed too (they attend to real tokens); compare all of them.
    assert seq_diff.max() < TOL, seq_diff.max()
    assert seq_diff[mask].max() < TOL
    pooled_diff = np.abs(keras.ops.convert_to_numpy(out["pooled_output"]) - pooled).max()
    assert pooled_diff < TOL, pooled_diff
    # The outputs are not degenerate: the examples differ from each other.
    assert np.abs(seq[0, 0] - seq[1, 0]).max() > 0.1


def test_no_attention_dropout_matches_reference():
    # With attention_probs_dropout_prob = 0 the attention-probability Dropout is the identity.
    config = tiny_config(attention_probs_dropout_prob=0.0)
    encoder = BertEncoder(config)
    assert encoder.transformer_layers[0]._self_attention_layer.dropout == 0.0
    weights = load_random_weights(encoder, seed=16)
    inputs = random_inputs(np.random.default_rng(17), lengths=[7, 2], seq_len=7, config=config)
    seq, pooled = ref.encoder_forward(
        weights, inputs["input_ids"], inputs["input_mask"], inputs["segment_ids"],
        config.num_hidden_layers, config.num_attention_heads, config.hidden_act,
    )
    out = encoder(inputs)
    assert np.abs(keras.ops.convert_to_numpy(out["sequence_output"]) - seq).max() < TOL
    assert np.abs(keras.ops.convert_to_numpy(out["pooled_output"]) - pooled).max() < TOL


def _seed_states(layer):
    return [v for v in layer.non_trainable_variables if "seed_generator" in v.path]


@pytest.mark.parametrize("lengths", [[6, 6, 6], [6, 3, 1]])
def test_block_equals_keras_hub_transformer_encoder_in_training(lengths):
    # The block computes attention itself (batched matmuls, additive padding mask). In
    # training mode, with the same dropout seeds, it must give keras-hub's own
    # TransformerEncoder.call result: same weights, same dropout masks (the probabilities are
    # dropped in the same [batch, heads, queries, keys] layout, so the same random draws).
    keras.utils.set_random_seed(3)
    block = BertTransformerBlock(intermediate_dim=24, num_heads=2, dropout=0.2,
                                 attention_dropout=0.3, activation=activations.gelu_approximate,
                                 layer_norm_epsilon=1e-12)
    x = tf.random.normal([3, 6, 8])
    mask = tf.sequence_mask(lengths, 6, dtype=tf.int32)
    block(x, padding_mask=mask)
    start = [v.numpy() for v in _seed_states(block)]
    assert start, "no dropout seed state found"

    def run(call):
        for v, value in zip(_seed_states(block), start):
            v.assign(value)
        with tf.GradientTape() as tape:
            y = call(block, x, padding_mask=mask, training=True)
            loss = tf.reduce_sum(y * tf.cos(tf.range(8, dtype=tf.float32)))
        return y.numpy(), [g.numpy() for g in tape.gradient(loss, block.trainable_variables)]

    ours, our_grads = run(BertTransformerBlock.call)
    theirs, their_grads = run(keras_hub.layers.TransformerEncoder.call)
    np.testing.assert_allclose(ours, theirs, atol=1e-5)
    for a, b in zip(our_grads, their_grads):
        np.testing.assert_allclose(a, b, atol=1e-5)
    # Dropout was live: a second draw differs.
    again = BertTransformerBlock.call(block, x, padding_mask=mask, training=True).numpy()
    assert np.abs(again - ours).max() > 1e-3


def test_block_defaults_to_one_dropout_rate():
    block = BertTransformerBlock(intermediate_dim=8, num_heads=2, dropout=0.3)
    block.build((None, None, 8))
    assert block.attention_dropout == 0.3
    assert block._self_attention_layer.dropout == 0.3
    restored = BertTransformerBlock.from_config(
        BertTransformerBlock(intermediate_dim=8, num_heads=2, dropout=0.3,
                             attention_dropout=0.0).get_config()
    )
    assert (restored.dropout, restored.attention_dropout) == (0.3, 0.0)


def test_padding_does_not_affect_real_positions(encoder_and_weights):
    encoder, _ = encoder_and_weights
    c = encoder.config
    rng = np.random.default_rng(3)
    inputs = random_inputs(rng, lengths=[4, 7], seq_len=9, config=c)
    changed = {k: v.copy() for k, v in inputs.items()}
    pad = inputs["input_mask"] == 0
    changed["input_ids"][pad] = rng.integers(1, c.vocab_size, size=pad.sum())
    changed["segment_ids"][pad] = 1
    a = keras.ops.convert_to_numpy(encoder(inputs)["sequence_output"])
    b = keras.ops.convert_to_numpy(encoder(changed)["sequence_output"])
    real = inputs["input_mask"].astype(bool)
    assert np.abs(a[real] - b[real]).max() < 1e-6
    # ... while the padded positions themselves did change (the test can fail).
    assert np.abs(a[~real] - b[~real]).max() > 1e-2
    # Without the mask, the same change does reach the real positions.
    unmasked = dict(inputs, input_mask=np.ones_like(inputs["input_mask"]))
    unmasked_changed = dict(changed, input_mask=np.ones_like(inputs["input_mask"]))
    c1 = keras.ops.convert_to_numpy(encoder(unmasked)["sequence_output"])
    c2 = keras.ops.convert_to_numpy(encoder(unmasked_changed)["sequence_output"])
    assert np.abs(c1[real] - c2[real]).max() > 1e-2


def test_variable_batch_and_length(encoder_and_weights):
    encoder, weights = encoder_and_weights
    c = encoder.config
    rng = np.random.default_rng(4)
    for batch, seq_len in [(1, 3), (5, 16)]:
        inputs = random_inputs(rng, lengths=[seq_len] * batch, seq_len=seq_len, config=c)
        out = encoder(inputs)
        assert tuple(out["sequence_output"].shape) == (batch, seq_len, c.hidden_size)
        assert tuple(out["pooled_output"].shape) == (batch, c.hidden_size)


def test_matches_keras_hub_bert_backbone():
    # keras-hub's BertBackbone uses the tanh GELU; copy weights layer by layer, by hand.
    config = tiny_config(hidden_act="gelu_approximate")
    encoder = BertEncoder(config)
    load_random_weights(encoder, seed=5)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=config.vocab_size,
        num_layers=config.num_hidden_layers,
        num_heads=config.num_attention_heads,
        hidden_dim=config.hidden_size,
        intermediate_dim=config.intermediate_size,
        max_sequence_length=config.max_position_embeddings,
        num_segments=config.type_vocab_size,
    )
    pairs = [
        (backbone.token_embedding, encoder.token_embedding),
        (backbone.position_embedding, encoder.position_embedding),
        (backbone.segment_embedding, encoder.segment_embedding),
        (backbone.embeddings_layer_norm, encoder.embeddings_layer_norm),
        (backbone.pooled_dense, encoder.pooler),
    ] + list(zip(backbone.transformer_layers, encoder.transformer_layers))
    for theirs, ours in pairs:
        theirs.set_weights(ours.get_weights())
    inputs = random_inputs(np.random.default_rng(6), lengths=[10, 3], seq_len=10, config=config)
    ours = encoder(inputs)
    theirs = backbone(
        {"token_ids": inputs["input_ids"], "segment_ids": inputs["segment_ids"],
         "padding_mask": inputs["input_mask"]}
    )
    for key in ("sequence_output", "pooled_output"):
        diff = np.abs(keras.ops.convert_to_numpy(ours[key])
                      - keras.ops.convert_to_numpy(theirs[key]))
        assert diff.max() < TOL, (key, diff.max())


def test_exact_and_tanh_gelu_give_different_models():
    # Same weights, the two activations: outputs differ (by a little), so the option is live.
    inputs = random_inputs(np.random.default_rng(7), lengths=[6], seq_len=6, config=tiny_config())
    outs = []
    for act in ("gelu_exact", "gelu"):
        encoder = BertEncoder(tiny_config(hidden_act=act))
        load_random_weights(encoder, seed=8)
        outs.append(keras.ops.convert_to_numpy(encoder(inputs)["sequence_output"]))
    diff = np.abs(outs[0] - outs[1]).max()
    assert 1e-5 < diff < 0.05, diff


def test_dropout_only_in_training():
    config = tiny_config(hidden_dropout_prob=0.3, attention_probs_dropout_prob=0.3)
    encoder = BertEncoder(config)
    inputs = random_inputs(np.random.default_rng(9), lengths=[8, 8], seq_len=8, config=config)
    infer = [keras.ops.convert_to_numpy(encoder(inputs)["sequence_output"]) for _ in range(2)]
    train = [keras.ops.convert_to_numpy(encoder(inputs, training=True)["sequence_output"])
             for _ in range(2)]
    np.testing.assert_array_equal(infer[0], infer[1])
    assert np.abs(train[0] - train[1]).max() > 1e-3
    assert np.abs(train[0] - infer[0]).max() > 1e-3


@pytest.mark.parametrize("hidden, attention", [(0.0, 0.5), (0.4, 0.0), (0.2, 0.1)])
def test_two_dropout_rates(hidden, attention):
    config = tiny_config(hidden_dropout_prob=hidden, attention_probs_dropout_prob=attention)
    encoder = BertEncoder(config)
    for block in encoder.transformer_layers:
        mha = block._self_attention_layer
        assert mha.dropout == attention
        assert mha._dropout_layer.rate == attention
        assert block._self_attention_dropout.rate == hidden
        assert block._feedforward_dropout.rate == hidden
    assert encoder.embeddings_dropout.rate == hidden
    # Either rate alone makes training differ from inference.
    inputs = random_inputs(np.random.default_rng(10), lengths=[8], seq_len=8, config=config)
    a = keras.ops.convert_to_numpy(encoder(inputs, training=True)["sequence_output"])
    b = keras.ops.convert_to_numpy(encoder(inputs, training=False)["sequence_output"])
    assert np.abs(a - b).max() > 1e-3


def test_initialization():
    config = tiny_config(vocab_size=1000, hidden_size=64, initializer_range=0.02)
    keras.utils.set_random_seed(11)
    encoder = BertEncoder(config)
    w = get_weights(encoder_weight_map(encoder))
    emb = w["embeddings/word_embeddings"]
    # Truncated at 2 stddev without rescaling: std = 0.02 * 0.8796 = 0.01759.
    assert abs(emb.std() - 0.02 * 0.8796) < 0.0005
    assert np.abs(emb).max() <= 0.04 + 1e-7
    q, k, v = (w[f"layer_0/attention/{n}/kernel"] for n in ("query", "key", "value"))
    assert np.abs(q - k).max() > 0.01 and np.abs(k - v).max() > 0.01
    np.testing.assert_array_equal(w["layer_0/attention/query/bias"], 0.0)
    np.testing.assert_array_equal(w["embeddings/layer_norm/gamma"], 1.0)
    # Reproducible from the Keras seed.
    keras.utils.set_random_seed(11)
    again = get_weights(encoder_weight_map(BertEncoder(config)))
    for name, value in w.items():
        np.testing.assert_array_equal(value, again[name], err_msg=name)


def test_variable_names_are_stable():
    encoder = BertEncoder(tiny_config(num_hidden_layers=1))
    paths = [v.path for v in encoder.weights if v.trainable]
    assert paths[:5] == [
        "word_embeddings/embeddings",
        "position_embeddings/embeddings",
        "token_type_embeddings/embeddings",
        "embeddings_layer_norm/gamma",
        "embeddings_layer_norm/beta",
    ]
    assert "transformer_layer_0/self_attention_layer/query/kernel" in paths
    assert "transformer_layer_0/feedforward_output_dense/kernel" in paths
    assert paths[-2:] == ["pooler/kernel", "pooler/bias"]


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision(policy):
    config = tiny_config()
    reference = BertEncoder(config)
    weights = load_random_weights(reference, seed=12)
    inputs = random_inputs(np.random.default_rng(13), lengths=[9, 4], seq_len=9, config=config)
    expected = reference(inputs)
    previous = keras.config.dtype_policy()
    keras.mixed_precision.set_dtype_policy(policy)
    try:
        encoder = BertEncoder(config)
    finally:
        keras.mixed_precision.set_dtype_policy(previous)
    set_weights(encoder_weight_map(encoder), weights)
    assert all(v.dtype == "float32" for v in encoder.trainable_weights)
    out = encoder(inputs)
    compute = policy.split("_")[1]
    assert out["sequence_output"].dtype == compute
    tol = 0.15 if compute == "bfloat16" else 0.02
    for key in ("sequence_output", "pooled_output"):
        got = keras.ops.convert_to_numpy(keras.ops.cast(out[key], "float32"))
        diff = np.abs(got - keras.ops.convert_to_numpy(expected[key])).max()
        assert np.isfinite(got).all() and diff < tol, (key, diff)


def test_save_and_load_keras_file(tmp_path):
    config = tiny_config(hidden_act="gelu_approximate", attention_probs_dropout_prob=0.2)
    encoder = BertEncoder(config, name="my_encoder")
    load_random_weights(encoder, seed=14)
    path = os.fspath(tmp_path / "encoder.keras")
    encoder.save(path)
    loaded = keras.models.load_model(path)
    assert isinstance(loaded, BertEncoder)
    assert loaded.config == config and loaded.name == "my_encoder"
    inputs = random_inputs(np.random.default_rng(15), lengths=[5, 2], seq_len=5, config=config)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(loaded(inputs)["sequence_output"]),
        keras.ops.convert_to_numpy(encoder(inputs)["sequence_output"]),
        atol=1e-6,
    )
    assert loaded.transformer_layers[0]._self_attention_layer.dropout == 0.2


@pytest.mark.parametrize("reverse_dtype", [None, "float32"])
def test_word_embedding_reverse_equals_keras_hub(reverse_dtype):
    # Same table, same values and gradients as keras-hub's transpose-then-matmul, for 3-D
    # inputs (the MLM head's [batch, predictions, hidden]); the forward lookup is untouched.
    ours = WordEmbedding(50, 8, reverse_dtype=reverse_dtype)
    theirs = keras_hub.layers.ReversibleEmbedding(50, 8, reverse_dtype=reverse_dtype)
    ids = np.array([[1, 2, 49], [0, 7, 7]], np.int32)
    ours.build(ids.shape)
    theirs.build(ids.shape)
    theirs.embeddings.assign(ours.embeddings)
    np.testing.assert_array_equal(ours(ids), theirs(ids))
    hidden = tf.constant(np.random.default_rng(0).normal(size=(2, 3, 8)), tf.float32)

    def logits_and_grads(layer):
        with tf.GradientTape() as tape:
            tape.watch(hidden)
            logits = layer(hidden, reverse=True)  # [2, 3, 50]
            loss = tf.reduce_sum(logits * tf.range(50, dtype=tf.float32))
        return (logits, *tape.gradient(loss, [hidden, layer.embeddings]))

    for got, want in zip(logits_and_grads(ours), logits_and_grads(theirs)):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
