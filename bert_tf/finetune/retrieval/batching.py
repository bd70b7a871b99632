"""Training batches with no text twice in a batch. Pure Python and NumPy.

With in-batch negatives every other passage of the batch is a negative for a query. If two
examples share a text (the same passage relevant to two queries, a query asked twice, a
mined negative that is another example's positive), that text becomes a false negative: the
loss pushes a query away from its own positive. `no_duplicate_batches` builds each batch
from the examples in a seeded random order, deferring an example whose texts are already in
the batch to a later batch (as sentence-transformers' NoDuplicatesBatchSampler does), so
every example is used once per epoch except, with `drop_last`, those left at the end that
cannot fill a batch.

Texts compare exactly as strings (after tokenization two different strings may still be
equal; that is rare and left alone).
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Sequence

import numpy as np


def no_duplicate_batches(texts: Sequence[Iterable[str]], batch_size: int,
                         rng: np.random.Generator, drop_last: bool = True) -> List[List[int]]:
    """One epoch of batches of example indices, no text twice within a batch.

    Args:
        texts: per example, all its texts (query, positive, negatives).
        batch_size: examples per batch.
        rng: the run's seeded generator; the order it draws is the only randomness, so the
            same seed gives the same batches.
        drop_last: drop the examples left at the end when they cannot fill a batch (they
            conflict with each other, or are fewer than `batch_size`); else they form
            smaller last batches.

    Returns:
        Batches of indices into `texts`; each index at most once.

    Raises:
        ValueError: batch_size < 1.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1 (got {batch_size})")
    rows = [frozenset(t) for t in texts]
    # Insertion-ordered dict as an ordered set: deletion keeps the others' order.
    remaining: Dict[int, None] = dict.fromkeys(int(i) for i in rng.permutation(len(rows)))
    batches: List[List[int]] = []
    while remaining:
        batch: List[int] = []
        seen: set = set()
        for index in remaining:
            if seen.isdisjoint(rows[index]):
                batch.append(index)
                seen.update(rows[index])
                if len(batch) == batch_size:
                    break
        if len(batch) < batch_size and drop_last:
            break  # the rest cannot fill a batch without a duplicate
        for index in batch:
            del remaining[index]
        batches.append(batch)
    return batches


def epoch_rng(seed: int, epoch: int) -> np.random.Generator:
    """The generator of one epoch: every epoch its own order, reproducible from the seed
    alone (a resumed run rebuilds epoch e without drawing epochs 0..e-1 again)."""
    return np.random.default_rng([seed, epoch])
