"""Tests of the long benchmarks' ledger (`benchmarks/pretraining_budget/budget_cache.py`):
finished arms kept in the repository, so that a benchmark of several hours can span sessions
on different machines.

- an arm's result written to the ledger reads back with where it was kept, and is never
  overwritten;
- `bench_pretraining_budget.run_arm` reports an arm the ledger holds without running
  anything (its cache is empty and no data exists), and a smoke run ignores the ledger;
- the report names each arm's machine, marks the arms that came from the ledger, and says
  when the arms' budgets were spent on different machines.
"""

from __future__ import annotations

import argparse
import os
import sys

import pytest

BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "benchmarks", "pretraining_budget")
sys.path.insert(0, BENCHMARKS)
import bench_pretraining_budget  # noqa: E402
import budget_cache  # noqa: E402
import budget_report  # noqa: E402

XEON = "Intel Xeon, 2 core(s), ISA AVX512-BF16/AMX"
EPYC = "AMD EPYC, 2 core(s), ISA AVX2"  # benchmarks/common/machine.py's lines, without "machine: "


def marker(machine: str, **values) -> dict:
    return dict(values, provenance={"date": "2026-11-27 16:00 UTC", "commit": "abc",
                                    "host": "h", "machine": f"machine: {machine}"})


def glue_row(mean: float) -> dict:
    score = {"mean": mean, "std": 1.0, "median": mean, "per_seed": {"1": mean - 1,
                                                                    "2": mean + 1}}
    return {"tasks": {"sst2": {"score": score}}, "glue_score": score}


@pytest.fixture
def ledger(tmp_path, monkeypatch):
    monkeypatch.setattr(budget_cache, "LEDGER_DIR", os.fspath(tmp_path / "ledger"))
    return tmp_path / "ledger"


def test_a_finished_arm_reads_back_and_is_written_once(ledger):
    result = {"name": "c", "row": glue_row(45.0), "ledger": "not kept"}
    budget_cache.to_ledger("bench", "/cache/arms/c-1234abcd", "scorecard-x.stage", result)
    path = ledger / "bench" / "c-1234abcd.scorecard-x.stage.json"
    assert path.exists()
    budget_cache.to_ledger("bench", "/cache/arms/c-1234abcd", "scorecard-x.stage",
                           dict(result, row=glue_row(99.0)))
    kept = budget_cache.from_ledger("bench", "/elsewhere/arms/c-1234abcd", "scorecard-x.stage")
    assert kept["row"]["glue_score"]["mean"] == 45.0
    assert kept["ledger"] == os.path.relpath(path, budget_cache.REPO)
    assert budget_cache.from_ledger("bench", "/cache/arms/c-1234abcd", "scorecard-y.stage") \
        is None


def bench_args(tmp_path, smoke=False) -> argparse.Namespace:
    return argparse.Namespace(tasks="sst2", finetune_learning_rate=3e-4, finetune_epochs=3.0,
                              max_train_examples=8000, seeds="1,2", smoke=smoke,
                              minutes=30.0, probe_minutes=1.0, pretrain_only=False,
                              curve=(10, 16), cache_dir=os.fspath(tmp_path / "cache"))


def test_run_arm_reports_a_ledger_arm_without_running_it(ledger, tmp_path, capsys, monkeypatch):
    args = bench_args(tmp_path)
    cache = os.fspath(tmp_path / "cache")
    arm = next(a for a in bench_pretraining_budget.ARMS if a.name == "c")
    config, vocab = os.fspath(tmp_path / "config.json"), os.fspath(tmp_path / "vocab.txt")
    arm_dir = bench_pretraining_budget.arm_folder(arm, args, cache, config, vocab)
    out, stage = bench_pretraining_budget.scorecard_key(arm_dir, args)
    finished = {"name": "c", "title": arm.title, "dir": arm_dir, "row": glue_row(44.0),
                "pretrain": marker(XEON, steps=10), "scorecard": marker(XEON)}
    budget_cache.to_ledger(bench_pretraining_budget.LEDGER, arm_dir,
                           f"{os.path.basename(out)}.{stage}", finished)

    got = bench_pretraining_budget.run_arm(arm, args, cache, config, vocab, "", "")
    assert got["row"] == finished["row"]
    assert got["ledger"].endswith(f"{os.path.basename(arm_dir)}.{os.path.basename(out)}.{stage}"
                                  ".json")
    assert f"finished on 2026-11-27 16:00 UTC ({XEON})" in capsys.readouterr().out
    assert not os.path.exists(arm_dir), "nothing may run for an arm the ledger holds"

    def refuse(*_):
        raise RuntimeError("pretraining started")

    monkeypatch.setattr(bench_pretraining_budget, "pretrain", refuse)
    with pytest.raises(RuntimeError, match="pretraining started"):  # smoke: never the ledger
        bench_pretraining_budget.run_arm(arm, bench_args(tmp_path, smoke=True), cache,
                                         config, vocab, "", "")


def test_report_names_machines_and_the_ledger_and_warns_when_they_differ():
    arms = [{"name": "a", "title": "random init", "row": glue_row(45.0),
             "scorecard": marker(EPYC)},
            {"name": "c", "title": "budget", "row": glue_row(44.0), "ledger": "benchmarks/x",
             "pretrain": marker(XEON, steps=10, examples=320, train_seconds=1800.0,
                                tokens_per_second=22.8), "scorecard": marker(XEON)}]
    settings = {"minutes": 30, "model": "L-2/H-128", "vocab_size": 16384, "corpus": "w",
                "finetune": "f", "seeds": "1,2", "max_train_examples": 8000,
                "tasks": ["sst2"]}
    text = budget_report.render(EPYC, settings, arms, budget_report.differences(
        {a["name"]: a["row"] for a in arms}))
    assert f"scorecard 2026-11-27 16:00 UTC, commit abc, h, {XEON} (from the ledger: " \
           "benchmarks/x)" in text
    assert "NOTE" not in text, "one pretraining machine: nothing to warn about"
    arms.append(dict(arms[1], name="b", pretrain=marker(EPYC, steps=10, examples=320,
                                                        train_seconds=1800.0,
                                                        tokens_per_second=22.8)))
    text = budget_report.render(EPYC, settings, arms, [])
    assert (f"NOTE: the pretraining arms ran on '{XEON}' and '{EPYC}': their budgets are "
            "minutes on different machines") in text
