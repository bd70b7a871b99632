"""scorecard_report's statistics, against values computed by hand."""

import json
import math

import pytest

from bert_tf.finetune.scorecard import scorecard_report


def test_stats_mean_sample_std_and_median():
    s = scorecard_report.stats({3: 74.0, 1: 70.0, 2: 78.0})
    assert s["mean"] == pytest.approx(74.0)
    # deviations -4, 0, 4: sum of squares 32 over n - 1 = 2 -> 16 -> std 4.
    assert s["std"] == pytest.approx(4.0)
    assert s["median"] == 74.0
    assert list(s["per_seed"]) == ["1", "2", "3"]


def test_stats_of_one_seed_has_zero_std():
    s = scorecard_report.stats({7: 50.0})
    assert (s["mean"], s["std"], s["median"]) == (50.0, 0.0, 50.0)


def test_difference_is_paired_over_common_seeds():
    a = scorecard_report.stats({1: 70.0, 2: 78.0, 3: 74.0})
    b = scorecard_report.stats({1: 68.0, 2: 75.0, 3: 73.0})
    d = scorecard_report.difference(a, b)
    # per-seed differences 2, 3, 1: mean 2, sample std 1, se 1 / sqrt(3).
    assert d["diff"] == pytest.approx(2.0)
    assert d["se"] == pytest.approx(1 / math.sqrt(3))
    assert d["paired"] == 3


def test_difference_of_unequal_seed_sets_is_paired_over_the_shared_seeds():
    # Seed 3 of b is missing (e.g. it diverged): seeds 1 and 2 are paired, seed 3 of a is
    # left out. Differences 2 and 3: mean 2.5, sample std sqrt(0.5), se sqrt(0.5) / sqrt(2)
    # = 0.5. The unpaired figures would be 76 - 71.5 = 4.5 and sqrt(28 / 3 + 24.5 / 2).
    a = scorecard_report.stats({1: 70.0, 2: 78.0, 3: 80.0})
    b = scorecard_report.stats({1: 68.0, 2: 75.0})
    d = scorecard_report.difference(a, b)
    assert d == {"diff": pytest.approx(2.5), "se": pytest.approx(0.5), "paired": 2}
    # b - a pairs the same seeds, with the sign reversed.
    assert scorecard_report.difference(b, a) == {
        "diff": pytest.approx(-2.5), "se": pytest.approx(0.5), "paired": 2}


def test_difference_is_unpaired_when_fewer_than_two_seeds_are_shared():
    a = scorecard_report.stats({1: 70.0, 2: 78.0, 3: 74.0})   # std 4
    b = scorecard_report.stats({4: 60.0, 5: 62.0})              # std sqrt(2)
    d = scorecard_report.difference(a, b)
    assert d["diff"] == pytest.approx(74.0 - 61.0)
    assert d["se"] == pytest.approx(math.sqrt(16 / 3 + 2 / 2))
    assert d["paired"] == 0
    # One shared seed (2) gives no spread of differences: unpaired over all seeds.
    # a: 70, 78 (mean 74, variance 32); b: 75, 71 (mean 73, variance 8).
    d = scorecard_report.difference(scorecard_report.stats({1: 70.0, 2: 78.0}),
                                    scorecard_report.stats({2: 75.0, 3: 71.0}))
    assert d == {"diff": pytest.approx(1.0), "se": pytest.approx(math.sqrt(32 / 2 + 8 / 2)),
                 "paired": 0}


def test_difference_with_one_seed_has_no_standard_error():
    a = scorecard_report.stats({1: 70.0, 2: 78.0, 3: 74.0})
    b = scorecard_report.stats({1: 60.0})
    d = scorecard_report.difference(a, b)
    assert d["diff"] == pytest.approx(14.0)
    assert d["se"] is None and d["paired"] == 0


def test_standard_error_is_std_over_root_n_and_none_for_one_seed():
    # 70, 72, 77: sample std sqrt(13) = 3.6056; over sqrt(3): 2.0817.
    three = scorecard_report.stats({1: 70.0, 2: 72.0, 3: 77.0})
    assert scorecard_report.standard_error(three) == pytest.approx(math.sqrt(13) / math.sqrt(3))
    assert scorecard_report.standard_error(three) == pytest.approx(2.0817, abs=1e-4)
    assert scorecard_report.standard_error(scorecard_report.stats({1: 70.0})) is None


def test_diverged_runs_are_reported_as_diverged_not_scored():
    from bert_tf.finetune.scorecard import suite
    from bert_tf.finetune.scorecard.scorecard_runs import Model, Protocol, Run, RunRecord

    a, b = (suite.ScoredTask(name, "tagging", (), (("eval_f1", "F1"),)) for name in "ab")
    protocol = Protocol("grid", (1e-4, 1e-3), (1, 2))
    m, m2 = Model("m"), Model("m2")
    diverged = "loss diverged at step 2: ..."

    def record(f1):
        return (RunRecord({}, {}, 1.0, (4, 4), diverged) if f1 is None
                else RunRecord({"eval_f1": f1}, {}, 1.0, (4, 4)))

    # Per (task, lr): the F1 of seeds 1 and 2, None where the run diverged.
    f1s = {(a, 1e-4): (0.8, 0.9), (a, 1e-3): (0.95, None),
           (b, 1e-4): (None, 0.7), (b, 1e-3): (None, None)}
    records = {Run(model, task, lr, seed): record(values[seed - 1])
               for model in (m, m2) for (task, lr), values in f1s.items() for seed in (1, 2)
               if model is m or task is a}
    records.update({Run(m2, b, lr, seed): record(None) for lr in (1e-4, 1e-3)
                    for seed in (1, 2)})
    doc = scorecard_report.summarize([m, m2], [a, b], protocol, records)
    row, row2 = doc["rows"]
    # a: 1e-3 scores 95 on its one healthy seed, but 1e-4 diverged on none: 1e-4 (80, 90).
    assert row["tasks"]["a"]["learning_rate"] == 1e-4
    assert row["tasks"]["a"]["grid"] == {"0.0001": pytest.approx(85.0), "0.001": 95.0}
    # b: seed 1 diverged at both rates; seed 2 scores 70 at 1e-4.
    assert row["tasks"]["b"]["diverged_seeds"] == [1]
    assert row["tasks"]["b"]["score"]["per_seed"] == {"2": 70.0}
    assert row["tasks"]["b"]["grid"] == {"0.0001": 70.0, "0.001": None}
    # The average score only over seed 2, the one seed whose every task is scored: (90+70)/2.
    assert row["glue_score"]["per_seed"] == {"2": 80.0}
    assert row2["tasks"]["b"]["score"] is None and row2["glue_score"] is None
    assert row2["tasks"]["b"]["predictions"] == {} and row2["tasks"]["b"]["selected_seed"] is None
    lines = scorecard_report.markdown(doc).splitlines()
    first = lines.index("| model | average score | a F1 | b F1 |")
    # 80 and 90: std sqrt(50) = 7.07.
    assert lines[first + 2:first + 4] == [
        "| m | 80.00 ± 0.00 | 85.00 ± 7.07 | 70.00 ± 0.00 (1 of 2 seeds diverged) |",
        "| m2 | diverged | 85.00 ± 7.07 | diverged |"]
    assert "| m | b | 0.0001 | score | 70.00 ± 0.00 | 70.00 | 70.00; seed 1 diverged |" in lines
    assert "| m2 | b | 0.0001 | score | diverged (every seed) | | |" in lines
    grid = lines.index("Grid (mean score over seeds per learning rate):")
    assert lines[grid + 4:grid + 8] == ["| m | a | 85.00 | 95.00 |", "| m | b | 70.00 | diverged |",
                                        "| m2 | a | 85.00 | 95.00 |",
                                        "| m2 | b | diverged | diverged |"]
    json.dumps(doc, allow_nan=False)  # scorecard.json stays strict JSON
