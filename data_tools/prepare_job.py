"""The prepare-corpus job: raw documents -> one sentence per line, a blank line between them.

The parent streams the inputs into chunks of whole documents (`data_tools.raw_corpus`); a
pool of workers parses JSON, splits sentences (`data_tools.sentences`), drops empty and
short documents and hashes the rest; the parent consumes the results in chunk order, drops
exact duplicates (--dedup) and deals the documents to the output shards in turn (document
k to shard k mod N). Nothing depends on the number of workers or the chunk size, so the
output is byte-identical for any --num_workers.

Memory: a few chunks in flight, and with --dedup 8 bytes per distinct document (64-bit
BLAKE2b hashes in sorted arrays; two distinct documents share a hash with probability
about n^2 / 2^65, 3e-4 for n = 100 million).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from typing import Dict, List, Optional, Tuple

import numpy as np
from absl import logging

from bert_tf import fileio
from bert_tf.errors import UserError
from data_tools import parallel, raw_corpus, sentences, tfrecord_writer

_MAX_WARNINGS = 5  # broken JSON lines reported one by one; the rest are counted


@dataclasses.dataclass(frozen=True)
class PrepareConfig:
    """Everything the job needs (built from flags by `data_tools.prepare_corpus`).

    Attributes:
        input_files: expanded input paths, in order.
        output_files: one path per output shard.
        input_format: "text" or "jsonl".
        text_field: the JSON field holding a document's text (jsonl).
        document_per: "file", "line" or "blank_line": what one text document is.
        language: the sentence splitter's language (a code, e.g. "en", "de", "zh").
        min_sentences: documents with fewer sentences are dropped.
        min_chars: documents with fewer characters (sentences, without line breaks) are
            dropped.
        dedup: drop documents identical (after whitespace normalisation) to an earlier one.
        num_workers: processes (1 runs in this process).
        chunk_bytes: text per task (the output does not depend on it).
        progress_seconds: interval of progress lines (0: none).
    """

    input_files: Tuple[str, ...]
    output_files: Tuple[str, ...]
    input_format: str = raw_corpus.FORMAT_TEXT
    text_field: str = "text"
    document_per: str = raw_corpus.PER_BLANK_LINE
    language: str = sentences.DEFAULT_LANGUAGE
    min_sentences: int = 1
    min_chars: int = 0
    dedup: bool = False
    num_workers: int = 1
    chunk_bytes: int = 1 << 20
    progress_seconds: float = 5.0

    def __post_init__(self) -> None:
        if self.input_format not in raw_corpus.FORMATS:
            raise UserError(f"--input_format={self.input_format!r}: expected one of "
                            f"{', '.join(raw_corpus.FORMATS)}")
        if self.document_per not in raw_corpus.DOCUMENT_PER:
            raise UserError(f"--document_per={self.document_per!r}: expected one of "
                            f"{', '.join(raw_corpus.DOCUMENT_PER)}")
        if not self.text_field:
            raise UserError("--text_field is empty: name the JSON field with the text")
        object.__setattr__(self, "language", sentences.check_language(self.language))
        if self.min_sentences < 0:
            raise UserError(f"--min_sentences={self.min_sentences}: must be >= 0")
        if self.min_chars < 0:
            raise UserError(f"--min_chars={self.min_chars}: must be >= 0")
        if self.num_workers < 1:
            raise UserError(f"--num_workers={self.num_workers}: must be >= 1")
        if self.chunk_bytes < 1:
            raise UserError(f"--chunk_mb={self.chunk_bytes / 1e6}: must be > 0")
        if len(set(self.output_files)) != len(self.output_files):
            raise UserError("--output_file: the output files are not distinct")


@dataclasses.dataclass
class ChunkResult:
    """What a worker returns for one chunk.

    Attributes:
        index: the chunk's index.
        documents: the kept documents, each its sentences joined by "\\n", plus "\\n".
        sentence_counts: sentences of each kept document.
        hashes: `[len(documents)]` uint64 hashes of the documents (with dedup), else None.
        empty, short: documents dropped for having no sentence, or too few / too short.
        json_ok, json_broken: JSON lines parsed, and skipped as broken.
        warnings: the first few messages about broken JSON lines.
    """

    index: int
    documents: List[str]
    sentence_counts: List[int]
    hashes: Optional[np.ndarray]
    empty: int = 0
    short: int = 0
    json_ok: int = 0
    json_broken: int = 0
    warnings: List[str] = dataclasses.field(default_factory=list)


def _text_of(line: str, where: str, field: str, result: ChunkResult) -> Optional[str]:
    """The text of one JSON line; None (counted, and a warning) when the line is broken.

    Raises:
        UserError: the object has no `field`, or it is not a string.
    """
    try:
        obj = json.loads(line)
        if not isinstance(obj, dict):
            raise ValueError(f"a JSON {type(obj).__name__}, not an object")
    except ValueError as e:  # json.JSONDecodeError is a ValueError
        result.json_broken += 1
        if len(result.warnings) < _MAX_WARNINGS:
            result.warnings.append(f"{where}: broken JSON line skipped "
                                   f"({getattr(e, 'msg', None) or e})")
        return None
    result.json_ok += 1
    if field not in obj:
        fields = ", ".join(list(obj)[:10]) or "none"
        raise UserError(f"--text_field={field!r}: no such field in {where} (its fields: "
                        f"{fields})")
    text = obj[field]
    if text is None:
        return ""
    if not isinstance(text, str):
        raise UserError(f"--text_field={field!r} in {where} is a JSON "
                        f"{type(text).__name__}, not a string")
    return text


def process_chunk(chunk: raw_corpus.Chunk, config: PrepareConfig) -> ChunkResult:
    """Splits, filters and hashes the documents of one chunk.

    Raises:
        UserError: a JSON object without --text_field (or a non-string one).
    """
    result = ChunkResult(chunk.index, [], [], None)
    jsonl = config.input_format == raw_corpus.FORMAT_JSONL
    digests = []
    for item, (file_index, line) in zip(chunk.items, chunk.sources):
        text = item
        if jsonl:
            where = f"{config.input_files[file_index]}:{line}"
            text = _text_of(item, where, config.text_field, result)
            if text is None:
                continue
        found = sentences.split_document(text, config.language)
        if not found:
            result.empty += 1
            continue
        if (len(found) < config.min_sentences
                or (config.min_chars and sum(map(len, found)) < config.min_chars)):
            result.short += 1
            continue
        document = "\n".join(found) + "\n"
        result.documents.append(document)
        result.sentence_counts.append(len(found))
        if config.dedup:
            digests.append(hashlib.blake2b(document.encode("utf-8"), digest_size=8).digest())
    if config.dedup:
        result.hashes = np.frombuffer(b"".join(digests), dtype="<u8")
    return result


class SeenHashes:
    """A set of 64-bit hashes in sorted arrays of geometric sizes (8 bytes per hash).

    Adding a batch sorts it into a new array, then merges the newest arrays while the last
    is at least as large as the one before, so there are about log2(n) arrays and each hash
    is copied about log2(n) times in all.
    """

    def __init__(self) -> None:
        self._levels: List[np.ndarray] = []

    def __len__(self) -> int:
        return sum(len(level) for level in self._levels)

    def add_new(self, hashes: np.ndarray) -> np.ndarray:
        """Adds a batch; returns `[len(hashes)]` bool: True where a hash was not seen before
        (in earlier batches, or earlier in this one)."""
        hashes = np.asarray(hashes, dtype=np.uint64)
        new = np.zeros(len(hashes), dtype=bool)
        if not len(hashes):
            return new
        new[np.unique(hashes, return_index=True)[1]] = True
        for level in self._levels:
            at = np.minimum(np.searchsorted(level, hashes), len(level) - 1)
            new &= level[at] != hashes
        if new.any():
            self._levels.append(np.sort(hashes[new]))
        while len(self._levels) > 1 and len(self._levels[-1]) >= len(self._levels[-2]):
            last = self._levels.pop()
            self._levels[-1] = np.sort(np.concatenate([self._levels[-1], last]), kind="stable")
        return new


@dataclasses.dataclass
class PrepareSummary:
    """The outcome of `run`."""

    documents: int = 0
    sentences: int = 0
    empty: int = 0
    short: int = 0
    duplicates: int = 0
    json_broken: int = 0
    text_bytes: int = 0
    seconds: float = 0.0
    warnings: List[str] = dataclasses.field(default_factory=list)

    def describe(self, shards: int) -> str:
        mb_s = self.text_bytes / 1e6 / max(self.seconds, 1e-9)
        return (f"wrote {self.documents} documents, {self.sentences} sentences to {shards} "
                f"shard(s) from {self.text_bytes / 1e6:.1f} MB of text in {self.seconds:.1f} s "
                f"({mb_s:.2f} MB/s); dropped {self.empty} empty, {self.short} short, "
                f"{self.duplicates} duplicate document(s); {self.json_broken} broken JSON "
                f"line(s) skipped; {len(self.warnings)} warning(s)")


# ---- worker processes ------------------------------------------------------------------

_WORKER: Dict[str, PrepareConfig] = {}


def _init_worker(config: PrepareConfig) -> None:
    _WORKER["config"] = config


def _worker_task(chunk: raw_corpus.Chunk) -> ChunkResult:
    return process_chunk(chunk, _WORKER["config"])


def run(config: PrepareConfig) -> PrepareSummary:
    """Runs the job: reads the inputs, writes every shard (atomically), returns a summary.

    Raises:
        UserError: unreadable input, no text, a missing --text_field, every JSON line
            broken, every document dropped, or an unwritable output.
    """
    start = time.monotonic()
    total_bytes = max(sum(fileio.size(p) for p in config.input_files), 1)
    logging.info("reading %d input file(s), %.1f MB (%s); writing %d shard(s); %d worker(s)",
                 len(config.input_files), total_bytes / 1e6, config.input_format,
                 len(config.output_files), config.num_workers)
    stats = raw_corpus.ReadStats()
    summary = PrepareSummary()
    seen = SeenHashes() if config.dedup else None
    shards = len(config.output_files)
    last_progress = start
    chunks = raw_corpus.iter_chunks(config.input_files, config.input_format,
                                    config.document_per, config.chunk_bytes, stats)
    if config.num_workers <= 1:
        results = (process_chunk(chunk, config) for chunk in chunks)
    else:
        results = parallel.map_ordered(_worker_task, ((chunk,) for chunk in chunks),
                                       config.num_workers, _init_worker, (config,))
    json_ok = 0
    with tfrecord_writer.ShardedWriter(config.output_files) as writer:
        for result in results:
            for message in result.warnings:
                if len(summary.warnings) < _MAX_WARNINGS:
                    raw_corpus.warn(stats, message)
                    summary.warnings.append(message)
            json_ok += result.json_ok
            summary.json_broken += result.json_broken
            summary.empty += result.empty
            summary.short += result.short
            keep = (seen.add_new(result.hashes) if seen is not None
                    else np.ones(len(result.documents), dtype=bool))
            summary.duplicates += int((~keep).sum())
            out: List[List[str]] = [[] for _ in range(shards)]
            for document, count, kept in zip(result.documents, result.sentence_counts, keep):
                if kept:
                    shard = summary.documents % shards
                    # A blank line between documents, none before a shard's first.
                    out[shard].append(document if summary.documents < shards
                                      else "\n" + document)
                    summary.documents += 1
                    summary.sentences += count
            for shard, parts in enumerate(out):
                if parts:
                    writer.write(shard, "".join(parts).encode("utf-8"))
            now = time.monotonic()
            if config.progress_seconds > 0 and now - last_progress >= config.progress_seconds:
                last_progress = now
                logging.info("progress: %.1f%% of input, %d documents, %d sentences, %.2f "
                             "MB/s", 100 * min(stats.bytes_read / total_bytes, 1.0),
                             summary.documents, summary.sentences,
                             stats.text_bytes / 1e6 / max(now - start, 1e-9))
        _check_something_written(config, stats, summary, json_ok)
    summary.text_bytes = stats.text_bytes
    summary.seconds = time.monotonic() - start
    if summary.json_broken > len(summary.warnings):
        raw_corpus.warn(stats, f"{summary.json_broken} broken JSON line(s) skipped in all")
    summary.warnings = list(stats.warnings)
    logging.info("%s", summary.describe(shards))
    return summary


def _check_something_written(config: PrepareConfig, stats: raw_corpus.ReadStats,
                             summary: PrepareSummary, json_ok: int) -> None:
    """Raises UserError (so no output is kept) when there is nothing to write."""
    files = f"the {len(config.input_files)} input file(s)"
    if summary.json_broken and not json_ok:
        raise UserError(f"every JSON line of {files} is broken ({summary.json_broken} "
                        f"line(s); first: {summary.warnings[0] if summary.warnings else '?'})")
    read = summary.documents + summary.empty + summary.short + summary.duplicates
    if not read:
        raise UserError(f"no text in {files}: empty or blank lines only")
    if not summary.documents:
        raise UserError(f"no document left to write: of {read} read, {summary.empty} empty, "
                        f"{summary.short} shorter than --min_sentences={config.min_sentences} "
                        f"or --min_chars={config.min_chars}, {summary.duplicates} duplicates")
