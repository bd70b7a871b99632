"""Exact top-k search by dot product over a corpus too large for one score matrix. NumPy only.

`top_k` scores the queries against the corpus one block of rows at a time and keeps a
running top k per query: memory is queries x (block + 2k) scores, never queries x corpus.
With L2-normalised embeddings (the default pooling) the dot product is the cosine.

Results are deterministic: equal scores are ranked by corpus order (the lower row first),
whatever the block sizes, so a run reproduces and a resumed or re-blocked search returns the
same hits. (BEIR's own exact search keeps ties in heap order; its metrics re-rank ties by id,
`ir_metrics`.) A query whose own id is in the corpus can skip that row
(`identical_rows`), as BEIR's exact search skips it, so k real hits remain.
"""

from __future__ import annotations

from typing import Dict, Optional, Sequence, Tuple, Union

import numpy as np

NO_HIT = -1  # the index of an empty slot (fewer than k rows could be ranked)

Corpus = Union[np.ndarray, Sequence[np.ndarray]]


def identical_rows(query_ids: Sequence[str], corpus_ids: Sequence[str]) -> np.ndarray:
    """int64 [queries]: the corpus row whose id equals each query's id, else NO_HIT."""
    row_of: Dict[str, int] = {pid: i for i, pid in enumerate(corpus_ids)}
    return np.array([row_of.get(qid, NO_HIT) for qid in query_ids], dtype=np.int64)


def _best(scores: np.ndarray, indices: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
    """The k best (score descending, index ascending) of each row of small [n, m] arrays."""
    # Empty slots (NO_HIT) sort after every real row of equal score (-inf).
    tie_key = np.where(indices < 0, np.iinfo(np.int64).max, indices)
    order = np.lexsort((tie_key, -scores), axis=1)[:, :k]
    return (np.take_along_axis(scores, order, axis=1),
            np.take_along_axis(indices, order, axis=1))


def _block_top_k(scores: np.ndarray, start: int, k: int) -> Tuple[np.ndarray, np.ndarray]:
    """The k best of each row of a [n, b] block, ties to the lower column, without sorting
    the whole block: the entries at or above each row's k-th largest score are the only
    candidates (at least k of them), and only those are sorted."""
    n, b = scores.shape
    if b <= k:
        indices = np.broadcast_to(np.arange(start, start + b, dtype=np.int64), (n, b))
        return _best(scores, np.ascontiguousarray(indices), b)
    kth = np.partition(scores, b - k, axis=1)[:, b - k]  # [n]: each row's k-th largest
    rows, cols = np.nonzero(scores >= kth[:, None])
    values = scores[rows, cols]
    order = np.lexsort((cols, -values, rows))  # by row, then score descending, then column
    rows, cols, values = rows[order], cols[order], values[order]
    first = np.searchsorted(rows, np.arange(n))  # where each row's candidates start
    keep = np.arange(len(rows)) - first[rows] < k
    return (values[keep].reshape(n, k),
            cols[keep].reshape(n, k).astype(np.int64) + start)


def top_k(queries: np.ndarray, corpus: Corpus, k: int, block_size: int = 16384,
          query_block_size: int = 1024, skip_rows: Optional[np.ndarray] = None
          ) -> Tuple[np.ndarray, np.ndarray]:
    """The k corpus rows with the largest dot product with each query.

    Args:
        queries: float [queries, dim].
        corpus: float [corpus, dim], or a sequence of such shards (rows numbered across
            them in order); a memory-mapped `.npy` (`embedding_store`) is read block by block.
        k: hits per query.
        block_size: corpus rows scored at a time (any size from 1).
        query_block_size: queries scored at a time.
        skip_rows: int [queries]: a corpus row to leave out for each query, NO_HIT for none
            (`identical_rows`).

    Returns:
        (indices int64 [queries, k'], scores float32 [queries, k']), k' = min(k, corpus
        rows), each row ranked by score descending, equal scores by corpus row ascending.
        Slots that no row could fill (every row skipped, or NaN scores) hold NO_HIT and -inf.

    Raises:
        ValueError: k or a block size below 1, or dimensions that differ.
    """
    if k < 1 or block_size < 1 or query_block_size < 1:
        raise ValueError(f"k, block_size and query_block_size must be >= 1 "
                         f"(got {k}, {block_size}, {query_block_size})")
    shards = [corpus] if isinstance(corpus, np.ndarray) else list(corpus)
    queries = np.asarray(queries, dtype=np.float32)
    dims = {int(s.shape[1]) for s in shards if s.ndim == 2} | {int(queries.shape[1])}
    if len(dims) != 1 or any(s.ndim != 2 for s in shards):
        raise ValueError(f"queries {queries.shape} and corpus shards "
                         f"{[s.shape for s in shards]} must be 2-D with one dimension")
    total = sum(int(s.shape[0]) for s in shards)
    width = min(k, total)
    num_queries = queries.shape[0]
    best_scores = np.full((num_queries, width), -np.inf, dtype=np.float32)
    best_indices = np.full((num_queries, width), NO_HIT, dtype=np.int64)
    skip = None if skip_rows is None else np.asarray(skip_rows, dtype=np.int64)
    offset = 0
    for shard in shards:
        for begin in range(0, shard.shape[0], block_size):
            block = np.asarray(shard[begin:begin + block_size], dtype=np.float32)  # [b, dim]
            start = offset + begin
            for q0 in range(0, num_queries, query_block_size):
                q1 = min(q0 + query_block_size, num_queries)
                scores = queries[q0:q1] @ block.T  # [q, b]
                # A NaN (an all-zero vector left unnormalised) would sort above every score.
                scores[np.isnan(scores)] = -np.inf
                if skip is not None:
                    local = skip[q0:q1] - start
                    hit = np.nonzero((local >= 0) & (local < block.shape[0]))[0]
                    scores[hit, local[hit]] = -np.inf
                values, indices = _block_top_k(scores, start, min(width, block.shape[0]))
                indices = np.where(np.isneginf(values), NO_HIT, indices)
                best_scores[q0:q1], best_indices[q0:q1] = _best(
                    np.concatenate([best_scores[q0:q1], values], axis=1),
                    np.concatenate([best_indices[q0:q1], indices], axis=1), width)
        offset += shard.shape[0]
    return best_indices, best_scores
