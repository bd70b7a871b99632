"""Exact word totals in bounded memory, and the rule that picks the words the trainer gets.

`Totals` adds word counts (a part's at a time) into a dict; whenever it holds more than
`max_words` distinct words, it writes them, sorted, to a run file on disk and starts afresh.
At the end the runs are merged in word order, so every word's total is exact, and the
`max_words` most frequent words are kept, ties broken by code point order (`top_words`; all
words when there are fewer).

What this guarantees: the kept words and their counts are a function of the exact totals
alone, so they do not depend on the number of workers, on the part size, or on the order in
which counts are merged (a Beam combine merges in any order; `data_tools.vocab.beam_vocab` applies
the same rule with `Top.Of`). A word is left out only when `max_words` words are more
frequent than it, or as frequent and smaller in code point order; with at most `max_words`
distinct words nothing is left out and nothing is spilled. Memory: at most `max_words`
words plus the part being added, then a heap of `max_words` while merging.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import os
import tempfile
from collections import Counter
from typing import Iterable, Iterator, List, Optional, Tuple


def top_words(pairs: Iterable[Tuple[str, int]], max_words: int) -> Counter:
    """The `max_words` most frequent words of (word, count) pairs (each word once), ties
    broken by code point order: a total order, so any merge order gives the same set."""
    return collections.Counter(dict(heapq.nsmallest(max_words, pairs,
                                                     key=lambda wc: (-wc[1], wc[0]))))


class Totals:
    """Exact word totals in bounded memory: a dict of at most `max_words` words (plus the
    part being added), then sorted runs on disk, merged in word order at the end."""

    def __init__(self, max_words: int, temp_dir: str = ""):
        self.max_words = max_words
        self.temp_dir = temp_dir
        self.words: Counter = collections.Counter()
        self.distinct = 0  # distinct words in all, once `finish` has run
        self.runs: List[str] = []
        self.peak_words = 0  # most distinct words held at once (for tests and logs)
        self._dir: Optional[tempfile.TemporaryDirectory] = None

    def add(self, words: Counter) -> None:
        """Adds word counts (e.g. one part's)."""
        self.words.update(words)
        self.peak_words = max(self.peak_words, len(self.words))
        if len(self.words) > self.max_words:
            self._spill()

    def _spill(self) -> None:
        if self._dir is None:
            self._dir = tempfile.TemporaryDirectory(prefix="vocab-counts-",
                                                    dir=self.temp_dir or None)
        path = os.path.join(self._dir.name, f"run-{len(self.runs):05d}.txt")
        # Words hold no whitespace (the basic split removed it), so one word and its count
        # per line, tab-separated, is unambiguous; UTF-8 sorts as code points do.
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(f"{w}\t{n}\n" for w, n in sorted(self.words.items()))
        self.runs.append(path)
        self.words = collections.Counter()

    def _merged(self) -> Iterator[Tuple[str, int]]:
        def read(path: str) -> Iterator[Tuple[str, int]]:
            with open(path, encoding="utf-8") as f:
                for line in f:
                    word, n = line.rstrip("\n").split("\t")
                    yield word, int(n)

        streams = [read(p) for p in self.runs] + [iter(sorted(self.words.items()))]
        for word, group in itertools.groupby(heapq.merge(*streams), key=lambda wc: wc[0]):
            yield word, sum(n for _, n in group)

    def _counted(self, pairs: Iterator[Tuple[str, int]]) -> Iterator[Tuple[str, int]]:
        for pair in pairs:
            self.distinct += 1
            yield pair

    def finish(self) -> Counter:
        """The `max_words` most frequent words with their exact counts (see `top_words`)."""
        try:
            if not self.runs:
                self.distinct = len(self.words)
                if len(self.words) <= self.max_words:
                    return self.words
                return top_words(self.words.items(), self.max_words)
            return top_words(self._counted(self._merged()), self.max_words)
        finally:
            self.words = collections.Counter()
            self.close()

    def close(self) -> None:
        """Removes the sorted runs (idempotent)."""
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None
