"""Tests for bert_tf.finetune.retrieval.batching: no text twice in a batch, every example
once per epoch, deferral instead of loss, and batches fixed by the seed."""

from __future__ import annotations

import numpy as np
import pytest

from bert_tf.finetune.retrieval import batching


def examples(n=40, seed=0):
    # Queries repeat (every 7th), positives are shared by pairs of examples, negatives are
    # other examples' positives: many conflicts.
    rng = np.random.default_rng(seed)
    return [(f"q{i % 7 if i % 5 == 0 else i}", f"p{i // 2}", f"p{rng.integers(0, n // 2)}")
            for i in range(n)]


def assert_no_duplicates(texts, batches):
    for batch in batches:
        words = [t for i in batch for t in set(texts[i])]
        assert len(words) == len(set(words)), batch


def test_no_duplicates_and_every_example_once_without_drop_last():
    texts = examples()
    batches = batching.no_duplicate_batches(texts, 8, np.random.default_rng(1), drop_last=False)
    assert_no_duplicates(texts, batches)
    assert sorted(i for b in batches for i in b) == list(range(40))
    assert all(len(b) == 8 for b in batches[:3])  # full batches first, short ones at the end


def test_drop_last_keeps_full_batches_only():
    texts = examples()
    batches = batching.no_duplicate_batches(texts, 8, np.random.default_rng(1))
    assert batches and all(len(b) == 8 for b in batches)
    used = [i for b in batches for i in b]
    assert len(used) == len(set(used))
    assert_no_duplicates(texts, batches)


def test_a_conflicting_example_is_deferred_not_lost():
    # Examples 0 and 1 share a positive: never in one batch, both used.
    texts = [("a", "common"), ("b", "common"), ("c", "x"), ("d", "y")]
    for seed in range(10):
        batches = batching.no_duplicate_batches(texts, 2, np.random.default_rng(seed),
                                                drop_last=False)
        assert sorted(i for b in batches for i in b) == [0, 1, 2, 3]
        assert not any({0, 1} <= set(b) for b in batches)
    # Three examples with one shared text and batch size 2: only one full batch is possible
    # once the free example is used, so drop_last leaves the conflicting one out.
    texts = [("a", "s"), ("b", "s"), ("c", "t")]
    batches = batching.no_duplicate_batches(texts, 2, np.random.default_rng(0))
    assert len(batches) == 1 and 2 in batches[0]


def test_the_seed_fixes_the_batches():
    texts = examples()
    first = batching.no_duplicate_batches(texts, 8, batching.epoch_rng(3, 0))
    assert first == batching.no_duplicate_batches(texts, 8, batching.epoch_rng(3, 0))
    assert first != batching.no_duplicate_batches(texts, 8, batching.epoch_rng(3, 1))
    assert first != batching.no_duplicate_batches(texts, 8, batching.epoch_rng(4, 0))
    # Without conflicts the batches are the generator's permutation, cut in order.
    plain = [(f"q{i}", f"p{i}") for i in range(12)]
    order = batching.epoch_rng(5, 2).permutation(12).tolist()
    assert batching.no_duplicate_batches(plain, 4, batching.epoch_rng(5, 2)) == [
        order[:4], order[4:8], order[8:]]


def test_bad_batch_size():
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        batching.no_duplicate_batches([("a", "b")], 0, np.random.default_rng(0))
