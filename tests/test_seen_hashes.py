"""Tests for data_tools.prepare.seen_hashes: the --dedup hash set against a Python set."""

import numpy as np

from data_tools.prepare.seen_hashes import SeenHashes


def test_seen_hashes_matches_a_python_set_and_stays_compact():
    rng = np.random.default_rng(0)
    seen, reference = SeenHashes(), set()
    for _ in range(300):
        batch = rng.integers(0, 3000, size=rng.integers(0, 40)).astype(np.uint64)
        batch[::7] = np.uint64(2**64 - 1 - int(rng.integers(0, 3)))  # high bit set too
        new = seen.add_new(batch)
        expected = []
        for h in batch.tolist():
            expected.append(h not in reference)
            reference.add(h)
        assert new.tolist() == expected
    assert len(seen) == len(reference)
    assert len(seen._levels) <= int(np.log2(len(reference))) + 1
