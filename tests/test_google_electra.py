"""Tests for bert_tf.interop.google_electra: google-research/electra's TF1 checkpoints.

The names are checked against tests/data/google_electra/variables.tsv, the variables that
google-research/electra's own pretraining model creates (its README says how it was made).
"""

import dataclasses
import os

import numpy as np
import pytest
import tensorflow as tf
from _pretraining_helpers import REPO_ROOT

from bert_tf.core.errors import UserError
from bert_tf.interop import electra_layout, formats, google_electra
from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.electra import ElectraPretrainingModel, electra_weight_map
from bert_tf.modeling.weight_map import get_weights

VARIABLES = REPO_ROOT / "tests" / "data" / "google_electra" / "variables.tsv"
# ELECTRA-Small with 2 layers: the config the reference list was made with.
SMALL_2 = BertConfig(vocab_size=30522, hidden_size=256, num_hidden_layers=2,
                     num_attention_heads=4, intermediate_size=1024, embedding_size=128,
                     type_vocab_size=2)
# A tiny one for the round trips: heads = hidden / 64, as ELECTRA's configs (and the
# reader of a checkpoint without bert_config.json) have.
TINY = BertConfig(vocab_size=64, hidden_size=64, num_hidden_layers=2, num_attention_heads=1,
                  intermediate_size=96, max_position_embeddings=24, embedding_size=32,
                  type_vocab_size=2)
POOLERS = {"pooler/kernel", "pooler/bias", "generator/pooler/kernel", "generator/pooler/bias"}


def reference():
    rows = [line.split("\t") for line in VARIABLES.read_text().splitlines()]
    return {name: [int(d) for d in shape.strip("[]").split(", ")] for name, shape in rows}


def test_names_and_shapes_are_google_research_electra_s():
    table = google_electra.electra_name_table(SMALL_2.num_hidden_layers)
    shapes = electra_layout.electra_shapes(SMALL_2, 64)  # the generator: 256 / 4
    ours = {table[n]: list(s) for n, s in shapes.items() if n not in POOLERS}
    assert ours == reference()
    assert set(table) == set(shapes) - POOLERS


@pytest.fixture(scope="module")
def run_checkpoint(tmp_path_factory):
    """A bert_tf ELECTRA checkpoint as a run saves it (model/... of the Keras model)."""
    root = tmp_path_factory.mktemp("electra_run")
    model = ElectraPretrainingModel(TINY, 0.25, sampling_seed=3)
    for i, variable in enumerate(model.weights):  # every weight distinct, so a swap shows
        variable.assign(np.random.default_rng(i).normal(0, 0.3, variable.shape) + i)
    tf.train.Checkpoint(model=model).write(os.fspath(root / "ckpt-5"))
    with open(root / "checkpoint", "w") as f:
        f.write('model_checkpoint_path: "ckpt-5"\nall_model_checkpoint_paths: "ckpt-5"\n')
    TINY.to_json_file(os.fspath(root / "bert_config.json"))
    return root, get_weights(electra_weight_map(model))


def test_bert_tf_to_google_to_bert_tf_keeps_every_weight(run_checkpoint, tmp_path):
    root, weights = run_checkpoint
    files = formats.read_model("bert_tf", os.fspath(root))
    assert set(files.weights) == set(weights)
    prefix = formats.write_model("google", files, os.fspath(tmp_path / "google"))
    assert formats.detect_format(os.fspath(tmp_path / "google")) == "google"
    names = set(tf.train.load_checkpoint(prefix).get_variable_to_shape_map())
    assert names == {google_electra.electra_name_table(2)[n] for n in weights if n not in POOLERS}
    google = formats.read_model("google", os.fspath(tmp_path / "google"))
    assert google.config == TINY
    assert set(google.weights) == set(weights) - POOLERS
    for name, value in google.weights.items():
        np.testing.assert_array_equal(value, weights[name], err_msg=name)
    formats.write_model("bert_tf", google, os.fspath(tmp_path / "back"))
    back = formats.read_model("bert_tf", os.fspath(tmp_path / "back"))
    for name in set(weights) - POOLERS:
        np.testing.assert_array_equal(back.weights[name], weights[name], err_msg=name)


def test_without_bert_config_the_config_comes_from_the_shapes(run_checkpoint, tmp_path,
                                                              capsys):
    files = formats.read_model("bert_tf", os.fspath(run_checkpoint[0]))
    prefix = formats.write_model("google", files, os.fspath(tmp_path / "google"))
    os.remove(tmp_path / "google" / "bert_config.json")  # as ELECTRA's releases ship
    again = formats.read_model("google", prefix)
    assert again.config == TINY
    assert formats.read_config("google", prefix) == TINY  # what --init_checkpoint reads
    assert "read the config from its shapes (hidden 64, 2 layers, 1 heads" in \
        capsys.readouterr().err


def test_the_discriminator_alone_round_trips(run_checkpoint, tmp_path):
    files = formats.read_model("bert_tf", os.fspath(run_checkpoint[0]))
    disc = {n: v for n, v in files.weights.items() if not electra_layout.has_generator([n])}
    alone = dataclasses.replace(files, weights=disc)
    formats.write_model("google", alone, os.fspath(tmp_path / "google"))
    back = formats.read_model("google", os.fspath(tmp_path / "google"))
    assert not electra_layout.has_generator(back.weights)
    assert set(back.weights) == set(disc) - POOLERS


def test_a_checkpoint_deeper_than_its_config_is_refused(run_checkpoint, tmp_path):
    files = formats.read_model("bert_tf", os.fspath(run_checkpoint[0]))
    formats.write_model("google", files, os.fspath(tmp_path / "google"))
    shallow = dataclasses.replace(TINY, num_hidden_layers=1)
    shallow.to_json_file(os.fspath(tmp_path / "one_layer.json"))
    with pytest.raises(UserError, match="has encoder layers .*layer_1.* num_hidden_layers=1"):
        formats.read_model("google", os.fspath(tmp_path / "google"),
                           os.fspath(tmp_path / "one_layer.json"))
