"""The set of document hashes behind `prepare_corpus --dedup`: 8 bytes per distinct document
(64-bit BLAKE2b hashes in sorted arrays; two distinct documents share a hash with probability
about n^2 / 2^65, 3e-4 for n = 100 million)."""

from __future__ import annotations

from typing import List

import numpy as np


class SeenHashes:
    """A set of 64-bit hashes in sorted arrays of geometric sizes (8 bytes per hash).

    Adding a batch sorts it into a new array, then merges the newest arrays while the last
    is at least as large as the one before, so there are about log2(n) arrays and each hash
    is copied about log2(n) times in all.
    """

    def __init__(self) -> None:
        self._levels: List[np.ndarray] = []

    def __len__(self) -> int:
        return sum(len(level) for level in self._levels)

    def add_new(self, hashes: np.ndarray) -> np.ndarray:
        """Adds a batch; returns `[len(hashes)]` bool: True where a hash was not seen before
        (in earlier batches, or earlier in this one)."""
        hashes = np.asarray(hashes, dtype=np.uint64)
        new = np.zeros(len(hashes), dtype=bool)
        if not len(hashes):
            return new
        new[np.unique(hashes, return_index=True)[1]] = True
        for level in self._levels:
            at = np.minimum(np.searchsorted(level, hashes), len(level) - 1)
            new &= level[at] != hashes
        if new.any():
            self._levels.append(np.sort(hashes[new]))
        while len(self._levels) > 1 and len(self._levels[-1]) >= len(self._levels[-2]):
            last = self._levels.pop()
            self._levels[-1] = np.sort(np.concatenate([self._levels[-1], last]), kind="stable")
        return new
