"""Tests of the long benchmarks' ledger (`benchmarks/pretraining_budget/budget_cache.py`) and
the budget benchmark's arm keys (`budget_keys.py`): finished arms kept in the repository, so
that a benchmark of several hours can span sessions on different machines.

- an arm's key changes with the machine and with its files' contents, not with their paths;
  the earlier version's keys (paths, no machine) reproduce the ledger's file names and still
  find their entries, on the machine they ran on;
- a second result under one key is reported, not written;

- an arm's result written to the ledger reads back with where it was kept, and is never
  overwritten;
- `bench_pretraining_budget.run_arm` reports an arm the ledger holds without running
  anything (its cache is empty and no data exists), and a smoke run ignores the ledger;
- the report names each arm's machine, marks the arms that came from the ledger, and says
  when the arms' budgets were spent on different machines.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import pytest

BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "benchmarks", "pretraining_budget")
sys.path.insert(0, BENCHMARKS)
import bench_pretraining_budget  # noqa: E402
import budget_arms  # noqa: E402
import budget_cache  # noqa: E402
import budget_keys  # noqa: E402
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
                              curve=(10, 16), cache_dir=os.fspath(tmp_path / "cache"),
                              readout="pooler", scorecard_only=False, folders={})


def test_run_arm_reports_a_ledger_arm_without_running_it(ledger, tmp_path, capsys, monkeypatch):
    args = bench_args(tmp_path)
    cache = os.fspath(tmp_path / "cache")
    arm = next(a for a in budget_arms.ARMS if a.name == "c")
    config, vocab = os.fspath(tmp_path / "config.json"), os.fspath(tmp_path / "vocab.txt")
    arm_dir = budget_keys.arm_folder(arm, args, cache, config, vocab, 128)
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


def test_an_arm_named_by_folder_is_read_from_the_ledger_under_that_folder(ledger, tmp_path,
                                                                          capsys):
    """--arm_folders=c=c-0000beef: another machine's c, reported from its ledger entry; a
    folder the ledger does not hold under this protocol stops with one line, never pretrains."""
    args = bench_args(tmp_path)
    cache = os.fspath(tmp_path / "cache")
    config, vocab = os.fspath(tmp_path / "config.json"), os.fspath(tmp_path / "vocab.txt")
    elsewhere = os.path.join(cache, "arms", "c-0000beef")
    out, stage = bench_pretraining_budget.scorecard_key(elsewhere, args)
    finished = {"name": "c", "title": _arm("c").title, "dir": elsewhere, "row": glue_row(43.0),
                "pretrain": marker(XEON, steps=10), "scorecard": marker(XEON)}
    budget_cache.to_ledger(bench_pretraining_budget.LEDGER, elsewhere,
                           f"{os.path.basename(out)}.{stage}", finished)
    args.folders = {"c": "c-0000beef"}
    got = bench_pretraining_budget.run_arm(_arm("c"), args, cache, config, vocab, "", "")
    assert got["row"]["glue_score"]["mean"] == 43.0
    assert "c-0000beef" in got["ledger"]
    args.folders = {"c": "c-0000dead"}
    with pytest.raises(SystemExit, match="arm c: folder c-0000dead has no scorecard"):
        bench_pretraining_budget.run_arm(_arm("c"), args, cache, config, vocab, "", "")
    assert not os.path.exists(os.path.join(cache, "arms", "c-0000dead"))


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


def _arm(name):
    return next(a for a in budget_arms.ARMS if a.name == name)


def test_an_arms_key_is_its_machine_and_file_contents_not_their_paths(tmp_path, monkeypatch):
    args = bench_args(tmp_path)
    one, two = tmp_path / "one", tmp_path / "two"
    for root in (one, two):
        (root / "corpus").mkdir(parents=True)
        (root / "corpus" / "train.txt").write_text("the same articles\n")
        (root / "config.json").write_text('{"hidden_size": 128}')
        (root / "vocab.txt").write_text("[PAD]\n[UNK]\nthe\n")
    monkeypatch.setattr(budget_cache, "this_machine", lambda: EPYC)

    def name(arm, root):
        return os.path.basename(budget_keys.arm_folder(
            _arm(arm), args, os.fspath(root), os.fspath(root / "config.json"),
            os.fspath(root / "vocab.txt"), 128))

    for arm in ("a", "c", "d-tuned"):  # other paths, the same bytes: the same arm
        assert name(arm, one) == name(arm, two)
    before = {arm: name(arm, one) for arm in ("a", "c", "d")}
    (two / "vocab.txt").write_text("[PAD]\n[UNK]\nthe\nof\n")  # a vocabulary of other bytes
    assert all(name(arm, two) != before[arm] for arm in before)
    (two / "vocab.txt").write_text("[PAD]\n[UNK]\nthe\n")
    (two / "corpus" / "train.txt").write_text("other articles\n")  # random weights read none
    assert name("a", two) == before["a"] and name("c", two) != before["c"]
    # Another CPU: the timed arms are other arms, random weights are the same.
    monkeypatch.setattr(budget_cache, "this_machine", lambda: XEON)
    assert name("a", one) == before["a"]
    assert name("c", one) != before["c"] and name("d", one) != before["d"]
    assert name("d", one) != name("d-tuned", one)


def test_the_earlier_versions_keys_still_find_their_ledger_entries(ledger, tmp_path, monkeypatch):
    """The earlier keys hashed paths and left out the machine: an entry under one counts on
    the machine its pretraining ran on (any machine for random weights), and entries
    migrated with a machine suffix are found too; arms that version lacked have no key."""
    args = bench_args(tmp_path)
    cache = "/root/.cache/bert_tf/bench_pretraining_budget"
    config = f"{cache}/model/bert_config_b8b5a3a3.json"
    vocab = f"{cache}/vocab/vocab.txt"
    old = {name: budget_keys.legacy_arm_folder(_arm(name), args, cache, config, vocab, 128)
           for name in ("a", "c")}
    assert budget_keys.legacy_arm_folder(_arm("d-tuned"), args, cache, config, vocab, 128) == ""
    downstream = "scorecard-x.scorecard_y"
    budget_cache.to_ledger("bench", old["a"], downstream, {"name": "a", "row": glue_row(45.0),
                                                           "scorecard": marker(EPYC)})
    migrated = ledger / "bench" / f"{os.path.basename(old['c'])}.{downstream}.m1234abcd.json"
    budget_cache.write_json(os.fspath(migrated), {"name": "c", "row": glue_row(44.0),
                                                  "pretrain": marker(XEON, steps=10)})
    kept = budget_cache.from_legacy_ledger("bench", old["a"], downstream, None)
    assert kept["row"]["glue_score"]["mean"] == 45.0
    kept = budget_cache.from_legacy_ledger("bench", old["c"], downstream, XEON)
    assert kept["ledger"] == os.path.relpath(migrated, budget_cache.REPO)
    assert budget_cache.from_legacy_ledger("bench", old["c"], downstream, EPYC) is None


def test_the_legacy_keys_reproduce_the_ledgers_file_names():
    """Arms a and b as the earlier version keyed them (its default cache and BERT-Tiny at
    16,384 pieces, whose config digest is in the name): the names the ledger holds."""
    args = argparse.Namespace(minutes=30.0, probe_minutes=1.0)
    cache = "/root/.cache/bert_tf/bench_pretraining_budget"
    config = dict(budget_cache.read_json(os.path.join(
        budget_cache.REPO, "configs", "bert_config_tiny.json")), vocab_size=16384)
    path = f"{cache}/model/bert_config_{budget_cache.digest(config)}.json"
    names = {n: os.path.basename(budget_keys.legacy_arm_folder(
        _arm(n), args, cache, path, f"{cache}/vocab/vocab.txt", 128)) for n in ("a", "b")}
    assert names == {"a": "a-a14d22d4", "b": "b-72fffe96"}
    kept = os.listdir(os.path.join(budget_cache.LEDGER_DIR, "pretraining_budget"))
    assert any(k.startswith("a-a14d22d4.") for k in kept)
    assert any(k.startswith("b-72fffe96.") for k in kept)


def test_a_second_result_under_one_key_is_reported_not_written(ledger, capsys):
    budget_cache.to_ledger("bench", "/c/arms/c-1", "s.t", {"name": "c", "row": glue_row(45.0)})
    budget_cache.to_ledger("bench", "/c/arms/c-1", "s.t", {"name": "c", "row": glue_row(45.0)})
    assert "WARNING" not in capsys.readouterr().out
    budget_cache.to_ledger("bench", "/c/arms/c-1", "s.t", {"name": "c", "row": glue_row(40.0)})
    assert "holds other scores under this arm's key" in capsys.readouterr().out
    assert budget_cache.read_json(os.fspath(ledger / "bench" / "c-1.s.t.json"))["row"] == \
        glue_row(45.0)


def test_the_scorecards_key_takes_the_readout_only_off_its_default(tmp_path):
    args = bench_args(tmp_path)
    out, stage = bench_pretraining_budget.scorecard_key("/arms/c-1", args)
    earlier = budget_cache.digest(dict(tasks="sst2", lr=3e-4, epochs=3.0,
                                       max_train_examples=8000))
    assert (out, stage) == (f"/arms/c-1/scorecard-{earlier}",
                            f"scorecard_{budget_cache.digest('1,2')}")
    args.readout = "mean"
    assert bench_pretraining_budget.scorecard_key("/arms/c-1", args)[0] != out


def test_an_arm_pretrained_under_the_earlier_key_is_rescored_on_its_machine(
        ledger, tmp_path, monkeypatch):
    args = bench_args(tmp_path)
    cache = os.fspath(tmp_path / "cache")
    config, vocab = os.fspath(tmp_path / "config.json"), os.fspath(tmp_path / "vocab.txt")
    legacy = budget_keys.legacy_arm_folder(_arm("c"), args, cache, config, vocab, 128)
    budget_cache.finish(legacy, "pretrain", {"steps": 10})  # its provenance: this machine
    here = budget_cache.machine_name(budget_cache.done(legacy, "pretrain"))
    used = []

    def stop(arm, arm_dir, *_):
        used.append(arm_dir)
        raise RuntimeError("stop")

    monkeypatch.setattr(bench_pretraining_budget, "pretrain", stop)
    for machine_line in (here, XEON):
        monkeypatch.setattr(budget_cache, "this_machine", lambda m=machine_line: m)
        with pytest.raises(RuntimeError, match="stop"):
            bench_pretraining_budget.run_arm(_arm("c"), args, cache, config, vocab, "", "")
    assert used[0] == legacy, "the cached checkpoint of this machine is scored"
    assert used[1] == budget_keys.arm_folder(_arm("c"), args, cache, config, vocab, 128)


def test_electra_and_the_long_arms_have_keys_of_their_own_and_c_keeps_its_key(tmp_path,
                                                                              monkeypatch):
    """f, the 120-minute arms, the modern arms g and h and f-mlm are other arms than c; the
    fields added later (scale, snapshots, recipe, architecture, mlm_first) enter a key only
    when set, so c's key is what it was."""
    import dataclasses

    args = bench_args(tmp_path)
    root = tmp_path / "one"
    (root / "corpus").mkdir(parents=True)
    (root / "corpus" / "train.txt").write_text("the same articles\n")
    (root / "config.json").write_text('{"hidden_size": 128}')
    (root / "vocab.txt").write_text("[PAD]\n[UNK]\nthe\n")
    monkeypatch.setattr(budget_cache, "this_machine", lambda: EPYC)
    names = {arm: os.path.basename(budget_keys.arm_folder(
        _arm(arm), args, os.fspath(root), os.fspath(root / "config.json"),
        os.fspath(root / "vocab.txt"), 128))
        for arm in ("c", "f", "c120", "f120", "g", "h", "f-mlm")}
    assert len({n.split("-")[-1] for n in names.values()}) == 7, names
    c = _arm("c")
    before = {k: v for k, v in dataclasses.asdict(c).items()  # the Arm of the earlier version
              if k not in ("scale", "snapshots", "recipe", "architecture", "mlm_first")}
    assert budget_keys.arm_fields(c) == before
    assert budget_keys.arm_fields(_arm("c120"))["snapshots"] == (0.25, 0.5)
    # A snapshot's ledger entry is named by its own folder, beside its run's.
    snap = bench_pretraining_budget.budget_curves.snapshot_dir(f"/x/arms/{names['c120']}", 30.0)
    assert os.path.basename(budget_cache.ledger_file("pretraining_budget", snap, "s.t")) == \
        f"{names['c120']}@30min.s.t.json"


def test_the_modern_arms_train_bert_tinys_parameters_on_packed_documents(tmp_path):
    """g's and h's config is the shared one with ModernBERT's block, its GeGLU feed-forward
    sized so that the model keeps BERT's parameters (within the dropped biases, pooler and
    segment table); their records are the packed feature set, under keys of their own."""
    import numpy as np

    from bert_tf.interop.model_files import expected_shapes
    from bert_tf.modeling import modern_config
    from bert_tf.modeling.config import BertConfig

    shared = os.path.join(budget_cache.REPO, "configs", "bert_config_tiny.json")
    path = budget_arms.modern_config_of(shared, os.fspath(tmp_path))
    bert, modern = BertConfig.from_json_file(shared), BertConfig.from_json_file(path)
    assert modern_config.is_modern(modern) and modern.intermediate_size == 341  # 2/3 of 512
    assert (modern.hidden_size, modern.num_hidden_layers, modern.vocab_size) == (
        bert.hidden_size, bert.num_hidden_layers, bert.vocab_size)

    def params(config, prefix=""):
        return sum(int(np.prod(s)) for n, s in expected_shapes(config, use_nsp=False).items()
                   if n.startswith(prefix) and not n.startswith("pooler/"))

    # The blocks within 1 % (196,736 + 196,608 against 2 x 198,272), the whole model within
    # 2 %: rotary positions drop the 512 x 128 position table.
    assert abs(params(modern, "layer_") / params(bert, "layer_") - 1) < 0.01
    assert abs(params(modern) / params(bert) - 1) < 0.02
    assert budget_arms.modern_config_of(shared, os.fspath(tmp_path)) == path
    with open(path) as f, open(os.path.join(budget_cache.REPO, "configs",
                                            "modernbert_tiny.json")) as g:
        assert json.load(f) == json.load(g)  # the checked-in shape is the arms' model
    data = bench_pretraining_budget.budget_data
    assert data.RecordSpec("train", False, 128, 51, 0.4).key == "train_mlm_s128_p51_m0.4_d1_r12345"
    assert data.RecordSpec("train", False, 128, 51, 0.4, packed=True).key == \
        "train_packed_s128_p51_m0.4_d1_r12345"
    assert {_arm(a).records for a in ("g", "h")} == {"packed"}
