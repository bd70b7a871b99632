"""The prepare-corpus job as an Apache Beam pipeline (`--beam_pipeline_options`).

Writes the same bytes as `data_tools.prepare_job.run`: the launcher stages
`raw_corpus.iter_chunks`' chunks (`data_tools.beam_io`); workers run
`prepare_job.process_chunk` on each. With --dedup, the first occurrence of each document hash
in (chunk, position) order is kept, as the local run keeps the first it reads: a
`CombinePerKey(min)` over the hashes. The kept documents are numbered in corpus order from
the kept count of every chunk (a side input of one int per chunk), so document k goes to
shard k mod N as locally. Each shard's text is grouped by (shard, range of chunks) into
groups of about 64 MB, written as part files in chunk order and concatenated per shard.

Memory per worker: one chunk and its result, one group (~64 MB of text), and the per-chunk
kept counts (8 bytes per chunk), plus Beam's own buffers.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Dict, List

import numpy as np
from absl import logging

from bert_tf import fileio
from bert_tf.errors import UserError
from data_tools import beam_io as bp
from data_tools import prepare_job, raw_corpus
from data_tools.beam_io import NAMESPACE, beam

_GROUP_BYTES = 64 << 20  # text per (shard, chunk range) group
_COUNTERS = ("documents", "sentences", "empty", "short", "duplicates", "json_ok",
             "json_broken")


class _Process(beam.DoFn):
    """chunk ref -> (chunk index, ChunkResult) with the chunk's counters."""

    def __init__(self, config: prepare_job.PrepareConfig):
        self.config = config

    def setup(self) -> None:
        self.counters = {n: beam.metrics.Metrics.counter(NAMESPACE, n) for n in _COUNTERS}

    def process(self, ref):
        result = prepare_job.process_chunk(bp.load_chunk(ref), self.config)
        for message in result.warnings:
            logging.warning("%s", message)
        for name in ("empty", "short", "json_ok", "json_broken"):
            self.counters[name].inc(getattr(result, name))
        yield result.index, result


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
    """(chunk, documents, counts) -> ((shard, chunk group), (chunk, text of the shard))."""

    def __init__(self, num_shards: int, chunks_per_group: int):
        self.num_shards = num_shards
        self.chunks_per_group = chunks_per_group

    def setup(self) -> None:
        self.offsets = None
        self.documents = beam.metrics.Metrics.counter(NAMESPACE, "documents")
        self.sentences = beam.metrics.Metrics.counter(NAMESPACE, "sentences")

    def process(self, item, kept_counts):
        if self.offsets is None:  # documents kept before each chunk, once per worker
            counts = dict(kept_counts)
            n = max(counts) + 1 if counts else 0
            per_chunk = np.array([counts.get(i, 0) for i in range(n)], np.int64)
            self.offsets = np.cumsum(per_chunk) - per_chunk
        index, docs, counts = item
        self.documents.inc(len(docs))
        self.sentences.inc(sum(counts))
        first = int(self.offsets[index])
        out: List[List[str]] = [[] for _ in range(self.num_shards)]
        for k, document in enumerate(docs, first):
            # A blank line between documents, none before a shard's first.
            out[k % self.num_shards].append(document if k < self.num_shards
                                            else "\n" + document)
        for shard, parts in enumerate(out):
            if parts:
                yield ((shard, index // self.chunks_per_group),
                       (index, "".join(parts).encode("utf-8")))


def _write_group(item, directory: str):
    (shard, group), blocks = item
    data = b"".join(text for _, text in sorted(blocks))
    return bp.write_part(directory, shard, group, data)


def run(config: prepare_job.PrepareConfig, options: str) -> prepare_job.PrepareSummary:
    """Runs the job on Beam; writes the same shards as `prepare_job.run(config)`.

    Raises:
        UserError: as `prepare_job.run`, before the pipeline starts where possible.
    """
    start = time.monotonic()
    # Workers may run elsewhere (a portable runner's in their own working directory).
    config = dataclasses.replace(
        config, input_files=tuple(map(bp.absolute, config.input_files)),
        output_files=tuple(map(bp.absolute, config.output_files)))
    outputs = list(config.output_files)
    opts = bp.pipeline_options(options, list(config.input_files) + outputs)
    total_bytes = sum(fileio.size(p) for p in config.input_files)
    logging.info("Beam: reading %d input file(s), %.1f MB (%s); writing %d shard(s)",
                 len(config.input_files), total_bytes / 1e6, config.input_format,
                 len(outputs))
    temps = bp.prepare_outputs(outputs)
    staging = ""
    stats = raw_corpus.ReadStats()
    try:
        staging = bp.staging_dir("", outputs[0])
        chunks = raw_corpus.iter_chunks(config.input_files, config.input_format,
                                        config.document_per, config.chunk_bytes, stats)
        first_warnings: List[str] = []
        staged = bp.stage_chunks(_checked(chunks, config, first_warnings), staging)
        logging.info("staged %.1f MB of text in %d file(s) in %.1f s", stats.text_bytes / 1e6,
                     len(staged), time.monotonic() - start)
        counters: Dict[str, int] = {}
        if staged:
            counters = bp.execute(_build(beam.Pipeline(options=opts), config, staged,
                                         staging, temps))
        summary = prepare_job.PrepareSummary(
            **{name: counters.get(name, 0) for name in _COUNTERS if name != "json_ok"},
            warnings=first_warnings)
        # Success is what was written: a runner may report no metrics at all (then the
        # counts are unknown, not zero).
        written = sum(bp.written_bytes(t) for t in temps)
        if counters or not staged:
            prepare_job._check_something_written(config, stats, summary,
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
    summary.text_bytes = stats.text_bytes
    summary.seconds = time.monotonic() - start
    summary.warnings = list(stats.warnings)
    if counters:
        logging.info("Beam: %s", summary.describe(len(outputs)))
    else:  # never "0 documents" beside complete shards
        logging.warning("the Beam runner reported no metrics: the outputs are complete, the "
                        "counts are not available")
        logging.info("Beam: wrote %d shard(s), %.1f MB, from %.1f MB of text in %.1f s; %d "
                     "warning(s)", len(outputs), written / 1e6, summary.text_bytes / 1e6,
                     summary.seconds, len(summary.warnings))
    return summary


def _checked(chunks, config: prepare_job.PrepareConfig, warnings: List[str]):
    """The chunks; the start of the first is processed here too, so a missing --text_field
    (a worker's bad-input error) stops the job before the pipeline starts."""
    for chunk in chunks:
        if chunk.index == 0:
            warnings += prepare_job.process_chunk(raw_corpus.Chunk(
                0, chunk.items[:100], chunk.sources[:100], 0), config).warnings
        yield chunk


def _build(p, config: prepare_job.PrepareConfig, staged: List[str], staging: str,
           temps: List[str]):
    results = bp.read_chunks(p, staged) | "Process" >> beam.ParDo(_Process(config))
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
    chunks_per_group = max(1, _GROUP_BYTES * num_shards // config.chunk_bytes)
    parts = (documents
             | "Deal" >> beam.ParDo(_Deal(num_shards, chunks_per_group),
                                    beam.pvalue.AsList(kept_counts))
             | "GroupChunks" >> beam.GroupByKey()
             | "WriteGroups" >> beam.Map(_write_group, staging))
    bp.finish_shards(p, parts, temps)
    return p
