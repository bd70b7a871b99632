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
