"""Tests of the pretraining-budget benchmark's report
(`benchmarks/pretraining_budget/budget_report.py`): the
ablation table, c against each arm that puts one of its choices back, with hand-computed
differences; the per-arm table and machine notes are tested in test_budget_cache.py.
"""

from __future__ import annotations

import os
import sys

import pytest

BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "benchmarks", "pretraining_budget")
sys.path.insert(0, BENCHMARKS)
import budget_report  # noqa: E402

EPYC = "machine: AMD EPYC, 2 core(s), ISA AVX2"
XEON = "machine: Intel Xeon, 2 core(s), ISA AVX512-BF16/AMX"


def pretrained(name: str, machine: str, examples: int, mlm: float, per_seed=None) -> dict:
    arm = {"name": name, "title": f"{name} title",
           "pretrain": {"examples": examples, "provenance": {"machine": machine}},
           "mlm": {"masked_lm_accuracy": mlm}}
    if per_seed:
        values = list(per_seed.values())
        mean = sum(values) / len(values)
        std = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5
        arm["row"] = {"glue_score": {"mean": mean, "std": std, "per_seed": per_seed}}
    return arm


def test_each_ablation_arm_is_measured_against_c_on_the_same_machine():
    arms = [{"name": "a", "title": "random init"},
            pretrained("c", EPYC, 64_000, 0.2170, {"1": 45.0, "2": 47.0, "3": 46.0}),
            pretrained("c-mask15", EPYC, 96_000, 0.1478, {"1": 44.0, "2": 45.0, "3": 46.0}),
            pretrained("c-static", EPYC, 90_000, 0.1500),  # pretrained, not yet scored
            pretrained("c-nsp", XEON, 63_552, 0.1424, {"1": 45.5, "2": 45.5, "3": 45.5})]
    entries = {e["arm"]: e for e in budget_report.ablation(arms)}
    assert sorted(entries) == ["c-mask15", "c-nsp", "c-static"], "a and c are not ablations"
    mask15 = entries["c-mask15"]
    assert mask15["mlm_bought"] == pytest.approx(6.92)
    assert mask15["sequences"] == (64_000, 96_000)
    # c - c-mask15 per seed: 1, 2, 0 -> mean 1.0, SE = stdev / sqrt(3) = 1 / sqrt(3).
    assert mask15["glue_bought"] == pytest.approx(1.0)
    assert mask15["glue_se"] == pytest.approx(3 ** -0.5)
    assert mask15["same_machine"]
    assert "glue_bought" not in entries["c-static"]
    assert not entries["c-nsp"]["same_machine"]

    text = "\n".join(budget_report.render_ablation(budget_report.ablation(arms)))
    # t = 1.0 / 0.577 = 1.7 on 2 df: below 2 and below 4.30, so no measurable gain.
    assert "| c-mask15: c-mask15 title | 64,000 / 96,000 | +6.92 | +1.00 ± 0.58 | " \
           "no measurable gain (t = 1.7, 2 df) | yes |" in text
    assert "| c-static: c-static title | 64,000 / 90,000 | +6.70 | - | - | yes |" in text
    assert "| c-nsp: c-nsp title | 64,000 / 63,552 | +7.46 | +0.50 ± 0.58 | " \
           "no measurable gain (t = 0.9, 2 df) | NO: not comparable |" in text


def test_without_c_there_is_no_ablation_table():
    arms = [pretrained("c-mask15", EPYC, 96_000, 0.1478)]
    assert budget_report.ablation(arms) == []
    assert budget_report.render_ablation([]) == []


def test_a_difference_is_a_gain_or_loss_only_when_measurable():
    # The published c - a at BERT-Tiny: -0.94 ± 0.42 over 3 seeds, t = -2.24 on 2 df, whose
    # two-sided 5 % critical value is 4.303: no measurable loss.
    assert budget_report.verdict(-0.94, 0.42, 2) == "no measurable loss (t = -2.2, 2 df)"
    assert budget_report.verdict(+3.0, 0.5, 2) == "gain (t = 6.0, 2 df)"
    assert budget_report.verdict(-3.0, 0.5, 2) == "loss (t = -6.0, 2 df)"
    # Many seeds: the t-test's critical value falls below 2, and 2 SE still holds.
    assert budget_report.t_critical(40) == 1.96
    assert budget_report.verdict(1.9, 1.0, 40) == "no measurable gain (t = 1.9, 40 df)"
    assert budget_report.verdict(2.1, 1.0, 40) == "gain (t = 2.1, 40 df)"
    assert budget_report.t_critical(11) == 2.228  # between rows: the lower df's, larger value
    assert budget_report.verdict(0.0, 1.0, 2) == "no measurable difference (t = 0.0, 2 df)"
    assert budget_report.verdict(1.0, None, 0) == "one seed: no verdict"


def test_goals_and_tuned_peer_comparisons_carry_their_verdicts():
    seeds = lambda *v: {str(i): x for i, x in enumerate(v, 1)}  # noqa: E731
    arms = [pretrained("a", EPYC, 0, 0.0, seeds(45.0, 46.0, 44.5)),
            pretrained("c", EPYC, 1, 0.2, seeds(44.0, 45.2, 43.8)),
            pretrained("d", EPYC, 1, 0.1, seeds(44.0, 45.0, 44.0)),
            pretrained("d-tuned", EPYC, 1, 0.1, seeds(48.0, 49.1, 48.2))]
    rows = {a["name"]: a["row"] for a in arms}
    goal = next(g for g in budget_report.differences(rows) if g["goal"] == "c - a >= +5.0")
    # c - a per seed: -1.0, -0.8, -0.7: mean -0.833, sample std 0.153, SE 0.0882, t = -9.4.
    assert goal["diff"] == pytest.approx(-0.8333, abs=1e-4)
    assert goal["verdict"] == "loss (t = -9.4, 2 df)"
    compared = {c["comparison"]: c for c in budget_report.comparisons(rows)}
    assert sorted(compared) == ["c - d-tuned", "d-tuned - d"], "e and e-tuned did not run"
    # d-tuned - d per seed: 4.0, 4.1, 4.2: mean 4.1, SE 0.0577, t = 71.0.
    assert compared["d-tuned - d"]["diff"] == pytest.approx(4.1)
    assert compared["d-tuned - d"]["verdict"] == "gain (t = 71.0, 2 df)"


# The budget curve (budget_curves.py): GLUE against pretraining minutes from ledger entries.
import budget_curves  # noqa: E402


def scored(per_seed: dict, sst2: dict = None, stsb: dict = None) -> dict:
    """A scorecard row: GLUE and two tasks' scores over seeds (sample std)."""
    def stats(values):
        v = list(values.values())
        mean = sum(v) / len(v)
        return {"mean": mean, "per_seed": values,
                "std": (sum((x - mean) ** 2 for x in v) / (len(v) - 1)) ** 0.5}
    return {"glue_score": stats(per_seed),
            "tasks": {"sst2": {"score": stats(sst2 or per_seed)},
                      "stsb": {"score": stats(stsb or per_seed)}}}


def ledger_entries() -> list:
    """Hand-made ledger entries: a, c and f at 30 minutes, f120 with its two snapshots."""
    a = {"name": "a", "row": scored({"1": 40.0, "2": 41.0, "3": 42.0})}
    c = {"name": "c", "minutes": 30.0, "recipe": "", "pretrain": {"train_seconds": 1800.2},
         "row": scored({"1": 42.0, "2": 44.0, "3": 46.0})}  # c - a: 2, 3, 4
    f = {"name": "f", "minutes": 30.0, "recipe": "", "pretrain": {"train_seconds": 1799.8},
         "row": scored({"1": 44.0, "2": 45.0, "3": 46.0},  # f - a: 4, 4, 4
                       sst2={"1": 41.0, "2": 41.5, "3": 42.5},  # f - a: 1, 0.5, 0.5
                       stsb={"1": 50.0, "2": 52.0, "3": 51.0})}  # f - a: 10, 11, 9
    f120 = {"name": "f120", "minutes": 120.0, "recipe": "f",
            "pretrain": {"train_seconds": 7200.5},
            "row": scored({"1": 47.0, "2": 47.0, "3": 48.0}),  # - a: 7, 6, 6
            "snapshots": [
                {"minutes": 30.0, "train_seconds": 1802.0,
                 "row": scored({"1": 43.0, "2": 44.0, "3": 44.0})},  # - a: 3, 3, 2
                {"minutes": 60.0, "train_seconds": 3597.0,
                 "row": scored({"1": 45.0, "2": 46.0, "3": 46.0})}]}  # - a: 5, 5, 4
    return [a, c, f, f120]


def test_the_curve_table_has_a_row_per_recipe_and_minute_against_random():
    results = ledger_entries()
    points = budget_curves.curve_points(results)
    assert [(p["recipe"], p["arm"], p["minutes"], p["schedule"]) for p in points] == [
        ("c", "c", 30.0, "own"),
        ("f", "f120", 30.0, "long"), ("f", "f", 30.0, "own"),
        ("f", "f120", 60.0, "long"), ("f", "f120", 120.0, "own")]
    lines = budget_curves.render_curve(points, results[0]["row"])
    rows = [line for line in lines if line.startswith("| c ") or line.startswith("| f ")]
    # c - a = mean(2, 3, 4) = 3.00, SE = 1 / sqrt(3) = 0.58, t = 5.2 > 4.30: a gain.
    assert rows[0] == ("| c | c | 30 | 1800 | own | 44.00 (1.15) | +3.00 ± 0.58 | "
                       "gain (t = 5.2, 2 df) |")
    # f120 at 30: mean(3, 3, 2) = 2.67, SE = std(3, 3, 2) / sqrt(3) = 0.577 / 1.732 = 0.33.
    assert rows[1] == ("| f | f120 | 30 | 1802 | long | 43.67 (0.33) | +2.67 ± 0.33 | "
                       "gain (t = 8.0, 2 df) |")
    # f at 30: 4, 4, 4 - no spread, an infinite t.
    assert rows[2].startswith("| f | f | 30 | 1800 | own | 45.00 (0.58) | +4.00 ± 0.00 | gain")
    assert rows[4] == ("| f | f120 | 120 | 7200 | own | 47.33 (0.33) | +6.33 ± 0.33 | "
                       "gain (t = 19.0, 2 df) |")
    data = budget_curves.chart_data(points, results[0]["row"])
    assert data[3]["minutes"] == 60.0 and round(data[3]["minus_random"], 4) == 4.6667


def test_the_goals_are_computed_checks_worded_met_not_met_or_no_measurable_difference():
    results = ledger_entries()
    rows = {r["name"]: r["row"] for r in results}
    checks = {g["goal"]: g for g in budget_curves.goals(rows, budget_curves.curve_points(
        results))}
    assert checks["f - a >= +3.0"]["result"] == "met"  # +4.00, SE 0
    assert checks["f - max(d, e, tuned peers) >= +2.0 (best: -)"]["result"] == "arms missing"
    # SST-2: f - a = mean(1, 0.5, 0.5) = 0.67, SE = 0.289 / 1.732 = 0.167: t = 4.0 < 4.30.
    sst2 = checks["SST-2: f - a >= 2 SE"]
    assert round(sst2["diff"], 4) == 0.6667 and round(sst2["se"], 4) == 0.1667
    assert sst2["result"] == "no measurable difference"
    assert checks["STS-B: f - a >= 2 SE"]["result"] == "met"  # +10.00 ± 0.58
    # At 120 minutes f120 is the only point: +6.33 ± 0.33 >= +5.0.
    assert checks["at 120 min, max(c, f) - a >= +5.0 (best: f120)"]["result"] == "met"
    assert checks["floor: f > a"]["result"] == "met"
    # f - c: 2, 1, 0 -> +1.00 ± 0.58, t = 1.7: within the noise.
    assert checks["floor: f >= c"]["result"] == "no measurable difference"
    rows["f"] = scored({"1": 40.0, "2": 41.5, "3": 42.0})  # f - a: 0, 0.5, 0 -> t = 1.0
    rows["a"] = scored({"1": 44.0, "2": 45.0, "3": 46.5})  # now f - a: -4, -3.5, -4.5
    low = {g["goal"]: g["result"] for g in budget_curves.goals(rows, [])}
    assert low["f - a >= +3.0"] == "not met" and low["floor: f > a"] == "not met"
    assert low["at 120 min, max(c, f) - a >= +5.0 (best: -)"] == "arms missing"
    lines = budget_curves.render_goals(budget_curves.goals(rows, []))
    assert "| f - a >= +3.0 | -4.00 ± 0.29 | not met |" in lines
    # Two of the four peers: the max over them is reported, and the result says it is partial.
    rows["d"] = scored({"1": 30.0, "2": 31.0, "3": 31.5})  # f - d: 10, 10.5, 10.5
    rows["d-tuned"] = scored({"1": 39.0, "2": 39.0, "3": 39.0})  # f - d-tuned: 1, 2.5, 3
    peer = next(g for g in budget_curves.goals(rows, []) if g["goal"].startswith("f - max"))
    assert peer["goal"] == "f - max(d, e, tuned peers) >= +2.0 (best: d-tuned)"
    assert round(peer["diff"], 4) == 2.1667  # t = 2.17 / 0.60 = 3.6 < 4.30
    assert peer["result"] == ("no measurable difference against the peers run; not run: e, "
                              "e-tuned")


def test_the_modern_encoders_goals_compare_g_with_c_and_the_better_modern_arm_with_random():
    rows = {r["name"]: r["row"] for r in ledger_entries()}
    rows["g"] = scored({"1": 44.0, "2": 46.0, "3": 46.5})  # g - c: 2, 2, 0.5; g - a: 4, 5, 4.5
    rows["h"] = scored({"1": 43.0, "2": 44.0, "3": 45.0})  # the lower GLUE mean: not chosen
    checks = {g["goal"]: g for g in budget_curves.modern_goals(rows)}
    # g - c = mean(2, 2, 0.5) = 1.50, SE = std(2, 2, 0.5) / sqrt(3) = 0.866 / 1.732 = 0.50,
    # t = 3.0 < 4.30 (2 df): within the noise, though the mean reaches the threshold.
    gc = checks["g - c >= +1.5"]
    assert round(gc["diff"], 4) == 1.5 and round(gc["se"], 4) == 0.5
    assert gc["result"] == "no measurable difference"
    # g - a = mean(4, 5, 4.5) = 4.50, SE = 0.5 / 1.732 = 0.289, t = 15.6: met (>= 4.0).
    best = checks["max(g, h) - a >= +4.0 (best: g)"]
    assert round(best["diff"], 4) == 4.5 and round(best["se"], 4) == 0.2887
    assert best["result"] == "met"
    del rows["g"]
    only_h = {g["goal"]: g["result"] for g in budget_curves.modern_goals(rows)}
    assert only_h["g - c >= +1.5"] == "arms missing"
    # h - a = 3, 3, 3: no spread, below +4.0.
    assert only_h["max(g, h) - a >= +4.0 (best: h)"] == "not met"
    lines = budget_curves.render_goals(budget_curves.modern_goals(rows), "The modern encoder's")
    assert lines[1].startswith("The modern encoder's goals (GLUE points")


def test_a_slice_stops_where_the_rate_so_far_reaches_its_minute():
    assert budget_curves.slice_steps(0.0, 0, 1800.0, 0.5) == 900  # the probe's rate at first
    assert budget_curves.slice_steps(1790.0, 1000, 3600.0, 0.5) == 1011  # 1000 / 1790 s
    assert budget_curves.slice_steps(3601.0, 2000, 3600.0, 0.5) == 1  # never 0: no run


def test_the_glue_score_over_the_kept_tasks_and_the_chance_row():
    """The chosen protocol's GLUE averages CoLA, SST-2 and STS-B: per seed the mean of the
    three, hand-computed; the report shows each task's chance level and names the tasks left
    out of the average."""
    def stats(per_seed):
        v = list(per_seed.values())
        m = sum(v) / len(v)
        return {"mean": m, "per_seed": per_seed,
                "std": (sum((x - m) ** 2 for x in v) / (len(v) - 1)) ** 0.5}

    scores = {"cola": {"4": 9.0, "5": 12.0, "6": 6.0}, "sst2": {"4": 78.0, "5": 75.0, "6": 78.0},
              "mrpc": {"4": 70.0, "5": 71.0, "6": 72.0}, "stsb": {"4": 22.0, "5": 21.0, "6": 18.0},
              "rte": {"4": 50.0, "5": 49.0, "6": 51.0}}
    row = {"tasks": {t: {"score": stats(s)} for t, s in scores.items()},
           "glue_score": stats({"4": 45.8, "5": 45.6, "6": 45.0})}
    kept = budget_report.over_tasks(row, ["cola", "sst2", "stsb"])
    # Per seed (9 + 78 + 22) / 3 = 36.33, (12 + 75 + 21) / 3 = 36.0, (6 + 78 + 18) / 3 = 34.0.
    assert kept["glue_score"]["per_seed"] == pytest.approx({"4": 109 / 3, "5": 36.0, "6": 34.0})
    assert kept["glue_score"]["mean"] == pytest.approx((109 / 3 + 36.0 + 34.0) / 3)
    assert kept["glue_score_all_tasks"] == row["glue_score"]
    assert budget_report.over_tasks(kept, ["cola", "sst2", "stsb"])["glue_score_all_tasks"] \
        == row["glue_score"], "applied twice, the all-task score is the scorecard's"
    assert budget_report.over_tasks(row, list(scores)) is row

    settings = {"minutes": 30, "model": "L-2/H-128", "vocab_size": 16384, "corpus": "w",
                "finetune": "f", "seeds": "4,5,6", "max_train_examples": 8000,
                "tasks": list(scores), "glue_tasks": ["cola", "sst2", "stsb"],
                "chance": {"cola": {"level": 0.0}, "sst2": {"level": 50.92},
                           "mrpc": {"level": 74.8}, "stsb": None, "rte": {"level": 52.71}}}
    text = budget_report.render(EPYC, settings, [{"name": "a", "title": "random init",
                                                  "row": kept}], [])
    assert "| GLUE over CoLA, SST-2, STS-B (± SE) |" in text
    assert "| majority class / chance | - | - | - | - | - | 0.00 | 50.92 | 74.80 | - | 52.71 " \
           "| - |" in text
    assert "average CoLA, SST-2, STS-B: MRPC, RTE are scored but left out" in text
    assert "| 35.44 ± 1.26 (0.73) |" in text
