"""The prepare-corpus job: raw documents -> one sentence per line, a blank line between them.

The parent plans the splits of the input from file sizes alone
(`data_tools.prepare.raw_documents.plan`) and reads no text: each worker reads its own splits
(`raw_documents.split_chunks`: every document is read by exactly one split), parses JSON, splits
sentences (`data_tools.prepare.sentences`), drops empty and short documents and hashes the rest.
The parent consumes the results in split order, adds up the per-file counts (line numbers in
messages are made the file's from the line counts of the splits before), drops exact duplicates
(--dedup) and deals the documents to the output shards in turn (document k to shard k mod N;
with --heldout_every, every N-th to the held-out file and the others in turn, see
`PrepareConfig.deal`).
Documents in split order are the corpus's, so the output is byte-identical for any --num_workers
and --chunk_mb.

A compressed file, and a file with --document_per=file, is one split, read by one worker:
give several files to use several workers on them.

Memory: a few splits' results in flight (a split is --chunk_mb of input; a whole file's
results past 64 MB wait in a file on local disk: `data_tools.prepare.split_worker`), and with
--dedup 8 bytes per distinct document (`data_tools.prepare.seen_hashes`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import tempfile
import time
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
from absl import logging

from bert_tf.core.errors import UserError
from data_tools.inputs import splits
from data_tools.prepare import raw_documents, sentences
from data_tools.prepare.prepare_config import PrepareConfig
from data_tools.prepare.seen_hashes import SeenHashes
from data_tools.prepare.split_worker import SplitResult, process_split
from data_tools.runtime import process_pool, sharded_output

_MAX_WARNINGS = 5  # broken JSON lines reported one by one; the rest are counted


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
        warnings: the first few broken JSON lines: (source, message after the location),
            the source as in `raw_documents.Chunk.sources` (`message` words them).
        line_base, split_start: the chunk's (`raw_documents.Chunk`), to locate its sources.
    """

    index: int
    documents: List[str]
    sentence_counts: List[int]
    hashes: Optional[np.ndarray]
    empty: int = 0
    short: int = 0
    json_ok: int = 0
    json_broken: int = 0
    warnings: List[Tuple[Tuple[int, int], str]] = dataclasses.field(default_factory=list)
    line_base: Optional[int] = 0
    split_start: int = 0

    def messages(self, files: Sequence[str], line_base: Optional[int] = None) -> List[str]:
        """The warnings worded, located with `line_base` (the lines of the file before the
        chunk's split) when given, else with what the chunk knew."""
        base = self.line_base if line_base is None else line_base
        return [f"{where(files, source, base, self.split_start)}: {text}"
                for source, text in self.warnings]


def where(files: Sequence[str], source: Tuple[int, int], line_base: Optional[int],
          split_start: int) -> str:
    """"path:line" for an item's source; "path, line n from byte b" when the lines before
    its split are not known (a Beam worker reading a split inside a file)."""
    file_index, line = source
    if line_base is not None:
        return f"{files[file_index]}:{line_base + line}"
    return f"{files[file_index]}, line {line} from byte {split_start}"


class LocatedError(UserError):
    """A bad-input error at a source line, worded again once the split's line base is
    known (`at`)."""

    def __init__(self, template: str, files: Sequence[str], source: Tuple[int, int],
                 line_base: Optional[int], split_start: int):
        super().__init__(template.format(where=where(files, source, line_base, split_start)))
        self.details = (template, tuple(files), source, line_base, split_start)

    def __reduce__(self):  # to cross the worker pipe with its details
        return LocatedError, self.details

    def at(self, line_base: int) -> UserError:
        template, files, source, _, split_start = self.details
        return UserError(template.format(where=where(files, source, line_base, split_start)))


def _text_of(line: str, source: Tuple[int, int], chunk: raw_documents.Chunk,
             config: "PrepareConfig", result: ChunkResult) -> Optional[str]:
    """The text of one JSON line; None (counted, and a warning) when the line is broken.

    Raises:
        LocatedError: the object has no --text_field, or it is not a string.
    """
    try:
        obj = json.loads(line)
        if not isinstance(obj, dict):
            raise ValueError(f"a JSON {type(obj).__name__}, not an object")
    except ValueError as e:  # json.JSONDecodeError is a ValueError
        result.json_broken += 1
        if len(result.warnings) < _MAX_WARNINGS:
            result.warnings.append((source, "broken JSON line skipped "
                                    f"({getattr(e, 'msg', None) or e})"))
        return None
    result.json_ok += 1
    field = _literal(repr(config.text_field))
    if config.text_field not in obj:
        fields = _literal(", ".join(list(obj)[:10]) or "none")
        template = f"--text_field={field}: no such field in {{where}} (its fields: {fields})"
    else:
        text = obj[config.text_field]
        if text is None:
            return ""
        if isinstance(text, str):
            return text
        template = (f"--text_field={field} in {{where}} is a JSON {type(text).__name__}, "
                    "not a string")
    raise LocatedError(template, config.input_files, source, chunk.line_base,
                       chunk.split_start)


def _literal(text: str) -> str:
    """`text` as a literal part of a str.format template."""
    return text.replace("{", "{{").replace("}", "}}")


def process_chunk(chunk: raw_documents.Chunk, config: PrepareConfig) -> ChunkResult:
    """Splits, filters and hashes the documents of one chunk.

    Raises:
        UserError: a JSON object without --text_field (or a non-string one).
    """
    result = ChunkResult(chunk.index, [], [], None, line_base=chunk.line_base,
                         split_start=chunk.split_start)
    jsonl = config.input_format == raw_documents.FORMAT_JSONL
    digests = []
    for item, source in zip(chunk.items, chunk.sources):
        text = item
        if jsonl:
            text = _text_of(item, source, chunk, config, result)
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


@dataclasses.dataclass
class PrepareSummary:
    """The outcome of `run`."""

    documents: int = 0
    sentences: int = 0
    heldout: int = 0
    empty: int = 0
    short: int = 0
    duplicates: int = 0
    json_broken: int = 0
    text_bytes: int = 0
    seconds: float = 0.0
    warnings: List[str] = dataclasses.field(default_factory=list)

    def describe(self, shards: int) -> str:
        mb_s = self.text_bytes / 1e6 / max(self.seconds, 1e-9)
        heldout = f" ({self.heldout} of them to the held-out file)" if self.heldout else ""
        return (f"wrote {self.documents} documents{heldout}, {self.sentences} sentences to "
                f"{shards} shard(s) from {self.text_bytes / 1e6:.1f} MB of text in "
                f"{self.seconds:.1f} s "
                f"({mb_s:.2f} MB/s); dropped {self.empty} empty, {self.short} short, "
                f"{self.duplicates} duplicate document(s); {self.json_broken} broken JSON "
                f"line(s) skipped; {len(self.warnings)} warning(s)")


# ---- worker processes ------------------------------------------------------------------

_WORKER: Dict[str, PrepareConfig] = {}


def _init_worker(config: PrepareConfig) -> None:
    _WORKER["config"] = config


def _worker_split(split: splits.Split, spill_dir: str) -> SplitResult:
    return process_split(split, _WORKER["config"], process_chunk, spill_dir)


def _split_results(config: PrepareConfig, split_plan: Sequence[splits.Split], spill_dir: str
                   ) -> Iterator[Tuple[splits.Split, SplitResult, int]]:
    """(split, its result, lines of its file before it) in split order, the splits read by
    the workers (`split_worker.process_split`); a located error is worded with its file's
    line number."""
    if config.num_workers <= 1:
        results = (process_split(split, config, process_chunk, spill_dir)
                   for split in split_plan)
    else:
        results = process_pool.map_ordered(
            _worker_split, ((split, spill_dir) for split in split_plan), config.num_workers,
            _init_worker, (config,))
    lines = [0] * len(config.input_files)
    for split in split_plan:
        try:
            result = next(results)
        except LocatedError as e:
            raise e.at(lines[split.file_index]) from None
        yield split, result, lines[split.file_index]
        lines[split.file_index] += result.stats.lines


def run(config: PrepareConfig) -> PrepareSummary:
    """Runs the job: reads the inputs, writes every shard (atomically), returns a summary.

    Raises:
        UserError: unreadable input, no text, a missing --text_field, every JSON line
            broken, every document dropped, or an unwritable output.
    """
    start = time.monotonic()
    split_plan, sizes = raw_documents.plan(config.input_files, config.input_format,
                                           config.document_per, config.chunk_bytes)
    total_bytes = max(sum(sizes), 1)
    logging.info("reading %d input file(s), %.1f MB (%s) in %d split(s); writing %d "
                 "shard(s); %d worker(s)", len(config.input_files), total_bytes / 1e6,
                 config.input_format, len(split_plan), len(config.output_files),
                 config.num_workers)
    stats = raw_documents.ReadStats(files=len(config.input_files))
    summary = PrepareSummary()
    spill_dir = tempfile.mkdtemp(prefix="prepare-corpus-")  # local disk, for whole files
    try:
        _write_all(config, split_plan, spill_dir, stats, summary, total_bytes, start)
    finally:
        shutil.rmtree(spill_dir, ignore_errors=True)
    summary.text_bytes = stats.text_bytes
    summary.seconds = time.monotonic() - start
    if summary.json_broken > len(summary.warnings):
        raw_documents.warn(stats, f"{summary.json_broken} broken JSON line(s) skipped in all")
    summary.warnings = list(stats.warnings)
    logging.info("%s", summary.describe(len(config.output_files)))
    return summary


def _write_all(config: PrepareConfig, split_plan: Sequence[splits.Split], spill_dir: str,
               stats: raw_documents.ReadStats, summary: PrepareSummary, total_bytes: int,
               start: float) -> None:
    """Consumes the splits' results in order and writes the shards (atomically)."""
    bad_utf8 = [0] * len(config.input_files)
    last_split = {split.file_index: split.index for split in split_plan}
    seen = SeenHashes() if config.dedup else None
    last_progress = start
    json_ok = 0
    with sharded_output.ShardedWriter(config.outputs) as writer:
        for split, split_result, line_base in _split_results(config, split_plan, spill_dir):
            read = split_result.stats
            stats.lines += read.lines
            stats.bytes_read += read.bytes_read
            stats.text_bytes += read.text_bytes
            bad_utf8[split.file_index] += read.bad_utf8
            for result in split_result.chunk_results():
                for message in result.messages(config.input_files, line_base):
                    if len(summary.warnings) < _MAX_WARNINGS:
                        raw_documents.warn(stats, message)
                        summary.warnings.append(message)
                json_ok += result.json_ok
                _write(writer, result, seen, config, summary)
            if last_split[split.file_index] == split.index and bad_utf8[split.file_index]:
                stats.bad_utf8 += bad_utf8[split.file_index]
                raw_documents.warn(stats, f"{split.path}: {bad_utf8[split.file_index]} invalid "
                                "UTF-8 byte sequence(s) replaced by U+FFFD")
            now = time.monotonic()
            if config.progress_seconds > 0 and now - last_progress >= config.progress_seconds:
                last_progress = now
                logging.info("progress: %.1f%% of input, %d documents, %d sentences, %.2f "
                             "MB/s", 100 * min(stats.bytes_read / total_bytes, 1.0),
                             summary.documents, summary.sentences,
                             stats.text_bytes / 1e6 / max(now - start, 1e-9))
        check_something_written(config, stats, summary, json_ok)


def _write(writer: sharded_output.ShardedWriter, result: ChunkResult,
           seen: Optional[SeenHashes], config: PrepareConfig, summary: PrepareSummary) -> None:
    """Counts one chunk's result, drops its duplicates and deals its documents
    (`PrepareConfig.deal`)."""
    shards = len(config.outputs)
    summary.json_broken += result.json_broken
    summary.empty += result.empty
    summary.short += result.short
    keep = (seen.add_new(result.hashes) if seen is not None
            else np.ones(len(result.documents), dtype=bool))
    summary.duplicates += int((~keep).sum())
    out: List[List[str]] = [[] for _ in range(shards)]
    for document, count, kept in zip(result.documents, result.sentence_counts, keep):
        if kept:
            shard, first = config.deal(summary.documents)
            # A blank line between documents, none before a file's first.
            out[shard].append(document if first else "\n" + document)
            summary.documents += 1
            summary.sentences += count
            summary.heldout += shard == len(config.output_files)
    for shard, parts in enumerate(out):
        if parts:
            writer.write(shard, "".join(parts).encode("utf-8"))


def check_something_written(config: PrepareConfig, stats: raw_documents.ReadStats,
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
