"""The create-pretraining-data job as an Apache Beam pipeline (Dataflow, Flink, Spark, Direct).

`python -m data_tools.create_pretraining_data ... --beam_pipeline_options="--runner=..."`
runs the same job as `data_tools.pretraining_data.create_job` and writes the same bytes:

1. The launcher plans the splits (`data_tools.inputs.splits`: file sizes only, the local runner's
   plan, so the same chunks and per-chunk seeds) and runs the first chunk itself, so that a
   job that fails on real text, the vocab or the flags fails before the pipeline. It reads
   nothing else of the corpus.
2. Workers read their splits and tokenize the chunks into the token store under the
   temporary directory (`create_job.store_split`); one worker builds the store's index from
   their reports (a side input of the next step). Workers then pack each stored chunk
   (`chunk_records.process_stored`), reading random next segments from the whole store as the local
   runner does (a store under gs:// is first copied to each worker's disk). Each record
   gets the global shuffle's key (`external_shuffle.record_keys`); shard = key % num_shards.
3. Records are grouped by (shard, bucket), the bucket being the key's top bits, with enough
   buckets that a group holds about --shuffle_memory_mb of records (the total estimated
   from the first chunk). Each group is sorted by key and written as one part file.
4. Each shard's parts are concatenated in bucket order (gzip-compressed if asked) into a
   temporary file beside the output; the launcher renames every shard when the pipeline
   succeeded and removes temporary files whatever happened.

Memory per worker: one chunk (its documents and records, as a local worker) or one group
(about --shuffle_memory_mb of records, held twice while sorted), plus Beam's own buffers.
Nothing grows with the corpus. Only the Beam modules import Beam (the `[beam]` extra).
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Iterator, List, Tuple

import numpy as np
from absl import logging

from bert_tf.core import fileio, tokenization
from bert_tf.core.errors import UserError
from data_tools.inputs import documents, splits
from data_tools.pretraining_data import create_job, token_store
from data_tools.pretraining_data.chunk_records import InstanceStats, process_chunk, process_stored
from data_tools.pretraining_data.create_config import CreateConfig
from data_tools.runtime import beam_runtime
from data_tools.runtime.beam_runtime import NAMESPACE, beam
from data_tools.shuffle import external_shuffle

_MAX_BUCKET_BITS = 24

# ---- the create-pretraining-data pipeline ----------------------------------------------

_STATS_FIELDS = ("instances", "tokens", "maskable_tokens", "short", "predictions",
                 "random_next", "text_tokens", "long_lines", "lost_tokens")


class _Store(beam.DoFn):
    """split -> a `StoredChunk` (with its report) per chunk: the split read by this worker,
    its chunks tokenized into the store; its counts go to counters (per file by index)."""

    def __init__(self, config: CreateConfig, directory: str):
        self.config = config
        self.directory = directory

    def setup(self) -> None:
        self.tokenizer = load_tokenizer(self.config)

    def process(self, split):
        stored, stats = create_job.store_split(split, self.config, self.tokenizer, self.directory)
        for name, value in (("lines", stats.lines), ("documents_read", stats.documents),
                            (f"lines_{split.file_index}", stats.file_lines.get(split.path, 0)),
                            (f"bad_utf8_{split.file_index}", stats.bad_utf8.get(split.path, 0))):
            if value:
                beam.metrics.Metrics.counter(NAMESPACE, name).inc(value)
        yield from stored


def _corpus_stats(counters, files) -> documents.CorpusStats:
    """The job's corpus counts, from the counters of `_Store`."""
    stats = documents.CorpusStats(lines=counters.get("lines", 0),
                                  documents=counters.get("documents_read", 0))
    for i, path in enumerate(files):
        stats.file_lines[path] = counters.get(f"lines_{i}", 0)
        if counters.get(f"bad_utf8_{i}"):
            stats.bad_utf8[path] = counters[f"bad_utf8_{i}"]
    return stats


def _build_index(reports, directory: str) -> token_store.StoreIndex:
    """Every chunk's report -> the store's index (its documents' table written beside)."""
    builder = token_store.IndexBuilder(directory)
    try:
        for info in sorted(reports, key=lambda info: info.index):
            builder.add(info)
        return builder.finish()
    finally:
        builder.close()


class _PackChunks(beam.DoFn):
    """chunk ref (or `StoredChunk`, with the store's index as side input) -> ((shard, bucket),
    (chunk, keys uint64 bytes, frame lengths int64 bytes, frames)), the bucket being the
    keys' top `bits` bits."""

    def __init__(self, config: CreateConfig, bits: int):
        self.config = config
        self.bits = bits

    def setup(self) -> None:
        self.tokenizer = load_tokenizer(self.config)
        self.reader = None
        self.counters = {name: beam.metrics.Metrics.counter(NAMESPACE, name) for name in
                         _STATS_FIELDS + ("documents", "chunks", "record_bytes",
                                          "mask", "keep", "random")}

    def process(self, chunk, store):
        config = self.config
        if self.reader is None or self.reader.index.directory != store.directory:
            self.reader = token_store.Reader(store)
        examples = config.log_examples if chunk.index == store.chunk_ids[0] else 0
        result = process_stored(chunk, config, self.tokenizer, self.reader, examples)
        for example in result.examples:
            create_job.log_example(example, self.tokenizer, config.use_v2_feature_names)
        stats = result.stats
        for name in _STATS_FIELDS:
            self.counters[name].inc(getattr(stats, name))
        for name, value in zip(("mask", "keep", "random"), stats.decisions):
            self.counters[name].inc(value)
        self.counters["documents"].inc(result.num_documents)
        self.counters["chunks"].inc()
        self.counters["record_bytes"].inc(int(result.frames.nbytes))
        lengths = result.frame_lengths.astype(np.int64)
        if not len(lengths):
            return
        keys = external_shuffle.record_keys(config.random_seed, result.index, len(lengths))
        group_of = (keys % np.uint64(len(config.output_files))).astype(np.int64)
        if self.bits:  # (shard, bucket) as one int: shard << bits | key's top bits
            group_of = (group_of << self.bits) | (keys >> np.uint64(64 - self.bits)).astype(
                np.int64)
        view = memoryview(result.frames)
        for group, sel in _groups(group_of):
            yield ((group >> self.bits, group & ((1 << self.bits) - 1)),
                   _take(result.index, keys, lengths, view, sel))


def _groups(group_of: np.ndarray) -> Iterator[Tuple[int, np.ndarray]]:
    """(group, indices of its rows, in row order) for every group present."""
    order = np.argsort(group_of, kind="stable")
    present, starts = np.unique(group_of[order], return_index=True)
    ends = list(starts[1:]) + [len(order)]
    for g, lo, hi in zip(present.tolist(), starts.tolist(), ends):
        yield g, order[lo:hi]


def _take(chunk: int, keys: np.ndarray, lengths: np.ndarray, view: memoryview,
          sel: np.ndarray) -> Tuple[int, bytes, bytes, bytes]:
    starts = (np.cumsum(lengths) - lengths)[sel]
    data = b"".join([view[s:s + n] for s, n in zip(starts.tolist(), lengths[sel].tolist())])
    return chunk, keys[sel].tobytes(), lengths[sel].tobytes(), data


def bucket_bits(total_bytes: int, num_groups: int, budget: int) -> int:
    """Key bits that split each of `num_groups` into groups of about `budget` bytes."""
    per_group = total_bytes / max(num_groups, 1)
    if per_group <= budget:
        return 0
    return min(_MAX_BUCKET_BITS, math.ceil(math.log2(per_group / budget)))


def _sort_group(item, directory: str):
    """((shard, bucket), blocks) -> part file of its records ordered by key."""
    (shard, bucket), blocks = item
    blocks = list(blocks)
    keys = np.concatenate([np.frombuffer(b[1], np.uint64) for b in blocks])
    lengths = np.concatenate([np.frombuffer(b[2], np.int64) for b in blocks])
    # Ties (two equal 64-bit keys) go in chunk order, then record order, as locally.
    chunks = np.repeat([b[0] for b in blocks], [len(b[1]) // 8 for b in blocks])
    block_of = np.repeat(np.arange(len(blocks)), [len(b[1]) // 8 for b in blocks])
    starts = np.concatenate([np.cumsum(np.frombuffer(b[2], np.int64))
                             - np.frombuffer(b[2], np.int64) for b in blocks])
    order = np.lexsort((starts, chunks, keys))
    views = [memoryview(b[3]) for b in blocks]
    data = b"".join([views[b][s:s + n] for b, s, n in zip(
        block_of[order].tolist(), starts[order].tolist(), lengths[order].tolist())])
    del blocks, views
    return beam_runtime.write_part(directory, shard, bucket, data)


def load_tokenizer(config: CreateConfig) -> tokenization.FullTokenizer:
    return tokenization.FullTokenizer(
        config.vocab_file, config.do_lower_case,
        required_tokens=(tokenization.UNK, tokenization.CLS, tokenization.SEP,
                         tokenization.MASK))


def run(config: CreateConfig, options: str) -> create_job.CreateSummary:
    """Runs the job on Beam; writes the same shards as `create_job.run(config)`.

    Args:
        config: the job.
        options: Beam pipeline options, e.g. "--runner=DataflowRunner --project=...".

    Raises:
        UserError: as `create_job.run`, before the pipeline starts where possible.
    """
    start = time.monotonic()
    # Workers may run elsewhere (a portable runner's in their own working directory).
    config = dataclasses.replace(
        config, input_files=tuple(map(beam_runtime.absolute, config.input_files)),
        output_files=tuple(map(beam_runtime.absolute, config.output_files)),
        vocab_file=beam_runtime.absolute(config.vocab_file),
        temp_dir=beam_runtime.absolute(config.temp_dir))
    opts = beam_runtime.pipeline_options(options, list(config.input_files)
                                         + list(config.output_files)
                                         + [config.vocab_file, config.temp_dir])
    load_tokenizer(config)  # a bad vocab fails here, not on a worker
    total_bytes = sum(fileio.size(p) for p in config.input_files)
    outputs = list(config.output_files)
    logging.info("Beam: reading %d input file(s), %.1f MB; writing %d shard(s)",
                 len(config.input_files), total_bytes / 1e6, len(outputs))
    temps = beam_runtime.prepare_outputs(outputs)
    staging = ""
    try:
        staging = beam_runtime.staging_dir(config.temp_dir, outputs[0])
        # The launcher reads file sizes and the first chunk only; workers read the splits.
        split_plan, sizes = splits.plan(config.input_files, config.chunk_bytes)
        ratio = _try_first_chunk(split_plan, config)
        bits = bucket_bits(int(ratio * total_bytes), len(outputs), config.shuffle_memory_bytes)
        logging.info("%d split(s); about %.0f MB of records, in %d group(s) per shard",
                     len(split_plan), ratio * total_bytes / 1e6, 1 << bits)
        p = beam.Pipeline(options=opts)
        store = f"{staging}/tokens"
        fileio.makedirs(store)
        stored = (p | "Splits" >> beam.Create(split_plan)
                  | "SpreadSplits" >> beam.Reshuffle()
                  | "Tokenize" >> beam.ParDo(_Store(config, store)))
        index = (stored | "Reports" >> beam.Map(lambda t: (0, t.info))
                 | "AllReports" >> beam.GroupByKey()
                 | "Index" >> beam.MapTuple(lambda _, reports: _build_index(reports, store)))
        parts = (stored | "Chunks" >> beam.Map(dataclasses.replace, info=None)
                 | "SpreadChunks" >> beam.Reshuffle()
                 | "Pack" >> beam.ParDo(_PackChunks(config, bits), beam.pvalue.AsSingleton(index))
                 | "GroupBuckets" >> beam.GroupByKey()
                 | "SortGroups" >> beam.Map(_sort_group, staging))
        beam_runtime.finish_shards(p, parts, temps, config.output_compression)
        counters = beam_runtime.execute(p)
        # Success is what was written: a runner may report no metrics at all.
        written = sum(beam_runtime.written_bytes(t, config.output_compression) for t in temps)
        if not written:
            raise _no_text(config)
        if not counters:
            logging.warning("the Beam runner reported no metrics: the outputs are complete, "
                            "the statistics below are not available")
        beam_runtime.publish(temps, outputs)
    except BaseException:
        beam_runtime.remove_files(temps)
        raise
    finally:
        if staging:
            beam_runtime.remove_tree(staging)
    corpus_stats = _corpus_stats(counters, config.input_files)
    if counters:
        corpus_stats.finish(config.input_files, sizes)
    stats = InstanceStats(**{name: counters.get(name, 0) for name in _STATS_FIELDS},
                          decisions=tuple(counters.get(n, 0) for n in
                                          ("mask", "keep", "random")))
    create_job.warn_truncation(stats, config, corpus_stats)
    seconds = time.monotonic() - start
    summary = create_job.CreateSummary(stats.instances, counters.get("documents", 0),
                                       corpus_stats.lines, len(outputs),
                                       counters.get("shard_bytes", written), seconds,
                                       corpus_stats.warnings, stats)
    if not counters:  # no counts to report: never "0 instances" beside complete shards
        logging.info("Beam: wrote %d shard(s), %.1f MB of records, in %.1f s; %d lines; %d "
                     "warning(s)", summary.shards, summary.bytes_written / 1e6, seconds,
                     summary.lines, len(summary.warnings))
        return summary
    logging.info("Beam: wrote %d instances to %d shard(s), %.1f MB of records, from %d "
                 "chunks in %.1f s; %d documents, %d lines; %d warning(s)", summary.instances,
                 summary.shards, summary.bytes_written / 1e6, counters.get("chunks", 0),
                 seconds, summary.documents, summary.lines, len(summary.warnings))
    logging.info("statistics: %s", stats.describe(config.packing.nsp,
                                                  config.packing.max_seq_length))
    return summary


def _try_first_chunk(split_plan: List[splits.Split], config: CreateConfig) -> float:
    """Runs the job's first chunk here (its text, the vocab and the flags fail before the
    pipeline starts); returns its record bytes per text byte, whence the key buckets.

    Raises:
        UserError: the first chunk fails, or no split holds a document.
    """
    stats = documents.CorpusStats(quiet=True)
    for split in split_plan:
        chunk = next(documents.split_chunks(split, config.chunk_bytes, stats), None)
        if chunk is not None:
            result = process_chunk(chunk, config, load_tokenizer(config))
            if len(result.frame_lengths):
                return result.frames.nbytes / max(chunk.num_bytes, 1)
    raise _no_text(config)


def _no_text(config: CreateConfig) -> UserError:
    return UserError(f"no text to write: the {len(config.input_files)} input file(s) hold no "
                     "document with a token (empty, blank or unreadable lines only)")
