"""A global shuffle of every record of the job, in bounded memory (a two-pass external shuffle).

Each record gets a 64-bit key, a pure function of (random_seed, task index, record index in
the task): key j of task i is the j-th uint64 of a PCG64 generator seeded with
`SeedSequence(random_seed, spawn_key=(2, i))` (`record_keys`). The key decides everything:

    shard    = key % num_shards       (each record lands in a uniformly random shard)
    position = rank of key in shard   (each shard is in uniformly random order)

So every output file is a uniform random sample of all the instances of the run, in random
order, and the bytes depend only on the seed and the tasks' records, never on the number of
workers, on memory or on how the work below is split. A distributed runner (e.g. Apache Beam)
reproduces the same files by computing the same keys, grouping by shard and sorting by key.

Pass 1 (`add`) keeps records in memory until they exceed `memory_bytes`; then it spills
them, and every later record, to temporary bucket files by the key's top bits (bucket b holds
keys in [b, b + 1) * 2**64 / num_buckets, a power of two). Pass 2 (`write_to`) reads the buckets
in key order, sorts each one by key and appends its records to their shards; a bucket that
turns out larger than the budget is split again by its next key bits first. Memory therefore
stays near `memory_bytes` whatever the corpus size, and a job that fits in memory never
touches the disk.

Temporary files live in one private directory (beside the outputs, or under `--temp_dir`),
removed by `close()` on success, error, Ctrl-C or a dead worker.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from typing import IO, List, Optional, Sequence

import numpy as np

from bert_tf import fileio
from bert_tf.errors import UserError, reason

_MAX_BUCKETS = 256  # open bucket files in pass 1 (kept well under common `ulimit -n`)
_WRITE_RECORDS = 4096  # records gathered into one write call
_KEY_BITS = 64


def record_keys(random_seed: int, task_index: int, num_records: int) -> np.ndarray:
    """The shuffle keys of one task's records: uint64 [num_records]."""
    rng = np.random.Generator(np.random.PCG64(
        np.random.SeedSequence(random_seed % (1 << 64), spawn_key=(2, task_index))))
    return rng.integers(0, 1 << 64, size=num_records, dtype=np.uint64, endpoint=False)


def _frame_starts(lengths: np.ndarray) -> np.ndarray:
    ends = np.cumsum(lengths, dtype=np.int64)
    return ends - lengths


def _top_bits(keys: np.ndarray, shift: int, bits: int) -> np.ndarray:
    """Bits [shift, shift + bits) from the top of each key, as int64 bucket numbers."""
    if bits == 0:
        return np.zeros(len(keys), np.int64)
    down = np.uint64(_KEY_BITS - shift - bits)
    return ((keys >> down) & np.uint64((1 << bits) - 1)).astype(np.int64)


class _Block:
    """Records of one bucket in memory: their keys, frame lengths and framed bytes."""

    def __init__(self, keys: np.ndarray, lengths: np.ndarray, data: np.ndarray):
        self.keys, self.lengths, self.data = keys, lengths, data

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes) + 16 * len(self.keys)


def _join(view: memoryview, starts: np.ndarray, lengths: np.ndarray) -> bytes:
    """The byte ranges [starts[i], starts[i] + lengths[i]) of `view`, back to back."""
    return b"".join([view[s:s + n] for s, n in zip(starts.tolist(), lengths.tolist())])


def _split(block: _Block, bucket_of: np.ndarray, num_buckets: int) -> List[_Block]:
    """The records of `block` grouped by bucket (stable: task order kept inside a bucket)."""
    order = np.argsort(bucket_of, kind="stable")
    counts = np.bincount(bucket_of, minlength=num_buckets)
    starts = _frame_starts(block.lengths)
    view = memoryview(block.data)
    out = []
    lo = 0
    for b in range(num_buckets):
        sel = order[lo:lo + counts[b]]
        lo += counts[b]
        lengths = block.lengths[sel]
        out.append(_Block(block.keys[sel], lengths,
                          np.frombuffer(_join(view, starts[sel], lengths), np.uint8)))
    return out


class _BucketFile:
    """A temporary file of blocks: [n, nbytes] int64, keys uint64[n], lengths int64[n], data."""

    def __init__(self, path: str, buffer_bytes: int):
        self.path = path
        self.size = 0
        try:
            self._f: Optional[IO] = (fileio.open_file(path, "wb") if fileio.is_remote(path)
                                     else open(path, "wb", buffering=buffer_bytes))
        except Exception as e:  # OSError locally, tf.errors remotely
            raise UserError(f"cannot write temporary file {path}: {reason(e)}") from None

    def append(self, block: _Block) -> None:
        if not len(block.keys):
            return
        header = np.array([len(block.keys), block.data.nbytes], np.int64)
        try:
            for part in (header, block.keys, block.lengths.astype(np.int64), block.data):
                self._f.write(part.tobytes())
        except OSError as e:  # e.g. a full disk
            raise UserError(f"cannot write temporary file {self.path}: {reason(e)} "
                            "(--temp_dir chooses where they go)") from None
        self.size += block.nbytes + 16

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None

    def read(self) -> List[_Block]:
        """Every block of the file (views of one buffer: the file is read once, not copied)."""
        self.close()
        with fileio.open_file(self.path, "rb") as f:
            raw = f.read()
        blocks = []
        pos = 0
        while pos < len(raw):
            n, nbytes = (int(v) for v in np.frombuffer(raw, np.int64, 2, pos))
            pos += 16
            keys = np.frombuffer(raw, np.uint64, n, pos)
            lengths = np.frombuffer(raw, np.int64, n, pos + 8 * n)
            pos += 16 * n
            blocks.append(_Block(keys, lengths, np.frombuffer(raw, np.uint8, nbytes, pos)))
            pos += nbytes
        return blocks


class ExternalShuffle:
    """Collects framed records (pass 1), then writes them to the shards in key order (pass 2).

    Args:
        num_shards: output files.
        random_seed: the job's seed (keys are drawn from it).
        memory_bytes: records held in memory before spilling, and the target size of a
            bucket read back in pass 2.
        temp_dir: directory for the private spill directory (created there when needed).
        expected_bytes: callable -> estimated total record bytes of the job, asked once when
            spilling starts, to choose the number of buckets.
    """

    def __init__(self, num_shards: int, random_seed: int, memory_bytes: int, temp_dir: str,
                 expected_bytes=lambda: 0):
        if memory_bytes < 1:
            raise ValueError("memory_bytes must be >= 1")
        self.num_shards = num_shards
        self.random_seed = random_seed
        self.memory_bytes = memory_bytes
        self.temp_dir = temp_dir
        self._expected_bytes = expected_bytes
        self._held: List[_Block] = []
        self._held_bytes = 0
        self._dir: Optional[str] = None
        self._buckets: List[_BucketFile] = []
        self._bucket_bits = 0
        self.files_created = 0
        self.records = 0
        self.spilled_bytes = 0

    @property
    def spill_dir(self) -> Optional[str]:
        """The private temporary directory, once spilling started."""
        return self._dir

    def add(self, task_index: int, frames: np.ndarray, lengths: np.ndarray) -> None:
        """Adds the framed records of task `task_index` (tasks may come in any order)."""
        if not len(lengths):
            return
        keys = record_keys(self.random_seed, task_index, len(lengths))
        block = _Block(keys, np.asarray(lengths, np.int64), np.asarray(frames, np.uint8))
        self.records += len(keys)
        if not self._buckets:
            self._held.append(block)
            self._held_bytes += block.nbytes
            if self._held_bytes <= self.memory_bytes:
                return
            self._start_spilling()
            held, self._held, self._held_bytes = self._held, [], 0
            for block in held:
                self._spill(block)
            return
        self._spill(block)

    def _start_spilling(self) -> None:
        expected = max(self._held_bytes, int(self._expected_bytes() or 0))
        buckets = 2 * -(-expected // self.memory_bytes)  # room for the estimate's error
        self._bucket_bits = min(max(int(buckets - 1).bit_length(), 1),
                                _MAX_BUCKETS.bit_length() - 1)
        self._dir = self._make_dir()
        self._buckets = [self._new_file(1 << self._bucket_bits)
                         for _ in range(1 << self._bucket_bits)]

    def _make_dir(self) -> str:
        path = os.path.join(self.temp_dir or ".", f".bert_tf-shuffle-{uuid.uuid4().hex[:12]}")
        try:
            fileio.makedirs(path)
        except Exception as e:
            raise UserError(f"cannot create a temporary directory under "
                            f"{self.temp_dir or '.'}: {reason(e)} (see --temp_dir)") from None
        return path

    def _new_file(self, open_files: int) -> _BucketFile:
        # The write buffers of all open bucket files together stay within a quarter of the
        # budget (8 KB to 256 KB each).
        buffer_bytes = min(max(self.memory_bytes // (4 * open_files), 1 << 13), 1 << 18)
        self.files_created += 1
        return _BucketFile(os.path.join(self._dir, f"bucket-{self.files_created:06d}"),
                           buffer_bytes)

    def _spill(self, block: _Block) -> None:
        parts = _split(block, _top_bits(block.keys, 0, self._bucket_bits), len(self._buckets))
        for bucket, part in zip(self._buckets, parts):
            bucket.append(part)
        self.spilled_bytes += block.nbytes

    def write_to(self, write) -> None:
        """Pass 2: calls `write(shard, bytes)` with every record, each shard in key order."""
        if not self._buckets:
            held, self._held, self._held_bytes = self._held, [], 0
            self._write_blocks(held, write)
            return
        for bucket in self._buckets:
            self._drain(bucket, self._bucket_bits, write)
        self._buckets = []

    def _drain(self, bucket: _BucketFile, shift: int, write) -> None:
        bucket.close()
        if bucket.size > 2 * self.memory_bytes and shift < _KEY_BITS - 8:
            # Larger than planned (the estimate was low): split it by the next key bits into
            # sub-buckets read one at a time, so no read exceeds about the budget.
            bits = min(max(int(-(-bucket.size // self.memory_bytes) - 1).bit_length(), 1), 8)
            subs = [self._new_file(1 << bits) for _ in range(1 << bits)]
            for part_block in self._read_in_parts(bucket):
                parts = _split(part_block, _top_bits(part_block.keys, shift, bits), len(subs))
                for sub, part in zip(subs, parts):
                    sub.append(part)
            self._remove(bucket)
            for sub in subs:
                self._drain(sub, shift + bits, write)
            return
        blocks = bucket.read()
        self._remove(bucket)
        self._write_blocks(blocks, write)

    def _read_in_parts(self, bucket: _BucketFile):
        """The blocks of a bucket file, one at a time (pass 1 wrote one block per task)."""
        with fileio.open_file(bucket.path, "rb") as f:
            while True:
                head = f.read(16)
                if len(head) < 16:
                    return
                n, nbytes = (int(v) for v in np.frombuffer(head, np.int64))
                keys = np.frombuffer(f.read(8 * n), np.uint64)
                lengths = np.frombuffer(f.read(8 * n), np.int64)
                data = np.frombuffer(f.read(nbytes), np.uint8)
                yield _Block(keys, lengths, data)

    def _write_blocks(self, blocks: Sequence[_Block], write) -> None:
        """Sorts the records of `blocks` by key and writes each to its shard."""
        blocks = [b for b in blocks if len(b.keys)]
        if not blocks:
            return
        keys = np.concatenate([b.keys for b in blocks])
        lengths = np.concatenate([b.lengths for b in blocks])
        starts = np.concatenate([_frame_starts(b.lengths) for b in blocks])
        block_of = np.repeat(np.arange(len(blocks)), [len(b.keys) for b in blocks])
        views = [memoryview(b.data) for b in blocks]
        order = np.argsort(keys, kind="stable")
        shard_of = (keys[order] % np.uint64(self.num_shards)).astype(np.int64)
        order = order[np.argsort(shard_of, kind="stable")]  # by shard, then by key
        ends = np.cumsum(np.bincount(shard_of, minlength=self.num_shards))
        for shard in range(self.num_shards):
            mine = order[(ends[shard - 1] if shard else 0):ends[shard]]
            for lo in range(0, len(mine), _WRITE_RECORDS):
                sel = mine[lo:lo + _WRITE_RECORDS]
                write(shard, b"".join([views[b][s:s + n] for b, s, n in zip(
                    block_of[sel].tolist(), starts[sel].tolist(), lengths[sel].tolist())]))

    def _remove(self, bucket: _BucketFile) -> None:
        with contextlib.suppress(Exception):
            fileio.remove(bucket.path)

    def close(self) -> None:
        """Removes every temporary file (safe to call more than once)."""
        for bucket in self._buckets:
            with contextlib.suppress(Exception):
                bucket.close()
        self._buckets, self._held = [], []
        if self._dir is not None:
            with contextlib.suppress(Exception):
                if fileio.is_remote(self._dir):
                    import tensorflow as tf  # remote paths have TensorFlow loaded already

                    tf.io.gfile.rmtree(self._dir)
                else:
                    shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> "ExternalShuffle":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

