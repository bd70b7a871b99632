"""Splits of the input by files and byte ranges: each worker reads its own, from the first byte.

A plain file is cut into ranges of `split_bytes` of text, counted after a byte-order mark; a
compressed one (`data_tools.inputs.text_files`) is one split, as it cannot be entered at an offset,
whose reader cuts the same ranges of the decompressed text (`documents.split_chunks`), so a
compressed file gives the same chunks as the plain one. The plan depends on the files' sizes
and first bytes and on `split_bytes` only, never on the number of workers, so the jobs'
outputs do not either.

Two kinds of ownership, as Hadoop splits text:
- lines (`range_blocks`, for `build_vocab`): a range owns the lines whose first byte lies in
  it: it begins at the first line that starts at or after its offset and ends with the line
  that runs past its end;
- documents (`split_documents`, for `create_pretraining_data`, and `prepare_corpus`'s
  --document_per=blank_line; a blank line between documents, the end of a file also ends
  one): a split owns the documents whose first line starts in its range. It skips the end of
  a document begun before its offset, and reads past its end to finish its last document.
  So every document is read by exactly one split.

`split_lines` is the one reader of a plain split (decoded lines, the BOM and UTF-8 rules of
`data_tools.inputs.text_files`); it counts the lines, bytes and invalid sequences the range owns, so
per-file counts add up exactly over the splits.
"""

from __future__ import annotations

import dataclasses
from typing import Iterator, List, Sequence, Tuple

from bert_tf.core import fileio
from bert_tf.core.errors import UserError, reason
from data_tools.inputs import text_files


@dataclasses.dataclass(frozen=True)
class Split:
    """Bytes [start, end) of one file, or the whole of it (end = -1: a compressed file, read
    from its start through its decompressor).

    Attributes:
        index: position of the split in the plan (0, 1, ...).
        path: the file.
        file_index: the file's position among the inputs.
        start, end: the byte range.
        size: bytes of the file this split accounts for, as stored (for progress).
        number: the range's number in its file (0 for a compressed file, whose reader
            numbers the ranges of its text).
    """

    index: int
    path: str
    file_index: int
    start: int
    end: int
    size: int
    number: int = 0


# Chunk and document ids: (file, range number) in the high bits, a count within the range in
# the low ones; int64, increasing in corpus order, the same for a plain and a compressed file.
_FILE_BITS, _RANGE_BITS, _CHUNK_BITS, _DOC_BITS = 19, 24, 16, 20


def chunk_id(file_index: int, number: int, chunk: int) -> int:
    """The id of a range's `chunk`-th chunk."""
    if chunk >= 1 << _CHUNK_BITS:
        raise UserError(f"a document of more than {1 << _CHUNK_BITS} chunks: raise --chunk_mb")
    return ((file_index << _RANGE_BITS | number) << _CHUNK_BITS) | chunk


def doc_id(file_index: int, number: int, doc: int) -> int:
    """The id of a range's `doc`-th document."""
    if doc >= 1 << _DOC_BITS:
        raise UserError(f"more than {1 << _DOC_BITS} documents start in one range of "
                        "--chunk_mb bytes: lower --chunk_mb")
    return ((file_index << _RANGE_BITS | number) << _DOC_BITS) | doc


def is_compressed(path: str) -> bool:
    """True for a gzip or bzip2 file (`text_files.compression`)."""
    return _head(path)[0]


def _head(path: str) -> Tuple[bool, int]:
    """(compressed, length of a leading UTF-8 byte-order mark) of a file."""
    if text_files.compression(path, b""):
        return True, 0
    with fileio.open_file(path, "rb") as f:
        head = f.read(4)
    packed = text_files.compression(path, head) is not None
    return packed, (len(text_files.BOM_UTF8)
                    if not packed and head.startswith(text_files.BOM_UTF8) else 0)


def plan(files: Sequence[str], split_bytes: int, whole_files: bool = False
         ) -> Tuple[List[Split], List[int]]:
    """The splits of `files`, and the file sizes; with `whole_files` every file is one split
    (a document per file), as a compressed file always is.

    Raises:
        UserError: a file cannot be read.
    """
    if split_bytes <= 0:
        raise ValueError("split_bytes must be > 0")
    if len(files) >= 1 << _FILE_BITS:
        raise UserError(f"{len(files)} input files: at most {(1 << _FILE_BITS) - 1}; "
                        "concatenate some")
    sizes: List[int] = []
    splits: List[Split] = []
    for i, path in enumerate(files):
        try:
            size = fileio.size(path)
            packed, bom = _head(path) if size else (False, 0)
        except Exception as e:  # OSError locally, tf.errors remotely
            raise UserError(f"cannot read input file {path}: {reason(e)}") from None
        sizes.append(size)
        if packed or (whole_files and size):
            splits.append(Split(len(splits), path, i, 0, -1, size))
            continue
        if size and (size - bom - 1) // split_bytes >= 1 << _RANGE_BITS:
            raise UserError(f"{path}: more than {1 << _RANGE_BITS} ranges of --chunk_mb: "
                            "raise --chunk_mb")
        for number, start in enumerate(range(bom, size, split_bytes)):
            lo = 0 if number == 0 else start
            end = min(start + split_bytes, size)
            splits.append(Split(len(splits), path, i, lo, end, end - lo, number))
    return splits, sizes


def range_blocks(f, start: int, end: int) -> Iterator[bytes]:
    """The bytes of the lines that start in [start, end) of an open binary file, in blocks
    of whole lines of about `text_files.BLOCK` bytes (so memory does not grow with the
    range)."""
    if start > 0:
        f.seek(start - 1)
        start = start - 1 + len(f.readline())  # through the newline at or after start - 1
    f.seek(start)
    pos = start
    while pos < end:
        data = f.read(min(text_files.BLOCK, end - pos))
        if not data:
            return
        if not data.endswith(b"\n"):
            data += f.readline()  # finish the line: it starts in the range, so it is ours
        pos += len(data)
        yield data


def block_lines(data: bytes, first: bool) -> Tuple[List[str], int]:
    """The lines of a block of whole lines (without their "\n"; the last one may lack it
    at the end of a file), and the invalid UTF-8 sequences replaced in it. `first`: the
    block starts the file, so a byte-order mark is dropped."""
    text, bad = text_files.decode(data)
    if first:
        text = text_files.strip_bom(text)
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    return lines, bad


def _after_blank_line(f, pos: int) -> bool:
    """Whether the line that ends just before byte `pos` (a line start) is blank, or `pos`
    is the start of the file."""
    if pos <= 0:
        return True
    back = 256
    while True:
        lo = max(0, pos - 1 - back)
        f.seek(lo)
        data = f.read(pos - 1 - lo)  # the bytes before the newline at pos - 1
        cut = data.rfind(b"\n")
        if cut >= 0 or lo == 0:
            line = data[cut + 1:]
            return not text_files.decode(line)[0].strip()
        back *= 4


class Counts:
    """What reading a split saw: bytes read as stored and invalid UTF-8 sequences replaced
    (both with the lines read past the range), and the lines, bytes and invalid sequences of
    the lines the range owns (these add up to the file's over its splits)."""

    def __init__(self):
        self.input_bytes = 0
        self.bad_utf8 = 0
        self.lines = 0
        self.range_bytes = 0
        self.range_bad = 0


def split_lines(split: Split, counts: Counts, run_on: bool = True
                ) -> Iterator[Tuple[bool, str]]:
    """(in range, line) for the lines of a plain split's range (without the "\n"), then with
    `run_on` the lines after it to the end of the file (a document begun in the range may run
    on; the caller stops)."""
    try:
        f = fileio.open_file(split.path, "rb")
    except Exception as e:  # OSError locally, tf.errors remotely
        raise UserError(f"cannot read input file {split.path}: {reason(e)}") from None
    with f:
        first = split.start == 0
        try:
            # Past the range, lines come in blocks of about 64 KB: usually the rest of one
            # document is all that is read there.
            parts = [(True, range_blocks(f, split.start, split.end))]
            if run_on:
                parts.append((False, _rest(f, split.end)))
            for in_range, blocks in parts:
                for data in blocks:
                    counts.input_bytes += len(data)
                    lines, bad = block_lines(data, first)
                    first = False
                    counts.bad_utf8 += bad
                    if in_range:
                        counts.range_bytes += len(data)
                        counts.range_bad += bad
                        counts.lines += len(lines)
                    for line in lines:
                        yield in_range, line
        except UserError:
            raise
        except Exception as e:  # noqa: BLE001 - a read failure: one line
            text_files.reraise(split.path, e)


def _rest(f, end: int) -> Iterator[bytes]:
    """Whole lines from the first line starting at or after `end` to the end of the file."""
    f.seek(max(end - 1, 0))
    if end > 0:
        f.readline()  # the line that runs past `end` was the range's
    while True:
        data = f.read(64 << 10)
        if not data:
            return
        if not data.endswith(b"\n"):
            data += f.readline()
        yield data


def begins_in_document(split: Split) -> bool:
    """Whether the first line a plain split owns continues a document begun before it (the
    previous split reads that document to its end)."""
    if split.start <= 0:
        return False
    try:
        with fileio.open_file(split.path, "rb") as f:
            f.seek(split.start - 1)
            start = split.start - 1 + len(f.readline())
            return not _after_blank_line(f, start)
    except Exception as e:  # noqa: BLE001 - a read failure: one line
        text_files.reraise(split.path, e)
        raise


def split_documents(split: Split, counts: Counts) -> Iterator[List[str]]:
    """The documents a plain split owns: lists of stripped, non-blank lines."""
    doc: List[str] = []
    skipping = begins_in_document(split)
    for in_range, raw in split_lines(split, counts):
        line = raw.strip()
        if not line:
            if doc:
                yield doc
                doc = []
            skipping = False
            if not in_range:
                return
            continue
        if skipping:
            if not in_range:
                return  # the rest of a document begun before the range, then the next split's
            continue
        if not doc and not in_range:
            return  # the next document starts after the range: the next split's
        doc.append(line)
    if doc:
        yield doc
