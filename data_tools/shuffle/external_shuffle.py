"""A global shuffle of every record of the job, in bounded memory, writing and reading each
spilled record once, with the disk work in the worker processes.

Each record gets a 64-bit key, a pure function of (random_seed, chunk index, record index in
the chunk): key j of chunk i is the j-th uint64 of a PCG64 generator seeded with
`SeedSequence(random_seed, spawn_key=(2, i))` (`record_keys`). The key decides everything:

    shard    = key % num_shards       (each record lands in a uniformly random shard)
    position = rank of key in shard   (each shard is in uniformly random order)

Equal keys (rare) go in chunk order, then record order. So every output file is a uniform
random sample of all the instances of the run, in random order, and the bytes depend only
on the seed and the chunks' records, never on the number of workers, on memory or on how the
work below is split. A distributed runner (e.g. Apache Beam) reproduces the same files by
computing the same keys, grouping by shard and sorting by key.

A job whose records fit in `memory_bytes` never touches the disk. Otherwise, as soon as the
records held, or the estimate of the job's total (`expected_bytes`: records per input byte
so far times the input size), exceed the budget, a `SpillPlan` fixes the buckets: the 2**bits
ranges of the keys' top bits, with bits chosen so that the estimated total fills each bucket
to about half the budget. From then on every worker appends the records of its chunks to its
own bucket files (`bucket_files.spill`), counting each bucket's record bytes per shard,
and the parent spills only the few results it already holds. In the final pass
(`write_to`) the workers read, sort and group by shard one bucket each, in parallel, and
write each bucket's piece of a shard straight into the shard's file at the offset those
counts give (local uncompressed outputs; for gzip or remote ones the parent appends them in
key order). Each spilled record is therefore written once and read once (about 1.02x its
bytes with keys, lengths and headers), and memory holds at most `memory_bytes` per bucket
in flight.

If the estimate was low by a factor f > 2, buckets exceed the budget; each one then is first
cut by its next key bits (`split_unit`, in the workers), which costs those records one more
write and read: at most 2 writes and 2 reads of each record for f up to 2 * 256, and the
memory bound holds whatever f. The first level has at most 2**14 buckets (files per writer),
so the single pass holds for up to 2**13 * `memory_bytes` of records (128 GB at 16 MB);
beyond that, raise `--shuffle_memory_mb` to keep it.

Temporary files live in one private directory (beside the outputs, or under `--temp_dir`),
removed by `close()` on success, error, Ctrl-C or a dead worker.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import uuid
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from bert_tf.core import fileio
from bert_tf.core.errors import UserError, reason
from data_tools.runtime import process_pool
from data_tools.shuffle import bucket_files
from data_tools.shuffle.bucket_files import Block, SpillPlan, spill

__all__ = ["ExternalShuffle", "ShuffleStats", "SpillPlan", "record_keys", "spill"]

_MAX_BITS = 14  # first-level buckets: files per writer
_MAX_SPLIT_BITS = 8  # a bucket larger than planned is cut into at most 256
_MAX_CELLS = 1 << 22  # (bucket, shard) byte counts kept (32 MB) to write shards in place
_LAST_SPLIT_BITS = bucket_files.KEY_BITS - 2 * _MAX_SPLIT_BITS  # deeper: read as it is


def record_keys(random_seed: int, chunk_index: int, num_records: int) -> np.ndarray:
    """The shuffle keys of one chunk's records: uint64 [num_records]."""
    rng = np.random.Generator(np.random.PCG64(
        np.random.SeedSequence(random_seed % (1 << 64), spawn_key=(2, chunk_index))))
    return rng.integers(0, 1 << 64, size=num_records, dtype=np.uint64, endpoint=False)


def _bits_for(total_bytes: int, target_bytes: int, max_bits: int) -> int:
    """Key bits that cut `total_bytes` into pieces of at most about `target_bytes`."""
    pieces = -(-max(total_bytes, 1) // max(target_bytes, 1))
    return min(max(int(pieces - 1).bit_length(), 1), max_bits)


@dataclasses.dataclass
class ShuffleStats:
    """What the shuffle did, for the job's log, the benchmarks and the tests."""

    records: int = 0
    record_bytes: int = 0  # framed records added
    buckets: int = 0  # first-level buckets (0: everything stayed in memory)
    written_bytes: int = 0  # to temporary files, headers included
    worker_written_bytes: int = 0  # of which written by worker processes (`add_spilled`)
    read_bytes: int = 0  # from temporary files
    split_buckets: int = 0  # buckets cut again because the estimate was low


def _map(fn: Callable, calls: Iterable[Sequence], num_workers: int) -> Iterator:
    if num_workers <= 1:
        return (fn(*call) for call in calls)
    return process_pool.map_ordered(fn, calls, num_workers)


class ExternalShuffle:
    """Collects framed records, spilled by this process or by workers, then writes them to
    the shards in key order.

    Args:
        num_shards: output files.
        random_seed: the job's seed (keys are drawn from it).
        memory_bytes: records held in memory before spilling, and the most a bucket read
            back in the final pass should hold.
        temp_dir: directory for the private spill directory (created there when needed).
        expected_bytes: callable -> estimated total record bytes of the job, asked while
            nothing is spilled, to decide when to spill and to size the buckets.
        num_workers: processes for the final pass (1: this process).
    """

    def __init__(self, num_shards: int, random_seed: int, memory_bytes: int, temp_dir: str,
                 expected_bytes: Callable[[], int] = lambda: 0, num_workers: int = 1):
        if memory_bytes < 1:
            raise ValueError("memory_bytes must be >= 1")
        self.num_shards = num_shards
        self.random_seed = random_seed
        self.memory_bytes = memory_bytes
        self.temp_dir = temp_dir
        self.num_workers = num_workers
        self._expected_bytes = expected_bytes
        self._held: List[Block] = []
        self._held_bytes = 0
        self.plan: Optional[SpillPlan] = None
        self.stats = ShuffleStats()
        # Record bytes of each first-level bucket in each shard (None: too many to keep),
        # and of the pieces of buckets cut again: where each piece of a shard goes.
        self._cells: Optional[np.ndarray] = None
        self._piece_cells: Dict[Tuple[int, int], np.ndarray] = {}

    @property
    def spill_dir(self) -> Optional[str]:
        """The private temporary directory, once spilling started."""
        return self.plan.directory if self.plan else None

    @property
    def records(self) -> int:
        return self.stats.records

    def add(self, chunk_index: int, frames: np.ndarray, lengths: np.ndarray) -> None:
        """Adds the framed records of chunk `chunk_index` (chunks may come in any order):
        held in memory, or spilled by this process once spilling started."""
        if not len(lengths):
            return
        keys = record_keys(self.random_seed, chunk_index, len(lengths))
        block = Block(chunk_index, keys, np.asarray(lengths, np.int64),
                      np.asarray(frames, np.uint8))
        self.stats.records += len(keys)
        self.stats.record_bytes += int(block.data.nbytes)
        if self.plan is None:
            self._held.append(block)
            self._held_bytes += block.file_bytes
            if (self._held_bytes <= self.memory_bytes
                    and int(self._expected_bytes() or 0) <= self.memory_bytes):
                return
            self._start_spilling()
            held, self._held, self._held_bytes = self._held, [], 0
            for b in held:
                self._spill(b)
            return
        self._spill(block)

    def add_spilled(self, num_records: int, record_bytes: int,
                    spilled: Tuple[np.ndarray, Optional[Tuple[np.ndarray, np.ndarray]]]
                    ) -> None:
        """Counts the records of a chunk that a worker spilled itself (`spill` under `plan`).

        Args:
            num_records: the chunk's records.
            record_bytes: their framed bytes.
            spilled: what `spill` returned: bytes written to each bucket, and the record
                bytes of the (bucket, shard) cells.
        """
        self.stats.records += num_records
        self.stats.record_bytes += record_bytes
        self.stats.worker_written_bytes += self._count(*spilled)

    def _spill(self, block: Block) -> None:
        self._count(*spill(self.plan, block.chunk, block.keys, block.lengths, block.data))

    def _count(self, written: np.ndarray, cells) -> int:
        self.stats.written_bytes += int(written.sum())
        if self._cells is not None:
            np.add.at(self._cells.reshape(-1), cells[0], cells[1])
        return int(written.sum())

    def _start_spilling(self) -> None:
        # The estimate counts record bytes; files also hold a key and a length per record.
        held_data = sum(int(b.data.nbytes) for b in self._held)
        expected = max(self._held_bytes,
                       int(self._expected_bytes() or 0) * self._held_bytes // max(held_data, 1))
        # Half the budget per bucket at the estimate: room for an estimate low by 2x.
        bits = _bits_for(expected, self.memory_bytes // 2, _MAX_BITS)
        counted = (1 << bits) * self.num_shards <= _MAX_CELLS
        self.plan = SpillPlan(self._make_dir(), bits, self.num_shards if counted else 0)
        self.stats.buckets = 1 << bits
        if counted:
            self._cells = np.zeros((1 << bits, self.num_shards), np.int64)

    def _make_dir(self) -> str:
        path = os.path.join(self.temp_dir or ".", f".bert_tf-shuffle-{uuid.uuid4().hex[:12]}")
        try:
            fileio.makedirs(path)
        except Exception as e:
            raise UserError(f"cannot create a temporary directory under "
                            f"{self.temp_dir or '.'}: {reason(e)} (see --temp_dir)") from None
        return path

    def write_to(self, write: Callable[[int, bytes], None],
                 shard_paths: Optional[Sequence[str]] = None,
                 count: Callable[[int, int], None] = lambda shard, n: None) -> None:
        """The final pass: every record to its shard, each shard in key order, the buckets
        read and sorted by `num_workers` processes.

        Args:
            write: `write(shard, bytes)` appends to a shard.
            shard_paths: the shards' files, if local, uncompressed and empty: the workers
                then write each bucket's pieces into them in place, at offsets from the
                counts of the first pass, and `write` is not called for spilled records
                (nothing goes through this process).
            count: `count(shard, bytes)` for the bytes written in place.
        """
        if self.plan is None:
            held, self._held, self._held_bytes = self._held, [], 0
            self._emit(*bucket_files.sort_blocks(held, self.num_shards), write)
            return
        directory = self.plan.directory
        units = bucket_files.list_units(directory)
        while True:  # only when the estimate was low: cut the buckets too large to read
            large = [(directory, bits, prefix, writers,
                      _bits_for(size, self.memory_bytes // 2, _MAX_SPLIT_BITS),
                      self.num_shards)
                     for (bits, prefix), (writers, size) in units.items()
                     if size > self.memory_bytes and bits <= _LAST_SPLIT_BITS]
            if self._cells is None:  # not counted: pieces are not written in place either
                large = [u[:-1] + (0,) for u in large]
            if not large:
                break
            splits = _map(bucket_files.split_unit, large, self.num_workers)
            with contextlib.closing(splits):
                for (_, bits, prefix, _, extra, _), (read, written, cells) in zip(large, splits):
                    self.stats.read_bytes += read
                    self.stats.written_bytes += written
                    for sub in range(1 << extra if cells is not None else 0):
                        self._piece_cells[bits + extra, (prefix << extra) | sub] = cells[sub]
            self.stats.split_buckets += len(large)
            units = bucket_files.list_units(directory)
        order = sorted(units, key=lambda u: bucket_files.unit_start(*u))
        in_place = shard_paths is not None and self._cells is not None
        offsets = np.zeros(self.num_shards, np.int64)

        def calls():
            for bits, prefix in order:
                call = (directory, bits, prefix, units[bits, prefix][0], self.num_shards)
                if in_place:
                    cells = self._unit_cells(bits, prefix)
                    yield call + (list(shard_paths), offsets.copy())
                    offsets[:] += cells
                else:
                    yield call

        sorted_units = _map(bucket_files.sort_unit, calls(), self.num_workers)
        with contextlib.closing(sorted_units):
            for (bits, prefix), (ends, data, read) in zip(order, sorted_units):
                self.stats.read_bytes += read
                if not in_place:
                    self._emit(ends, data, write)
                    continue
                sizes = np.diff(ends, prepend=0)
                if not np.array_equal(sizes, self._unit_cells(bits, prefix)):
                    raise RuntimeError(f"bucket {bits}-{prefix:x}: its shard sizes differ "
                                       "from the first pass's counts")
                for shard, n in enumerate(sizes.tolist()):
                    if n:
                        count(shard, n)

    def _unit_cells(self, bits: int, prefix: int) -> np.ndarray:
        """int64 [num_shards]: record bytes of a bucket in each shard."""
        if bits == self.plan.bits:
            return self._cells[prefix]
        return self._piece_cells[bits, prefix]

    def _emit(self, ends: np.ndarray, data: bytes, write) -> None:
        lo = 0
        for shard, hi in enumerate(ends.tolist()):
            if hi > lo:  # bytes, not a view: tf.io.gfile writes only bytes
                write(shard, data if hi - lo == len(data) else data[lo:hi])
            lo = hi

    def close(self) -> None:
        """Removes every temporary file (safe to call more than once)."""
        self._held = []
        if self.plan is not None:
            with contextlib.suppress(Exception):
                if fileio.is_remote(self.plan.directory):
                    import tensorflow as tf  # remote paths have TensorFlow loaded already

                    tf.io.gfile.rmtree(self.plan.directory)
                else:
                    shutil.rmtree(self.plan.directory, ignore_errors=True)
            self.plan = None

    def __enter__(self) -> "ExternalShuffle":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
