"""Packed MLM-only rows: several documents per row (the `packed_mlm` feature set).

A chunk's documents (`instances.DocumentBuffer`) become rows of exactly `max_seq_length`
slots in two steps:

1. `document_pieces`: a document longer than max_seq_length - 2 tokens (the room beside its
   [CLS] and [SEP]) is cut into pieces of exactly that many tokens and a last, shorter one:
   every piece but the last fills a row alone, and no token is lost (the NSP and `--no_nsp`
   layouts truncate over-long lines). Cutting at sentence ends instead would leave a gap of
   up to a sentence in every such row, which few documents are short enough to fill (13.5%
   padding at 128 tokens on 6,000 lines of the bundled WikiText, against 0.3% cut exactly).
2. `pack_pieces`: the segments ([CLS] piece [SEP]) go into rows by best-fit decreasing, the
   longest first, each into the open row with the least free room that still holds it, else
   into a new row. Ties of length are visited in an order drawn from the chunk's generator,
   so each dupe packs its own rows, reproducibly. Best-fit decreasing is within 11/9 of the
   fewest possible rows (plus one); on document lengths the rows are nearly full, and only
   the chunk's last rows carry much padding.

`materialize` writes rows of segments back to back, then zero padding:

    input_ids     [CLS] d1 ... [SEP] [CLS] d2 ... [SEP] ... 0 0
    doc_ids       1 1 ... 1 2 2 ... 2 ... 0 0       (the segment's rank in its row, 1..k)
    position_ids  0 1 ... n1+1 0 1 ... n2+1 ... 0 0 (restarting at each [CLS])

Everything here is NumPy and deterministic given the generator; `chunk_records` masks the
rows as any other instances and writes them with the two extra features
(`bert_tf.core.schema.PACKED_FEATURES`).
"""

from __future__ import annotations

import bisect
import dataclasses
from typing import List, Tuple

import numpy as np

from data_tools.pretraining_data.instances import DocumentBuffer

# Special tokens per segment: its [CLS] and its [SEP].
SPECIALS = 2


@dataclasses.dataclass
class Pieces:
    """Ranges of a `DocumentBuffer.ids`, each a document or a part of one.

    Attributes:
        start: int64 [n], offset of the piece's first token in the buffer's ids.
        length: int64 [n], its tokens (>= 1, specials not included).
    """

    start: np.ndarray
    length: np.ndarray


def document_pieces(buf: DocumentBuffer, room: int) -> Pieces:
    """Every document of `buf`, cut into pieces of `room` tokens and a last, shorter one.

    Args:
        buf: the chunk's documents (sentences contiguous within a document).
        room: tokens a piece may hold (max_seq_length - 2).

    Returns:
        The pieces, in document order.
    """
    lo = np.asarray([first for first, _ in buf.doc_sents], np.int64)
    hi = np.asarray([last - 1 for _, last in buf.doc_sents], np.int64)
    doc_start = np.asarray(buf.sent_start, np.int64)[lo] if len(lo) else lo
    doc_len = (np.asarray(buf.sent_end, np.int64)[hi] - doc_start) if len(hi) else hi
    count = -(-doc_len // room)  # pieces per document
    doc = np.repeat(np.arange(len(doc_len)), count)
    k = np.arange(int(count.sum()), dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)
    start = doc_start[doc] + k * room
    return Pieces(start, np.minimum(room, doc_start[doc] + doc_len[doc] - start))


@dataclasses.dataclass
class PackedRows:
    """Where each segment goes.

    Attributes:
        row: int64 [n], the row of each segment (rows numbered from 0 as opened).
        offset: int64 [n], the column of its [CLS] in the row.
        rank: int64 [n], its document id in the row: 1 for the row's first segment, 2, ...
        num_rows: rows in all.
    """

    row: np.ndarray
    offset: np.ndarray
    rank: np.ndarray
    num_rows: int


def pack_pieces(sizes: np.ndarray, capacity: int, rng: np.random.Generator) -> PackedRows:
    """Best-fit decreasing of segments of `sizes` slots into rows of `capacity` slots.

    Args:
        sizes: int [n], each segment's slots (1 <= size <= capacity).
        capacity: slots per row (max_seq_length).
        rng: orders segments of equal size.

    Returns:
        The placement of every segment.
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    n = len(sizes)
    order = rng.permutation(n)
    order = order[np.argsort(-sizes[order], kind="stable")]
    row = np.empty(n, np.int64)
    offset = np.empty(n, np.int64)
    rank = np.empty(n, np.int64)
    fill: List[int] = []  # slots used per row
    count: List[int] = []  # segments per row
    # Open rows as sorted keys room * 2^32 + row: bisect finds the least room >= a size.
    open_rows: List[int] = []
    smallest = int(sizes.min()) if n else 0
    for i in order.tolist():
        size = int(sizes[i])
        k = bisect.bisect_left(open_rows, size << 32)
        if k < len(open_rows):
            key = open_rows.pop(k)
            r, room = key & 0xFFFFFFFF, key >> 32
        else:
            r, room = len(fill), capacity
            fill.append(0)
            count.append(0)
        row[i], offset[i] = r, fill[r]
        fill[r] += size
        count[r] += 1
        rank[i] = count[r]
        if room - size >= smallest:  # else no later (smaller or equal) segment fits
            bisect.insort(open_rows, ((room - size) << 32) | r)
    return PackedRows(row, offset, rank, len(fill))


def pack_dupes(buf: DocumentBuffer, max_seq_length: int, dupe_factor: int,
               rng: np.random.Generator) -> Tuple[Pieces, PackedRows]:
    """The pieces of `buf` packed `dupe_factor` times (rows of dupe d after those of d - 1).

    Returns:
        (pieces repeated once per dupe, their placement).
    """
    one = document_pieces(buf, max_seq_length - SPECIALS)
    rows, offsets, ranks = [], [], []
    base = 0
    for _ in range(dupe_factor):
        packed = pack_pieces(one.length + SPECIALS, max_seq_length, rng)
        rows.append(packed.row + base)
        offsets.append(packed.offset)
        ranks.append(packed.rank)
        base += packed.num_rows
    pieces = Pieces(np.tile(one.start, dupe_factor), np.tile(one.length, dupe_factor))
    placement = PackedRows(np.concatenate(rows), np.concatenate(offsets),
                           np.concatenate(ranks), base)
    return pieces, placement


@dataclasses.dataclass
class RowBatch:
    """Materialised rows (`materialize`).

    Attributes:
        input_ids, doc_ids, position_ids: int32 [m, max_seq_length].
        lengths: int64 [m], real tokens per row (specials included).
    """

    input_ids: np.ndarray
    doc_ids: np.ndarray
    position_ids: np.ndarray
    lengths: np.ndarray


def materialize(ids: np.ndarray, pieces: Pieces, placement: PackedRows, lo: int, hi: int,
                cls_id: int, sep_id: int, max_seq_length: int) -> RowBatch:
    """Rows lo..hi-1 of a packing as token, document and position matrices.

    Args:
        ids: the `DocumentBuffer.ids` the pieces point into.
        pieces, placement: from `pack_dupes` (or `document_pieces` + `pack_pieces`).
        lo, hi: the rows to write.
        cls_id, sep_id: the special ids.
        max_seq_length: slots per row.
    """
    sel = np.flatnonzero((placement.row >= lo) & (placement.row < hi))
    sizes = pieces.length[sel] + SPECIALS
    seg = np.repeat(np.arange(len(sel)), sizes)  # the segment of every written slot
    first = np.cumsum(sizes) - sizes
    pos = np.arange(int(sizes.sum()), dtype=np.int64) - first[seg]  # 0 at [CLS]
    rows = placement.row[sel][seg] - lo
    cols = placement.offset[sel][seg] + pos
    tokens = ids[np.clip(pieces.start[sel][seg] + pos - 1, 0, max(len(ids) - 1, 0))]
    tokens = np.where(pos == 0, cls_id, np.where(pos == sizes[seg] - 1, sep_id, tokens))
    shape = (hi - lo, max_seq_length)
    input_ids = np.zeros(shape, np.int32)
    doc_ids = np.zeros(shape, np.int32)
    position_ids = np.zeros(shape, np.int32)
    input_ids[rows, cols] = tokens
    doc_ids[rows, cols] = placement.rank[sel][seg]
    position_ids[rows, cols] = pos
    lengths = np.bincount(placement.row[sel] - lo, weights=sizes,
                          minlength=hi - lo).astype(np.int64)
    return RowBatch(input_ids, doc_ids, position_ids, lengths)
