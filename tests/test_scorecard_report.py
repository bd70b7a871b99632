"""scorecard_report's statistics, against values computed by hand."""

import math

import pytest

from bert_tf.finetune import scorecard_report


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
