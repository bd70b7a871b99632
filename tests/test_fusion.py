"""Tests of bert_tf.finetune.retrieval.fusion: reciprocal rank fusion by hand, its strict order
(ties to the first run's ranks), passages only one run holds, and bad arguments."""

import pytest

from bert_tf.finetune.retrieval import fusion

FIRST = {"q": {"a": 9.0, "b": 7.0, "c": 5.0, "d": 1.0}}  # ranks a1 b2 c3 d4
SECOND = {"q": {"c": 0.9, "b": 0.5, "a": 0.1, "e": 0.0}}  # ranks c1 b2 a3 e4


def test_rrf_sums_by_hand():
    scores = fusion.rrf_scores([FIRST, SECOND], k=60)
    assert scores["q"] == pytest.approx({
        "a": 1 / 61 + 1 / 63, "b": 1 / 62 + 1 / 62, "c": 1 / 63 + 1 / 61, "d": 1 / 64,
        "e": 1 / 64})
    assert fusion.ranks({"x": 1.0, "y": 1.0, "z": 2.0}) == {"z": 1, "x": 2, "y": 3}


def test_fused_order_is_strict_and_ties_go_to_the_first_run():
    fused = fusion.reciprocal_rank_fusion([FIRST, SECOND], k=60)
    # a and c tie (1/61 + 1/63): the first run ranks a higher. b's 2/62 is below both
    # (1/x is convex). d and e tie (1/64): d is in the first run, e is not.
    assert list(fused["q"]) == ["a", "c", "b", "d", "e"]
    assert fused["q"] == {"a": 5.0, "c": 4.0, "b": 3.0, "d": 2.0, "e": 1.0}
    swapped = fusion.reciprocal_rank_fusion([SECOND, FIRST], k=60)
    assert list(swapped["q"]) == ["c", "a", "b", "e", "d"]


def test_a_large_k_approaches_the_sum_of_ranks_and_bad_arguments():
    # With k far above the ranks, 1/(k + r) ~ 1/k - r/k^2: the order of the rank sums.
    fused = fusion.reciprocal_rank_fusion([FIRST, {"q": {"d": 4.0, "c": 3.0, "b": 2.0,
                                                         "a": 1.0}}], k=1e6)
    assert list(fused["q"]) == ["a", "b", "c", "d"]  # every sum is 5: the first run decides
    with pytest.raises(ValueError, match="at least one run"):
        fusion.reciprocal_rank_fusion([])
    with pytest.raises(ValueError, match="must be > 0"):
        fusion.rrf_scores([FIRST], k=0)
