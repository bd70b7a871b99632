"""Streams documents from text files and groups them into chunks (the units of parallel work).

Input format (as the original BERT release): one sentence per line, a blank line between
documents. Lines are split on "\\n" only; a line is blank when `line.strip()` is empty (the
original's test). The end of a file also ends a document. Files are read in blocks, so
memory does not grow with the corpus; they may be gzip or bzip2 compressed, and invalid UTF-8
is replaced (counted, one warning per file), by the rules of `data_tools.inputs.text_files`. Empty
files and files with only blank lines are skipped with a warning.

The input is cut into splits of `chunk_bytes` (`data_tools.inputs.splits`: file sizes only; a
compressed file is one split), and each worker reads its own: a split owns the documents
whose first line starts in its range. A split's documents form its chunks (`split_chunks`):
consecutive documents of at least `chunk_bytes` of text each, in UTF-8 bytes (a small last
one merged into the one before), usually one per split. Their boundaries depend only on the
input and `chunk_bytes`, never on the number of workers, which is what makes the output
independent of --num_workers. A document longer than `chunk_bytes` is cut at a line
boundary so that one chunk, and so each worker's memory, stays bounded; its pieces keep
the document's id (`Chunk.doc_ids`), so a random next sentence is never drawn from another
piece of the same document.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from absl import logging

from data_tools.inputs import splits, text_files


@dataclasses.dataclass
class Chunk:
    """Consecutive documents of the corpus: the unit of parallel work (a worker's call).

    Attributes:
        index: the chunk's index, `split index << 32` plus the chunk's number in its split
            (increasing in corpus order); seeds the chunk's generator.
        documents: each document is a list of non-blank lines (stripped).
        num_bytes: UTF-8 bytes of text in the chunk, newlines included (its size).
        doc_ids: the corpus-wide id of each document (`split index << 32` plus its number in
            the split); the pieces of a document cut because it was longer than a chunk
            share one id.
    """

    index: int
    documents: List[List[str]]
    num_bytes: int
    doc_ids: List[int] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class CorpusStats:
    """Counters filled while reading.

    Attributes:
        files: files read.
        bytes_read: input bytes read so far.
        lines: non-blank lines.
        documents: documents (before tokenization; a document whose lines all tokenize to
            nothing is dropped later, by the worker).
        split_documents: documents cut because they were longer than a chunk.
        warnings: the warning messages issued (one per problem per file).
        quiet: True to collect warnings without logging them (a second pass over the input).
    """

    files: int = 0
    bytes_read: int = 0
    lines: int = 0
    documents: int = 0
    split_documents: int = 0
    warnings: List[str] = dataclasses.field(default_factory=list)
    quiet: bool = False  # collect warnings without logging them (a second pass's)
    bad_utf8: Dict[str, int] = dataclasses.field(default_factory=dict)  # plain splits' counts
    file_lines: Dict[str, int] = dataclasses.field(default_factory=dict)  # per file, by splits

    def add(self, other: "CorpusStats") -> None:
        """Adds a split's counts (read by a worker) to the job's."""
        self.bytes_read += other.bytes_read
        self.lines += other.lines
        self.documents += other.documents
        self.split_documents += other.split_documents
        self.warnings.extend(other.warnings)
        for mine, theirs in ((self.bad_utf8, other.bad_utf8),
                             (self.file_lines, other.file_lines)):
            for path, n in theirs.items():
                mine[path] = mine.get(path, 0) + n

    def finish(self, paths: Sequence[str], sizes: Sequence[int]) -> None:
        """The per-file warnings of a job read in splits, once every split is counted."""
        self.files = len(paths)
        for path, size in zip(paths, sizes):
            if self.bad_utf8.get(path):
                _warn(self, f"{path}: {self.bad_utf8[path]} invalid UTF-8 byte sequence(s) "
                      "replaced")
            if not size:
                _warn(self, f"{path}: empty file, skipped")
            elif not self.file_lines.get(path):
                _warn(self, f"{path}: only blank lines, skipped")


def iter_lines(path: str, stats: CorpusStats, block_size: int = text_files.BLOCK
               ) -> Iterator[str]:
    """Yields the lines of one file (without the newline), decompressed (`text_files`) and
    decoded block by block; a byte-order mark at the start is dropped.

    A line longer than a block is assembled from its pieces (linear time, not quadratic).
    """
    for _, line in iter_lines_at(path, stats, block_size):
        yield line


def iter_lines_at(path: str, stats: CorpusStats, block_size: int = text_files.BLOCK
                  ) -> Iterator[Tuple[int, str]]:
    """(offset, line) for the lines of one file, as `iter_lines`; the offset of a line is
    that of its first byte in the decompressed file, after a byte-order mark."""
    bad = 0
    offset = 0

    def count(n: int) -> None:
        stats.bytes_read += n

    first = True
    with text_files.open_input(path, count) as f:
        try:
            pending: List[bytes] = []  # pieces of an unfinished line
            while True:
                block = f.read(block_size)
                if not block:
                    break
                cut = block.rfind(b"\n")
                if cut < 0:
                    pending.append(block)
                    continue
                # Decode only whole lines, so a multi-byte character is never split.
                head = (b"".join(pending + [block[: cut + 1]]) if pending
                        else block[: cut + 1])
                pending = [block[cut + 1:]] if cut + 1 < len(block) else []
                text, n_bad = text_files.decode(head)
                if first:
                    text, first = text_files.strip_bom(text), False
                    if head.startswith(text_files.BOM_UTF8):
                        head = head[len(text_files.BOM_UTF8):]
                bad += n_bad
                lines = text.split("\n")
                lines.pop()  # the empty string after the final "\n"
                # Invalid bytes become U+FFFD, so offsets come from the bytes themselves
                # (a newline is never part of an invalid sequence).
                for line, raw in zip(lines, head.split(b"\n")):
                    yield offset, line
                    offset += len(raw) + 1
            if pending:
                data = b"".join(pending)
                text, n_bad = text_files.decode(data)
                bad += n_bad
                yield offset, (text_files.strip_bom(text) if first else text)
        except Exception as e:  # noqa: BLE001 - corrupt or truncated data: one line
            text_files.reraise(path, e)
    if bad:
        stats.bad_utf8[path] = stats.bad_utf8.get(path, 0) + bad
        _warn(stats, f"{path}: {bad} invalid UTF-8 byte sequence(s) replaced")


def iter_chunks(
    paths: Sequence[str], chunk_bytes: int, stats: Optional[CorpusStats] = None,
) -> Iterator[Chunk]:
    """Every chunk of the job, in order: `split_chunks` of each split of `paths`
    (`data_tools.inputs.splits.plan` with splits of `chunk_bytes`), read in this process."""
    stats = stats if stats is not None else CorpusStats()
    plan, sizes = splits.plan(paths, chunk_bytes)
    for split in plan:
        yield from split_chunks(split, chunk_bytes, stats)
    stats.finish(paths, sizes)


def split_chunks(split: splits.Split, chunk_bytes: int, stats: CorpusStats
                 ) -> Iterator[Chunk]:
    """The chunks of one split: the documents of each range of `chunk_bytes` (the
    split's own, `splits.split_documents`; a compressed file's reader cuts the ranges of its
    text itself), a document longer than `chunk_bytes` cut into pieces at a line boundary,
    grouped into chunks of at least `chunk_bytes` of text, a small last one (under half of
    that) merged into the one before.

    Chunk indices and document ids are `splits.chunk_id` and `splits.doc_id` of (file, range,
    count): they depend on the input only (not on which worker reads the split, nor on the
    file being compressed). `stats` gets the split's counts (per file, for
    `CorpusStats.finish`).
    """
    if chunk_bytes <= 0:
        raise ValueError("chunk_bytes must be > 0")
    lines_before = stats.lines
    if split.end < 0:
        quiet = CorpusStats(quiet=True)
        ranges = _ranges_of_file(split.path, quiet, chunk_bytes)
    else:
        counts = splits.Counts()
        ranges = iter([(split.number, splits.split_documents(split, counts))])
    for number, docs in ranges:
        yield from _range_chunks(docs, split.file_index, number, chunk_bytes, stats)
    read, bad = ((quiet.bytes_read, quiet.bad_utf8.get(split.path, 0)) if split.end < 0
                 else (counts.input_bytes, counts.range_bad))  # past the range: the next split's
    stats.bytes_read += read
    if bad:  # worded once per file by `CorpusStats.finish`
        stats.bad_utf8[split.path] = stats.bad_utf8.get(split.path, 0) + bad
    stats.file_lines[split.path] = (stats.file_lines.get(split.path, 0)
                                    + stats.lines - lines_before)


def _range_chunks(docs: Iterable[List[str]], file_index: int, number: int, chunk_bytes: int,
                  stats: CorpusStats) -> Iterator[Chunk]:
    """The chunks of one range's documents."""
    held: Optional[Chunk] = None  # the last full chunk, kept back to absorb a small tail
    count = 0
    chunk_docs: List[List[str]] = []
    ids: List[int] = []
    size = 0
    for doc, piece in _pieces(docs, chunk_bytes, stats):
        chunk_docs.append(piece)
        ids.append(splits.doc_id(file_index, number, doc))
        size += sum(utf8_len(line) + 1 for line in piece) + 1
        if size >= chunk_bytes:
            if held is not None:
                yield held
            held = Chunk(index=splits.chunk_id(file_index, number, count),
                         documents=chunk_docs, num_bytes=size, doc_ids=ids)
            count += 1
            chunk_docs, ids, size = [], [], 0
    if chunk_docs and held is not None and size < chunk_bytes // 2:
        held.documents.extend(chunk_docs)
        held.doc_ids.extend(ids)
        held.num_bytes += size
        chunk_docs = []
    if held is not None:
        yield held
    if chunk_docs:
        yield Chunk(index=splits.chunk_id(file_index, number, count), documents=chunk_docs,
                    num_bytes=size, doc_ids=ids)


def _ranges_of_file(path: str, stats: CorpusStats, range_bytes: int
                    ) -> Iterator[Tuple[int, Iterator[List[str]]]]:
    """(range number, its documents) of a whole file read in one stream (a compressed
    one): a document belongs to the range of `range_bytes` where its first line starts, as
    `splits.split_documents` reads a plain file's ranges."""

    def documents() -> Iterator[Tuple[int, List[str]]]:
        doc: List[str] = []
        start = 0
        for offset, raw in iter_lines_at(path, stats):
            line = raw.strip()
            if line:
                if not doc:
                    start = offset
                doc.append(line)
            elif doc:
                yield start // range_bytes, doc
                doc = []
        if doc:
            yield start // range_bytes, doc

    for number, group in itertools.groupby(documents(), key=lambda item: item[0]):
        yield number, (doc for _, doc in group)


def _pieces(docs: Iterable[List[str]], max_bytes: int, stats: CorpusStats
            ) -> Iterator[Tuple[int, List[str]]]:
    """(document number, piece): each document cut after the line that makes a piece at
    least `max_bytes` long; pieces share their document's number."""
    for number, doc in enumerate(docs):
        stats.documents += 1
        stats.lines += len(doc)
        piece: List[str] = []
        piece_bytes = 0
        for k, line in enumerate(doc):
            piece.append(line)
            piece_bytes += utf8_len(line) + 1
            if piece_bytes >= max_bytes:
                yield number, piece
                piece, piece_bytes = [], 0
                stats.split_documents += k + 1 < len(doc)
        if piece:
            yield number, piece


def utf8_len(text: str) -> int:
    """UTF-8 bytes of `text` (chunk sizes count bytes, as progress does, whatever the script)."""
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def _warn(stats: CorpusStats, message: str) -> None:
    stats.warnings.append(message)
    if not stats.quiet:
        logging.warning("%s", message)
