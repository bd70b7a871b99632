"""The create-pretraining-data job: chunks -> parallel workers -> bounded shuffle -> shards.

The parent streams the input into chunks of whole documents (`data_tools.corpus`); each
chunk is one task (`data_tools.tasks`), run by a pool of worker processes. Results are
consumed in task order, so the output is byte-identical whatever the number of workers.

The parent shuffles records within a window of consecutive tasks (at least
`shuffle_buffer_size` records; the whole output when it is smaller) and deals them
round-robin to the output shards, as the original deals its globally shuffled instances.
Memory is bounded by the window and a few tasks in flight, not by the corpus size.
"""

from __future__ import annotations

import collections
import concurrent.futures
import concurrent.futures.process
import dataclasses
import multiprocessing
import signal
import sys
import time
from typing import Deque, Dict, Iterable, Iterator, List, Tuple

import numpy as np
from absl import logging

from bert_tf import fileio, schema, tokenization
from bert_tf.errors import UserError
from data_tools import corpus, tfrecord_writer
from data_tools.job_config import PipelineConfig
from data_tools.tasks import InstanceStats, TaskResult, process_chunk

__all__ = ["PipelineConfig", "RunSummary", "run"]

_MAX_LOGGED_TOKENS = 512


@dataclasses.dataclass
class RunSummary:
    """The outcome of `run`."""

    instances: int
    documents: int
    lines: int
    shards: int
    bytes_written: int
    seconds: float
    warnings: List[str]
    stats: InstanceStats


def shuffle_rng(random_seed: int) -> np.random.Generator:
    """The generator of the parent's shuffle windows (independent of every task's)."""
    return np.random.default_rng(np.random.SeedSequence(random_seed % (1 << 64), spawn_key=(1,)))


# ---- worker processes ------------------------------------------------------------------

_WORKER: Dict[str, object] = {}


def _init_worker(config: PipelineConfig, tokenizer: tokenization.FullTokenizer) -> None:
    # Ctrl-C reaches the whole process group; the parent alone handles it and terminates us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The entry point turns SIGTERM into KeyboardInterrupt; the parent ends workers with
    # SIGTERM, which must simply end a worker.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _WORKER["config"] = config
    _WORKER["tokenizer"] = tokenizer


def _worker_task(chunk: corpus.Chunk, num_examples: int) -> TaskResult:
    return process_chunk(chunk, _WORKER["config"], _WORKER["tokenizer"], num_examples)


def _map_ordered(chunks: Iterable[corpus.Chunk], config: PipelineConfig,
                 tokenizer: tokenization.FullTokenizer) -> Iterator[TaskResult]:
    """Processes chunks in parallel, yielding results in chunk order, few tasks in flight."""
    def examples_for(chunk: corpus.Chunk) -> int:
        return config.log_examples if chunk.index == 0 else 0

    if config.num_workers <= 1:
        for chunk in chunks:
            yield process_chunk(chunk, config, tokenizer, examples_for(chunk))
        return
    # fork shares the loaded tokenizer for free; after TensorFlow was imported (remote paths)
    # forking is unsafe, as it is on macOS, so spawn (the tokenizer is pickled to each worker).
    method = ("fork" if sys.platform.startswith("linux") and "tensorflow" not in sys.modules
              else "spawn")
    executor = concurrent.futures.ProcessPoolExecutor(
        config.num_workers, mp_context=multiprocessing.get_context(method),
        initializer=_init_worker, initargs=(config, tokenizer))
    pending: Deque[concurrent.futures.Future] = collections.deque()
    try:
        for chunk in chunks:
            pending.append(executor.submit(_worker_task, chunk, examples_for(chunk)))
            while len(pending) > config.num_workers + 1:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    except concurrent.futures.process.BrokenProcessPool:
        raise UserError("a worker process died (killed, or out of memory?); no output "
                        "was written") from None
    finally:
        # On Ctrl-C or an error, stop the workers now rather than after their current task.
        for process in list((getattr(executor, "_processes", None) or {}).values()):
            process.terminate()
        executor.shutdown(wait=True, cancel_futures=True)


class ShardDealer:
    """Shuffles records within windows of consecutive tasks and deals them to the shards."""

    def __init__(self, writer: tfrecord_writer.ShardedWriter, num_shards: int,
                 buffer_size: int, rng: np.random.Generator):
        self._writer = writer
        self._num_shards = num_shards
        self._buffer_size = buffer_size
        self._rng = rng
        self._blocks: List[Tuple[np.ndarray, np.ndarray]] = []
        self._buffered = 0
        self._next_shard = 0
        self.records = 0

    def add(self, frames: np.ndarray, lengths: np.ndarray) -> None:
        if len(lengths):
            self._blocks.append((frames, lengths))
            self._buffered += len(lengths)
        if self._buffered >= self._buffer_size:
            self.flush()

    def flush(self) -> None:
        if not self._buffered:
            return
        blocks = [memoryview(frames) for frames, _ in self._blocks]
        # Record j of the window: block block_of[j], bytes [start[j], end[j]) of that block.
        block_of = np.concatenate([np.full(len(l), b, dtype=np.int64)
                                   for b, (_, l) in enumerate(self._blocks)])
        end = np.concatenate([np.cumsum(l) for _, l in self._blocks])
        start = end - np.concatenate([l for _, l in self._blocks])
        self._blocks, self._buffered = [], 0
        order = self._rng.permutation(len(block_of))
        # Record j of the shuffled window goes to shard (next_shard + j) % num_shards, as the
        # original deals its shuffled instances round-robin.
        shard_of = (self._next_shard + np.arange(len(order))) % self._num_shards
        for shard in range(self._num_shards):
            mine = order[shard_of == shard]
            for lo in range(0, len(mine), 4096):
                sel = mine[lo:lo + 4096]
                self._writer.write(shard, b"".join([
                    blocks[b][s:e] for b, s, e in zip(block_of[sel].tolist(),
                                                       start[sel].tolist(), end[sel].tolist())]))
        self._next_shard = (self._next_shard + len(order)) % self._num_shards
        self.records += len(order)


class _Progress:
    """Periodic progress lines on stderr (absl logging)."""

    def __init__(self, total_bytes: int, every: float):
        self.total_bytes = max(total_bytes, 1)
        self.every = every
        self.start = time.monotonic()
        self.last = self.start
        self.bytes = 0
        self.documents = 0
        self.instances = 0

    def update(self, result: TaskResult) -> None:
        self.bytes += result.num_bytes
        self.documents += result.num_documents
        self.instances += len(result.frame_lengths)
        now = time.monotonic()
        if self.every > 0 and now - self.last >= self.every:
            self.last = now
            elapsed = now - self.start
            frac = min(self.bytes / self.total_bytes, 1.0)
            eta = elapsed * (1 - frac) / frac if frac > 0 else float("nan")
            logging.info("progress: %.1f%% of input, %d documents, %d instances, %.0f "
                         "instances/s, ETA %.0f s", 100 * frac, self.documents,
                         self.instances, self.instances / max(elapsed, 1e-9), eta)


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
    for f in schema.FEATURES:
        values = example[f.name]
        logging.info("%s: %s", schema.stored_name(f.name, use_v2_feature_names),
                     " ".join(str(v) for v in values))


def run(config: PipelineConfig) -> RunSummary:
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
    corpus_stats = corpus.CorpusStats()
    stats = InstanceStats()
    progress = _Progress(total_bytes, config.progress_seconds)
    with tfrecord_writer.ShardedWriter(config.output_files, config.output_compression) as w:
        dealer = ShardDealer(w, len(config.output_files), config.shuffle_buffer_size,
                             shuffle_rng(config.random_seed))
        chunks = corpus.iter_chunks(config.input_files, config.chunk_bytes, corpus_stats)
        for result in _map_ordered(chunks, config, tokenizer):
            for example in result.examples:
                log_example(example, tokenizer, config.use_v2_feature_names)
            dealer.add(result.frames, result.frame_lengths)
            stats.add(result.stats)
            progress.update(result)
        dealer.flush()
        if dealer.records == 0:
            raise UserError(
                f"no text to write: the {len(config.input_files)} input file(s) hold no "
                "document with a token (empty, blank or unreadable lines only)")
        bytes_written = sum(w.bytes_written)
    seconds = time.monotonic() - start
    summary = RunSummary(dealer.records, progress.documents, corpus_stats.lines,
                         len(config.output_files), bytes_written, seconds,
                         corpus_stats.warnings, stats)
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
