"""The prepare-corpus job as an Apache Beam pipeline (`--beam_pipeline_options`).

Writes the same bytes as `data_tools.prepare.prepare_job.run`: the launcher plans the splits from
file sizes alone (`raw_documents.plan`, the local runner's plan) and runs the start of the first
chunk itself, so that a missing --text_field fails before the pipeline; it reads nothing
else of the corpus, so its work does not grow with it. Workers read their own splits
(`Create(splits) | Reshuffle | ParDo`) and run `prepare_job.process_chunk` on each chunk;
per-file counts go to counters by file index. With --dedup, the first occurrence of each
document hash in (chunk, position) order is kept, as the local run keeps the first it reads: a
`CombinePerKey(min)` over the hashes. The kept documents are numbered in corpus order from
the kept count of every chunk (a side input of one int per chunk), so document k goes where
it goes locally (`PrepareConfig.deal`: shard k mod N, or with --heldout_every the held-out
file or the next shard in turn). Each shard's text is grouped by (shard, range of splits) into
groups of about 64 MB, written as part files in chunk order and concatenated per shard.

Warnings say "path:line" in a split at the start of a file; a worker reading a later split
does not know the lines before it and says "path, line n from byte b".

Memory per worker: one chunk and its result, one group (~64 MB of text; more when one
compressed file holds more than that of a shard's text), and the per-chunk kept counts (16
bytes per chunk), plus Beam's own buffers.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Dict, List, Optional

import numpy as np
from absl import logging

from bert_tf.core.errors import UserError
from data_tools.inputs import splits
from data_tools.prepare import prepare_job, raw_documents
from data_tools.prepare.prepare_config import PrepareConfig
from data_tools.runtime import beam_runtime as bp
from data_tools.runtime.beam_runtime import NAMESPACE, beam

_GROUP_BYTES = 64 << 20  # text per (shard, chunk range) group
_COUNTERS = ("documents", "sentences", "empty", "short", "duplicates", "json_ok",
             "json_broken")


class _Process(beam.DoFn):
    """split -> (chunk index, ChunkResult) for each of its chunks, read by this worker; the
    counts go to counters (the split's lines, text bytes and invalid UTF-8 per file)."""

    def __init__(self, config: PrepareConfig):
        self.config = config

    def setup(self) -> None:
        self.counters = {n: beam.metrics.Metrics.counter(NAMESPACE, n) for n in _COUNTERS}

    def process(self, split: splits.Split):
        config = self.config
        stats = raw_documents.ReadStats()
        for chunk in raw_documents.split_chunks(split, config.input_format, config.document_per,
                                                config.chunk_bytes, stats):
            try:
                result = prepare_job.process_chunk(chunk, config)
            except prepare_job.LocatedError as e:  # worded here: the runner reports a
                raise UserError(str(e)) from None  # UserError's line (`beam_runtime.execute`)
            for message in result.messages(config.input_files):
                logging.warning("%s", message)
            for name in ("empty", "short", "json_ok", "json_broken"):
                self.counters[name].inc(getattr(result, name))
            yield result.index, result
        for name, value in (("lines", stats.lines), ("text_bytes", stats.text_bytes),
                            (f"bad_utf8_{split.file_index}", stats.bad_utf8)):
            if value:
                beam.metrics.Metrics.counter(NAMESPACE, name).inc(value)


def _hashes(item):
    """(chunk, result) -> (hash, (chunk, position)) for every document."""
    index, result = item
    for position, h in enumerate(result.hashes.tolist()):
        yield h, (index, position)


def _keep(item, dedup: bool):
    """(chunk, {"result": [r], "kept": [[positions]]}) -> (chunk, kept documents, counts)."""
    index, groups = item
    (result,) = groups["result"]
    if dedup:
        kept = set(groups["kept"][0]) if groups["kept"] else set()
        keep = [i in kept for i in range(len(result.documents))]
        duplicates = len(keep) - sum(keep)
        if duplicates:
            beam.metrics.Metrics.counter(NAMESPACE, "duplicates").inc(duplicates)
    else:
        keep = [True] * len(result.documents)
    docs = [d for d, k in zip(result.documents, keep) if k]
    counts = [c for c, k in zip(result.sentence_counts, keep) if k]
    return index, docs, counts


class _Deal(beam.DoFn):
    """(chunk, documents, counts) -> ((file, chunk group), (chunk, text of the file)); the
    files are `PrepareConfig.outputs`, each document's chosen by `PrepareConfig.deal`."""

    def __init__(self, config: PrepareConfig, splits_per_group: int):
        self.config = config
        self.splits_per_group = splits_per_group

    def setup(self) -> None:
        self.offsets = None
        self.documents = beam.metrics.Metrics.counter(NAMESPACE, "documents")
        self.sentences = beam.metrics.Metrics.counter(NAMESPACE, "sentences")
        self.heldout = beam.metrics.Metrics.counter(NAMESPACE, "heldout")

    def process(self, item, kept_counts):
        if self.offsets is None:  # documents kept before each chunk, once per worker
            pairs = np.array(sorted(kept_counts), np.int64).reshape(-1, 2)
            self.chunks = pairs[:, 0]
            self.offsets = np.cumsum(pairs[:, 1]) - pairs[:, 1]
        index, docs, counts = item
        self.documents.inc(len(docs))
        self.sentences.inc(sum(counts))
        first = int(self.offsets[np.searchsorted(self.chunks, index)])
        out: List[List[str]] = [[] for _ in self.config.outputs]
        for k, document in enumerate(docs, first):
            shard, first_of_file = self.config.deal(k)
            # A blank line between documents, none before a file's first.
            out[shard].append(document if first_of_file else "\n" + document)
            if shard == len(self.config.output_files):
                self.heldout.inc()
        for shard, parts in enumerate(out):
            if parts:
                yield ((shard, (index >> 32) // self.splits_per_group),
                       (index, "".join(parts).encode("utf-8")))


def _write_group(item, directory: str):
    (shard, group), blocks = item
    data = b"".join(text for _, text in sorted(blocks))
    return bp.write_part(directory, shard, group, data)


def run(config: PrepareConfig, options: str) -> prepare_job.PrepareSummary:
    """Runs the job on Beam; writes the same shards as `prepare_job.run(config)`.

    Raises:
        UserError: as `prepare_job.run`, before the pipeline starts where possible.
    """
    start = time.monotonic()
    # Workers may run elsewhere (a portable runner's in their own working directory).
    config = dataclasses.replace(
        config, input_files=tuple(map(bp.absolute, config.input_files)),
        output_files=tuple(map(bp.absolute, config.output_files)),
        heldout_file=bp.absolute(config.heldout_file) if config.heldout_file else "")
    outputs = list(config.outputs)
    opts = bp.pipeline_options(options, list(config.input_files) + outputs)
    # The launcher reads file sizes and the start of the first chunk only.
    split_plan, sizes = raw_documents.plan(config.input_files, config.input_format,
                                           config.document_per, config.chunk_bytes)
    logging.info("Beam: reading %d input file(s), %.1f MB (%s) in %d split(s); writing %d "
                 "shard(s)", len(config.input_files), sum(sizes) / 1e6, config.input_format,
                 len(split_plan), len(outputs))
    temps = bp.prepare_outputs(outputs)
    staging = ""
    try:
        staging = bp.staging_dir("", outputs[0])
        first_warnings = _try_first_chunk(split_plan, config)
        counters: Dict[str, int] = {}
        if first_warnings is not None:
            counters = bp.execute(_build(beam.Pipeline(options=opts), config, split_plan,
                                         staging, temps))
        summary = prepare_job.PrepareSummary(
            **{name: counters.get(name, 0) for name in _COUNTERS if name != "json_ok"},
            heldout=counters.get("heldout", 0),
            warnings=list(first_warnings or []))
        # Success is what was written: a runner may report no metrics at all (then the
        # counts are unknown, not zero).
        written = sum(bp.written_bytes(t) for t in temps)
        if counters or first_warnings is None:
            prepare_job.check_something_written(config, raw_documents.ReadStats(), summary,
                                                counters.get("json_ok", 0))
        elif not written:
            raise UserError(f"no document to write from the {len(config.input_files)} input "
                            "file(s): empty, short or duplicate documents only (the Beam "
                            "runner reported no counts to say which)")
        bp.publish(temps, outputs)
    except BaseException:
        bp.remove_files(temps)
        raise
    finally:
        if staging:
            bp.remove_tree(staging)
    stats = raw_documents.ReadStats(files=len(sizes), lines=counters.get("lines", 0),
                                    bytes_read=sum(sizes),
                                    text_bytes=counters.get("text_bytes", 0),
                                    warnings=summary.warnings)
    for i, path in enumerate(config.input_files):
        if counters.get(f"bad_utf8_{i}"):
            stats.bad_utf8 += counters[f"bad_utf8_{i}"]
            raw_documents.warn(stats, f"{path}: {counters[f'bad_utf8_{i}']} invalid UTF-8 byte "
                            "sequence(s) replaced by U+FFFD")
    summary.text_bytes = stats.text_bytes
    summary.seconds = time.monotonic() - start
    if counters:
        logging.info("Beam: %s", summary.describe(len(config.output_files)))
    else:  # never "0 documents" beside complete shards
        logging.warning("the Beam runner reported no metrics: the outputs are complete, the "
                        "counts are not available")
        logging.info("Beam: wrote %d shard(s), %.1f MB, from %.1f MB of input in %.1f s; %d "
                     "warning(s)", len(outputs), written / 1e6, sum(sizes) / 1e6,
                     summary.seconds, len(summary.warnings))
    return summary


def _try_first_chunk(split_plan: List[splits.Split], config: PrepareConfig
                     ) -> Optional[List[str]]:
    """Processes the start of the job's first chunk here (jsonl), so that a missing
    --text_field (a worker's bad-input error) stops the job before the pipeline starts;
    returns its warnings, or None when no split holds a document (nothing to run)."""
    stats = raw_documents.ReadStats()
    if config.input_format == raw_documents.FORMAT_TEXT:
        # No text fails on a worker: only whether there is any is checked, up to the first
        # non-blank line (with --document_per=file a first document can be a whole file).
        found = any(next(raw_documents.split_items(split, raw_documents.FORMAT_TEXT,
                                                   raw_documents.PER_LINE, stats), None)
                    for split in split_plan)
        return [] if found else None
    for split in split_plan:
        chunk = next(raw_documents.split_chunks(split, config.input_format, config.document_per,
                                                config.chunk_bytes, stats), None)
        if chunk is not None:
            head = dataclasses.replace(chunk, items=chunk.items[:100],
                                       sources=chunk.sources[:100])
            result = prepare_job.process_chunk(head, config)
            messages = result.messages(config.input_files)
            for message in messages:
                logging.warning("%s", message)
            return messages
    return None


def _build(p, config: PrepareConfig, split_plan: List[splits.Split],
           staging: str, temps: List[str]):
    results = (p | "Splits" >> beam.Create(split_plan)
               | "SpreadSplits" >> beam.Reshuffle()
               | "Process" >> beam.ParDo(_Process(config)))
    kept = p | "NoDedup" >> beam.Create([])
    if config.dedup:
        kept = (results | "Hashes" >> beam.FlatMap(_hashes)
                | "FirstOfHash" >> beam.CombinePerKey(min)
                | "KeptPosition" >> beam.Map(lambda kv: kv[1])
                | "KeptOfChunk" >> beam.GroupByKey())
    documents = ({"result": results, "kept": kept} | "JoinKept" >> beam.CoGroupByKey()
                 | "Keep" >> beam.Map(_keep, config.dedup))
    kept_counts = documents | "KeptCounts" >> beam.Map(lambda t: (t[0], len(t[1])))
    num_shards = len(temps)
    splits_per_group = max(1, _GROUP_BYTES * num_shards // config.chunk_bytes)
    parts = (documents
             | "Deal" >> beam.ParDo(_Deal(config, splits_per_group),
                                    beam.pvalue.AsList(kept_counts))
             | "GroupChunks" >> beam.GroupByKey()
             | "WriteGroups" >> beam.Map(_write_group, staging))
    bp.finish_shards(p, parts, temps)
    return p
