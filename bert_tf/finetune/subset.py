"""Seeded training subsets, for screening a model on a small budget (`run_glue`).

The subset depends only on the number of examples, the size asked for and its own seed: every
model, learning rate and fine-tuning seed of a scorecard trains on the same examples, so their
scores differ by the model alone. Rows keep their file order.
"""

from __future__ import annotations

from typing import List, Sequence, TypeVar

import numpy as np

T = TypeVar("T")


def subset_indices(num_examples: int, max_examples: int, seed: int) -> np.ndarray:
    """Sorted indices of a uniform sample of `max_examples` rows out of `num_examples`.

    Args:
        num_examples: rows in the file.
        max_examples: rows to keep; 0, or at least `num_examples`, keeps every row.
        seed: the subset's own seed (not the fine-tuning seed).

    Returns:
        int64 [min(num_examples, max_examples)] (every index when nothing is dropped).
    """
    if max_examples <= 0 or max_examples >= num_examples:
        return np.arange(num_examples, dtype=np.int64)
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(num_examples, size=max_examples, replace=False)).astype(np.int64)


def take_subset(items: Sequence[T], max_examples: int, seed: int) -> List[T]:
    """The items `subset_indices` keeps, in their original order."""
    return [items[i] for i in subset_indices(len(items), max_examples, seed)]
