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
    assert "| c-mask15: c-mask15 title | 64,000 / 96,000 | +6.92 | +1.00 ± 0.58 | yes |" in text
    assert "| c-static: c-static title | 64,000 / 90,000 | +6.70 | - | yes |" in text
    assert "| c-nsp: c-nsp title | 64,000 / 63,552 | +7.46 | +0.50 ± 0.58 | " \
           "NO: not comparable |" in text


def test_without_c_there_is_no_ablation_table():
    arms = [pretrained("c-mask15", EPYC, 96_000, 0.1478)]
    assert budget_report.ablation(arms) == []
    assert budget_report.render_ablation([]) == []
