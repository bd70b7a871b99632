"""Tests for bert_tf.finetune.retrieval.search: block-wise exact top-k equals a brute-force
NumPy ranking (ties by corpus order) at any block size, over shards, with skipped rows."""

from __future__ import annotations

import numpy as np
import pytest

from bert_tf.finetune.retrieval import search


def integer_vectors(rng, n, dim=6):
    # Small integers: every dot product is exact in float32 whatever the summation order,
    # and equal scores are frequent, so the tie rule is exercised.
    return rng.integers(-2, 3, size=(n, dim)).astype(np.float32)


def brute_force(queries, corpus, k, skip=None):
    scores = queries.astype(np.float64) @ corpus.astype(np.float64).T  # [q, corpus]
    if skip is not None:
        for q, row in enumerate(skip):
            if row >= 0:
                scores[q, row] = -np.inf
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]  # ties: lower row first
    top = np.take_along_axis(scores, order, axis=1)
    return np.where(np.isneginf(top), search.NO_HIT, order), top.astype(np.float32)


@pytest.mark.parametrize("num_corpus, k, block, query_block", [
    (50, 10, 7, 4), (50, 10, 1, 1), (50, 10, 50, 100), (50, 60, 8, 3), (13, 5, 3, 2),
])
def test_equals_brute_force_at_any_block_size(num_corpus, k, block, query_block):
    rng = np.random.default_rng(num_corpus * 1000 + k * 10 + block)
    queries, corpus = integer_vectors(rng, 9), integer_vectors(rng, num_corpus)
    indices, scores = search.top_k(queries, corpus, k, block_size=block,
                                   query_block_size=query_block)
    expected_indices, expected_scores = brute_force(queries, corpus, k)
    assert indices.dtype == np.int64 and scores.dtype == np.float32
    assert indices.shape == (9, min(k, num_corpus))
    np.testing.assert_array_equal(indices, expected_indices)
    np.testing.assert_array_equal(scores, expected_scores)
    tied = [(i, j) for i in range(9) for j in range(1, indices.shape[1])
            if scores[i, j] == scores[i, j - 1]]
    assert tied and all(indices[i, j] > indices[i, j - 1] for i, j in tied)


def test_random_float_embeddings_and_shards():
    rng = np.random.default_rng(0)
    queries = rng.standard_normal((20, 16)).astype(np.float32)
    corpus = rng.standard_normal((301, 16)).astype(np.float32)
    shards = [corpus[:100], corpus[100:101], corpus[101:]]
    indices, scores = search.top_k(queries, shards, 25, block_size=32)
    expected = np.argsort(-(queries @ corpus.T), axis=1, kind="stable")[:, :25]
    np.testing.assert_array_equal(indices, expected)
    np.testing.assert_allclose(scores, np.take_along_axis(queries @ corpus.T, expected, 1),
                               rtol=1e-5)


def test_skipped_rows_leave_k_real_hits_and_empty_slots_when_too_few():
    rng = np.random.default_rng(1)
    queries, corpus = integer_vectors(rng, 5), integer_vectors(rng, 30)
    query_ids = ["3", "x", "29", "0", "y"]
    skip = search.identical_rows(query_ids, [str(i) for i in range(30)])
    assert skip.tolist() == [3, -1, 29, 0, -1]
    indices, scores = search.top_k(queries, corpus, 10, block_size=4, skip_rows=skip)
    expected_indices, expected_scores = brute_force(queries, corpus, 10, skip)
    np.testing.assert_array_equal(indices, expected_indices)
    np.testing.assert_array_equal(scores, expected_scores)
    assert all(row not in hits for row, hits in zip(skip, indices) if row >= 0)
    # Three rows, k = 5: three slots at most, and a query skipping one row gets two hits.
    small, small_scores = search.top_k(queries[:2], corpus[:3], 5, block_size=1,
                                       skip_rows=np.array([1, -1]))
    assert small.shape == (2, 3)
    assert small[0, 2] == search.NO_HIT and np.isneginf(small_scores[0, 2])
    assert sorted(small[0, :2].tolist()) == [0, 2] and sorted(small[1].tolist()) == [0, 1, 2]


class RecordingRows(np.ndarray):
    """An array that records how many rows each slice of it reads."""

    reads: list

    def __getitem__(self, item):
        if isinstance(item, slice):
            start, stop, _ = item.indices(self.shape[0])
            type(self).reads.append(stop - start)
            return np.asarray(self).__getitem__(item)
        return super().__getitem__(item)


def test_reads_the_corpus_block_by_block_once():
    rng = np.random.default_rng(2)
    queries, corpus = integer_vectors(rng, 4), integer_vectors(rng, 23)
    RecordingRows.reads = []
    recording = corpus.view(RecordingRows)
    indices, _ = search.top_k(queries, recording, 6, block_size=1)
    assert RecordingRows.reads == [1] * 23  # never more than one block in memory
    np.testing.assert_array_equal(indices, brute_force(queries, corpus, 6)[0])


def test_nan_scores_are_no_hits():
    corpus = np.array([[1.0, 0.0], [np.nan, 0.0], [0.5, 0.0]], np.float32)
    indices, scores = search.top_k(np.array([[1.0, 0.0]], np.float32), corpus, 3, block_size=2)
    assert indices.tolist() == [[0, 2, search.NO_HIT]]
    assert scores[0, :2].tolist() == [1.0, 0.5] and np.isneginf(scores[0, 2])


def test_bad_arguments():
    with pytest.raises(ValueError, match="must be >= 1"):
        search.top_k(np.zeros((1, 2)), np.zeros((3, 2)), 0)
    with pytest.raises(ValueError, match="must be 2-D with one dimension"):
        search.top_k(np.zeros((1, 2)), np.zeros((3, 4)), 1)
