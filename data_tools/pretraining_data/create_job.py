"""The create-pretraining-data job: chunks -> parallel workers -> global shuffle -> shards.

The parent streams the input into chunks of whole documents (`data_tools.inputs.documents`);
each chunk is the unit of parallel work (`data_tools.pretraining_data.chunk_records`), run by a
pool of worker processes. Results are consumed in chunk order, so the output is byte-identical
whatever the number of workers. An NSP job makes two passes over the chunks: the first tokenizes
them into a store on local disk (`data_tools.pretraining_data.token_store`, removed at the end),
the second packs them, drawing the random next segments from the whole corpus as the original
does.

Every record of the run then goes through one global shuffle
(`data_tools.shuffle.external_shuffle`): each output file is a uniform random sample of all
instances, in random order, as the original shuffles all its instances before writing. Memory is
bounded by the shuffle's budget and a few chunks in flight, not by the corpus size: once the
records outgrow the budget, the workers append their chunks' records to their own bucket files
and send back only counts; in the final pass they read and sort one bucket each and write its
pieces into the shards' files in place (this process appends them itself for gzip or remote
outputs).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import sys
import tempfile
import time
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Tuple

import numpy as np
from absl import logging

from bert_tf.core import fileio, schema, tokenization
from bert_tf.core.errors import UserError
from data_tools.inputs import documents, splits
from data_tools.pretraining_data import token_store
from data_tools.pretraining_data.chunk_records import (
    ChunkRecords,
    InstanceStats,
    StoredChunk,
    process_stored,
    store_chunk,
    truncation_warning,
)
from data_tools.pretraining_data.create_config import CreateConfig
from data_tools.runtime import process_pool, sharded_output
from data_tools.shuffle import external_shuffle

__all__ = ["CreateConfig", "CreateSummary", "run"]

_MAX_LOGGED_TOKENS = 512


@dataclasses.dataclass
class CreateSummary:
    """The outcome of `run`."""

    instances: int
    documents: int
    lines: int
    shards: int
    bytes_written: int
    seconds: float
    warnings: List[str]
    stats: InstanceStats
    shuffle: external_shuffle.ShuffleStats = dataclasses.field(
        default_factory=external_shuffle.ShuffleStats)


# ---- worker processes ------------------------------------------------------------------

_WORKER: Dict[str, object] = {}


def _init_worker(config: CreateConfig, tokenizer: tokenization.FullTokenizer,
                 store: Optional[token_store.StoreIndex] = None) -> None:
    # Started by data_tools.runtime.process_pool, which sets the signal handlers.
    _WORKER["config"] = config
    _WORKER["tokenizer"] = tokenizer
    _WORKER["reader"] = token_store.Reader(store) if store is not None else None


def store_split(split: splits.Split, config: CreateConfig,
                tokenizer: tokenization.FullTokenizer, directory: str
                ) -> Tuple[List[StoredChunk], documents.CorpusStats]:
    """The first pass over one split: its chunks tokenized into the store."""
    stats = documents.CorpusStats(quiet=True)
    stored = [store_chunk(chunk, tokenizer, directory)
              for chunk in documents.split_chunks(split, config.chunk_bytes, stats)]
    return stored, stats


def _store_split(split: splits.Split, directory: str
                ) -> Tuple[List[StoredChunk], documents.CorpusStats]:
    return store_split(split, _WORKER["config"], _WORKER["tokenizer"], directory)


def _pack_stored(chunk: StoredChunk, num_examples: int, plan: Optional[external_shuffle.SpillPlan]
                 ) -> Tuple[ChunkRecords, Optional[tuple]]:
    """One stored chunk; once the shuffle spills, its records go to this worker's bucket
    files and only their count comes back (the parent never touches them)."""
    config = _WORKER["config"]
    result = process_stored(chunk, config, _WORKER["tokenizer"], _WORKER["reader"],
                            num_examples)
    if plan is None or not len(result.frame_lengths):
        return result, None
    keys = external_shuffle.record_keys(config.random_seed, result.index, len(result.frame_lengths))
    spilled = external_shuffle.spill(plan, result.index, keys, result.frame_lengths, result.frames)
    return dataclasses.replace(result, frames=np.empty(0, np.uint8)), spilled


def _map(fn: Callable, local_fn: Callable, calls: Iterable[tuple], config: CreateConfig,
         tokenizer: tokenization.FullTokenizer,
         store: Optional[token_store.StoreIndex] = None) -> Iterator:
    """`fn(*call)` for every call in order, on the job's worker processes (or `local_fn` in
    this process for one worker), few calls in flight."""
    if config.num_workers > 1:
        yield from process_pool.map_ordered(fn, calls, config.num_workers, _init_worker,
                                            (config, tokenizer, store))
        return
    _init_worker(config, tokenizer, store)
    try:
        for call in calls:
            yield local_fn(*call)
    finally:
        if _WORKER.get("reader") is not None:
            _WORKER["reader"].close()
        _WORKER.clear()


def job_results(config: CreateConfig, tokenizer: tokenization.FullTokenizer,
                corpus_stats: documents.CorpusStats, progress: "_Progress",
                plan: Callable[[], Optional[external_shuffle.SpillPlan]]
                ) -> Iterator[Tuple[ChunkRecords, Optional[tuple]]]:
    """Every chunk's result in chunk order, as `(result, what shuffle.spill returned if the
    worker spilled its records, else None)`; `plan()` is asked as each chunk is handed out.

    Pass 1 reads every split in the workers (no process reads the whole corpus) and stores
    its chunks' tokens; pass 2 packs each stored chunk. The store lives in a temporary
    directory, removed when this generator ends.
    """
    split_plan, sizes = splits.plan(config.input_files, config.chunk_bytes)
    where = temp_location(config)
    if fileio.is_remote(where):  # random reads need a local file
        where = tempfile.gettempdir()
        logging.info("the tokenized corpus goes under %s: --temp_dir is remote", where)
    try:
        os.makedirs(where, exist_ok=True)  # as the shuffle creates it
        directory = tempfile.mkdtemp(prefix=".bert_tf_tokens-", dir=where)
    except OSError as e:
        raise UserError(f"cannot create a temporary directory under {where}: "
                        f"{e.strerror or e} (--temp_dir chooses where it goes)") from None
    try:
        builder = token_store.IndexBuilder(directory)
        chunks: List[StoredChunk] = []
        try:
            for split, (stored, stats) in zip(split_plan, _map(
                    _store_split, _store_split,
                    ((split, directory) for split in split_plan), config, tokenizer)):
                corpus_stats.add(stats)
                for chunk in stored:
                    builder.add(chunk.info)
                    chunks.append(dataclasses.replace(chunk, info=None))
                progress.stored(split.size, len(stored))
            index = builder.finish()
        finally:
            builder.close()
        corpus_stats.finish(config.input_files, sizes)
        stored_mb = sum(os.path.getsize(os.path.join(directory, name))
                        for name in os.listdir(directory)) / 1e6
        logging.info("pass 1 of 2: %d split(s) -> %d chunk(s), %d documents tokenized into "
                     "%.1f MB under %s in %.1f s", len(split_plan), len(chunks),
                     index.num_documents, stored_mb, directory,
                     time.monotonic() - progress.start)
        progress.restart(sum(t.num_bytes for t in chunks))

        def examples_for(chunk: StoredChunk) -> int:
            return config.log_examples if chunk is chunks[0] else 0

        def pack_here(chunk: StoredChunk, num_examples: int, _plan) -> Tuple[ChunkRecords, None]:
            return process_stored(chunk, config, tokenizer, _WORKER["reader"],
                                  num_examples), None

        yield from _map(_pack_stored, pack_here,
                        ((chunk, examples_for(chunk), plan()) for chunk in chunks),
                        config, tokenizer, index)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


class _Progress:
    """Periodic progress lines on stderr (absl logging): pass 1 counts the input bytes of
    the splits read, pass 2 the text bytes of the chunks packed."""

    def __init__(self, total_bytes: int, every: float):
        self.every = every
        self.current = 0
        self.restart(total_bytes)

    def restart(self, total_bytes: int) -> None:
        """Starts the next pass, of `total_bytes` in all."""
        self.current += 1
        self.total_bytes = max(total_bytes, 1)
        self.start = time.monotonic()
        self.last = self.start
        self.bytes = 0
        self.documents = 0
        self.instances = 0

    def stored(self, split_bytes: int, chunks: int) -> None:
        self.bytes += split_bytes
        self.instances += chunks
        self._log(f"{self.instances} chunk(s) tokenized")

    def update(self, result: ChunkRecords) -> None:
        self.bytes += result.num_bytes
        self.documents += result.num_documents
        self.instances += len(result.frame_lengths)
        elapsed = max(time.monotonic() - self.start, 1e-9)
        self._log(f"{self.documents} documents, {self.instances} instances, "
                  f"{self.instances / elapsed:.0f} instances/s")

    def _log(self, what: str) -> None:
        now = time.monotonic()
        if self.every > 0 and now - self.last >= self.every:
            self.last = now
            elapsed = now - self.start
            frac = min(self.bytes / self.total_bytes, 1.0)
            eta = elapsed * (1 - frac) / frac if frac > 0 else float("nan")
            which = "of input" if self.current == 1 else "of text"
            logging.info("progress: pass %d of 2: %.1f%% %s, %s, ETA %.0f s", self.current,
                         100 * frac, which, what, eta)


def log_example(example: Dict[str, object], tokenizer: tokenization.FullTokenizer,
                use_v2_feature_names: bool) -> None:
    """Logs one instance as the original does: decoded tokens, then every feature."""
    length = int(example["length"])
    tokens = tokenizer.convert_ids_to_tokens(example[schema.INPUT_IDS][:length])
    logging.info("*** Example ***")
    logging.info("tokens: %s", " ".join(tokens[:_MAX_LOGGED_TOKENS]))
    n_pred = int(sum(example[schema.MASKED_LM_WEIGHTS]))
    labels = tokenizer.convert_ids_to_tokens(example[schema.MASKED_LM_IDS][:n_pred])
    logging.info("masked_lm_labels: %s", " ".join(labels))
    for f in schema.features_of(packed=schema.DOC_IDS in example):
        values = example[f.name]
        logging.info("%s: %s", schema.stored_name(f.name, use_v2_feature_names),
                     " ".join(str(v) for v in values))


def run(config: CreateConfig) -> CreateSummary:
    """Runs the job: reads the inputs, writes every shard (atomically), returns a summary.

    Raises:
        UserError: a bad vocab, unreadable input, unwritable output, or no text at all.
    """
    start = time.monotonic()
    tokenizer = tokenization.FullTokenizer(
        config.vocab_file, config.do_lower_case,
        required_tokens=(tokenization.UNK, tokenization.CLS, tokenization.SEP,
                         tokenization.MASK))
    total_bytes = sum(fileio.size(p) for p in config.input_files)
    logging.info("reading %d input file(s), %.1f MB; writing %d shard(s); %d worker(s)",
                 len(config.input_files), total_bytes / 1e6, len(config.output_files),
                 config.num_workers)
    corpus_stats = documents.CorpusStats()
    stats = InstanceStats()
    progress = _Progress(total_bytes, config.progress_seconds)
    record_bytes = text_bytes = 0

    def expected_record_bytes() -> int:
        # Records per text byte so far, times the text of all chunks (known after pass 1):
        # sizes the shuffle's buckets.
        return int(record_bytes * progress.total_bytes / text_bytes) if text_bytes else 0

    with sharded_output.ShardedWriter(config.output_files, config.output_compression) as w, \
            external_shuffle.ExternalShuffle(len(config.output_files), config.random_seed,
                                             config.shuffle_memory_bytes,
                                             shuffle_temp_dir(config), expected_record_bytes,
                                             config.num_workers) as shuffler:
        # closing(): on an error or Ctrl-C the workers are stopped before the shuffle
        # removes the files they write.
        with contextlib.closing(job_results(config, tokenizer, corpus_stats, progress,
                                            lambda: shuffler.plan)) as results:
            for result, spilled in results:
                for example in result.examples:
                    log_example(example, tokenizer, config.use_v2_feature_names)
                chunk_record_bytes = int(result.frame_lengths.sum())
                record_bytes += chunk_record_bytes
                text_bytes += result.num_bytes
                progress.update(result)
                if spilled is None:
                    shuffler.add(result.index, result.frames, result.frame_lengths)
                else:
                    shuffler.add_spilled(len(result.frame_lengths), chunk_record_bytes, spilled)
                stats.add(result.stats)
        if shuffler.records == 0:
            raise UserError(
                f"no text to write: the {len(config.input_files)} input file(s) hold no "
                "document with a token (empty, blank or unreadable lines only)")
        if shuffler.plan is not None:
            logging.info("shuffle: final pass over %d bucket(s) under %s, %d worker(s)",
                         shuffler.stats.buckets, shuffler.spill_dir, config.num_workers)
        shuffler.write_to(w.write, w.in_place_paths(), w.count)
        log_shuffle(shuffler)
        bytes_written = sum(w.bytes_written)
    num_records = shuffler.records
    warn_truncation(stats, config, corpus_stats)
    seconds = time.monotonic() - start
    summary = CreateSummary(num_records, progress.documents, corpus_stats.lines,
                            len(config.output_files), bytes_written, seconds,
                            corpus_stats.warnings, stats, shuffler.stats)
    logging.info("wrote %d instances to %d shard(s), %.1f MB of records, in %.1f s (%.0f "
                 "instances/s); "
                 "%d documents, %d lines; %d warning(s)", summary.instances, summary.shards,
                 bytes_written / 1e6, seconds, summary.instances / max(seconds, 1e-9),
                 summary.documents, corpus_stats.lines, len(corpus_stats.warnings))
    logging.info("statistics: %s", stats.describe(config.packing.nsp,
                                                  config.packing.max_seq_length))
    logging.info("peak RSS: main process %.0f MB, largest worker %.0f MB",
                 *peak_rss_mb())
    return summary


def log_shuffle(shuffler: external_shuffle.ExternalShuffle) -> None:
    """One line on what the shuffle did (parsed by benchmarks/data/bench_shuffle.py)."""
    st = shuffler.stats
    if not st.buckets:
        logging.info("shuffle: %.1f MB of records, all in memory", st.record_bytes / 1e6)
        return
    per = max(st.record_bytes, 1)
    logging.info("shuffle: %.1f MB of records in %d buckets; temporary files: %.1f MB written, "
                 "%.1f MB read (%.2fx / %.2fx the record bytes); %d bucket(s) split again",
                 st.record_bytes / 1e6, st.buckets, st.written_bytes / 1e6, st.read_bytes / 1e6,
                 st.written_bytes / per, st.read_bytes / per, st.split_buckets)


def temp_location(config: CreateConfig) -> str:
    """Where temporary files go: --temp_dir, else beside the outputs when they are local,
    else the machine's temporary directory (spilling to gs:// would move every record
    through the network twice more)."""
    if config.temp_dir:
        return config.temp_dir
    if fileio.is_remote(config.output_files[0]):
        return tempfile.gettempdir()
    return os.path.dirname(config.output_files[0]) or "."


def shuffle_temp_dir(config: CreateConfig) -> str:
    """`temp_location`, logged with what goes there, so the user knows where the space goes."""
    where = temp_location(config)
    what = "the shuffle's records beyond --shuffle_memory_mb"
    if config.packing.nsp:
        what = f"the tokenized corpus (about 2.5 bytes per token) and {what}"
    logging.info("temporary files: %s, under %s (--temp_dir to change)", what, where)
    return where


def warn_truncation(stats: InstanceStats, config: CreateConfig,
                    corpus_stats: documents.CorpusStats) -> None:
    """Logs and counts the warning about lines too long for an instance, if any."""
    packing = config.packing
    message = truncation_warning(stats, packing.max_seq_length, packing.max_num_tokens)
    if message:
        corpus_stats.warnings.append(message)
        logging.warning("%s", message)


def peak_rss_mb() -> Tuple[float, float]:
    """(this process, the largest finished child process) peak resident memory, in MB."""
    import resource

    scale = 1024 if sys.platform != "darwin" else 1  # ru_maxrss: KB on Linux, bytes on macOS
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 1e6
    # Linux keeps ru_maxrss across exec, so a process started by a large parent (pytest with
    # TensorFlow loaded) would report the parent's peak; VmHWM belongs to this image only.
    try:
        with open("/proc/self/status") as f:
            own = next(int(line.split()[1]) * 1024 / 1e6 for line in f
                       if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        pass
    return own, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * scale / 1e6
