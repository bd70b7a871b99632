"""The bucket files of the local shuffle, and the work on them that runs in worker processes.

A bucket is a range of shuffle keys: unit (bits, prefix) holds the records whose key's top
`bits` bits equal `prefix`. A process spills a chunk's records by cutting them into the
first-level buckets and appending one block per bucket to its own file of that bucket
(`spill`); no other process writes that file, so workers spill in parallel without locks.
In the final pass a worker reads every file of one bucket, sorts its records by key and
hands them back grouped by shard (`sort_unit`); a bucket larger than planned is first cut
by its next key bits into smaller ones (`split_unit`, one more write and read of its
records).

File name: `<bits>-<prefix hex>-<writer>` in the job's private directory; writer is `p<pid>`
for a local directory (appended to by that process only) or `c<chunk>` for a remote one
(tf.io.gfile cannot append, so each chunk writes its own files once), and `r` (remotely
`r<file>_<block>`) for the pieces of a split bucket (one chunk splits a bucket).

A file is a sequence of blocks, each the records of one chunk:
    int64 [n, nbytes, chunk] | uint64 keys[n] | int64 lengths[n] | data (nbytes)
"""

from __future__ import annotations

import dataclasses
import os
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from bert_tf.core import fileio
from bert_tf.core.errors import UserError, reason

KEY_BITS = 64
_HEADER = 24  # bytes of a block's header


@dataclasses.dataclass(frozen=True)
class SpillPlan:
    """Where and how finely records are spilled; decided once, then sent with every chunk.

    Attributes:
        directory: the job's private temporary directory.
        bits: first-level buckets are the 2**bits ranges of the keys' top bits.
        num_shards: output files (shard = key % num_shards), to count the record bytes of
            each bucket in each shard; 0: not counted (too many buckets and shards).
    """

    directory: str
    bits: int
    num_shards: int = 0


@dataclasses.dataclass
class Block:
    """Records of one chunk in one bucket: keys uint64 [n], frame lengths int64 [n] and the
    framed records back to back (uint8 [sum(lengths)])."""

    chunk: int
    keys: np.ndarray
    lengths: np.ndarray
    data: np.ndarray

    @property
    def file_bytes(self) -> int:
        return _HEADER + 16 * len(self.keys) + int(self.data.nbytes)


def top_bits(keys: np.ndarray, shift: int, bits: int) -> np.ndarray:
    """Bits [shift, shift + bits) from the top of each key, as int64 bucket numbers [n]."""
    if bits == 0:
        return np.zeros(len(keys), np.int64)
    down = np.uint64(KEY_BITS - shift - bits)
    return ((keys >> down) & np.uint64((1 << bits) - 1)).astype(np.int64)


def unit_start(bits: int, prefix: int) -> int:
    """The smallest key of unit (bits, prefix): units are written in this order."""
    return prefix << (KEY_BITS - bits)


def unit_file(directory: str, bits: int, prefix: int, writer: str) -> str:
    return os.path.join(directory, f"{bits:02d}-{prefix:x}-{writer}")


def writer_name(directory: str, chunk: int) -> str:
    """This process's writer name for the records of `chunk` (see the module docstring)."""
    return f"c{chunk}" if fileio.is_remote(directory) else f"p{os.getpid()}"


def _starts(lengths: np.ndarray) -> np.ndarray:
    return np.cumsum(lengths, dtype=np.int64) - lengths


def _cut(block: Block, bucket_of: np.ndarray, num_buckets: int) -> Iterator[Tuple[int, Block]]:
    """(bucket, its records of `block`) for every non-empty bucket, records in chunk order."""
    order = np.argsort(bucket_of, kind="stable")
    ends = np.cumsum(np.bincount(bucket_of, minlength=num_buckets))
    starts = _starts(block.lengths)
    view = memoryview(block.data)
    for b in np.flatnonzero(np.diff(ends, prepend=0)).tolist():
        sel = order[(ends[b - 1] if b else 0):ends[b]]
        lengths = block.lengths[sel]
        data = b"".join([view[s:s + n] for s, n in zip(starts[sel].tolist(), lengths.tolist())])
        yield b, Block(block.chunk, block.keys[sel], lengths, np.frombuffer(data, np.uint8))


def _write(path: str, blocks: Sequence[Block], append: bool) -> None:
    parts = []
    for block in blocks:
        parts += [np.array([len(block.keys), block.data.nbytes, block.chunk], np.int64).tobytes(),
                  block.keys.tobytes(), block.lengths.astype(np.int64).tobytes(),
                  block.data.tobytes()]
    payload = b"".join(parts)
    try:
        if append:  # one write(2) per block and file: O_APPEND keeps blocks whole
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                view = memoryview(payload)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
        else:
            with fileio.open_file(path, "wb") as f:
                f.write(payload)
    except Exception as e:  # OSError locally (e.g. a full disk), tf.errors remotely
        raise UserError(f"cannot write temporary file {path}: {reason(e)} "
                        "(--temp_dir chooses where they go)") from None


def spill(plan: SpillPlan, chunk: int, keys: np.ndarray, lengths: np.ndarray,
          frames: np.ndarray) -> Tuple[np.ndarray, Optional[Tuple[np.ndarray, np.ndarray]]]:
    """Appends the records of `chunk` to this process's files of their first-level buckets.

    Args:
        plan: the spill directory and the first-level bucket bits.
        chunk: the chunk index (kept with the records: ties of equal keys go in chunk order).
        keys: uint64 [n], the records' shuffle keys.
        lengths: int64 [n], frame lengths.
        frames: uint8 [sum(lengths)], the framed records back to back.

    Returns:
        (int64 [2**plan.bits]: bytes written to each bucket, and the record bytes of each
        (bucket, shard) cell, which place each bucket's piece of a shard in the final pass:
        (cells int64 [k] = bucket * num_shards + shard, bytes int64 [k]) for the k cells
        with records, at most one per record; None if plan.num_shards is 0).
    """
    block = Block(chunk, keys, np.asarray(lengths, np.int64), np.asarray(frames, np.uint8))
    num_buckets = 1 << plan.bits
    written = np.zeros(num_buckets, np.int64)
    writer = writer_name(plan.directory, chunk)
    append = not fileio.is_remote(plan.directory)
    bucket_of = top_bits(keys, 0, plan.bits)
    for b, part in _cut(block, bucket_of, num_buckets):
        _write(unit_file(plan.directory, plan.bits, b, writer), [part], append)
        written[b] = part.file_bytes
    cells = None
    if plan.num_shards:  # sparse: a chunk's records touch few of the cells
        cell = bucket_of * plan.num_shards + (keys % np.uint64(plan.num_shards)).astype(
            np.int64)
        present, which = np.unique(cell, return_inverse=True)
        cells = (present, np.bincount(which, weights=block.lengths).astype(np.int64))
    return written, cells


def shard_bytes(bucket_of: np.ndarray, keys: np.ndarray, lengths: np.ndarray,
                num_buckets: int, num_shards: int) -> np.ndarray:
    """int64 [num_buckets, num_shards]: record bytes of each bucket in each shard."""
    cell = bucket_of * num_shards + (keys % np.uint64(num_shards)).astype(np.int64)
    sums = np.bincount(cell, weights=lengths, minlength=num_buckets * num_shards)
    return sums.astype(np.int64).reshape(num_buckets, num_shards)


def _blocks(raw: bytes) -> Iterator[Block]:
    pos = 0
    while pos < len(raw):
        n, nbytes, chunk = (int(v) for v in np.frombuffer(raw, np.int64, 3, pos))
        pos += _HEADER
        keys = np.frombuffer(raw, np.uint64, n, pos)
        lengths = np.frombuffer(raw, np.int64, n, pos + 8 * n)
        pos += 16 * n
        yield Block(chunk, keys, lengths, np.frombuffer(raw, np.uint8, nbytes, pos))
        pos += nbytes


def _read(path: str) -> bytes:
    try:
        with fileio.open_file(path, "rb") as f:
            return f.read()
    except Exception as e:
        raise UserError(f"cannot read temporary file {path}: {reason(e)}") from None


def _remove(path: str) -> None:
    try:
        fileio.remove(path)
    except Exception:  # the directory goes at the end of the job anyway
        pass


def _sorted_views(blocks: Sequence[Block], num_shards: int
                  ) -> Tuple[np.ndarray, np.ndarray, List[memoryview]]:
    """The records of `blocks` in output order (by shard, then key) as views of the blocks:
    (records per shard int64 [num_shards], bytes per shard int64 [num_shards], views)."""
    # In chunk order, so that a stable sort by key leaves equal keys in chunk order, then in
    # record order.
    blocks = sorted((b for b in blocks if len(b.keys)), key=lambda b: b.chunk)
    if not blocks:
        return np.zeros(num_shards, np.int64), np.zeros(num_shards, np.int64), []
    keys = np.concatenate([b.keys for b in blocks])
    lengths = np.concatenate([b.lengths for b in blocks])
    starts = np.concatenate([_starts(b.lengths) for b in blocks])
    block_of = np.repeat(np.arange(len(blocks)), [len(b.keys) for b in blocks])
    order = np.argsort(keys, kind="stable")
    if num_shards > 1:
        shard_of = (keys[order] % np.uint64(num_shards)).astype(np.int64)
        counts = np.bincount(shard_of, minlength=num_shards)
        sizes = np.bincount(shard_of, weights=lengths[order], minlength=num_shards)
        order = order[np.argsort(shard_of, kind="stable")]  # by shard, then by key
    else:
        counts, sizes = np.array([len(keys)]), np.array([lengths.sum()])
    data = [memoryview(b.data) for b in blocks]
    views = [data[b][s:s + n] for b, s, n in zip(
        block_of[order].tolist(), starts[order].tolist(), lengths[order].tolist())]
    return counts.astype(np.int64), sizes.astype(np.int64), views


def sort_blocks(blocks: Sequence[Block], num_shards: int) -> Tuple[np.ndarray, bytes]:
    """The records of `blocks` grouped by shard (key % num_shards), each shard in key order.

    Equal keys (rare: 64 random bits) go in chunk order, then in record order, as on Beam;
    so the order of `blocks` does not matter (each chunk has at most one block).

    Returns:
        (ends int64 [num_shards]: shard s is data[ends[s-1]:ends[s]], data bytes).
    """
    _, sizes, views = _sorted_views(blocks, num_shards)
    return np.cumsum(sizes), b"".join(views)


def sort_unit(directory: str, bits: int, prefix: int, writers: Sequence[str],
              num_shards: int, shard_paths: Optional[Sequence[str]] = None,
              offsets: Optional[np.ndarray] = None) -> Tuple[np.ndarray, bytes, int]:
    """Reads, removes and sorts one bucket (one worker's call of the final pass).

    Args:
        directory, bits, prefix, writers: the bucket's files.
        num_shards: output files.
        shard_paths: local uncompressed files of the shards, or None. Given, the bucket's
            piece of shard s is written into shard_paths[s] at offsets[s] (pieces of
            different buckets do not overlap, so workers write them in parallel) and no
            data is returned.
        offsets: int64 [num_shards], with shard_paths.

    Returns:
        (shard ends, data) as `sort_blocks` (data empty when written here), and the bytes
        read.
    """
    raws = [_read(unit_file(directory, bits, prefix, w)) for w in writers]
    for w in writers:
        _remove(unit_file(directory, bits, prefix, w))
    blocks = [block for raw in raws for block in _blocks(raw)]
    read = sum(len(raw) for raw in raws)
    if shard_paths is None:
        ends, data = sort_blocks(blocks, num_shards)
        return ends, data, read
    counts, sizes, views = _sorted_views(blocks, num_shards)
    lo = 0
    for shard, n in enumerate(counts.tolist()):
        if n:
            _write_at(shard_paths[shard], views[lo:lo + n], int(offsets[shard]))
        lo += n
    return np.cumsum(sizes), b"", read


_IOV_MAX = 1024  # buffers per pwritev(2) (the POSIX minimum of IOV_MAX)


def _write_at(path: str, views: List[memoryview], offset: int) -> None:
    """Writes `views` back to back into `path` at `offset` (pwritev: no joined copy)."""
    try:
        fd = os.open(path, os.O_WRONLY)
        try:
            for lo in range(0, len(views), _IOV_MAX):
                batch = views[lo:lo + _IOV_MAX]
                if hasattr(os, "pwritev"):
                    data, n = None, os.pwritev(fd, batch, offset)
                else:
                    data = b"".join(batch)
                    n = os.pwrite(fd, data, offset)
                want = sum(len(v) for v in batch)
                while n < want:  # a short write: the rest, joined
                    rest = memoryview(data if data is not None else b"".join(batch))[n:]
                    n += os.pwrite(fd, rest, offset + n)
                offset += want
        finally:
            os.close(fd)
    except OSError as e:  # e.g. a full disk
        raise UserError(f"cannot write {path}: {reason(e)}") from None


def _stream_blocks(path: str) -> Iterator[Block]:
    """The blocks of a file, read one at a time (a file may be larger than the budget)."""
    try:
        with fileio.open_file(path, "rb") as f:
            while True:
                head = f.read(_HEADER)
                if len(head) < _HEADER:
                    return
                n, nbytes, chunk = (int(v) for v in np.frombuffer(head, np.int64))
                keys = np.frombuffer(f.read(8 * n), np.uint64)
                lengths = np.frombuffer(f.read(8 * n), np.int64)
                yield Block(chunk, keys, lengths, np.frombuffer(f.read(nbytes), np.uint8))
    except UserError:
        raise
    except Exception as e:
        raise UserError(f"cannot read temporary file {path}: {reason(e)}") from None


def split_unit(directory: str, bits: int, prefix: int, writers: Sequence[str],
               extra_bits: int, num_shards: int) -> Tuple[int, int, Optional[np.ndarray]]:
    """Cuts a bucket larger than planned into 2**extra_bits by its next key bits (in a worker
    process), one block (one chunk's records) at a time, so memory stays near a chunk's records.

    Returns:
        (bytes read, bytes written, int64 [2**extra_bits, num_shards]: record bytes of each
        piece in each shard, or None if num_shards is 0).
    """
    read = written = 0
    sizes = np.zeros((1 << extra_bits, num_shards), np.int64) if num_shards else None
    remote = fileio.is_remote(directory)
    for i, w in enumerate(writers):
        path = unit_file(directory, bits, prefix, w)
        for j, block in enumerate(_stream_blocks(path)):
            read += block.file_bytes
            # Locally every piece of this bucket is appended to one file; gfile cannot
            # append, so remotely each block's pieces get files of their own.
            writer = f"r{i}_{j}" if remote else "r"
            sub_of = top_bits(block.keys, bits, extra_bits)
            if sizes is not None:
                sizes += shard_bytes(sub_of, block.keys, block.lengths, 1 << extra_bits,
                                     num_shards)
            for sub, part in _cut(block, sub_of, 1 << extra_bits):
                _write(unit_file(directory, bits + extra_bits, (prefix << extra_bits) | sub,
                                 writer), [part], append=not remote)
                written += part.file_bytes
        _remove(path)
    return read, written, sizes


def list_units(directory: str) -> Dict[Tuple[int, int], Tuple[List[str], int]]:
    """Every bucket with files in `directory`: (bits, prefix) -> (writers, bytes on disk)."""
    units: Dict[Tuple[int, int], Tuple[List[str], int]] = {}
    for name in sorted(fileio.listdir(directory)):
        bits, prefix, writer = name.split("-", 2)
        size = fileio.size(os.path.join(directory, name))
        writers, total = units.get((int(bits), int(prefix, 16)), ([], 0))
        units[int(bits), int(prefix, 16)] = (writers + [writer], total + size)
    return units
