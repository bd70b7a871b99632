"""Tests of bert_tf.modeling.electra (and the embedding_size of config, encoder, weight_map):
the generator's size rule, the embedding projection's shapes, one shared set of embedding
variables, the heads' shapes, the canonical names, and the checkpoint layout from which the
discriminator and the generator load apart (the discriminator also through
`interop.native.load_pretrained`, what export and conversion read).
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import tensorflow as tf
from _pretraining_helpers import REPO_ROOT, TINY_BERT, synthetic_examples, tiny_bert_config

from bert_tf.core.errors import UserError
from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.electra import ElectraPretrainingModel, electra_weight_map, generator_config
from bert_tf.modeling.encoder import BertEncoder, dummy_inputs
from bert_tf.modeling.weight_map import encoder_weight_map, get_weights

EMBEDDING = 16  # the tiny model's E, against hidden 32


@pytest.fixture(scope="module")
def model():
    import keras

    keras.utils.set_random_seed(5)
    return ElectraPretrainingModel(tiny_bert_config(embedding_size=EMBEDDING), sampling_seed=1)


def test_generator_config_follows_electra_s_size_rule():
    configs = REPO_ROOT / "configs"
    small = BertConfig.from_json_file(os.fspath(configs / "bert_config_electra_small.json"))
    gen = generator_config(small, 0.25)
    # ELECTRA-Small's generator: hidden 64, one head, feed-forward 256, the 128-wide tables.
    assert (gen.hidden_size, gen.num_attention_heads, gen.intermediate_size,
            gen.embedding_size, gen.num_hidden_layers) == (64, 1, 256, 128, 12)
    base = BertConfig.from_json_file(os.fspath(configs / "bert_config_base.json"))
    gen = generator_config(base, 1 / 3)  # ELECTRA-Base's: 256 wide, 4 heads, E = hidden 768
    assert (gen.hidden_size, gen.num_attention_heads, gen.intermediate_size,
            gen.embedding_size) == (256, 4, 1024, 768)
    with pytest.raises(UserError, match=r"^--generator_hidden_fraction must be in \(0, 1\]"):
        generator_config(base, 0)
    with pytest.raises(UserError, match=r"^--generator_hidden_fraction=0.25 gives a generator "
                                        r"hidden size 200, not divisible by its 3 heads"):
        generator_config(dict_config(hidden_size=800, num_attention_heads=8), 0.25)


def dict_config(**overrides):
    return BertConfig.from_dict({**TINY_BERT, **overrides})


def test_embedding_size_absent_keeps_bert_s_config_file_and_layers():
    config = tiny_bert_config()
    assert config.embedding_size is None and config.embedding_width == 32
    assert "embedding_size" not in config.to_dict()  # the original's keys, nothing more
    encoder = BertEncoder(config)
    assert encoder.embeddings_project is None
    assert not any(name.startswith("embeddings_project") for name in encoder_weight_map(encoder))
    # Equal to hidden_size: no projection either.
    assert BertEncoder(tiny_bert_config(embedding_size=32)).embeddings_project is None


def test_embedding_size_round_trips_and_projects_to_hidden(tmp_path):
    config = tiny_bert_config(embedding_size=EMBEDDING)
    path = os.fspath(tmp_path / "bert_config.json")
    config.to_json_file(path)
    assert json.loads(open(path).read())["embedding_size"] == EMBEDDING
    assert BertConfig.from_json_file(path) == config
    with pytest.raises(UserError, match="embedding_size must be a positive integer or null"):
        BertConfig.from_dict({**TINY_BERT, "embedding_size": 0})
    encoder = BertEncoder(config)
    shapes = {name: w.shape for name, w in encoder_weight_map(encoder).items()}
    assert shapes["embeddings/word_embeddings"] == (128, EMBEDDING)
    assert shapes["embeddings/position_embeddings"] == (64, EMBEDDING)
    assert shapes["embeddings/token_type_embeddings"] == (2, EMBEDDING)
    assert shapes["embeddings/layer_norm/gamma"] == (EMBEDDING,)
    assert shapes["embeddings_project/kernel"] == (EMBEDDING, 32)
    assert shapes["embeddings_project/bias"] == (32,)
    assert shapes["layer_0/attention/query/kernel"] == (32, 32)
    out = encoder(dummy_inputs(batch_size=2, seq_len=5))
    assert out["sequence_output"].shape == (2, 5, 32)
    # encode_at takes the same projection: equal to the full pass at the queried rows.
    inputs = {k: tf.constant(v) for k, v in synthetic_examples(2).items()
              if k in ("input_ids", "input_mask", "segment_ids")}
    full = encoder(inputs)["sequence_output"].numpy()
    at = encoder.encode_at(inputs, tf.constant([[0, 3], [1, 2]])).numpy()
    np.testing.assert_allclose(at, np.stack([full[0, [0, 3]], full[1, [1, 2]]]), atol=1e-5)


def test_one_set_of_embedding_variables_serves_both_networks(model):
    disc, gen = model.encoder, model.generator
    for name in ("token_embedding", "position_embedding", "segment_embedding",
                 "embeddings_layer_norm"):
        assert getattr(gen, name) is getattr(disc, name), name
    assert model.generator_head.token_embedding is disc.token_embedding  # the tied output
    # Each network projects the E-wide embeddings to its own width.
    assert disc.embeddings_project.kernel.shape == (EMBEDDING, 32)
    assert gen.embeddings_project.kernel.shape == (EMBEDDING, 8)
    assert model.generator_config.hidden_size == 8  # round(0.25 x 32)
    # Every variable once: no copy of the shared tables.
    assert len({id(v) for v in model.weights}) == len(model.weights)
    names = electra_weight_map(model)
    assert sorted(id(w.variable) for w in names.values()) == sorted(id(v) for v in model.weights)
    assert names["generator_predictions/dense/kernel"].shape == (8, EMBEDDING)
    assert names["generator_predictions/output_bias"].shape == (128,)
    assert names["discriminator_predictions/dense/kernel"].shape == (32, 32)
    assert names["discriminator_predictions/dense_prediction/kernel"].shape == (32, 1)
    assert not any(n.startswith("generator/embeddings/") for n in names)


def test_heads_give_one_logit_per_token_and_vocab_logits_per_masked_slot(model):
    batch = {k: tf.constant(v) for k, v in synthetic_examples(3).items()}
    out = model(batch)
    assert out["mlm_logits"].shape == (3, 4, 128) and out["mlm_logits"].dtype == tf.float32
    assert out["disc_logits"].shape == (3, 16) and out["disc_logits"].dtype == tf.float32
    # The discriminator head by hand: dense (tanh-GELU) then dense_prediction on the encoder.
    seq = model.encoder({k: batch[k] for k in ("input_ids", "input_mask", "segment_ids")}
                        )["sequence_output"].numpy()
    head = model.discriminator_head
    h = seq @ head.dense.kernel.numpy() + head.dense.bias.numpy()
    h = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h ** 3)))
    logits = (h @ head.dense_prediction.kernel.numpy())[..., 0] + head.dense_prediction.bias.numpy()
    np.testing.assert_allclose(out["disc_logits"].numpy(), logits, atol=1e-5)


def test_the_checkpoint_lets_the_discriminator_and_the_generator_load_apart(model, tmp_path):
    prefix = tf.train.Checkpoint(model=model).write(os.fspath(tmp_path / "ckpt-1"))
    config = model.config
    config.to_json_file(os.fspath(tmp_path / "bert_config.json"))
    # The discriminator alone: a BertEncoder of the run's config, read from model/encoder.
    encoder = BertEncoder(config)
    tf.train.Checkpoint(model=tf.train.Checkpoint(encoder=encoder)).read(prefix).expect_partial()
    theirs = get_weights(encoder_weight_map(model.encoder))
    for name, value in get_weights(encoder_weight_map(encoder)).items():
        np.testing.assert_array_equal(value, theirs[name], err_msg=name)
    # What export and conversion load (interop.native): the same discriminator encoder.
    from bert_tf.interop import native

    loaded = native.load_pretrained(prefix)
    for name, value in get_weights(encoder_weight_map(loaded.model.encoder)).items():
        np.testing.assert_array_equal(value, theirs[name], err_msg=name)
    # A fresh ELECTRA model restores both networks and the heads, every weight.
    fresh = ElectraPretrainingModel(config, sampling_seed=2)
    tf.train.Checkpoint(model=fresh).read(prefix).assert_existing_objects_matched()
    ours = get_weights(electra_weight_map(fresh))
    for name, value in get_weights(electra_weight_map(model)).items():
        np.testing.assert_array_equal(ours[name], value, err_msg=name)
