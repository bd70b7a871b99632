"""BM25 over a list of texts, by the bm25s library: tokenise, index, top k for many queries.

The one BM25 of bert_tf: run_retrieval mines hard negatives with it
(`hard_negatives`, --hard_negatives_from=bm25), and a reranker's first stage can take its
candidates from the same `BM25Index`, so both rank exactly alike.

    index = BM25Index(["the cat sat", "a dog ran", ...])
    indices, scores = index.top_k(["cat", "where did the dog go"], k=100)

Texts are split as bm25s (and scikit-learn's CountVectorizer) split them: lower-cased words
of two or more word characters, bm25s' English stop words removed, no stemming. Scores are
bm25s' defaults (Lucene's BM25, k1 = 1.5, b = 0.75). Only passages that share a word with the
query are ranked: a passage of score 0 is no candidate (its slot holds `NO_HIT`), so a query
of unknown words has no hit at all. Equal scores rank by corpus order, the lower row first,
as `search.top_k` ranks them, so results do not depend on bm25s' selection order.
"""

from __future__ import annotations

from typing import List, Sequence, Tuple

import bm25s
import numpy as np

NO_HIT = -1  # as search.NO_HIT: an empty slot
STOPWORDS = "en"


def tokenize(texts: Sequence[str]) -> List[List[str]]:
    """The BM25 words of each text (module docstring), in text order."""
    return bm25s.tokenize(list(texts), lower=True, stopwords=STOPWORDS, return_ids=False,
                          show_progress=False)


class BM25Index:
    """A BM25 index of `texts` (rows 0 .. len - 1, in the given order).

    Args:
        texts: the passages (e.g. `Passage.encoder_text` of a BEIR corpus).
        k1, b: BM25's term-frequency saturation and length normalisation.

    Raises:
        ValueError: no text.
    """

    def __init__(self, texts: Sequence[str], k1: float = 1.5, b: float = 0.75) -> None:
        if not len(texts):
            raise ValueError("BM25Index needs at least one text")
        self.size = len(texts)
        self._retriever = bm25s.BM25(k1=k1, b=b)
        self._retriever.index(tokenize(texts), show_progress=False)

    def scores(self, query: str) -> np.ndarray:
        """float32 [texts]: the BM25 score of every text for `query` (0: no shared word)."""
        ids = self._retriever.get_tokens_ids(tokenize([query])[0])
        if not ids:  # bm25s cannot score an empty query
            return np.zeros(self.size, np.float32)
        return np.asarray(self._retriever.get_scores_from_ids(ids), np.float32)

    def top_k(self, queries: Sequence[str], k: int) -> Tuple[np.ndarray, np.ndarray]:
        """The k best texts of each query.

        Args:
            queries: the query texts.
            k: hits per query (>= 1).

        Returns:
            (indices int64 [queries, k'], scores float32 [queries, k']), k' = min(k, texts),
            ranked by score descending, equal scores by row ascending; slots beyond the
            texts sharing a word with the query hold NO_HIT and 0.
        """
        if k < 1:
            raise ValueError(f"k must be >= 1 (got {k})")
        width = min(k, self.size)
        indices = np.full((len(queries), width), NO_HIT, np.int64)
        best = np.zeros((len(queries), width), np.float32)
        for i, query in enumerate(queries):
            scores = self.scores(query)
            hits = np.nonzero(scores > 0)[0]
            if not len(hits):
                continue
            if len(hits) > width:  # only the candidates at or above the k-th score
                kth = np.partition(scores[hits], len(hits) - width)[len(hits) - width]
                hits = hits[scores[hits] >= kth]
            order = np.lexsort((hits, -scores[hits]))[:width]
            indices[i, :len(order)] = hits[order]
            best[i, :len(order)] = scores[hits[order]]
        return indices, best
