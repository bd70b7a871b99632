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


def test_difference_is_unpaired_when_the_seeds_differ():
    a = scorecard_report.stats({1: 70.0, 2: 78.0, 3: 74.0})   # std 4
    b = scorecard_report.stats({4: 60.0, 5: 62.0})              # std sqrt(2)
    d = scorecard_report.difference(a, b)
    assert d["diff"] == pytest.approx(74.0 - 61.0)
    assert d["se"] == pytest.approx(math.sqrt(16 / 3 + 2 / 2))


def test_difference_with_one_seed_has_no_standard_error():
    a = scorecard_report.stats({1: 70.0, 2: 78.0, 3: 74.0})
    b = scorecard_report.stats({1: 60.0})
    d = scorecard_report.difference(a, b)
    assert d["diff"] == pytest.approx(14.0)
    assert d["se"] is None


def test_standard_error_is_std_over_root_n_and_none_for_one_seed():
    # 70, 72, 77: sample std sqrt(13) = 3.6056; over sqrt(3): 2.0817.
    three = scorecard_report.stats({1: 70.0, 2: 72.0, 3: 77.0})
    assert scorecard_report.standard_error(three) == pytest.approx(math.sqrt(13) / math.sqrt(3))
    assert scorecard_report.standard_error(three) == pytest.approx(2.0817, abs=1e-4)
    assert scorecard_report.standard_error(scorecard_report.stats({1: 70.0})) is None
