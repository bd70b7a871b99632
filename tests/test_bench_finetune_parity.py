"""Tests of the fine-tuning parity benchmark's bookkeeping
(`benchmarks/finetuning/bench_finetune_parity.py`): a run's key is what decides its figures
(the contents of the model and the data, not their paths), a finished run is read back from
the ledger without running anything, and the gap is paired over seeds with its standard
error, computed by hand here."""

from __future__ import annotations

import argparse
import os
import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, os.fspath(REPO / "benchmarks" / "finetuning"))
import bench_finetune_parity as parity  # noqa: E402

RECIPE = {"learning_rate": 3e-4, "epochs": 3}


def _tree(root: pathlib.Path, model_bytes: bytes) -> tuple:
    (root / "model").mkdir(parents=True)
    (root / "model" / "config.json").write_text('{"hidden_size": 8}')
    (root / "model" / "model.safetensors").write_bytes(model_bytes)
    (root / "data" / "sst2").mkdir(parents=True)
    (root / "data" / "sst2" / "train.tsv").write_text("sentence\tlabel\ngood\t1\n")
    return root / "model", root / "data"


def test_a_runs_key_is_the_contents_not_the_paths(tmp_path):
    one, data_one = _tree(tmp_path / "one", b"weights")
    two, data_two = _tree(tmp_path / "two", b"weights")
    other, _ = _tree(tmp_path / "three", b"other weights")

    def name(model, data, **kw):
        args = dict(system="bert_tf", task="sst2", seed=1, recipe=RECIPE)
        args.update(kw)
        return parity.run_dir(tmp_path / "cache", model_digest=parity.folder_digest(model),
                              data_dir=data, **args).name

    assert name(one, data_one) == name(two, data_two)
    assert name(one, data_one).startswith("sst2-bert_tf-seed1-")
    assert name(other, data_one) != name(one, data_one)
    assert name(one, data_one, seed=2) != name(one, data_one)
    assert name(one, data_one, recipe=dict(RECIPE, epochs=4)) != name(one, data_one)
    assert name(one, data_one, system="transformers") != name(one, data_one)


def test_a_finished_run_is_read_from_the_ledger_without_running(tmp_path, monkeypatch, capsys):
    model, data = _tree(tmp_path, b"weights")
    monkeypatch.setattr(parity.budget_cache, "LEDGER_DIR", os.fspath(tmp_path / "ledger"))
    args = argparse.Namespace(cache_dir=tmp_path / "cache", data_dir=data)
    digest = parity.folder_digest(model)
    folder = parity.run_dir(args.cache_dir, "bert_tf", "sst2", 1, RECIPE, digest, data)
    parity.budget_cache.to_ledger(parity.LEDGER, os.fspath(folder), "run", {
        "row": [81.5], "provenance": {"date": "2026-12-02 17:00 UTC"}})

    def refuse(*a, **k):
        raise AssertionError("a finished run must not run again")

    monkeypatch.setattr(parity, "ours", refuse)
    assert parity.run_once("bert_tf", "sst2", 1, args, RECIPE, os.fspath(model), digest) == [81.5]
    assert "sst2 seed 1 bert_tf      finished on 2026-12-02 17:00 UTC" in capsys.readouterr().out
    assert not (args.cache_dir / "runs").exists()


def test_the_gap_is_paired_over_seeds_with_its_standard_error():
    row = parity.gap_row("sst2", "accuracy", [80.0, 82.0, 84.0], [81.0, 81.0, 82.0])
    # differences -1, +1, +2: mean 0.667, std (ddof 1) 1.528, standard error 0.882
    assert row == "| sst2 | accuracy | 82.00 ± 2.00 | 81.33 ± 0.58 | +0.67 ± 0.88 |"
