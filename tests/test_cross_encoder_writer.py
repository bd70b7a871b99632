"""Tests of bert_tf.export.cross_encoder_writer: a run_rerank directory written as the
transformers sequence-classification folder that sentence-transformers' CrossEncoder scored
for tests/data/cross_encoder_tiny/golden.json (tensors, config and tokenizer files the same
again), through convert_checkpoint too; other directories are refused in one line."""

import json
import os
import pathlib
import shutil

import numpy as np
import pytest
from _pretraining_helpers import error_lines

from bert_tf.core.errors import UserError
from bert_tf.export import cross_encoder_writer
from bert_tf.interop import safetensors_io

DATA = pathlib.Path(__file__).resolve().parent / "data" / "cross_encoder_tiny"
FILES = ["config.json", "model.safetensors", "special_tokens_map.json", "tokenizer.json",
         "tokenizer_config.json", "vocab.txt"]


def _same_folder(written: pathlib.Path) -> None:
    assert sorted(os.listdir(written)) == FILES
    want = safetensors_io.load_file(str(DATA / "hf" / "model.safetensors"))
    got = safetensors_io.load_file(str(written / "model.safetensors"))
    assert sorted(got) == sorted(want)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    for name in FILES[2:] + ["config.json"]:
        assert (written / name).read_bytes() == (DATA / "hf" / name).read_bytes(), name


def test_the_folder_is_what_cross_encoder_scored(tmp_path):
    out = tmp_path / "ce"
    assert cross_encoder_writer.write_cross_encoder(str(DATA / "run"), str(out)) == str(out)
    _same_folder(out)
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["BertForSequenceClassification"]
    assert config["id2label"] == {"0": "LABEL_0"}  # one label
    assert config["sentence_transformers"] == {
        "activation_fn": "torch.nn.modules.activation.Sigmoid"}
    assert json.loads((out / "tokenizer_config.json").read_text())["model_max_length"] == 24
    tensors = safetensors_io.load_file(str(out / "model.safetensors"))
    assert tensors["classifier.weight"].shape == (1, 32)
    assert tensors["classifier.bias"].shape == (1,)
    assert "bert.pooler.dense.weight" in tensors and not any(n.startswith("cls.")
                                                             for n in tensors)
    assert not any(name.endswith(".tmp") or ".tmp-" in name for name in os.listdir(tmp_path))


def test_convert_checkpoint_writes_it(cli, tmp_path):
    out = tmp_path / "ce"
    proc = cli.run("bert_tf.convert_checkpoint", [
        "--from_format=bert_tf", "--to_format=cross_encoder", f"--input={DATA / 'run'}",
        f"--output={out}"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"wrote cross_encoder folder to {out}" in proc.stdout
    _same_folder(out)
    proc = cli.run("bert_tf.convert_checkpoint", [
        "--from_format=hf", "--to_format=cross_encoder", f"--input={DATA / 'hf'}",
        f"--output={tmp_path / 'x'}"])
    assert proc.returncode == 2
    assert error_lines(proc.stderr) == [
        "error: --to_format=cross_encoder converts a run_rerank output directory: give "
        "--from_format=bert_tf"]


def test_refusals(tmp_path):
    classifier = tmp_path / "classifier"
    shutil.copytree(DATA / "run", classifier)
    info = json.loads((classifier / "finetune_task.json").read_text())
    del info["reranker"]
    (classifier / "finetune_task.json").write_text(json.dumps(info))
    with pytest.raises(UserError, match=r"classifier: not a run_rerank output directory \(its "
                                        r"finetune_task.json says no \"reranker\"\)"):
        cross_encoder_writer.write_cross_encoder(str(classifier), str(tmp_path / "a"))
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("x")
    with pytest.raises(UserError, match="taken"):
        cross_encoder_writer.write_cross_encoder(str(DATA / "run"), str(tmp_path / "taken"))
    with pytest.raises(UserError, match="--do_lower_case=false: .* was trained with "
                                        "do_lower_case=true"):
        cross_encoder_writer.convert(str(DATA / "run"), str(tmp_path / "b"), False)
