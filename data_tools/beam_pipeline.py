"""The create-pretraining-data job as an Apache Beam pipeline (Dataflow, Flink, Spark, Direct).

`python -m data_tools.create_pretraining_data ... --beam_pipeline_options="--runner=..."`
runs the same job as `data_tools.pipeline` and writes the same bytes:

1. The launcher streams the inputs through `corpus.iter_chunks` (the local runner's chunks,
   so the same tasks and per-task seeds) and stages each chunk, pickled and zlib-compressed,
   in files under the temporary directory (`stage_chunks`). This pass is sequential: it
   reads the corpus once, at about 45 MB/s here, against about 0.8 MB/s per worker for the
   tasks themselves (dupe_factor 10).
2. Workers run `tasks.process_chunk` on each chunk and give each record the global
   shuffle's key (`shuffle.record_keys`); shard = key % num_shards.
3. Records are grouped by (shard, bucket), the bucket being the key's top bits, with enough
   buckets that a group holds about --shuffle_memory_mb of records (the total is counted in
   the pipeline). Each group is sorted by key and written as one part file.
4. Each shard's parts are concatenated in bucket order (gzip-compressed if asked) into a
   temporary file beside the output; the launcher renames every shard when the pipeline
   succeeded and removes temporary files whatever happened.

Memory per worker: one task (a chunk and its records, as a local worker) or one group
(about --shuffle_memory_mb of records, held twice while sorted), plus Beam's own buffers.
Nothing grows with the corpus. Beam is imported only by this module (the `[beam]` extra).
"""

from __future__ import annotations

import logging as std_logging
import math
import os
import pickle
import re
import shlex
import shutil
import time
import uuid
import zlib
from typing import Callable, Dict, Iterable, Iterator, List, Sequence, Tuple

import numpy as np
from absl import logging

from bert_tf import fileio, tokenization
from bert_tf.errors import UserError, reason
from data_tools import corpus, pipeline, shuffle, tfrecord_writer
from data_tools.job_config import PipelineConfig
from data_tools.tasks import InstanceStats, process_chunk

try:
    import apache_beam as beam
    from apache_beam.metrics.metric import MetricsFilter
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
    from apache_beam.runners.runner import create_runner
except ImportError:  # the optional [beam] extra
    raise UserError("--beam_pipeline_options needs Apache Beam: pip install "
                    "'bert_tf[beam]' (or 'apache-beam>=2.77')") from None

# Beam's INFO lines (type hints, every worker's start and stop) would bury the job's own.
std_logging.getLogger("apache_beam").setLevel(std_logging.WARNING)

NAMESPACE = "bert_tf"
_STAGING_FILE_BYTES = 64 << 20  # compressed chunks per staging file
_COPY_BLOCK = 16 << 20
_MAX_BUCKET_BITS = 24


# ---- launcher helpers, shared with data_tools.beam_prepare -----------------------------

def pipeline_options(options: str, paths: Sequence[str]) -> "PipelineOptions":
    """Parses --beam_pipeline_options; checks that a cloud runner can reach every path.

    Raises:
        UserError: unparsable options, or a local path given to the DataflowRunner.
    """
    try:
        opts = PipelineOptions(shlex.split(options))
        runner = opts.view_as(StandardOptions).runner or "DirectRunner"
        create_runner(runner)  # an unknown runner fails here, not after the staging pass
    except (ValueError, ImportError, SystemExit) as e:
        raise UserError(f"--beam_pipeline_options={options!r}: {reason(e)}") from None
    if "dataflow" in str(runner).lower():
        local = [p for p in paths if p and not fileio.is_remote(p)]
        if local:
            raise UserError(f"--beam_pipeline_options: {runner} workers cannot read the "
                            f"local path {local[0]}: use gs:// paths (and --temp_dir)")
    return opts


def staging_dir(temp_dir: str, first_output: str) -> str:
    """A new private directory for staged chunks and part files (created here).

    Raises:
        UserError: it cannot be created.
    """
    base = temp_dir or os.path.dirname(first_output) or "."
    path = os.path.join(base, f".beam-staging-{uuid.uuid4().hex[:12]}")
    try:
        fileio.makedirs(path)
    except Exception as e:
        raise UserError(f"cannot create temporary directory {path}: {reason(e)} "
                        "(--temp_dir chooses where it goes)") from None
    return path


def remove_tree(path: str) -> None:
    """Removes a directory and everything in it, ignoring errors."""
    try:
        if fileio.is_remote(path):
            import tensorflow as tf  # remote paths have TensorFlow loaded already

            tf.io.gfile.rmtree(path)
        else:
            shutil.rmtree(path, ignore_errors=True)
    except Exception:  # cleanup must not hide the real error
        pass


def stage_chunks(chunks: Iterable[object], directory: str) -> List[str]:
    """Writes every chunk (pickled, zlib) into staging files; returns their paths.

    Each staging file has an index beside it (`<file>.idx`: int64 [n, 2] offset, length).
    """
    paths: List[str] = []
    f, index, size = None, [], 0

    def close() -> None:
        f.close()
        with fileio.open_file(paths[-1] + ".idx", "wb") as idx:
            idx.write(np.asarray(index, np.int64).reshape(-1, 2).tobytes())

    try:
        for chunk in chunks:
            if f is None or size >= _STAGING_FILE_BYTES:
                if f is not None:
                    close()
                paths.append(os.path.join(directory, f"chunks-{len(paths):06d}"))
                f, index, size = fileio.open_file(paths[-1], "wb"), [], 0
            blob = zlib.compress(pickle.dumps(chunk, protocol=pickle.HIGHEST_PROTOCOL), 1)
            f.write(blob)
            index.append((size, len(blob)))
            size += len(blob)
        if f is not None:
            close()
            f = None
    except OSError as e:
        raise UserError(f"cannot write temporary file in {directory}: {reason(e)}") from None
    finally:
        if f is not None:
            f.close()
    return paths


def chunk_refs(path: str) -> Iterator[Tuple[str, int, int]]:
    """(staging file, offset, length) of each chunk in one staging file."""
    with fileio.open_file(path + ".idx", "rb") as f:
        index = np.frombuffer(f.read(), np.int64).reshape(-1, 2)
    for offset, length in index.tolist():
        yield path, offset, length


def load_chunk(ref: Tuple[str, int, int]):
    """The chunk staged at `ref`."""
    path, offset, length = ref
    with fileio.open_file(path, "rb") as f:
        f.seek(offset)
        return pickle.loads(zlib.decompress(f.read(length)))


def read_chunks(p, staging_paths: Sequence[str]):
    """PCollection of chunk refs, spread over the workers."""
    return (p | "StagingFiles" >> beam.Create(list(staging_paths))
            | "ChunkRefs" >> beam.FlatMap(chunk_refs)
            | "SpreadChunks" >> beam.Reshuffle())


def write_part(directory: str, shard: int, bucket: int, data: bytes) -> Tuple[int, Tuple[int, str]]:
    """Writes one sorted group of a shard; returns (shard, (bucket, path))."""
    path = os.path.join(directory, f"part-{shard:05d}-{bucket:08d}")
    with fileio.open_file(path, "wb") as f:  # deterministic: a retried bundle rewrites it
        f.write(data)
    return shard, (bucket, path)


def _concat_shard(item, temp_paths: Sequence[str], compression: str) -> None:
    """Concatenates one shard's parts, in bucket order, into its temporary output file."""
    shard, groups = item
    parts = sorted(groups["parts"])
    compressor = (zlib.compressobj(tfrecord_writer._GZIP_LEVEL, zlib.DEFLATED,
                                   tfrecord_writer._GZIP_WBITS, tfrecord_writer._GZIP_MEM_LEVEL)
                  if compression == tfrecord_writer.COMPRESSION_GZIP else None)
    with fileio.open_file(temp_paths[shard], "wb") as out:
        out.write(b"")  # remote files exist only after a first write
        for _, path in parts:
            with fileio.open_file(path, "rb") as f:
                while True:
                    block = f.read(_COPY_BLOCK)
                    if not block:
                        break
                    beam.metrics.Metrics.counter(NAMESPACE, "shard_bytes").inc(len(block))
                    out.write(compressor.compress(block) if compressor else block)
        if compressor is not None:
            out.write(compressor.flush())


def finish_shards(p, parts, temp_paths: Sequence[str], compression: str = "") -> None:
    """Writes every shard (also those without parts) from (shard, (bucket, path)) parts."""
    shards = (p | "Shards" >> beam.Create(list(range(len(temp_paths))))
              | "ShardKeys" >> beam.Map(lambda s: (s, None)))
    _ = ({"parts": parts, "shard": shards} | "PartsOfShard" >> beam.CoGroupByKey()
         | "ConcatParts" >> beam.Map(_concat_shard, list(temp_paths), compression))


def prepare_outputs(paths: Sequence[str]) -> List[str]:
    """Creates an empty temporary file beside each output (checks it can be written).

    Raises:
        UserError: an output directory cannot be created or written.
    """
    temps: List[str] = []
    try:
        for path in paths:
            parent = os.path.dirname(path)
            if parent and not fileio.exists(parent):
                fileio.makedirs(parent)
            temps.append(fileio.temp_name(path))
            with fileio.open_file(temps[-1], "wb") as f:
                f.write(b"")
    except Exception as e:
        remove_files(temps)
        raise UserError(f"cannot write {paths[len(temps) - 1] if temps else paths[0]}: "
                        f"{reason(e)}") from None
    return temps


def remove_files(paths: Iterable[str]) -> None:
    for path in paths:
        try:
            if fileio.exists(path):
                fileio.remove(path)
        except Exception:
            pass


def execute(p) -> Dict[str, int]:
    """Runs the pipeline to the end; returns its counters (namespace `bert_tf`) by name.

    Raises:
        UserError: a worker raised one (its message, one line), or the pipeline failed.
    """
    try:
        result = p.run()
        state = result.wait_until_finish()
    except UserError:
        raise
    except Exception as e:
        found = re.findall(r"UserError: (.+?)(?: \[while running '[^\n]*'\])?$", str(e),
                           re.MULTILINE)
        if found:  # raised by a worker: keep its one line
            raise UserError(found[-1].strip()) from None
        raise
    if str(state).split(".")[-1] != "DONE":
        raise UserError(f"the Beam pipeline ended in state {state}")
    counters: Dict[str, int] = {}
    for c in result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))["counters"]:
        value = c.committed if c.committed is not None else c.attempted
        counters[c.key.metric.name] = counters.get(c.key.metric.name, 0) + int(value or 0)
    return counters


def publish(temps: Sequence[str], finals: Sequence[str]) -> None:
    """Renames every temporary output to its final name."""
    for tmp, path in zip(temps, finals):
        try:
            fileio.rename(tmp, path)
        except Exception as e:
            raise UserError(f"cannot finish the output file {path}: {reason(e)}") from None


# ---- the create-pretraining-data pipeline ----------------------------------------------

_STATS_FIELDS = ("instances", "tokens", "maskable_tokens", "short", "predictions",
                 "random_next")


class _Tasks(beam.DoFn):
    """chunk ref -> (shard, (task, keys uint64 bytes, frame lengths int64 bytes, frames))."""

    def __init__(self, config: PipelineConfig):
        self.config = config

    def setup(self) -> None:
        self.tokenizer = load_tokenizer(self.config)
        self.counters = {name: beam.metrics.Metrics.counter(NAMESPACE, name) for name in
                         _STATS_FIELDS + ("documents", "tasks", "record_bytes",
                                          "mask", "keep", "random")}

    def process(self, ref):
        config = self.config
        chunk = load_chunk(ref)
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
        num_shards = len(config.output_files)
        shard_of = (keys % np.uint64(num_shards)).astype(np.int64)
        for shard, sel in _groups(shard_of):
            yield shard, _take(result.index, keys, lengths, memoryview(result.frames), sel)


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


def _split_buckets(item, bits: int):
    """(shard, block) -> ((shard, bucket), block) by the keys' top `bits` bits."""
    shard, (task, key_bytes, length_bytes, data) = item
    if bits == 0:
        yield (shard, 0), (task, key_bytes, length_bytes, data)
        return
    keys = np.frombuffer(key_bytes, np.uint64)
    lengths = np.frombuffer(length_bytes, np.int64)
    bucket_of = (keys >> np.uint64(64 - bits)).astype(np.int64)
    view = memoryview(data)
    for bucket, sel in _groups(bucket_of):
        yield (shard, bucket), _take(task, keys, lengths, view, sel)


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
    return write_part(directory, shard, bucket, data)


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
    opts = pipeline_options(options, list(config.input_files) + list(config.output_files)
                            + [config.vocab_file, config.temp_dir])
    tokenizer = load_tokenizer(config)  # a bad vocab fails here, not on a worker
    del tokenizer
    total_bytes = sum(fileio.size(p) for p in config.input_files)
    outputs = list(config.output_files)
    logging.info("Beam: reading %d input file(s), %.1f MB; writing %d shard(s)",
                 len(config.input_files), total_bytes / 1e6, len(outputs))
    temps = prepare_outputs(outputs)
    staging = ""
    try:
        staging = staging_dir(config.temp_dir, outputs[0])
        corpus_stats = corpus.CorpusStats()
        staged = stage_chunks(corpus.iter_chunks(config.input_files, config.chunk_bytes,
                                                 corpus_stats), staging)
        logging.info("staged %.1f MB of text in %d file(s) under %s in %.1f s",
                     corpus_stats.bytes_read / 1e6, len(staged), staging,
                     time.monotonic() - start)
        if not staged:
            raise _no_text(config)
        p = beam.Pipeline(options=opts)
        blocks = read_chunks(p, staged) | "Tasks" >> beam.ParDo(_Tasks(config))
        bits = (blocks | "BlockBytes" >> beam.Map(lambda kv: len(kv[1][3]))
                | "TotalBytes" >> beam.CombineGlobally(sum)
                | "BucketBits" >> beam.Map(bucket_bits, len(outputs),
                                           config.shuffle_memory_bytes))
        parts = (blocks
                 | "Buckets" >> beam.FlatMap(_split_buckets, beam.pvalue.AsSingleton(bits))
                 | "GroupBuckets" >> beam.GroupByKey()
                 | "SortGroups" >> beam.Map(_sort_group, staging))
        finish_shards(p, parts, temps, config.output_compression)
        counters = execute(p)
        if not counters.get("instances"):
            raise _no_text(config)
        publish(temps, outputs)
    except BaseException:
        remove_files(temps)
        raise
    finally:
        if staging:
            remove_tree(staging)
    stats = InstanceStats(**{name: counters.get(name, 0) for name in _STATS_FIELDS},
                          decisions=tuple(counters.get(n, 0) for n in
                                          ("mask", "keep", "random")))
    seconds = time.monotonic() - start
    summary = pipeline.RunSummary(stats.instances, counters.get("documents", 0),
                                  corpus_stats.lines, len(outputs),
                                  counters.get("shard_bytes", 0), seconds,
                                  corpus_stats.warnings, stats)
    logging.info("Beam: wrote %d instances to %d shard(s), %.1f MB of records, from %d "
                 "tasks in %.1f s; %d documents, %d lines; %d warning(s)", summary.instances,
                 summary.shards, summary.bytes_written / 1e6, counters.get("tasks", 0),
                 seconds, summary.documents, summary.lines, len(summary.warnings))
    logging.info("statistics: %s", stats.describe(config.packing.nsp,
                                                  config.packing.max_seq_length))
    return summary


def _no_text(config: PipelineConfig) -> UserError:
    return UserError(f"no text to write: the {len(config.input_files)} input file(s) hold no "
                     "document with a token (empty, blank or unreadable lines only)")
