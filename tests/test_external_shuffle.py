"""Tests of data_tools.shuffle.external_shuffle: the keys, and the same bytes in memory,
spilled to buckets, and with buckets split again in pass 2 (an estimate far too low), with
nothing left behind."""

import os

import numpy as np
import pytest

from bert_tf.core.errors import UserError
from data_tools.runtime import process_pool
from data_tools.shuffle import external_shuffle


def _chunks(num_chunks=6, per_chunk=300, seed=0):
    """Framed-record stand-ins: record j of chunk t is b"<t>:<j>xx...|", of random length."""
    rng = np.random.default_rng(seed)
    out = []
    for t in range(num_chunks):
        recs = [f"{t}:{j}".encode().ljust(int(rng.integers(8, 200)), b"x") + b"|"
                for j in range(per_chunk)]
        out.append((t, np.frombuffer(b"".join(recs), np.uint8),
                    np.array([len(r) for r in recs], np.int64)))
    return out


def _run(chunks, num_shards, memory_bytes, temp_dir, expected=lambda: 0, order=None,
         num_workers=1, in_place=None):
    """The shards' bytes, whether it spilled, and the shuffle. With `in_place` (a directory),
    spilled records are written by the final pass's processes into files there."""
    shards = [[] for _ in range(num_shards)]
    paths = counted = None
    if in_place is not None:
        in_place.mkdir(exist_ok=True)
        paths = [str(in_place / f"shard-{s}") for s in range(num_shards)]
        for p in paths:
            open(p, "wb").close()
        counted = [0] * num_shards
    sh = external_shuffle.ExternalShuffle(num_shards, 42, memory_bytes, str(temp_dir), expected,
                                          num_workers)
    with sh:
        for t in (order or range(len(chunks))):
            sh.add(*chunks[t])
        sh.write_to(lambda s, data: shards[s].append(bytes(data)), paths,
                    lambda s, n: counted.__setitem__(s, counted[s] + n))
    if paths is None:
        return [b"".join(s) for s in shards], sh.stats.buckets > 0, sh
    out = []
    for s, p in enumerate(paths):
        with open(p, "rb") as f:
            out.append(b"".join(shards[s]) + f.read())  # one of the two is empty
        assert counted[s] == len(out[-1]) - sum(len(x) for x in shards[s])
        os.remove(p)
    return out, sh.stats.buckets > 0, sh


def _records(blob):
    return [r for r in blob.split(b"|") if r]


def test_keys_are_a_pure_function_of_seed_chunk_and_position():
    a = external_shuffle.record_keys(7, 3, 10)
    assert a.dtype == np.uint64 and len(set(a.tolist())) == 10
    np.testing.assert_array_equal(external_shuffle.record_keys(7, 3, 4), a[:4])  # prefix-stable
    assert not np.array_equal(external_shuffle.record_keys(7, 4, 10), a)
    assert not np.array_equal(external_shuffle.record_keys(8, 3, 10), a)
    # The documented definition, for other runners (e.g. Beam) to reproduce.
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(7, spawn_key=(2, 3))))
    np.testing.assert_array_equal(rng.integers(0, 1 << 64, 10, dtype=np.uint64), a)


def test_shard_and_order_follow_the_keys(tmp_path):
    chunks = _chunks()
    out, spilled, _ = _run(chunks, 3, 1 << 30, tmp_path)
    assert not spilled and os.listdir(tmp_path) == []
    for s in range(3):
        expect = []
        for t, _, lengths in chunks:
            keys = external_shuffle.record_keys(42, t, len(lengths))
            expect += [(k, f"{t}:{j}".encode()) for j, k in enumerate(keys.tolist())
                       if k % 3 == s]
        got = [r.split(b"x")[0] for r in _records(out[s])]
        assert got == [name for _, name in sorted(expect)]


def test_spilled_and_resplit_runs_write_the_same_bytes_and_clean_up(tmp_path):
    chunks = _chunks()
    total = sum(int(f.nbytes) for _, f, _ in chunks)
    in_memory, spilled, _ = _run(chunks, 4, 1 << 30, tmp_path / "a")
    assert not spilled
    # A good estimate: buckets of at most half the budget, each record written once and read
    # once. With 16 bytes of key and length per record of about 100 bytes, and block headers,
    # the files hold 1.16x the records: 2 * 8 * 1.16 -> 32 buckets.
    bucketed, spilled, sh = _run(chunks, 4, total // 8, tmp_path, expected=lambda: total)
    st = sh.stats
    assert spilled and bucketed == in_memory
    assert (st.buckets, st.split_buckets, st.record_bytes) == (32, 0, total)
    assert st.read_bytes == st.written_bytes < 1.25 * total
    # The same with the final pass in two worker processes, which also write the shards
    # in place.
    parallel_out, _, sh = _run(chunks, 4, total // 8, tmp_path, expected=lambda: total,
                               num_workers=2)
    assert parallel_out == in_memory and sh.stats.read_bytes == st.read_bytes
    in_place, _, _ = _run(chunks, 4, total // 8, tmp_path / "a", expected=lambda: total,
                          num_workers=2, in_place=tmp_path / "out")
    assert in_place == in_memory
    # No estimate at all: the buckets are sized from the first chunk alone (a sixth of the
    # records), all 16 are too large and are cut again, which costs a second write and read.
    resplit, spilled, sh2 = _run(chunks, 4, total // 40, tmp_path / "a", expected=lambda: 0,
                                 num_workers=2, in_place=tmp_path / "out")
    st2 = sh2.stats
    assert spilled and resplit == in_memory and st2.buckets == 16 and st2.split_buckets == 16
    assert st2.read_bytes == st2.written_bytes > 1.9 * st.written_bytes
    assert os.listdir(tmp_path / "a") == [] and os.listdir(tmp_path / "out") == []
    os.rmdir(tmp_path / "a")
    os.rmdir(tmp_path / "out")
    assert os.listdir(tmp_path) == []  # every private directory removed
    # Chunks arriving out of order give the same files (keys depend on the chunk index).
    shuffled, _, _ = _run(chunks, 4, total // 8, tmp_path, order=[3, 1, 0, 5, 2, 4])
    assert shuffled == in_memory


def test_records_the_old_256_buckets_split_again_are_written_and_read_once(tmp_path):
    """A thousand budgets of small records: the shuffle before this one had at most 256
    buckets and cut again every one larger than twice the budget, so every record was
    written and read twice; the buckets are now sized from the estimate."""
    rng = np.random.default_rng(1)
    chunks = []
    for t in range(4):
        lengths = rng.integers(16, 48, 40_000)
        chunks.append((t, rng.integers(0, 256, int(lengths.sum()), dtype=np.uint8), lengths))
    total = sum(int(f.nbytes) for _, f, _ in chunks)
    memory = total // 600  # ~270 records
    assert total / 256 > 2 * memory  # the old trigger
    expect, _, _ = _run(chunks, 2, 1 << 30, tmp_path / "a")
    out, spilled, sh = _run(chunks, 2, memory, tmp_path, expected=lambda: total)
    st = sh.stats
    assert out == expect and (st.buckets, st.split_buckets) == (2048, 0)
    # Once each: the records, their keys and lengths (16 bytes for a record of 32 bytes on
    # average), and a 24-byte header per block of about 20 records.
    assert st.read_bytes == st.written_bytes < 1.6 * total
    assert os.listdir(tmp_path) == []


def test_chunks_spilled_by_worker_processes_give_the_same_bytes(tmp_path):
    """The parent spills its first result; worker processes spill the others to their own
    files (as the job's workers do) and report only counts."""
    chunks = _chunks()
    total = sum(int(f.nbytes) for _, f, _ in chunks)
    expect, _, _ = _run(chunks, 3, 1 << 30, tmp_path / "a")
    shards = [[] for _ in range(3)]
    with external_shuffle.ExternalShuffle(3, 42, total // 8, str(tmp_path), lambda: total, 2) as sh:
        sh.add(*chunks[0])  # the estimate exceeds the budget: spilling starts at once
        assert sh.plan is not None and sh.plan.bits == 5
        calls = [(sh.plan, t, external_shuffle.record_keys(42, t, len(n)), n, f)
                 for t, f, n in chunks[1:]]
        spills = process_pool.map_ordered(external_shuffle.spill, calls, 2)
        for (_, f, n), spilled in zip(chunks[1:], spills):
            sh.add_spilled(len(n), f.nbytes, spilled)
        writers = {name.split("-", 2)[2] for name in os.listdir(sh.spill_dir)}
        assert f"p{os.getpid()}" in writers and len(writers) >= 2
        sh.write_to(lambda s, data: shards[s].append(bytes(data)))
        assert sh.stats.records == sum(len(n) for _, _, n in chunks)
        assert sh.stats.read_bytes == sh.stats.written_bytes and sh.stats.split_buckets == 0
    assert [b"".join(s) for s in shards] == expect and os.listdir(tmp_path) == []


def test_every_shard_is_a_uniform_sample_in_random_order(tmp_path):
    chunks = _chunks(num_chunks=20, per_chunk=500)
    out, _, _ = _run(chunks, 2, 1 << 30, tmp_path)
    sizes = [len(_records(b)) for b in out]
    assert sum(sizes) == 10_000 and abs(sizes[0] - 5000) < 4 * 50  # binomial sd = 50
    for blob in out:
        chunk_of = np.array([int(r.split(b":")[0]) for r in _records(blob)])
        pos = np.arange(len(chunk_of))
        # Chunk (= corpus) order is gone: rank correlation ~ N(0, 1/sqrt(n)).
        assert abs(np.corrcoef(pos, chunk_of)[0, 1]) < 0.06
        # Records of one chunk are not bunched: adjacent pairs from one chunk ~ 1/20.
        assert np.mean(chunk_of[1:] == chunk_of[:-1]) < 0.07


def test_close_removes_the_spill_directory_after_an_error(tmp_path):
    chunks = _chunks()
    sh = external_shuffle.ExternalShuffle(2, 1, 1000, str(tmp_path))
    with pytest.raises(RuntimeError):
        with sh:
            for t in chunks:
                sh.add(*t)
            assert sh.spill_dir and os.listdir(sh.spill_dir)
            raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []


def test_unwritable_temp_dir_is_a_user_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    sh = external_shuffle.ExternalShuffle(2, 1, 1000, str(blocker / "sub"))
    with pytest.raises(UserError, match="cannot create a temporary directory"):
        for t in _chunks():
            sh.add(*t)
    sh.close()


def test_a_remote_temp_dir_gets_one_file_per_chunk_and_bucket():
    """tf.io.gfile cannot append: remotely each chunk writes its own bucket files once (ram://
    is a TensorFlow filesystem, as gs:// is), and buckets cut again keep one file per block."""
    import tensorflow as tf

    chunks = _chunks()
    total = sum(int(f.nbytes) for _, f, _ in chunks)
    expect, _, _ = _run(chunks, 3, 1 << 30, "unused")
    root = "ram://shuffle_test/tmp"
    tf.io.gfile.makedirs(root)
    for expected, memory, split in ((lambda: total, total // 8, 0), (lambda: 0, total // 16, 8)):
        shards = [[] for _ in range(3)]
        with external_shuffle.ExternalShuffle(3, 42, memory, root, expected) as sh:
            for t in chunks:
                sh.add(*t)
            writers = {name.split("-", 2)[2] for name in tf.io.gfile.listdir(sh.spill_dir)}
            assert writers == {f"c{t}" for t in range(len(chunks))}
            sh.write_to(lambda s, data, shards=shards: shards[s].append(bytes(data)))
        assert [b"".join(s) for s in shards] == expect
        assert sh.stats.split_buckets == split and tf.io.gfile.listdir(root) == []
