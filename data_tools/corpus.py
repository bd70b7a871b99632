"""Streams documents from text files and groups them into chunks (the units of parallel work).

Input format (as the original BERT release): one sentence per line, a blank line between
documents. Lines are split on "\\n" only; a line is blank when `line.strip()` is empty (the
original's test). The end of a file also ends a document. Files are read in blocks, so
memory does not grow with the corpus; they may be gzip or bzip2 compressed, and invalid UTF-8
is replaced (counted, one warning per file), by the rules of `data_tools.text_files`. Empty
files and files with only blank lines are skipped with a warning.

Chunks hold whole consecutive documents, at least `chunk_bytes` of text each, in UTF-8 bytes
(the last chunk of the corpus is merged into the previous one when it is smaller than half
of that, so no chunk has too few documents to draw random next sentences from). Their
boundaries depend only on the input and `chunk_bytes`, never on the number of workers,
which is what makes the output independent of --num_workers. A document longer than
`chunk_bytes` is cut at a line boundary so that one chunk, and so each worker's memory,
stays bounded; its pieces keep the document's id (`Chunk.doc_ids`), so a random next
sentence is never drawn from another piece of the same document.
"""

from __future__ import annotations

import dataclasses
from typing import Iterator, List, Optional, Sequence, Tuple

from absl import logging

from data_tools import text_files


@dataclasses.dataclass
class Chunk:
    """Consecutive documents of the corpus: one task for a worker.

    Attributes:
        index: position of the chunk in the corpus (0, 1, ...); seeds the task's generator.
        documents: each document is a list of non-blank lines (stripped).
        num_bytes: UTF-8 bytes of text in the chunk, newlines included (its size).
        doc_ids: the corpus-wide id of each document; the pieces of a document cut because
            it was longer than a chunk share one id.
        input_bytes: bytes of the input files read (as stored: compressed ones for a
            compressed file) when the chunk was complete, for progress against file sizes.
    """

    index: int
    documents: List[List[str]]
    num_bytes: int
    doc_ids: List[int] = dataclasses.field(default_factory=list)
    input_bytes: int = 0


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


def iter_lines(path: str, stats: CorpusStats, block_size: int = text_files.BLOCK
               ) -> Iterator[str]:
    """Yields the lines of one file (without the newline), decompressed (`text_files`) and
    decoded block by block; a byte-order mark at the start is dropped.

    A line longer than a block is assembled from its pieces (linear time, not quadratic).
    """
    bad = 0

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
                bad += n_bad
                lines = text.split("\n")
                lines.pop()  # the empty string after the final "\n"
                yield from lines
            if pending:
                text, n_bad = text_files.decode(b"".join(pending))
                bad += n_bad
                yield text_files.strip_bom(text) if first else text
        except Exception as e:  # noqa: BLE001 - corrupt or truncated data: one line
            text_files.reraise(path, e)
    if bad:
        _warn(stats, f"{path}: {bad} invalid UTF-8 byte sequence(s) replaced")


def iter_pieces(
    paths: Sequence[str], stats: CorpusStats, max_document_bytes: int = 0
) -> Iterator[Tuple[int, List[str]]]:
    """Yields (document id, lines) of all files, in order; see `iter_documents`.

    Ids count documents from 0; the pieces of a document cut at `max_document_bytes` share
    its id.
    """
    doc_id = 0
    for path in paths:
        stats.files += 1
        lines_before = stats.lines
        start_bytes = stats.bytes_read
        doc: List[str] = []
        doc_bytes = 0
        cut = False  # the current document was already cut at least once
        for raw in iter_lines(path, stats):
            line = raw.strip()
            if not line:
                if doc:
                    stats.documents += 1
                    yield doc_id, doc
                if doc or cut:
                    doc_id += 1
                doc, doc_bytes, cut = [], 0, False
                continue
            stats.lines += 1
            doc.append(line)
            doc_bytes += utf8_len(raw) + 1
            if max_document_bytes and doc_bytes >= max_document_bytes:
                stats.documents += 1
                stats.split_documents += 1
                yield doc_id, doc
                doc, doc_bytes, cut = [], 0, True
        if doc:
            stats.documents += 1
            yield doc_id, doc
        if doc or cut:
            doc_id += 1
        if stats.bytes_read == start_bytes:
            _warn(stats, f"{path}: empty file, skipped")
        elif stats.lines == lines_before:
            _warn(stats, f"{path}: only blank lines, skipped")


def iter_documents(
    paths: Sequence[str], stats: CorpusStats, max_document_bytes: int = 0
) -> Iterator[List[str]]:
    """Yields documents (lists of stripped, non-blank lines) of all files, in order.

    Args:
        paths: input files.
        stats: counters and warnings, updated as files are read.
        max_document_bytes: if > 0, a document is cut after the line that makes it at least
            this long.
    """
    for _, doc in iter_pieces(paths, stats, max_document_bytes):
        yield doc


def iter_chunks(
    paths: Sequence[str], chunk_bytes: int, stats: Optional[CorpusStats] = None,
) -> Iterator[Chunk]:
    """Groups the documents of `paths` into chunks of at least `chunk_bytes` of text.

    Args:
        paths: input files, read in order.
        chunk_bytes: minimum text size of a chunk (the last one may be smaller).
        stats: counters and warnings (a fresh one if None).

    Yields:
        Chunks with consecutive indices from 0.
    """
    if chunk_bytes <= 0:
        raise ValueError("chunk_bytes must be > 0")
    stats = stats if stats is not None else CorpusStats()

    index = 0
    held: Optional[Chunk] = None  # the last full chunk, kept back to absorb a small tail
    docs: List[List[str]] = []
    ids: List[int] = []
    size = 0
    for doc_id, doc in iter_pieces(paths, stats, max_document_bytes=chunk_bytes):
        docs.append(doc)
        ids.append(doc_id)
        size += sum(utf8_len(line) + 1 for line in doc) + 1
        if size >= chunk_bytes:
            if held is not None:
                yield held
            held = Chunk(index=index, documents=docs, num_bytes=size, doc_ids=ids,
                         input_bytes=stats.bytes_read)
            index += 1
            docs, ids, size = [], [], 0
    if docs and held is not None and size < chunk_bytes // 2:
        held.documents.extend(docs)
        held.doc_ids.extend(ids)
        held.num_bytes += size
        held.input_bytes = stats.bytes_read
        docs = []
    if held is not None:
        yield held
    if docs:
        yield Chunk(index=index, documents=docs, num_bytes=size, doc_ids=ids,
                    input_bytes=stats.bytes_read)


def utf8_len(text: str) -> int:
    """UTF-8 bytes of `text` (chunk sizes count bytes, as progress does, whatever the script)."""
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def _warn(stats: CorpusStats, message: str) -> None:
    stats.warnings.append(message)
    if not stats.quiet:
        logging.warning("%s", message)
