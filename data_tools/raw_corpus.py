"""Reads raw documents (plain text or JSON Lines, gzip or not, local or gs://) into chunks.

The parent process of `data_tools.prepare_corpus` streams its inputs through `iter_chunks`;
each chunk (about `chunk_bytes` of text, whole documents) is one task for a worker, which
parses JSON, splits sentences and filters (`data_tools.prepare_job`).

- Compression and encoding: `data_tools.text_files`' rules, shared by all the data jobs
  (gzip or bzip2 by suffix or magic bytes; UTF-8, a leading byte-order mark dropped, invalid
  bytes replaced by U+FFFD and counted, one warning per file).
- Documents: with --input_format=jsonl every non-blank line is one JSON object, passed on
  unparsed (the workers parse it). With text, a document is a whole file, a line, or a block
  of lines between blank lines (--document_per); its lines stay its paragraph breaks.

Memory: a chunk and one line at a time (a document of a whole file is held whole).
"""

from __future__ import annotations

import dataclasses
from typing import Iterator, List, Sequence, Tuple

from absl import logging

from data_tools import text_files

FORMAT_TEXT = "text"
FORMAT_JSONL = "jsonl"
FORMATS = (FORMAT_TEXT, FORMAT_JSONL)
PER_FILE = "file"
PER_LINE = "line"
PER_BLANK_LINE = "blank_line"
DOCUMENT_PER = (PER_FILE, PER_LINE, PER_BLANK_LINE)



@dataclasses.dataclass
class Chunk:
    """Consecutive documents of the input: one task for a worker.

    Attributes:
        index: position of the chunk in the input (0, 1, ...).
        items: the documents' text (text input) or their unparsed JSON lines (jsonl).
        sources: where each item starts: (index into the input files, 1-based line number).
        num_bytes: UTF-8 bytes of the items (for throughput).
    """

    index: int
    items: List[str]
    sources: List[Tuple[int, int]]
    num_bytes: int


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


def iter_lines(path: str, stats: ReadStats) -> Iterator[str]:
    """Yields the lines of one file, decompressed and decoded (`data_tools.text_files`),
    without line endings.

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
        if bad:
            stats.bad_utf8 += bad
            warn(stats, f"{path}: {bad} invalid UTF-8 byte sequence(s) replaced by U+FFFD")


def iter_documents(paths: Sequence[str], input_format: str, document_per: str,
                   stats: ReadStats) -> Iterator[Tuple[str, int, int]]:
    """Yields (item, file index, line number) for every document of the inputs, in order.

    Items are unparsed JSON lines for jsonl, else the document's text with its line breaks.
    Blank lines and blank documents yield nothing.
    """
    for file_index, path in enumerate(paths):
        lines: List[str] = []
        first = 0
        for number, line in enumerate(iter_lines(path, stats), 1):
            if input_format == FORMAT_JSONL or document_per == PER_LINE:
                if line and not line.isspace():
                    yield line, file_index, number
            elif not line or line.isspace():
                if document_per == PER_BLANK_LINE and lines:
                    yield "\n".join(lines), file_index, first
                    lines = []
            else:
                if not lines:
                    first = number
                lines.append(line)
        if lines:
            yield "\n".join(lines), file_index, first


def iter_chunks(paths: Sequence[str], input_format: str, document_per: str,
                chunk_bytes: int, stats: ReadStats) -> Iterator[Chunk]:
    """Groups the documents of `iter_documents` into chunks of at least `chunk_bytes`."""
    items: List[str] = []
    sources: List[Tuple[int, int]] = []
    size = 0
    index = 0
    for item, file_index, line in iter_documents(paths, input_format, document_per, stats):
        items.append(item)
        sources.append((file_index, line))
        size += len(item.encode("utf-8")) if not item.isascii() else len(item)
        if size >= chunk_bytes:
            yield Chunk(index, items, sources, size)
            index += 1
            items, sources, size = [], [], 0
    if items:
        yield Chunk(index, items, sources, size)


def warn(stats: ReadStats, message: str) -> None:
    stats.warnings.append(message)
    logging.warning("%s", message)
