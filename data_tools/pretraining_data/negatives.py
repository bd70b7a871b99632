"""Random-next (NSP negative) segments drawn from the whole corpus, as the original draws them.

The original `create_pretraining_data.py` picks the B segment of an IsRandom instance like this:
a document uniformly from the whole corpus (10 tries to avoid A's own), a start sentence
uniformly within it, then sentences from there until B reaches its target length or the document
ends. `RandomNext` does exactly that over the tokenized corpus that the create job's first pass
stored on disk (`data_tools.pretraining_data.token_store`), so every sentence of the corpus can
open a random B, whatever the corpus order and document length, with the random draws taken from
the chunk's own generator (the output depends only on the input and the seed).

One deviation, kept from earlier releases: B never comes from A's own document. After the
original's 10 tries (which a corpus of very few documents can fail), one of the other
documents is drawn directly.
"""

from __future__ import annotations

import bisect
import math
from typing import List, Sequence, Tuple

import numpy as np

from data_tools.pretraining_data import token_store

_OFFSETS_BLOCK = 32  # sentence offsets read at once (a B segment spans a few sentences)


class RandomNext:
    """B segments of one chunk, read from the store and appended after the chunk's tokens.

    Segment coordinates continue those of the chunk's `DocumentBuffer.ids`: the first
    segment starts at `base`, so `ids()` (the buffer's ids followed by every segment) is
    what the instances' spans point into.
    """

    def __init__(self, reader: token_store.Reader, chunk: int, buffer_ids: np.ndarray,
                 doc_ids: Sequence[int]):
        """
        Args:
            reader: random reads of the store.
            chunk: the chunk's index (its documents' table numbers exclude A's own).
            buffer_ids: int32 [n]: the chunk's `DocumentBuffer.ids`.
            doc_ids: the corpus id of each document of the chunk's buffer.
        """
        self.reader = reader
        index = reader.index
        self.num_documents = index.num_documents
        self.table_numbers = index.table_numbers(chunk, doc_ids).tolist()
        self._sent_base = index.sent_base.tolist()
        self._parts: List[np.ndarray] = [buffer_ids]
        self._end = len(buffer_ids)

    def draw(self, uniform_int, doc: int, target: int) -> Tuple[int, int]:
        """One random next segment for A from the chunk's document `doc`.

        Args:
            uniform_int: (lo, hi) -> an int in [lo, hi] (the chunk's `RandomStream.randint`).
            doc: A's document, as an index of the chunk's buffer.
            target: B's target length in tokens (B takes whole sentences until it reaches
                it, at least one sentence, or until the document ends).

        Returns:
            (start, end) of the segment in `ids()`.
        """
        _, sentence, end = self.choose(uniform_int, doc)
        segment = self._read(sentence, end, target)
        start = self._end
        self._parts.append(segment)
        self._end += len(segment)
        return start, self._end

    def choose(self, uniform_int, doc: int) -> Tuple[int, int, int]:
        """B's document and start sentence, drawn as the original draws them.

        Returns:
            (the document's number in the store's table, B's first sentence, the end of
            the document), sentences numbered over the whole corpus.
        """
        n = self.num_documents
        own = self.table_numbers[doc]
        number = own
        if n > 1:
            for _ in range(10):  # the original's tries
                number = uniform_int(0, n - 1)
                if number != own:
                    break
            else:
                number = uniform_int(0, n - 2)
                number += number >= own
        first, count = self.reader.document(number)
        return number, first + uniform_int(0, count - 1), first + count

    def _read(self, s: int, end: int, target: int) -> np.ndarray:
        """Tokens of global sentences s, s+1, ... (< end) until `target` tokens."""
        pieces: List[np.ndarray] = []
        total = 0
        while s < end and (total < target or not pieces):
            chunk = bisect.bisect_right(self._sent_base, s) - 1
            base = self._sent_base[chunk]
            lo = s - base
            hi = min(end, self._sent_base[chunk + 1], s + _OFFSETS_BLOCK) - base
            offsets = self.reader.sentence_offsets(chunk, lo, hi)
            # Sentences lo..k-1 reach the target (or the block ends): k - lo of them.
            need = offsets[0] + max(target - total, 1)
            k = min(int(np.searchsorted(offsets[1:], need)) + 1, hi - lo)
            pieces.append(self.reader.tokens(chunk, int(offsets[0]), int(offsets[k])))
            total += int(offsets[k] - offsets[0])
            s += k
        return np.concatenate(pieces) if len(pieces) > 1 else pieces[0]

    def ids(self) -> np.ndarray:
        """int32: the buffer's ids, then every segment drawn so far."""
        if len(self._parts) > 1:
            self._parts = [np.concatenate(self._parts)]
        return self._parts[0]


def mean_distance(a_docs: np.ndarray, b_docs: np.ndarray, num_documents: int) -> float:
    """Mean |i - j| / num_documents over IsRandom instances (about 1/3 for a uniform draw
    of j; small when B comes from A's neighbourhood)."""
    if not len(a_docs):
        return math.nan
    return float(np.mean(np.abs(np.asarray(a_docs) - np.asarray(b_docs))) / num_documents)
