"""Reads raw documents (plain text or JSON Lines, gzip or not, local or gs://) into chunks.

The input is cut into splits (`data_tools.inputs.splits.plan`: file sizes only; a compressed file,
and with --document_per=file every file, is one split), and each worker reads its own
(`split_chunks`): no process reads the whole corpus. A split's documents form its chunks
(about `chunk_bytes` of text, whole documents), on which the worker parses JSON, splits
sentences and filters (`data_tools.prepare.prepare_job`). Which split reads a document:
- jsonl and --document_per=line: the split in whose byte range the line starts
  (`splits.split_lines`, Hadoop's rule for lines);
- --document_per=blank_line: the split in whose range the document's first line starts
  (`splits.split_documents`' rule: it skips the end of a document begun before its range
  and reads past its end to finish its last one).
So every document is read once, and the documents in split order are the corpus's.

- Compression and encoding: `data_tools.inputs.text_files`' rules, shared by all the data jobs
  (gzip or bzip2 by suffix or magic bytes; UTF-8, a leading byte-order mark dropped, invalid
  bytes replaced by U+FFFD and counted, one warning per file).
- Documents: with --input_format=jsonl every non-blank line is one JSON object, passed on
  unparsed (the workers parse it). With text, a document is a whole file, a line, or a block
  of lines between blank lines (--document_per); its lines stay its paragraph breaks.

Line numbers (for messages) count from a split's first line; `Chunk.line_base` holds the
lines of the file before the split when the reader knows it (a split at a file's start),
else the consumer adds it (the local runner knows every split's line count in order).

Memory: a chunk and one line at a time (a document of a whole file is held whole).
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Iterator, List, Optional, Sequence, Tuple

from absl import logging

from data_tools.inputs import splits, text_files

FORMAT_TEXT = "text"
FORMAT_JSONL = "jsonl"
FORMATS = (FORMAT_TEXT, FORMAT_JSONL)
PER_FILE = "file"
PER_LINE = "line"
PER_BLANK_LINE = "blank_line"
DOCUMENT_PER = (PER_FILE, PER_LINE, PER_BLANK_LINE)



@dataclasses.dataclass
class Chunk:
    """Consecutive documents of the input, prepared at once by a worker
    (`prepare_job.process_chunk`).

    Attributes:
        index: `split index << 32` plus the chunk's number in its split (increasing in
            corpus order; it depends on the plan only, never on the worker count).
        items: the documents' text (text input) or their unparsed JSON lines (jsonl).
        sources: where each item starts: (index into the input files, 1-based line number
            counted from the split's first line).
        num_bytes: UTF-8 bytes of the items (for throughput).
        line_base: lines of the file before the split, None when not known here.
        split_start: the split's first byte in its file.
    """

    index: int
    items: List[str]
    sources: List[Tuple[int, int]]
    num_bytes: int
    line_base: Optional[int] = 0
    split_start: int = 0


@dataclasses.dataclass
class ReadStats:
    """Counters filled while reading.

    Attributes:
        files: files opened.
        lines: lines read (blank ones included).
        bytes_read: bytes of the files as stored (compressed for gzip), for progress.
        text_bytes: bytes of text after decompression.
        bad_utf8: invalid UTF-8 sequences replaced.
        warnings: the warning messages issued.
    """

    files: int = 0
    lines: int = 0
    bytes_read: int = 0
    text_bytes: int = 0
    bad_utf8: int = 0
    warnings: List[str] = dataclasses.field(default_factory=list)


def iter_lines(path: str, stats: ReadStats, warn_bad: bool = True) -> Iterator[str]:
    """Yields the lines of one file, decompressed and decoded (`data_tools.inputs.text_files`),
    without line endings; `warn_bad=False` counts invalid UTF-8 without the warning (the
    caller words it once per file).

    Raises:
        UserError: the file cannot be opened or read, or its compressed data is corrupt.
    """
    def count(n: int) -> None:
        stats.bytes_read += n

    stats.files += 1
    bad = 0
    try:
        with text_files.open_input(path, count) as lines:
            for number, line in enumerate(lines, 1):
                stats.lines += 1
                stats.text_bytes += len(line)
                text, n_bad = text_files.decode(line.rstrip(b"\r\n"))
                bad += n_bad
                yield text_files.strip_bom(text) if number == 1 else text
    except Exception as e:  # noqa: BLE001 - corrupt or truncated data: one line
        text_files.reraise(path, e)
    finally:
        stats.bad_utf8 += bad
        if bad and warn_bad:
            warn(stats, f"{path}: {bad} invalid UTF-8 byte sequence(s) replaced by U+FFFD")


def _items(lines: Iterable[Tuple[bool, str]], input_format: str, document_per: str,
           skipping: bool = False) -> Iterator[Tuple[str, int]]:
    """(item, line number of its first line) from (in range, line), lines numbered from 1
    and stripped of a final "\r" (a "\r\n" ending): lines out of range end a line-owned
    split; a blank-line document begun out of range is the next split's, one begun before
    the range (`skipping`) the previous split's."""
    doc: List[str] = []
    first = 0
    per_line = input_format == FORMAT_JSONL or document_per == PER_LINE
    for number, (in_range, line) in enumerate(lines, 1):
        line = line.rstrip("\r")
        blank = not line or line.isspace()
        if per_line:
            if not in_range:
                return
            if not blank:
                yield line, number
        elif blank:
            if document_per == PER_BLANK_LINE and doc:
                yield "\n".join(doc), first
                doc = []
            skipping = False
            if not in_range:
                return
        elif skipping or (not doc and not in_range):
            if not in_range:
                return
        else:
            if not doc:
                first = number
            doc.append(line)
    if doc:
        yield "\n".join(doc), first


def iter_documents(paths: Sequence[str], input_format: str, document_per: str,
                   stats: ReadStats) -> Iterator[Tuple[str, int, int]]:
    """Yields (item, file index, line number) for every document of the inputs, in order,
    each file read whole in this process.

    Items are unparsed JSON lines for jsonl, else the document's text with its line breaks.
    Blank lines and blank documents yield nothing.
    """
    for file_index, path in enumerate(paths):
        lines = ((True, line) for line in iter_lines(path, stats))
        for item, line in _items(lines, input_format, document_per):
            yield item, file_index, line


def split_items(split: splits.Split, input_format: str, document_per: str,
                stats: ReadStats) -> Iterator[Tuple[str, int]]:
    """(item, line number from the split's first line) for the documents `split` owns.

    `stats` gets what the split owns: its lines, its bytes as stored (`bytes_read`) and
    decompressed (`text_bytes`), its invalid UTF-8 sequences (not worded: the caller words
    them once per file).
    """
    if split.end < 0:  # a whole file
        lines = ((True, line) for line in iter_lines(split.path, stats, warn_bad=False))
        yield from _items(lines, input_format, document_per)
        return
    counts = splits.Counts()
    per_line = input_format == FORMAT_JSONL or document_per == PER_LINE
    skipping = not per_line and splits.begins_in_document(split)
    lines = splits.split_lines(split, counts, run_on=not per_line)
    try:
        yield from _items(lines, input_format, document_per, skipping)
    finally:
        stats.lines += counts.lines
        stats.bytes_read += split.size
        stats.text_bytes += counts.range_bytes
        stats.bad_utf8 += counts.range_bad


def split_chunks(split: splits.Split, input_format: str, document_per: str,
                 chunk_bytes: int, stats: ReadStats) -> Iterator[Chunk]:
    """The chunks of one split: its documents (`split_items`) grouped into chunks of at
    least `chunk_bytes` (the last one may be smaller)."""
    base = split.index << 32
    line_base = 0 if split.start == 0 else None
    items: List[str] = []
    sources: List[Tuple[int, int]] = []
    size = 0
    number = 0
    for item, line in split_items(split, input_format, document_per, stats):
        items.append(item)
        sources.append((split.file_index, line))
        size += len(item.encode("utf-8")) if not item.isascii() else len(item)
        if size >= chunk_bytes:
            yield Chunk(base + number, items, sources, size, line_base, split.start)
            number += 1
            items, sources, size = [], [], 0
    if items:
        yield Chunk(base + number, items, sources, size, line_base, split.start)


def plan(paths: Sequence[str], input_format: str, document_per: str, chunk_bytes: int
         ) -> Tuple[List[splits.Split], List[int]]:
    """The job's splits (`splits.plan`; a file per split for text with --document_per=file)
    and the file sizes."""
    return splits.plan(paths, chunk_bytes, whole_files=(
        input_format == FORMAT_TEXT and document_per == PER_FILE))


def iter_chunks(paths: Sequence[str], input_format: str, document_per: str,
                chunk_bytes: int, stats: ReadStats) -> Iterator[Chunk]:
    """Every chunk of the job, in order, read in this process (`split_chunks` of each
    split); their line numbers are made the file's."""
    split_plan, _ = plan(paths, input_format, document_per, chunk_bytes)
    lines = [0] * len(paths)
    for split in split_plan:
        before = stats.lines
        for chunk in split_chunks(split, input_format, document_per, chunk_bytes, stats):
            chunk.line_base = lines[split.file_index]
            yield chunk
        lines[split.file_index] += stats.lines - before
    stats.files = len(paths)


def warn(stats: ReadStats, message: str) -> None:
    stats.warnings.append(message)
    logging.warning("%s", message)
