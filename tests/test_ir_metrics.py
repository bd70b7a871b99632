"""Tests for bert_tf.finetune.retrieval.ir_metrics: hand-computed BEIR figures (graded
relevance, ties, identical ids, queries missing from the run or the qrels, cutoffs)."""

from __future__ import annotations

import math

import pytest

from bert_tf.finetune.retrieval import ir_metrics as im

QRELS = {
    "q1": {"a": 2, "b": 1, "c": 0, "d": 1},
    "q2": {"e": 1},
    "q3": {"g": 0},       # judged, nothing relevant
    "q4": {"h": 1},       # not in the run
}
RUN = {
    "q1": {"a": 0.9, "x": 0.8, "b": 0.8, "c": 0.7, "y": 0.5},
    "q2": {"f": 0.5, "e": 0.5, "q2": 0.9},  # "q2" is the query's own id
    "q3": {"g": 1.0},
    "q5": {"a": 1.0},     # not in the qrels
}

L3, L4 = math.log2(3), math.log2(4)
# q1, ranked a, x, b, c, y (x before b: equal scores go by DESCENDING id). Relevant: a, b, d.
Q1 = {"ndcg_at_10": (2 + 1 / L4) / (2 + 1 / L3 + 1 / L4), "recall_at_100": 2 / 3,
      "mrr_at_10": 1.0, "map_at_100": (1 + 2 / 3) / 3}
# q2 without its own id: f, e by descending id (trec_eval); MRR keeps the run's order f, e.
Q2 = {"ndcg_at_10": 1 / L3, "recall_at_100": 1.0, "mrr_at_10": 0.5, "map_at_100": 0.5}
Q3 = dict.fromkeys(im.METRICS, 0.0)


def test_per_query_values_by_hand():
    scores = im.per_query(QRELS, RUN)
    assert sorted(scores) == ["q1", "q2", "q3"]  # q4 is not in the run, q5 not in the qrels
    for qid, expected in (("q1", Q1), ("q2", Q2), ("q3", Q3)):
        assert scores[qid] == pytest.approx(expected, abs=1e-12), qid


def test_averages_follow_beir():
    # nDCG, recall, MAP: over the 3 queries in both qrels and run (q3 counts, with 0);
    # MRR: over the 4 queries of the qrels (BEIR's len(qrels)).
    expected = {name: (Q1[name] + Q2[name]) / 3 for name in im.METRICS}
    expected["mrr_at_10"] = (1.0 + 0.5) / 4
    results = im.evaluate(QRELS, RUN)
    assert list(results) == list(im.METRICS)
    assert results == pytest.approx(expected, abs=1e-12)
    assert results["ndcg_at_10"] == pytest.approx(0.4764715, abs=1e-7)


def test_identical_ids_count_when_not_ignored():
    # q2 ranked q2 (not relevant), f, e.
    q2 = im.per_query(QRELS, RUN, ignore_identical_ids=False)["q2"]
    assert q2 == pytest.approx({"ndcg_at_10": 1 / L4, "recall_at_100": 1.0,
                                "mrr_at_10": 1 / 3, "map_at_100": 1 / 3}, abs=1e-12)
    assert "q2" in RUN["q2"]  # the caller's run is not changed


def test_ties_mrr_follows_the_run_order_trec_metrics_the_ids():
    first = {"q": {"e": 0.5, "f": 0.5}}
    second = {"q": {"f": 0.5, "e": 0.5}}
    qrels = {"q": {"e": 1}}
    a, b = im.per_query(qrels, first)["q"], im.per_query(qrels, second)["q"]
    assert (a["mrr_at_10"], b["mrr_at_10"]) == (1.0, 0.5)
    assert a["ndcg_at_10"] == b["ndcg_at_10"] == pytest.approx(1 / L3)
    # Ids compare as strings, not numbers: "9" > "10".
    assert im.trec_ranking({"10": 1.0, "9": 1.0, "100": 2.0}) == ["100", "9", "10"]


def test_cutoffs_and_denominators():
    docs = [f"d{i:02d}" for i in range(12)]
    qrels = {"q": dict.fromkeys(docs, 1)}
    perfect = {"q": {d: 100.0 - i for i, d in enumerate(docs)}}
    assert im.per_query(qrels, perfect)["q"] == pytest.approx(
        dict.fromkeys(im.METRICS, 1.0))  # the ideal ranking is cut at 10 too
    # Only 10 of the 12 relevant retrieved: MAP divides by 12, not by min(k, 12).
    ten = {"q": {d: 100.0 - i for i, d in enumerate(docs[:10])}}
    assert im.per_query(qrels, ten)["q"]["map_at_100"] == pytest.approx(10 / 12)
    assert im.per_query(qrels, ten)["q"]["recall_at_100"] == pytest.approx(10 / 12)
    # The one relevant passage at rank 11: outside nDCG@10 and MRR@10, inside the 100s.
    late = {"q": {f"n{i:02d}": 50.0 - i for i in range(10)} | {"r": 1.0}}
    scores = im.per_query({"q": {"r": 1}}, late)["q"]
    assert scores == pytest.approx({"ndcg_at_10": 0.0, "recall_at_100": 1.0, "mrr_at_10": 0.0,
                                    "map_at_100": 1 / 11})


def test_graded_gain_is_linear_not_exponential():
    # Ranked b (1), a (3): DCG = 1 + 3/log2(3); ideal 3 + 1/log2(3). With 2^rel - 1 gains it
    # would be (1 + 7/log2(3)) / (7 + 1/log2(3)).
    score = im.ndcg_at(["b", "a"], {"a": 3, "b": 1}, 10)
    assert score == pytest.approx((1 + 3 / L3) / (3 + 1 / L3), abs=1e-12)


def test_run_from_top_k_and_empty_runs():
    run = im.run_from_top_k(["q1", "q2"], ["a", "b", "c"], [[2, 0], [1, -1]],
                            [[0.5, 0.25], [1.0, float("-inf")]])
    assert run == {"q1": {"c": 0.5, "a": 0.25}, "q2": {"b": 1.0}}
    assert list(run["q1"]) == ["c", "a"]
    with pytest.raises(ValueError, match="no query of the run is in the qrels"):
        im.evaluate({"q": {"a": 1}}, {"other": {"a": 1.0}})
