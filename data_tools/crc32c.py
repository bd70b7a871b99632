"""CRC-32C (Castagnoli) of many byte strings at once, in numpy, for TFRecord framing.

TFRecord frames carry a masked CRC-32C of the length and of the data. Python has no CRC-32C
in its standard library, and a byte loop in Python runs at ~5 MB/s. CRC is linear over
GF(2): the register after a message is the XOR of one contribution per byte, which depends
only on the byte value and on its distance d from the end of the message, plus a term that
depends only on the length. With a table T[d, byte] (built once, 1 KB per distance) the CRCs
of a whole batch are one gather over every byte and one XOR-reduction per record
(`np.bitwise_xor.reduceat`), with no Python loop over bytes or positions.

Rows longer than the table (unusual for pretraining records) use a table-driven loop over
byte positions, each step one lookup for every such row at once; leading zero bytes of their
right-aligned padding are compensated by per-row initial registers, because one CRC step over
a zero byte is invertible.
"""

from __future__ import annotations

from typing import List

import numpy as np

from bert_tf import tfrecord_format
from data_tools.bytes_ops import Rows

# The byte table and the mask are defined once, in bert_tf.tfrecord_format.
_TABLE_LIST = tfrecord_format.CRC32C_TABLE
_TABLE = np.asarray(_TABLE_LIST, dtype=np.uint32)
# The top byte of _TABLE[i] is a bijection of i (a property of CRC tables), which makes one
# step over a zero byte invertible: see `_unshift_zero`.
_TOP_BYTE_TO_INDEX = {t >> 24: i for i, t in enumerate(_TABLE_LIST)}
assert len(_TOP_BYTE_TO_INDEX) == 256
# _INIT_FOR_PAD[p]: register value that p zero bytes turn into 0xFFFFFFFF. Grown on demand.
_INIT_FOR_PAD: List[int] = [0xFFFFFFFF]


def _unshift_zero(state: int) -> int:
    """The register before one zero byte that produced `state` (inverse of one CRC step)."""
    index = _TOP_BYTE_TO_INDEX[state >> 24]
    return (((state ^ _TABLE_LIST[index]) << 8) & 0xFFFFFFFF) | index


def _init_for_pad(max_pad: int) -> np.ndarray:
    while len(_INIT_FOR_PAD) <= max_pad:
        _INIT_FOR_PAD.append(_unshift_zero(_INIT_FOR_PAD[-1]))
    return np.asarray(_INIT_FOR_PAD[: max_pad + 1], dtype=np.uint32)


# CRC-32C of one byte string (plain Python; for tests and short inputs).
crc32c_bytes = tfrecord_format.crc32c


_TABLE_MAX_DISTANCE = 4096  # position tables cover rows up to this length (4 MB)
_POSITION_TABLES = np.zeros((0, 256), dtype=np.uint32)  # [d, byte], grown on demand
_LENGTH_TERMS: List[int] = [0xFFFFFFFF]  # register after n zero bytes from 0xFFFFFFFF


def _zero_step(state: int) -> int:
    """One CRC step over a zero byte (a linear map of the register)."""
    return _TABLE_LIST[state & 0xFF] ^ (state >> 8)


def _position_tables(max_len: int) -> "tuple[np.ndarray, np.ndarray]":
    """(T [max_len, 256], K [max_len + 1]) for rows of up to max_len bytes.

    T[d, b]: contribution of byte b followed by d more bytes, from a zero register.
    K[n]: the contribution of the initial register 0xFFFFFFFF to an n-byte message.
    """
    global _POSITION_TABLES
    have = _POSITION_TABLES.shape[0]
    if have < max_len:
        rows = [_POSITION_TABLES[i] for i in range(have)]
        current = rows[-1] if rows else None
        for d in range(have, max_len):
            current = (_TABLE.copy() if current is None
                       else _TABLE[current & 0xFF] ^ (current >> np.uint32(8)))
            rows.append(current)
        _POSITION_TABLES = np.stack(rows)
    while len(_LENGTH_TERMS) <= max_len:
        _LENGTH_TERMS.append(_zero_step(_LENGTH_TERMS[-1]))
    return _POSITION_TABLES, np.asarray(_LENGTH_TERMS[: max_len + 1], dtype=np.uint32)


def crc32c_rows(rows: Rows, max_matrix_bytes: int = 1 << 26,
                slice_bytes: int = 1 << 21) -> np.ndarray:
    """CRC-32C of every row.

    Args:
        rows: the byte strings.
        max_matrix_bytes: for rows longer than the position tables: the padded matrix is
            built for slices of rows of at most about this size.
        slice_bytes: rows are processed in slices of about this many bytes (bounds the
            temporary arrays of the table method).

    Returns:
        uint32 [num_rows].
    """
    n = rows.num_rows
    out = np.zeros(n, dtype=np.uint32)
    if n == 0:
        return out
    offsets = rows.offsets
    lengths = rows.lengths.astype(np.int64)
    # Empty rows keep CRC 0. Rows that fit the position tables go in slices of about
    # slice_bytes (bounds the temporaries); longer ones take the loop below.
    short = np.flatnonzero((lengths > 0) & (lengths <= _TABLE_MAX_DISTANCE))
    cum = np.cumsum(lengths[short])
    lo = 0
    while lo < short.size:
        done = int(cum[lo - 1]) if lo else 0
        hi = max(lo + 1, int(np.searchsorted(cum, done + slice_bytes, side="right")))
        idx = short[lo:hi]
        out[idx] = _crc_by_tables(rows.data, offsets[idx], lengths[idx])
        lo = hi
    long_rows = np.flatnonzero(lengths > _TABLE_MAX_DISTANCE)
    if long_rows.size:
        out[long_rows] = _crc_long_rows(rows.data, offsets[long_rows], lengths[long_rows],
                                        max_matrix_bytes)
    return out


def _crc_by_tables(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """CRC of non-empty rows data[starts[i]:starts[i]+lengths[i]] (each <= table size)."""
    tables, length_terms = _position_tables(int(lengths.max()))
    total = int(lengths.sum())
    seg_start = np.zeros(len(lengths), dtype=np.int64)
    np.cumsum(lengths[:-1], out=seg_start[1:])
    if starts[0] + total == starts[-1] + lengths[-1] and (np.diff(starts) == lengths[:-1]).all():
        gathered = data[starts[0]:starts[0] + total]  # consecutive rows: no gather needed
    else:
        gathered = data[np.repeat(starts - seg_start, lengths)
                        + np.arange(total, dtype=np.int64)]
    # Byte k of the gathered rows is at distance (seg_start + len - 1 - k) from its row's end;
    # its contribution is tables[distance, byte] (flat index distance * 256 + byte).
    index = np.repeat((seg_start + lengths - 1) * 256, lengths)
    index -= np.arange(0, total * 256, 256, dtype=np.int64)
    index += gathered
    contrib = tables.reshape(-1).take(index)
    crc = np.bitwise_xor.reduceat(contrib, seg_start)
    return crc ^ length_terms[lengths] ^ np.uint32(0xFFFFFFFF)


def _crc_long_rows(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
                   max_matrix_bytes: int) -> np.ndarray:
    """CRC of long rows, in length-sorted slices of padded matrices."""
    n = len(lengths)
    out = np.zeros(n, dtype=np.uint32)
    # Sorting by length groups similar rows, so padding stays small inside each slice.
    order = np.argsort(lengths, kind="stable")
    sorted_lengths = lengths[order]
    start = 0
    while start < n:
        # Rows are sorted by length, so the last row of a slice is its longest: take the
        # largest slice whose padded matrix (rows x longest) fits the budget.
        tail = sorted_lengths[start:]
        cost = np.arange(1, tail.size + 1, dtype=np.int64) * np.maximum(tail, 1)
        stop = start + max(1, int(np.searchsorted(cost, max_matrix_bytes, side="right")))
        idx = order[start:stop]
        out[idx] = _crc_block(data, starts[idx], lengths[idx])
        start = stop
    return out


def _crc_block(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """CRC of rows data[starts[i]:starts[i]+lengths[i]] via a right-aligned padded matrix."""
    m = len(starts)
    width = int(lengths.max()) if m else 0
    # Right-aligned, zero-padded rows [m, width]; the copy is sequential in memory.
    rows_mat = np.zeros((m, width), dtype=np.uint8)
    total = int(lengths.sum())
    if total:
        src_start = np.zeros(m, dtype=np.int64)
        np.cumsum(lengths[:-1], out=src_start[1:])
        # Byte i of row r goes to cell (r, width - len_r + i).
        shift = (np.arange(1, m + 1, dtype=np.int64) * width - lengths) - src_start
        dest = np.repeat(shift, lengths)
        dest += np.arange(total, dtype=np.int64)
        rows_mat.reshape(-1)[dest] = data[np.repeat(starts - src_start, lengths)
                                          + np.arange(total, dtype=np.int64)]
    # Column-major copy: each byte position is then one contiguous vector.
    mat = np.ascontiguousarray(rows_mat.T)
    crc = _init_for_pad(width)[width - lengths]
    table = _TABLE
    tmp = np.empty(m, dtype=np.uint32)
    for j in range(width):
        np.bitwise_xor(crc, mat[j], out=tmp)
        np.bitwise_and(tmp, 0xFF, out=tmp)
        np.right_shift(crc, 8, out=crc)
        np.bitwise_xor(crc, table[tmp], out=crc)
    return crc ^ np.uint32(0xFFFFFFFF)


def mask_crc(crc: np.ndarray) -> np.ndarray:
    """TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8 (mod 2^32)."""
    # The one definition, applied to a uint32 array (numpy wraps modulo 2^32).
    return tfrecord_format.mask_crc(np.asarray(crc, dtype=np.uint32))
