"""The create-pretraining-data job as an Apache Beam pipeline (Dataflow, Flink, Spark, Direct).

`python -m data_tools.create_pretraining_data ... --beam_pipeline_options="--runner=..."`
runs the same job as `data_tools.pipeline` and writes the same bytes:

1. The launcher streams the inputs through `corpus.iter_chunks` (the local runner's chunks,
   so the same tasks and per-task seeds) and stages each chunk, pickled and zlib-compressed,
   in files under the temporary directory (`beam_io.stage_chunks`). This pass is sequential: it
   reads the corpus once, at about 45 MB/s here, against about 0.8 MB/s per worker for the
   tasks themselves (dupe_factor 10).
2. NSP jobs: workers tokenize each chunk into the token store under the temporary
   directory (`tasks.store_chunk`), and one worker builds the store's index from their
   reports (a side input of the next step). Workers then pack each stored chunk
   (`tasks.process_stored`), reading random next segments from the whole store as the local
   runner does (a store under gs:// is first copied to each worker's disk). MLM-only jobs
   run `tasks.process_chunk` on each chunk at once. Each record gets the global shuffle's
   key (`shuffle.record_keys`); shard = key % num_shards.
3. Records are grouped by (shard, bucket), the bucket being the key's top bits, with enough
   buckets that a group holds about --shuffle_memory_mb of records (the total estimated
   from the first chunk, which the launcher also runs, so a job that fails on real text
   fails before the pipeline). Each group is sorted by key and written as one part file.
4. Each shard's parts are concatenated in bucket order (gzip-compressed if asked) into a
   temporary file beside the output; the launcher renames every shard when the pipeline
   succeeded and removes temporary files whatever happened.

Memory per worker: one task (a chunk and its records, as a local worker) or one group
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

from bert_tf import fileio
from bert_tf.errors import UserError
from bert_tf.text import tokenization
from data_tools import beam_io, corpus, pipeline, shuffle, token_store
from data_tools.beam_io import NAMESPACE, beam
from data_tools.job_config import PipelineConfig
from data_tools.tasks import InstanceStats, process_chunk, process_stored, store_chunk

_MAX_BUCKET_BITS = 24

# ---- the create-pretraining-data pipeline ----------------------------------------------

_STATS_FIELDS = ("instances", "tokens", "maskable_tokens", "short", "predictions",
                 "random_next", "text_tokens", "long_lines", "lost_tokens")


class _Store(beam.DoFn):
    """chunk ref -> `StoredTask` (with its report): the chunk tokenized into the store."""

    def __init__(self, config: PipelineConfig, directory: str):
        self.config = config
        self.directory = directory

    def setup(self) -> None:
        self.tokenizer = load_tokenizer(self.config)

    def process(self, ref):
        yield store_chunk(beam_io.load_chunk(ref), self.tokenizer, self.directory)


def _build_index(reports, directory: str) -> token_store.StoreIndex:
    """Every chunk's report -> the store's index (its documents' table written beside)."""
    builder = token_store.IndexBuilder(directory)
    try:
        for info in sorted(reports, key=lambda info: info.index):
            builder.add(info)
        return builder.finish()
    finally:
        builder.close()


class _Tasks(beam.DoFn):
    """chunk ref (or `StoredTask`, with the store's index as side input) -> ((shard, bucket),
    (task, keys uint64 bytes, frame lengths int64 bytes, frames)), the bucket being the
    keys' top `bits` bits."""

    def __init__(self, config: PipelineConfig, bits: int):
        self.config = config
        self.bits = bits

    def setup(self) -> None:
        self.tokenizer = load_tokenizer(self.config)
        self.reader = None
        self.counters = {name: beam.metrics.Metrics.counter(NAMESPACE, name) for name in
                         _STATS_FIELDS + ("documents", "tasks", "record_bytes",
                                          "mask", "keep", "random")}

    def process(self, task, store=None):
        config = self.config
        if store is not None:
            if self.reader is None or self.reader.index.directory != store.directory:
                self.reader = token_store.Reader(store)
            examples = config.log_examples if task.index == 0 else 0
            result = process_stored(task, config, self.tokenizer, self.reader, examples)
        else:
            chunk = beam_io.load_chunk(task)
            result = process_chunk(chunk, config, self.tokenizer,
                                   config.log_examples if chunk.index == 0 else 0)
        for example in result.examples:
            pipeline.log_example(example, self.tokenizer, config.use_v2_feature_names)
        stats = result.stats
        for name in _STATS_FIELDS:
            self.counters[name].inc(getattr(stats, name))
        for name, value in zip(("mask", "keep", "random"), stats.decisions):
            self.counters[name].inc(value)
        self.counters["documents"].inc(result.num_documents)
        self.counters["tasks"].inc()
        self.counters["record_bytes"].inc(int(result.frames.nbytes))
        lengths = result.frame_lengths.astype(np.int64)
        if not len(lengths):
            return
        keys = shuffle.record_keys(config.random_seed, result.index, len(lengths))
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


def _take(task: int, keys: np.ndarray, lengths: np.ndarray, view: memoryview,
          sel: np.ndarray) -> Tuple[int, bytes, bytes, bytes]:
    starts = (np.cumsum(lengths) - lengths)[sel]
    data = b"".join([view[s:s + n] for s, n in zip(starts.tolist(), lengths[sel].tolist())])
    return task, keys[sel].tobytes(), lengths[sel].tobytes(), data


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
    # Ties (two equal 64-bit keys) go in task order, then record order, as locally.
    tasks = np.repeat([b[0] for b in blocks], [len(b[1]) // 8 for b in blocks])
    block_of = np.repeat(np.arange(len(blocks)), [len(b[1]) // 8 for b in blocks])
    starts = np.concatenate([np.cumsum(np.frombuffer(b[2], np.int64))
                             - np.frombuffer(b[2], np.int64) for b in blocks])
    order = np.lexsort((starts, tasks, keys))
    views = [memoryview(b[3]) for b in blocks]
    data = b"".join([views[b][s:s + n] for b, s, n in zip(
        block_of[order].tolist(), starts[order].tolist(), lengths[order].tolist())])
    del blocks, views
    return beam_io.write_part(directory, shard, bucket, data)


def load_tokenizer(config: PipelineConfig) -> tokenization.FullTokenizer:
    return tokenization.FullTokenizer(
        config.vocab_file, config.do_lower_case,
        required_tokens=(tokenization.UNK, tokenization.CLS, tokenization.SEP,
                         tokenization.MASK))


def run(config: PipelineConfig, options: str) -> pipeline.RunSummary:
    """Runs the job on Beam; writes the same shards as `pipeline.run(config)`.

    Args:
        config: the job.
        options: Beam pipeline options, e.g. "--runner=DataflowRunner --project=...".

    Raises:
        UserError: as `pipeline.run`, before the pipeline starts where possible.
    """
    start = time.monotonic()
    # Workers may run elsewhere (a portable runner's in their own working directory).
    config = dataclasses.replace(
        config, input_files=tuple(map(beam_io.absolute, config.input_files)),
        output_files=tuple(map(beam_io.absolute, config.output_files)),
        vocab_file=beam_io.absolute(config.vocab_file), temp_dir=beam_io.absolute(config.temp_dir))
    opts = beam_io.pipeline_options(options, list(config.input_files)
                                    + list(config.output_files)
                                    + [config.vocab_file, config.temp_dir])
    load_tokenizer(config)  # a bad vocab fails here, not on a worker
    total_bytes = sum(fileio.size(p) for p in config.input_files)
    outputs = list(config.output_files)
    logging.info("Beam: reading %d input file(s), %.1f MB; writing %d shard(s)",
                 len(config.input_files), total_bytes / 1e6, len(outputs))
    temps = beam_io.prepare_outputs(outputs)
    staging = ""
    try:
        staging = beam_io.staging_dir(config.temp_dir, outputs[0])
        corpus_stats = corpus.CorpusStats()
        chunks = corpus.iter_chunks(config.input_files, config.chunk_bytes, corpus_stats)
        ratio = [0.0]  # record bytes per text byte, from the first chunk
        staged = beam_io.stage_chunks(_first_run_here(chunks, config, ratio), staging)
        if not staged:
            raise _no_text(config)
        bits = bucket_bits(int(ratio[0] * total_bytes), len(outputs),
                           config.shuffle_memory_bytes)
        logging.info("staged %.1f MB of text in %d file(s) in %.1f s; about %.0f MB of "
                     "records, in %d group(s) per shard", corpus_stats.bytes_read / 1e6,
                     len(staged), time.monotonic() - start, ratio[0] * total_bytes / 1e6,
                     1 << bits)
        p = beam.Pipeline(options=opts)
        refs = beam_io.read_chunks(p, staged)
        if config.packing.nsp:
            store = f"{staging}/tokens"
            fileio.makedirs(store)
            stored = refs | "Tokenize" >> beam.ParDo(_Store(config, store))
            index = (stored | "Reports" >> beam.Map(lambda t: (0, t.info))
                     | "AllReports" >> beam.GroupByKey()
                     | "Index" >> beam.MapTuple(lambda _, reports: _build_index(reports, store)))
            records = (stored | "Tasks" >> beam.Map(dataclasses.replace, info=None)
                       | "SpreadTasks" >> beam.Reshuffle()
                       | "Pack" >> beam.ParDo(_Tasks(config, bits),
                                              beam.pvalue.AsSingleton(index)))
        else:
            records = refs | "Tasks" >> beam.ParDo(_Tasks(config, bits))
        parts = (records
                 | "GroupBuckets" >> beam.GroupByKey()
                 | "SortGroups" >> beam.Map(_sort_group, staging))
        beam_io.finish_shards(p, parts, temps, config.output_compression)
        counters = beam_io.execute(p)
        # Success is what was written: a runner may report no metrics at all.
        written = sum(beam_io.written_bytes(t, config.output_compression) for t in temps)
        if not written:
            raise _no_text(config)
        if not counters:
            logging.warning("the Beam runner reported no metrics: the outputs are complete, "
                            "the statistics below are not available")
        beam_io.publish(temps, outputs)
    except BaseException:
        beam_io.remove_files(temps)
        raise
    finally:
        if staging:
            beam_io.remove_tree(staging)
    stats = InstanceStats(**{name: counters.get(name, 0) for name in _STATS_FIELDS},
                          decisions=tuple(counters.get(n, 0) for n in
                                          ("mask", "keep", "random")))
    pipeline.warn_truncation(stats, config, corpus_stats)
    seconds = time.monotonic() - start
    summary = pipeline.RunSummary(stats.instances, counters.get("documents", 0),
                                  corpus_stats.lines, len(outputs),
                                  counters.get("shard_bytes", written), seconds,
                                  corpus_stats.warnings, stats)
    if not counters:  # no counts to report: never "0 instances" beside complete shards
        logging.info("Beam: wrote %d shard(s), %.1f MB of records, in %.1f s; %d lines; %d "
                     "warning(s)", summary.shards, summary.bytes_written / 1e6, seconds,
                     summary.lines, len(summary.warnings))
        return summary
    logging.info("Beam: wrote %d instances to %d shard(s), %.1f MB of records, from %d "
                 "tasks in %.1f s; %d documents, %d lines; %d warning(s)", summary.instances,
                 summary.shards, summary.bytes_written / 1e6, counters.get("tasks", 0),
                 seconds, summary.documents, summary.lines, len(summary.warnings))
    logging.info("statistics: %s", stats.describe(config.packing.nsp,
                                                  config.packing.max_seq_length))
    return summary


def _first_run_here(chunks: Iterator[corpus.Chunk], config: PipelineConfig,
                    ratio: List[float]) -> Iterator[corpus.Chunk]:
    """The chunks; the first one also runs here, which tries the whole job on real text
    before the pipeline starts and measures its record bytes per text byte (`ratio[0]`),
    whence the number of key buckets."""
    for chunk in chunks:
        if chunk.index == 0:
            result = process_chunk(chunk, config, load_tokenizer(config))
            ratio[0] = result.frames.nbytes / max(chunk.num_bytes, 1)
        yield chunk


def _no_text(config: PipelineConfig) -> UserError:
    return UserError(f"no text to write: the {len(config.input_files)} input file(s) hold no "
                     "document with a token (empty, blank or unreadable lines only)")
