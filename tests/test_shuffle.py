"""Tests of data_tools.shuffle: the keys, and the same bytes in memory, spilled to buckets, and
with buckets split again in pass 2 (an estimate far too low), with nothing left behind."""

import os

import numpy as np
import pytest

from bert_tf.errors import UserError
from data_tools import shuffle


def _tasks(num_tasks=6, per_task=300, seed=0):
    """Framed-record stand-ins: record j of task t is b"<t>:<j>xx...|", of random length."""
    rng = np.random.default_rng(seed)
    out = []
    for t in range(num_tasks):
        recs = [f"{t}:{j}".encode().ljust(int(rng.integers(8, 200)), b"x") + b"|"
                for j in range(per_task)]
        out.append((t, np.frombuffer(b"".join(recs), np.uint8),
                    np.array([len(r) for r in recs], np.int64)))
    return out


def _run(tasks, num_shards, memory_bytes, temp_dir, expected=lambda: 0, order=None):
    shards = [[] for _ in range(num_shards)]
    sh = shuffle.ExternalShuffle(num_shards, 42, memory_bytes, str(temp_dir), expected)
    with sh:
        for t in (order or range(len(tasks))):
            sh.add(*tasks[t])
        sh.write_to(lambda s, data: shards[s].append(bytes(data)))
        spilled = sh.spill_dir is not None
    return [b"".join(s) for s in shards], spilled, sh


def _records(blob):
    return [r for r in blob.split(b"|") if r]


def test_keys_are_a_pure_function_of_seed_task_and_position():
    a = shuffle.record_keys(7, 3, 10)
    assert a.dtype == np.uint64 and len(set(a.tolist())) == 10
    np.testing.assert_array_equal(shuffle.record_keys(7, 3, 4), a[:4])  # prefix-stable
    assert not np.array_equal(shuffle.record_keys(7, 4, 10), a)
    assert not np.array_equal(shuffle.record_keys(8, 3, 10), a)
    # The documented definition, for other runners (e.g. Beam) to reproduce.
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(7, spawn_key=(2, 3))))
    np.testing.assert_array_equal(rng.integers(0, 1 << 64, 10, dtype=np.uint64), a)


def test_shard_and_order_follow_the_keys(tmp_path):
    tasks = _tasks()
    out, spilled, _ = _run(tasks, 3, 1 << 30, tmp_path)
    assert not spilled and os.listdir(tmp_path) == []
    for s in range(3):
        expect = []
        for t, _, lengths in tasks:
            keys = shuffle.record_keys(42, t, len(lengths))
            expect += [(k, f"{t}:{j}".encode()) for j, k in enumerate(keys.tolist())
                       if k % 3 == s]
        got = [r.split(b"x")[0] for r in _records(out[s])]
        assert got == [name for _, name in sorted(expect)]


def test_spilled_and_resplit_runs_write_the_same_bytes_and_clean_up(tmp_path):
    tasks = _tasks()
    total = sum(int(f.nbytes) for _, f, _ in tasks)
    in_memory, spilled, _ = _run(tasks, 4, 1 << 30, tmp_path / "a")
    assert not spilled
    # A good estimate: spilled to buckets of about the budget.
    bucketed, spilled, sh = _run(tasks, 4, total // 8, tmp_path, expected=lambda: total)
    assert spilled and bucketed == in_memory and sh.files_created >= 8
    # No estimate at all: the few first-level buckets are too large and split again.
    resplit, spilled, sh2 = _run(tasks, 4, total // 40, tmp_path, expected=lambda: 0)
    assert spilled and resplit == in_memory and sh2.files_created > 4
    assert os.listdir(tmp_path) == []  # every private directory removed
    # Tasks arriving out of order give the same files (keys depend on the task index).
    shuffled, _, _ = _run(tasks, 4, total // 8, tmp_path, order=[3, 1, 0, 5, 2, 4])
    assert shuffled == in_memory


def test_every_shard_is_a_uniform_sample_in_random_order(tmp_path):
    tasks = _tasks(num_tasks=20, per_task=500)
    out, _, _ = _run(tasks, 2, 1 << 30, tmp_path)
    sizes = [len(_records(b)) for b in out]
    assert sum(sizes) == 10_000 and abs(sizes[0] - 5000) < 4 * 50  # binomial sd = 50
    for blob in out:
        task_of = np.array([int(r.split(b":")[0]) for r in _records(blob)])
        pos = np.arange(len(task_of))
        # Task (= corpus) order is gone: rank correlation ~ N(0, 1/sqrt(n)).
        assert abs(np.corrcoef(pos, task_of)[0, 1]) < 0.06
        # Records of one task are not bunched: adjacent pairs from one task ~ 1/20.
        assert np.mean(task_of[1:] == task_of[:-1]) < 0.07


def test_close_removes_the_spill_directory_after_an_error(tmp_path):
    tasks = _tasks()
    sh = shuffle.ExternalShuffle(2, 1, 1000, str(tmp_path))
    with pytest.raises(RuntimeError):
        with sh:
            for t in tasks:
                sh.add(*t)
            assert sh.spill_dir and os.listdir(sh.spill_dir)
            raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []


def test_unwritable_temp_dir_is_a_user_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    sh = shuffle.ExternalShuffle(2, 1, 1000, str(blocker / "sub"))
    with pytest.raises(UserError, match="cannot create a temporary directory"):
        for t in _tasks():
            sh.add(*t)
    sh.close()
