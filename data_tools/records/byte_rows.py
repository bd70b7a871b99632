"""Vectorised byte building blocks: protobuf varints and row-wise concatenation of byte rows.

Serialising ~100k small records one by one in Python costs tens of microseconds each; here a
whole batch of records is built with a few numpy passes. A batch of byte strings is a
`Rows` value: one flat uint8 buffer plus the length of every row, or a fixed-width uint8
matrix when every row has the same length (the common case for padding-free features).

Nothing here imports TensorFlow.
"""

from __future__ import annotations

import dataclasses
from typing import List, Sequence, Union

import numpy as np


@dataclasses.dataclass(frozen=True)
class Rows:
    """A batch of byte strings, one per row.

    Attributes:
        data: uint8 [sum(lengths)], the rows back to back.
        lengths: int64 [num_rows].
    """

    data: np.ndarray
    lengths: np.ndarray

    @property
    def num_rows(self) -> int:
        return int(self.lengths.shape[0])

    @property
    def offsets(self) -> np.ndarray:
        """int64 [num_rows + 1]: row i is data[offsets[i]:offsets[i + 1]]."""
        out = np.zeros(self.num_rows + 1, dtype=np.int64)
        np.cumsum(self.lengths, out=out[1:])
        return out

    def row(self, i: int) -> bytes:
        o = self.offsets
        return self.data[o[i]:o[i + 1]].tobytes()

    def to_list(self) -> List[bytes]:
        o = self.offsets
        buf = self.data.tobytes()
        return [buf[o[i]:o[i + 1]] for i in range(self.num_rows)]


# Ragged parts whose rows average at least this many bytes are copied row by row.
_LOOP_MIN_ROW_BYTES = 128

# A part of a record: ragged `Rows`, a uint8 matrix [num_rows, width] (or [1, width] for a
# constant shared by every row), or bytes (a constant).
Part = Union[Rows, np.ndarray, bytes]


def varint_length(values: np.ndarray) -> np.ndarray:
    """Bytes of the protobuf varint of each value (non-negative), same shape, int64."""
    v = np.asarray(values)
    n = np.ones(v.shape, dtype=np.int64)
    if v.size == 0:
        return n
    top = int(v.max())
    v = v.astype(np.uint32 if top < (1 << 32) else np.uint64, copy=False)
    for shift in range(7, 64, 7):
        if top < (1 << shift):
            break
        n += v >= (1 << shift)
    return n


def encode_varints(values: np.ndarray) -> Part:
    """Packed protobuf varints of every row of a non-negative int matrix.

    Args:
        values: int [num_rows, width], each >= 0.

    Returns:
        The packed encoding of each row: a uint8 matrix [num_rows, width] when every value is
        below 128 (one byte each), else `Rows`.
    """
    v = np.asarray(values)
    if v.ndim != 2:
        raise ValueError(f"expected a matrix, got shape {v.shape}")
    if v.size and v.min() < 0:
        raise ValueError("negative values are not supported (they take 10 varint bytes)")
    if v.size == 0 or v.max() < 128:
        return v.astype(np.uint8)
    # 32-bit arithmetic when it suffices (ids, lengths): half the memory traffic.
    dtype = np.uint32 if v.max() < (1 << 32) else np.uint64
    v = v.astype(dtype)
    nbytes = varint_length(v)  # [rows, width]
    width = int(nbytes.max())
    groups = np.empty(v.shape + (width,), dtype=np.uint8)
    for k in range(width):
        byte = (v >> dtype(7 * k)) & dtype(0x7F)
        if k < width - 1:
            # Every byte but the value's last carries the continuation bit.
            byte |= (nbytes > k + 1).astype(dtype) << dtype(7)
        groups[..., k] = byte
    keep = np.arange(width) < nbytes[..., None]
    return Rows(data=groups[keep], lengths=nbytes.sum(axis=1))


def part_lengths(part: Part, num_rows: int) -> np.ndarray:
    """int64 [num_rows]: the length of the part in each row."""
    if isinstance(part, Rows):
        return part.lengths.astype(np.int64, copy=False)
    if isinstance(part, (bytes, bytearray)):
        return np.full(num_rows, len(part), dtype=np.int64)
    return np.full(num_rows, part.shape[1], dtype=np.int64)


def concat_rows(parts: Sequence[Part], num_rows: int) -> Rows:
    """Row i of the result is the concatenation of row i of every part, in order.

    Adjacent constant parts should be merged by the caller (`bytes` + `bytes`) for speed.

    Args:
        parts: `Rows`, uint8 matrices [num_rows or 1, width], or bytes constants.
        num_rows: the number of rows of every part.

    Returns:
        `Rows` with num_rows rows.
    """
    lens = np.stack([part_lengths(p, num_rows) for p in parts], axis=1)  # [rows, parts]
    flat_starts = np.zeros(lens.size + 1, dtype=np.int64)
    np.cumsum(lens.ravel(), out=flat_starts[1:])
    starts = flat_starts[:-1].reshape(lens.shape)  # where part k of row i begins
    out = np.empty(int(flat_starts[-1]), dtype=np.uint8)
    for k, part in enumerate(parts):
        if isinstance(part, (bytes, bytearray)):
            part = np.frombuffer(bytes(part), dtype=np.uint8)[None, :]
        if isinstance(part, Rows):
            if part.data.size == 0:
                continue
            src_starts = np.zeros(num_rows, dtype=np.int64)
            np.cumsum(part.lengths[:-1], out=src_starts[1:])
            if part.data.size >= _LOOP_MIN_ROW_BYTES * num_rows:
                # Long rows: one slice copy per row beats index arrays 8x the data size.
                for d, s_, n in zip(starts[:, k].tolist(), src_starts.tolist(),
                                    part.lengths.tolist()):
                    out[d:d + n] = part.data[s_:s_ + n]
                continue
            # Byte j of the part's flat buffer lands at j + (dest start - source start) of its row.
            shift = np.repeat(starts[:, k] - src_starts, part.lengths)
            shift += np.arange(part.data.size, dtype=np.int64)
            out[shift] = part.data
        else:
            width = part.shape[1]
            if width == 0:
                continue
            idx = starts[:, k, None] + np.arange(width, dtype=np.int64)
            out[idx] = part  # broadcasts a [1, width] constant over rows
    return Rows(data=out, lengths=lens.sum(axis=1))


def fixed_width(part: np.ndarray) -> np.ndarray:
    """Views an array [rows, ...] of any dtype as its little-endian bytes [rows, nbytes]."""
    a = np.ascontiguousarray(part)
    if a.dtype.byteorder == ">" or (a.dtype.byteorder == "=" and np.little_endian is False):
        a = a.byteswap().view(a.dtype.newbyteorder("<"))
    return a.view(np.uint8).reshape(a.shape[0], -1)
