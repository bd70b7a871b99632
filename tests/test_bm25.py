"""Tests for bert_tf.finetune.retrieval.bm25: BM25Index's scores are Lucene's BM25 computed
here by hand from the formula, its top k ranks them (ties by corpus order, passages of
score 0 left out), and its words are bm25s' (lower-cased, English stop words out)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bert_tf.finetune.retrieval.bm25 import NO_HIT, BM25Index, tokenize

TEXTS = ["The cat sat on the mat.", "Dogs ran far away.", "A cat and a dog.",
         "cat cat cat", "Nothing here."]


def lucene_bm25(query_words, docs, k1=1.5, b=0.75):
    """Lucene's BM25 (bm25s' default): idf = ln(1 + (N - df + 0.5) / (df + 0.5)),
    tf part = tf / (tf + k1 * (1 - b + b * len / avg_len))."""
    n = len(docs)
    avg = sum(len(d) for d in docs) / n
    out = []
    for doc in docs:
        score = 0.0
        for word in set(query_words):
            tf = doc.count(word)
            if not tf:
                continue
            df = sum(word in d for d in docs)
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            score += idf * tf / (tf + k1 * (1 - b + b * len(doc) / avg))
        out.append(score)
    return np.array(out)


def test_words_are_lower_cased_without_stop_words():
    assert tokenize(["The cat sat on the mat.", "A Dog!"]) == [["cat", "sat", "mat"], ["dog"]]


def test_scores_are_lucene_bm25_and_top_k_ranks_them():
    index = BM25Index(TEXTS)
    docs = tokenize(TEXTS)
    for query in ("cat", "cat dog mat", "dogs far"):
        expected = lucene_bm25(tokenize([query])[0], docs)
        np.testing.assert_allclose(index.scores(query), expected, rtol=1e-5)
    indices, scores = index.top_k(["cat dog mat", "dogs far", "zebra"], k=3)
    assert indices.dtype == np.int64 and scores.dtype == np.float32
    full = lucene_bm25(["cat", "dog", "mat"], docs)
    assert indices[0].tolist() == np.argsort(-full, kind="stable")[:3].tolist()
    np.testing.assert_allclose(scores[0], np.sort(full)[::-1][:3], rtol=1e-5)
    # "dogs far" matches text 1 only: the other slots are empty, never a score-0 passage.
    assert indices[1].tolist() == [1, NO_HIT, NO_HIT] and scores[1, 1:].tolist() == [0, 0]
    assert indices[2].tolist() == [NO_HIT] * 3  # no known word


def test_equal_scores_rank_by_corpus_order_and_k_is_capped():
    index = BM25Index(["red apple", "green pear", "red apple", "blue sky", "red apple"])
    indices, scores = index.top_k(["apple"], k=10)
    assert indices.shape == (1, 5)
    assert indices[0].tolist() == [0, 2, 4, NO_HIT, NO_HIT]
    assert scores[0, 0] == scores[0, 1] == scores[0, 2] > 0
    indices, _ = index.top_k(["apple"], k=2)  # the boundary tie goes to the lower rows
    assert indices[0].tolist() == [0, 2]
    with pytest.raises(ValueError):
        index.top_k(["apple"], k=0)
    with pytest.raises(ValueError):
        BM25Index([])
