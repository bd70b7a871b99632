"""Tests for bert_tf.finetune.retrieval.hard_negatives: mined negatives are never a positive
of their query (nor a copy of one), come from the asked ranks of the ranking with the
positives taken out, are the same on every run (random draws too, from the seed), and an
example without enough candidates is dropped; BM25 mining on a small corpus gives the
negatives a hand ranking gives."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bert_tf.core.errors import UserError
from bert_tf.finetune.retrieval import beir_data
from bert_tf.finetune.retrieval import hard_negatives as hn
from bert_tf.finetune.retrieval.beir_data import TrainingExample


def fixed_rank(rankings):
    """A Rank that returns the given rows (a stand-in for BM25 or the model)."""
    def rank(queries, k):
        rows = np.full((len(queries), k), hn.NO_HIT, np.int64)
        for i, q in enumerate(queries):
            got = rankings[q][:k]
            rows[i, :len(got)] = got
        return rows
    return rank


def test_pool_keeps_each_text_once_and_every_positive_of_a_query():
    examples = [TrainingExample("q1", "p1"), TrainingExample("q2", "p2"),
                TrainingExample("q1", "p3")]
    pool = hn.build_pool(examples, ["p0", "p1", "p2", "p1", "p3", "p4"])
    assert pool.texts == ["p0", "p1", "p2", "p3", "p4"]
    assert pool.queries == ["q1", "q2"]
    assert pool.positives == [{1, 3}, {2}]
    assert hn.build_pool(examples).texts == ["p1", "p2", "p3"]  # the file's positives


def test_negatives_skip_positives_then_take_the_asked_ranks():
    # Query 0 ranks rows 5 3 0 1 7 2 4 6 with its positives 3 and 1 among them.
    ranked = np.array([[5, 3, 0, 1, 7, 2, 4, 6], [2, 4, hn.NO_HIT, hn.NO_HIT] + [-1] * 4])
    positives = [{3, 1}, {2}]
    top = hn.MiningConfig("bm25", num_negatives=2, range_min=1, range_max=4)
    # Without the positives query 0's ranking is 5 0 7 2 4 6: ranks [1, 4) = 0 7 2.
    assert hn.select(ranked, positives, top) == [(0, 7), None]
    assert hn.select(ranked, positives, hn.MiningConfig("bm25", 1, 0, 1)) == [(5,), (4,)]
    draws = [hn.select(ranked, positives, hn.MiningConfig("bm25", 2, 1, 5, "random", seed=s))
             for s in (1, 1, 2, 3, 4)]
    assert draws[0] == draws[1]  # the seed decides
    for drawn in draws:
        assert drawn[1] is None
        assert set(drawn[0]) <= {0, 7, 2, 4} and len(set(drawn[0])) == 2
        order = [0, 7, 2, 4]  # in rank order
        assert [order.index(r) for r in drawn[0]] == sorted(order.index(r) for r in drawn[0])
    assert len({d[0] for d in draws}) > 1  # other seeds draw other negatives


def test_mine_never_gives_a_positive_or_its_copy_and_drops_starved_examples():
    examples = [TrainingExample("q1", "alpha"), TrainingExample("q1", "beta"),
                TrainingExample("q2", "gamma")]
    corpus = ["alpha", "beta", "gamma", "delta", "alpha", "eps"]  # "alpha" twice
    pool = hn.build_pool(examples, corpus)
    assert pool.texts == ["alpha", "beta", "gamma", "delta", "eps"]
    rank = fixed_rank({"q1": [0, 1, 2, 3, 4], "q2": [2]})
    config = hn.MiningConfig("model", num_negatives=2, range_min=0, range_max=3)
    kept, dropped = hn.mine(examples, pool, rank, config)
    assert dropped == 1  # q2 ranks nothing but its positive
    assert [(e.query, e.positive, e.negatives) for e in kept] == [
        ("q1", "alpha", ("gamma", "delta")), ("q1", "beta", ("gamma", "delta"))]
    with pytest.raises(UserError, match=r"^no training example has 2 hard negative\(s\) in "
                                        r"ranks \[0, 3\) of --hard_negatives_from=model"):
        hn.mine(examples[2:], pool, rank, config)


def test_bm25_mining_matches_a_hand_ranking_and_writes_readable_pairs(tmp_path):
    corpus = ["cats purr and sleep", "a cat sat on a mat", "dogs bark at cats",
              "the stock market fell", "cats and dogs play", "a mat for a cat",
              "my cat is black"]
    examples = [TrainingExample("why do cats purr", corpus[0]),
                TrainingExample("cat on a mat", corpus[1])]
    pool = hn.build_pool(examples, corpus)
    rank = hn.bm25_rank(pool.texts)
    from bert_tf.finetune.retrieval.bm25 import BM25Index

    index = BM25Index(corpus)
    # Each query shares a word with two passages besides its positive.
    for config in (hn.MiningConfig("bm25", 1, 0, 10), hn.MiningConfig("bm25", 2, 0, 10),
                   hn.MiningConfig("bm25", 1, 1, 10)):
        kept, dropped = hn.mine(examples, pool, rank, config)
        assert dropped == 0
        for example, mined in zip(examples, kept):
            scores = index.scores(example.query)
            order = [int(i) for i in np.lexsort((np.arange(len(corpus)), -scores))
                     if scores[i] > 0 and corpus[i] != example.positive]
            want = order[config.range_min:config.range_min + config.num_negatives]
            assert mined.negatives == tuple(corpus[i] for i in want)
            assert example.positive not in mined.negatives
        assert hn.mine(examples, pool, rank, config)[0] == kept  # deterministic
    path = tmp_path / hn.MINED_FILE
    hn.write_examples(str(path), kept)
    assert json.loads(path.read_text().splitlines()[0]) == {
        "query": kept[0].query, "positive": kept[0].positive,
        "negatives": list(kept[0].negatives)}
    back = beir_data.read_training_pairs(str(path))
    assert [(e.query, e.positive, e.negatives) for e in back] == [
        (e.query, e.positive, e.negatives) for e in kept]
