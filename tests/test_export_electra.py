"""End to end: a tiny `--objective=electra` run's checkpoint through bert_tf.export (the
serving SavedModel and a keras-hub ElectraBackbone preset) and convert_checkpoint's formats,
and a run that continues from transformers' ELECTRA (bert_tf.interop.electra_warm_start).

The reference is the run's discriminator, restored from its checkpoint into a fresh
`ElectraPretrainingModel` (`model/encoder`, the layout of bert_tf.modeling.electra).
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from _pretraining_helpers import (
    REPO_ROOT,
    TINY_BERT,
    pretraining_flags,
    synthetic_examples,
    write_tfrecords,
    write_tiny_run_data,
)

from bert_tf.interop import electra_layout, formats
from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.electra import ElectraPretrainingModel, electra_weight_map
from bert_tf.modeling.weight_map import get_weights

TEXTS = ["w1 w2 w3 w4 w5", "w7 w8"]
FRACTION = 0.5  # a generator of width 16 (the tiny discriminator is 32 wide)


@pytest.fixture(scope="module")
def run(cli, tmp_path_factory):
    """(output_dir, vocab.txt, the run's restored ElectraPretrainingModel)."""
    root = write_tiny_run_data(tmp_path_factory.mktemp("electra_export"), 16, 8, 5,
                               embedding_size=16)
    out = root / "run"
    proc = cli.run("bert_tf.run_pretraining", pretraining_flags(
        root, out, objective="electra", num_train_steps=2, save_checkpoints_steps=2,
        generator_hidden_fraction=FRACTION))
    assert proc.returncode == 0, proc.stderr[-3000:]
    model = ElectraPretrainingModel(BertConfig.from_dict(TINY_BERT | {"embedding_size": 16}),
                                    FRACTION)
    tf.train.Checkpoint(model=model).read(tf.train.latest_checkpoint(out)).expect_partial()
    return out, root / "vocab.txt", model


def test_the_saved_model_serves_the_discriminator(cli, run, tmp_path):
    out, vocab, model = run
    export_dir = tmp_path / "sm" / "1"
    proc = cli.run("bert_tf.export", [f"--output_dir={out}", f"--vocab_file={vocab}",
                                      "--do_lower_case=true", f"--export_dir={export_dir}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "is an ELECTRA run's: its discriminator is exported, without a fill_mask" in \
        proc.stderr
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops)

    loaded = tf.saved_model.load(os.fspath(export_dir))
    assert sorted(loaded.signatures) == ["serve_ids", "serve_text_pair", "serving_default"]
    served = loaded.signatures["serving_default"](text_a=tf.constant(TEXTS))
    ids = served["input_ids"].numpy()
    assert ids[0].tolist() == [2, 6, 7, 8, 9, 10, 3]  # [CLS] w1 .. w5 [SEP]: the vocabulary's
    ours = model.encoder({"input_ids": ids, "input_mask": served["input_mask"].numpy(),
                          "segment_ids": served["segment_ids"].numpy()})
    real = served["input_mask"].numpy().astype(bool)
    np.testing.assert_allclose(served["sequence_output"].numpy()[real],
                               ours["sequence_output"].numpy()[real], atol=1e-5)
    by_ids = loaded.signatures["serve_ids"](
        input_word_ids=served["input_ids"], input_mask=served["input_mask"],
        input_type_ids=served["segment_ids"])
    np.testing.assert_allclose(by_ids["sequence_output"].numpy()[real],
                               ours["sequence_output"].numpy()[real], atol=1e-5)


# A fresh interpreter in which importing bert_tf raises, as where only keras-hub is installed.
_WITHOUT_BERT_TF = r"""
import importlib.abc, json, sys

class NoBertTf(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "bert_tf" or name.startswith("bert_tf."):
            raise ImportError(f"{name} imported: the preset must load with keras-hub alone")

sys.meta_path.insert(0, NoBertTf())
import keras_hub, numpy as np

preset, work = sys.argv[1], sys.argv[2]
inputs = np.load(f"{work}/inputs.npz")
backbone = keras_hub.models.ElectraBackbone.from_preset(preset)
outputs = backbone({"token_ids": inputs["ids"], "padding_mask": inputs["mask"],
                    "segment_ids": inputs["segments"]})
np.savez(f"{work}/outputs.npz", sequence=np.asarray(outputs["sequence_output"]),
         pooled=np.asarray(outputs["pooled_output"]))
tokenizer = keras_hub.models.ElectraTokenizer.from_preset(preset)
with open(f"{work}/ids.json", "w") as f:
    json.dump({"ids": np.asarray(tokenizer("W1 w2")).tolist(),
               "bert_tf_modules": sorted(m for m in sys.modules if m.startswith("bert_tf"))}, f)
"""


def test_the_keras_hub_preset_loads_with_keras_hub_alone(cli, run, tmp_path):
    out, vocab, model = run
    preset = tmp_path / "preset"
    proc = cli.run("bert_tf.export", [f"--output_dir={out}", f"--vocab_file={vocab}",
                                      "--do_lower_case=true", f"--export_dir={preset}",
                                      "--format=keras_hub"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "pooled_output (ElectraBackbone's pooled_dense) is an untrained" in proc.stderr
    rng = np.random.default_rng(4)
    ids = rng.integers(5, 128, (2, 9)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[1, 5:] = 0
    segments = (np.arange(9)[None] >= 4).astype(np.int32).repeat(2, 0)
    np.savez(tmp_path / "inputs.npz", ids=ids, mask=mask, segments=segments)
    result = subprocess.run(
        [sys.executable, "-c", _WITHOUT_BERT_TF, os.fspath(preset), os.fspath(tmp_path)],
        cwd=os.fspath(tmp_path), capture_output=True, text=True, timeout=600,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": ""})
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = json.loads((tmp_path / "ids.json").read_text())
    assert loaded["bert_tf_modules"] == [] and loaded["ids"] == [6, 7]  # lower-cased
    ours = model.encoder({"input_ids": ids, "input_mask": mask, "segment_ids": segments})
    theirs = np.load(tmp_path / "outputs.npz")
    real = mask.astype(bool)
    np.testing.assert_allclose(theirs["sequence"][real],
                               ours["sequence_output"].numpy()[real], atol=1e-5)
    # the pooled output is the (never trained) pooler's, as the docs warn
    np.testing.assert_allclose(theirs["pooled"], ours["pooled_output"].numpy(), atol=1e-5)


def test_convert_checkpoint_gives_both_networks_to_transformers(run, tmp_path):
    out, vocab, model = run
    written = formats.convert("bert_tf", "hf", os.fspath(out), os.fspath(tmp_path / "hf"),
                              vocab_file=os.fspath(vocab))
    for network, architecture in (("discriminator", "ElectraForPreTraining"),
                                  ("generator", "ElectraForMaskedLM")):
        with open(os.path.join(written, network, "config.json")) as f:
            config = json.load(f)
        assert (config["model_type"], config["architectures"]) == ("electra", [architecture])
        assert config["hidden_size"] == {"discriminator": 32, "generator": 16}[network]
        for name in ("model.safetensors", "vocab.txt", "tokenizer.json"):
            assert os.path.exists(os.path.join(written, network, name)), (network, name)
    back = formats.read_model("hf", written)
    weights = get_weights(electra_weight_map(model))
    assert electra_layout.generator_width(back.weights) == 16
    for name, value in back.weights.items():
        np.testing.assert_array_equal(value, weights[name], err_msg=name)
    assert set(weights) - set(back.weights) == {
        "pooler/kernel", "pooler/bias", "generator/pooler/kernel", "generator/pooler/bias"}


def test_pretraining_continues_from_transformers_electra_pair(cli, tmp_path):
    """--objective=electra --init_checkpoint=<discriminator/ + generator/>: the run starts
    from every weight of the pair (one step at a vanishing learning rate moves none by 1e-6),
    and its config is the discriminator's config.json."""
    pair = os.fspath(REPO_ROOT / "tests" / "data" / "electra_tiny")
    write_tfrecords(tmp_path / "train-0.tfrecord", synthetic_examples(
        8, seed=7, vocab=96, uneven_weights=False))
    out = tmp_path / "run"
    proc = cli.run("bert_tf.run_pretraining", pretraining_flags(
        tmp_path, out, objective="electra", num_train_steps=1, save_checkpoints_steps=1,
        learning_rate=1e-12, generator_hidden_fraction=0.25, init_checkpoint=pair,
        bert_config_file=None, eval_input_file=None))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "set 82 ELECTRA weights" in proc.stderr
    theirs = formats.read_model("hf", pair).weights
    ours = formats.read_model("bert_tf", os.fspath(out)).weights
    for name, value in theirs.items():
        np.testing.assert_allclose(ours[name], value, atol=1e-6, err_msg=name)
    wrong = cli.run("bert_tf.run_pretraining", pretraining_flags(
        tmp_path, tmp_path / "wrong", objective="electra", num_train_steps=1,
        generator_hidden_fraction=0.5, init_checkpoint=pair, bert_config_file=None,
        eval_input_file=None))
    assert wrong.returncode != 0
    assert "generator is 8 wide but --generator_hidden_fraction gives 16 (use " \
        "--generator_hidden_fraction=0.25)" in wrong.stderr
