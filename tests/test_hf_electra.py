"""Tests for bert_tf.interop.hf_electra (and electra_layout, native_electra): transformers'
ELECTRA in and out.

The reference is tests/data/electra_tiny/ (its README: a random ELECTRA pair saved by
transformers with its outputs on three padded rows; scripts/make_electra_golden.py).
"""

import dataclasses
import json
import os
import shutil

import numpy as np
import pytest
from _pretraining_helpers import REPO_ROOT

from bert_tf.core.errors import UserError
from bert_tf.interop import (
    electra_layout,
    formats,
    hf_electra,
    native,
    native_electra,
    safetensors_io,
)
from bert_tf.modeling.electra import electra_weight_map
from bert_tf.modeling.weight_map import encoder_weight_map, get_weights, set_weights

DATA = str(REPO_ROOT / "tests" / "data" / "electra_tiny")
TOLERANCE = 1e-4
GENERATOR_WIDTH = 8


@pytest.fixture(scope="module")
def loaded():
    files = formats.read_model("hf", DATA)
    model = native_electra.build_model(files.config, electra_layout.generator_width(files.weights))
    set_weights(electra_weight_map(model), files.weights, strict=False)
    return files, model, dict(np.load(os.path.join(DATA, "golden.npz")))


@pytest.fixture(scope="module")
def vocab_file(tmp_path_factory):
    """A 96-token vocabulary (the tiny model's size), for the tokenizer files."""
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(91)]
    path.write_text("\n".join(tokens) + "\n")
    return os.fspath(path)


def test_config_of_the_pair_is_the_discriminator_s(loaded):
    config = loaded[0].config
    assert (config.hidden_size, config.embedding_size, config.num_attention_heads) == (32, 16, 2)
    assert (config.num_hidden_layers, config.intermediate_size, config.vocab_size) == (2, 64, 96)
    assert config.hidden_act == "gelu_exact"  # transformers' "gelu" is the erf form
    assert electra_layout.generator_width(loaded[0].weights) == GENERATOR_WIDTH
    assert formats.detect_format(DATA) == "hf"
    assert formats.read_config("hf", DATA) == config


def test_outputs_equal_transformers(loaded):
    _, model, golden = loaded
    inputs = {"input_ids": golden["input_ids"], "input_mask": golden["attention_mask"],
              "segment_ids": golden["token_type_ids"]}
    real = golden["attention_mask"].astype(bool)
    hidden = model.encoder(inputs)["sequence_output"].numpy()
    np.testing.assert_allclose(hidden[real], golden["last_hidden_state"][real], atol=TOLERANCE)
    disc = model.discriminator_logits(inputs).numpy()
    np.testing.assert_allclose(disc[real], golden["disc_logits"][real], atol=TOLERANCE)
    positions = np.tile(np.arange(real.shape[1], dtype=np.int32), (real.shape[0], 1))
    mlm = model.generator_logits({**inputs, "masked_lm_positions": positions}).numpy()
    assert np.abs(golden["mlm_logits"]).max() > 1  # logits of real size, not near zero
    np.testing.assert_allclose(mlm[real], golden["mlm_logits"][real], atol=TOLERANCE)


def test_every_weight_but_the_poolers_is_read(loaded, capsys):
    files, model, _ = loaded
    names = set(electra_weight_map(model))
    assert set(files.weights) == names - {"pooler/kernel", "pooler/bias",
                                          "generator/pooler/kernel", "generator/pooler/bias"}
    assert electra_layout.report_missing(files) == ["pooler/kernel", "pooler/bias",
                                                    "generator/pooler/kernel",
                                                    "generator/pooler/bias"]
    assert "untrained pooler(s)" in capsys.readouterr().err


def test_written_back_the_tensors_are_the_original_ones(loaded, vocab_file, tmp_path):
    files = loaded[0]
    out = formats.write_model("hf", dataclasses.replace(files, vocab_file=vocab_file),
                              os.fspath(tmp_path / "out"))
    for network, architecture in (("discriminator", "ElectraForPreTraining"),
                                  ("generator", "ElectraForMaskedLM")):
        ours = safetensors_io.load_file(os.path.join(out, network, "model.safetensors"))
        theirs = safetensors_io.load_file(os.path.join(DATA, network, "model.safetensors"))
        assert sorted(ours) == sorted(theirs)
        for name, value in theirs.items():
            np.testing.assert_array_equal(ours[name], value, err_msg=f"{network}: {name}")
        with open(os.path.join(out, network, "config.json")) as f:
            written = json.load(f)
        with open(os.path.join(DATA, network, "config.json")) as f:
            original = json.load(f)
        assert written["architectures"] == [architecture] and written["model_type"] == "electra"
        for key in ("vocab_size", "embedding_size", "hidden_size", "num_hidden_layers",
                    "num_attention_heads", "intermediate_size", "hidden_act",
                    "max_position_embeddings", "type_vocab_size"):
            assert written[key] == original[key], (network, key)
        for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json"):
            assert os.path.exists(os.path.join(out, network, name)), (network, name)
    # and read again: the same canonical weights, the vocabulary found beside them
    again = formats.read_model("hf", out)
    assert again.vocab_file == os.path.join(out, "discriminator", "vocab.txt")
    for name, value in files.weights.items():
        np.testing.assert_array_equal(again.weights[name], value, err_msg=name)


def test_through_a_bert_tf_checkpoint_every_weight_survives(loaded, tmp_path):
    files, model, _ = loaded
    prefix = formats.write_model("bert_tf", files, os.fspath(tmp_path / "native"))
    assert native_electra.is_electra_checkpoint(os.fspath(tmp_path / "native"))
    assert native_electra.saved_generator_width(prefix) == GENERATOR_WIDTH
    back = formats.read_model("bert_tf", os.fspath(tmp_path / "native"))
    assert set(back.weights) == set(electra_weight_map(model))  # poolers now initialised
    for name, value in files.weights.items():
        np.testing.assert_array_equal(back.weights[name], value, err_msg=name)
    # export and fine-tuning's loader finds the discriminator under model/encoder
    encoder = native.load_pretrained(prefix).model.encoder
    for name, value in get_weights(encoder_weight_map(encoder)).items():
        if not name.startswith("pooler/"):
            np.testing.assert_array_equal(value, files.weights[name], err_msg=name)


def test_a_discriminator_directory_alone_is_the_encoder_and_its_head(tmp_path, capsys):
    files = formats.read_model("hf", os.path.join(DATA, "discriminator"))
    assert not electra_layout.has_generator(files.weights)
    assert electra_layout.is_electra(files.weights)
    assert "discriminator_predictions/dense_prediction/kernel" in files.weights
    pair = formats.read_model("hf", DATA)
    for name, value in files.weights.items():
        np.testing.assert_array_equal(value, pair.weights[name], err_msg=name)
    # bert_tf keeps model/encoder and model/discriminator_head; hf writes discriminator/ only
    formats.write_model("bert_tf", files, os.fspath(tmp_path / "native"))
    back = formats.read_model("bert_tf", os.fspath(tmp_path / "native"))
    assert not electra_layout.has_generator(back.weights)
    out = formats.write_model("hf", back, os.fspath(tmp_path / "hf"))
    assert sorted(os.listdir(out)) == ["discriminator"]
    ours = safetensors_io.load_file(os.path.join(out, "discriminator", "model.safetensors"))
    theirs = safetensors_io.load_file(os.path.join(DATA, "discriminator", "model.safetensors"))
    for name, value in theirs.items():
        np.testing.assert_array_equal(ours[name], value, err_msg=name)


def test_a_generator_directory_alone_is_refused():
    with pytest.raises(UserError, match="generator .ElectraForMaskedLM. alone"):
        formats.read_model("hf", os.path.join(DATA, "generator"))


def copy_pair(tmp_path):
    target = tmp_path / "pair"
    shutil.copytree(DATA, target)
    return target


def test_generator_embeddings_that_differ_are_refused(tmp_path):
    pair = copy_pair(tmp_path)
    weights = pair / "generator" / "model.safetensors"
    tensors = safetensors_io.load_file(os.fspath(weights))
    tensors["electra.embeddings.LayerNorm.bias"] += 0.5
    safetensors_io.save_file(tensors, os.fspath(weights), metadata={"format": "pt"})
    with pytest.raises(UserError, match=r"layer_norm/beta differs .* \(max \|diff\| 0.5"):
        formats.read_model("hf", os.fspath(pair))


def test_a_generator_off_electra_s_size_rule_is_refused(tmp_path):
    pair = copy_pair(tmp_path)
    config_file = pair / "generator" / "config.json"
    config = json.loads(config_file.read_text())
    config["intermediate_size"] = 48
    config_file.write_text(json.dumps(config))
    with pytest.raises(UserError, match="generator's intermediate_size is 48 where .* needs 32"):
        formats.read_model("hf", os.fspath(pair))


def test_a_generator_width_its_heads_do_not_divide_is_refused_naming_the_folder(tmp_path):
    pair = copy_pair(tmp_path)
    config_file = pair / "generator" / "config.json"
    config = json.loads(config_file.read_text())
    config["hidden_size"] = 200  # 3 heads of 64 do not divide it
    config_file.write_text(json.dumps(config))
    with pytest.raises(UserError, match=r"generator gives a generator hidden size 200, not "
                                        r"divisible by its 3 heads \(64 units each\)$"):
        formats.read_model("hf", os.fspath(pair))


def test_name_tables_cover_the_canonical_layout(loaded):
    files, model, _ = loaded
    names = set(hf_electra.network_table(2, "discriminator")) | set(
        hf_electra.network_table(2, "generator"))
    shapes = electra_layout.electra_shapes(files.config, GENERATOR_WIDTH)
    layout = set(shapes)
    assert layout - names == {"pooler/kernel", "pooler/bias", "generator/pooler/kernel",
                              "generator/pooler/bias"}
    assert names <= layout
    weights = electra_weight_map(model)
    assert list(shapes) == list(weights)  # the same names and order, and shapes
    assert all(shapes[n] == weights[n].shape for n in shapes)


def test_a_bert_model_with_a_projection_is_not_written_as_bert(loaded, tmp_path):
    files = loaded[0]
    encoder_only = dataclasses.replace(files, weights={
        n: v for n, v in files.weights.items() if not electra_layout.is_electra([n])})
    for fmt in ("hf", "google"):
        with pytest.raises(UserError, match="embedding_size 16 != hidden_size 32, which BERT's"):
            formats.write_model(fmt, encoder_only, os.fspath(tmp_path / fmt))


def test_a_live_model_takes_the_pair_to_continue_pretraining(loaded):
    files, _, golden = loaded
    model = native_electra.build_model(files.config, GENERATOR_WIDTH, seed=9)
    assert native_electra.load_into(model, files) == (
        "pooler/kernel", "pooler/bias", "generator/pooler/kernel", "generator/pooler/bias")
    inputs = {"input_ids": golden["input_ids"], "input_mask": golden["attention_mask"],
              "segment_ids": golden["token_type_ids"]}
    real = golden["attention_mask"].astype(bool)
    disc = model.discriminator_logits(inputs).numpy()
    np.testing.assert_allclose(disc[real], golden["disc_logits"][real], atol=TOLERANCE)
    wider = native_electra.build_model(files.config, 16)
    with pytest.raises(UserError, match="generator is 8 wide but --generator_hidden_fraction "
                                        r"gives 16 \(use --generator_hidden_fraction=0.25\)"):
        native_electra.load_into(wider, files)
    alone = formats.read_model("hf", os.path.join(DATA, "discriminator"))
    with pytest.raises(UserError, match="holds no ELECTRA generator"):
        native_electra.load_into(model, alone)
    # --init_discriminator_only: transformers' discriminator alone gives its own logits; the
    # generator stays as built. A checkpoint without a whole encoder is refused in one line.
    fresh = native_electra.build_model(files.config, GENERATOR_WIDTH, seed=9)
    own = [n for n in electra_weight_map(fresh) if n.startswith("generator")]
    before = get_weights({n: electra_weight_map(fresh)[n] for n in own})
    left = native_electra.load_into(fresh, alone, discriminator_only=True)
    assert set(own) <= set(left)
    disc = fresh.discriminator_logits(inputs).numpy()
    np.testing.assert_allclose(disc[real], golden["disc_logits"][real], atol=TOLERANCE)
    after = get_weights({n: electra_weight_map(fresh)[n] for n in own})
    assert all(np.array_equal(before[n], after[n]) for n in own), "the generator moved"
    partial = dataclasses.replace(alone, weights={
        n: v for n, v in alone.weights.items() if not n.startswith("layer_0/")})
    with pytest.raises(UserError, match="not an encoder of this config for "
                                        "--init_discriminator_only: 16 encoder weight"):
        native_electra.load_into(fresh, partial, discriminator_only=True)
