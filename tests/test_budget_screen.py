"""Tests of the protocol screen's decision (`benchmarks/pretraining_budget/budget_screen.py`):
the chance-level rule, the paired t per arm, the mean t, the tie-break and the table, on
hand-computed scorecards.
"""

from __future__ import annotations

import os
import sys

import pytest

BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "benchmarks", "pretraining_budget")
sys.path.insert(0, BENCHMARKS)
import budget_screen  # noqa: E402

CHANCE = {"sst2": {"level": 50.0}, "mrpc": {"level": 80.0}}


def row(sst2, mrpc) -> dict:
    """A scorecard row of two tasks from per-seed scores (seeds 1, 2, 3)."""
    def summary(values):
        mean = sum(values) / len(values)
        std = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5
        return {"mean": mean, "std": std, "per_seed": dict(zip(("1", "2", "3"), values))}

    return {"tasks": {"sst2": {"score": summary(sst2)}, "mrpc": {"score": summary(mrpc)}}}


def test_parse_reads_readout_at_rate_and_names_a_bad_item():
    assert budget_screen.parse("pooler@3e-4, mean@1e-3") == [("pooler", 3e-4), ("mean", 1e-3)]
    with pytest.raises(ValueError, match="'cls3e-4' is not readout@learning_rate"):
        budget_screen.parse("cls3e-4")
    with pytest.raises(ValueError, match="'max@1e-4'"):
        budget_screen.parse("max@1e-4")
    with pytest.raises(ValueError, match="'fast' is not a learning rate"):
        budget_screen.parse("cls@fast")


def test_a_task_c_does_not_lift_above_chance_is_left_out_and_t_is_paired_over_seeds():
    rows = {"a": row([70, 72, 74], [81, 81, 81]),
            "c": row([72, 75, 76], [79, 79, 79]),   # MRPC below its 80 majority: dropped
            "d": row([71, 72, 77], [81, 81, 81])}
    a = budget_screen.assess(rows, CHANCE, ["sst2", "mrpc"])
    assert a["kept"] == ["sst2"] and a["dropped"] == ["mrpc"]
    # c - a per seed on SST-2 alone: 2, 3, 2 -> mean 7/3, stdev 0.577, SE 1/3, t = 7.
    assert a["arms"]["c"]["diff"] == pytest.approx(7 / 3)
    assert a["arms"]["c"]["se"] == pytest.approx(1 / 3)
    assert a["arms"]["c"]["t"] == pytest.approx(7.0)
    # d - a: 1, 0, 3 -> mean 4/3, stdev 1.528, SE 0.882, t = 1.512.
    assert a["arms"]["d"]["t"] == pytest.approx((4 / 3) / (1.5275252 / 3 ** 0.5), rel=1e-6)
    assert a["mean_t"] == pytest.approx((7.0 + a["arms"]["d"]["t"]) / 2)


def test_the_largest_mean_t_wins_unless_a_simpler_protocol_is_within_half_a_point():
    def assessed(t):
        return {"mean_t": t, "kept": [], "dropped": [], "arms": {}}

    clear = {("pooler", 3e-4): assessed(1.0), ("cls", 3e-4): assessed(3.0),
             ("mean", 3e-4): assessed(2.0)}
    assert budget_screen.choose(clear) == ("cls", 3e-4)
    tie = {("pooler", 3e-4): assessed(2.6), ("cls", 3e-4): assessed(3.0),
           ("mean", 1e-4): assessed(3.05)}
    assert budget_screen.choose(tie) == ("pooler", 3e-4), "within 0.5: the simplest"
    rates = {("cls", 1e-3): assessed(3.0), ("cls", 1e-4): assessed(2.8)}
    assert budget_screen.choose(rates) == ("cls", 1e-4), "then the smaller rate"
    assert budget_screen.choose({("cls", 1e-3): assessed(None)}) is None


def test_the_table_marks_dropped_tasks_and_names_the_choice():
    rows = {("pooler", 3e-4): {"a": row([70, 72, 74], [81, 81, 81]),
                                "c": row([72, 75, 76], [79, 79, 79]),
                                "d": row([71, 72, 77], [81, 81, 81])}}
    assessed = {p: budget_screen.assess(r, CHANCE, ["sst2", "mrpc"]) for p, r in rows.items()}
    text = "\n".join(budget_screen.render(assessed, rows, CHANCE, ["sst2", "mrpc"],
                                          {"sst2": "SST-2", "mrpc": "MRPC"}))
    assert "| chance | - | 50.00 | 80.00 | - |" in text
    assert "| pooler @ 0.0003 | c | 74.33 ± 2.08 | 79.00 ± 0.00* | 74.33 ± 2.08 |" in text
    assert "| pooler @ 0.0003 | SST-2 | +2.33 ± 0.33, t = 7.0 | +1.33 ± 0.88, t = 1.5 | 4.26 |" \
        in text
    assert text.endswith("Chosen (largest mean t; within 0.5 the simpler): pooler @ 0.0003")
