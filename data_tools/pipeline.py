"""The create-pretraining-data job: chunks -> parallel workers -> bounded shuffle -> shards.

The parent streams the input into chunks of whole documents (`data_tools.corpus`); each
chunk is one task. A worker tokenizes its chunk, packs instances for every dupe
(`data_tools.instances`), shuffles them, masks them (`data_tools.masking`), serialises them
(`data_tools.example_codec`) and frames them (`data_tools.tfrecord_writer`), all vectorised
with numpy and without TensorFlow. The generator of task i is seeded from (random_seed, i)
only, and results are consumed in task order, so the output is byte-identical whatever the
number of workers.

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
from data_tools import corpus, example_codec, instances, masking, tfrecord_writer
from data_tools.bytes_ops import Rows

_BATCH_ROWS = 4096  # instances masked and serialised at once (bounds worker memory)
_MAX_LOGGED_TOKENS = 512


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
    """Everything the job needs (built from flags by the entry point).

    Attributes:
        input_files: expanded input paths, in order.
        output_files: one path per output shard.
        vocab_file, do_lower_case: the tokenizer.
        packing: how instances are packed (`instances.PackingConfig`).
        masked_lm_prob, max_predictions_per_seq, do_whole_word_mask, whole_word_mask_mode,
            max_ngram_size: masking (see `masking.MaskingConfig`).
        random_seed: seeds every task's generator and the shuffle.
        dupe_factor: passes over the data, each with different packing and masks.
        output_compression: "" or "gzip".
        use_v2_feature_names: input_word_ids / input_type_ids instead of v1 names.
        num_workers: processes (1 runs in this process).
        chunk_bytes: text per task; the output depends on it (not on num_workers).
        shuffle_buffer_size: records shuffled together in the parent (at least).
        log_examples: decoded instances logged at the start.
        progress_seconds: interval of progress lines.
    """

    input_files: Tuple[str, ...]
    output_files: Tuple[str, ...]
    vocab_file: str
    do_lower_case: bool = True
    packing: instances.PackingConfig = instances.PackingConfig()
    masked_lm_prob: float = 0.15
    max_predictions_per_seq: int = 20
    do_whole_word_mask: bool = False
    whole_word_mask_mode: str = masking.MODE_FIXED
    max_ngram_size: int = 1
    random_seed: int = 12345
    dupe_factor: int = 10
    output_compression: str = ""
    use_v2_feature_names: bool = False
    num_workers: int = 1
    chunk_bytes: int = 512 * 1024
    shuffle_buffer_size: int = 16384
    log_examples: int = 3
    progress_seconds: float = 5.0


@dataclasses.dataclass
class InstanceStats:
    """Counters over instances (summed over tasks)."""

    instances: int = 0
    tokens: int = 0  # real tokens, specials included
    maskable_tokens: int = 0  # real tokens other than [CLS]/[SEP]
    short: int = 0  # instances shorter than max_seq_length // 2
    predictions: int = 0
    decisions: Tuple[int, int, int] = (0, 0, 0)  # [MASK], kept, random
    random_next: int = 0

    def add(self, other: "InstanceStats") -> None:
        for f in dataclasses.fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            setattr(self, f.name, tuple(x + y for x, y in zip(a, b))
                    if isinstance(a, tuple) else a + b)

    def describe(self, nsp: bool, max_seq_length: int) -> str:
        n = max(self.instances, 1)
        p = max(self.predictions, 1)
        m, k, r = self.decisions
        text = (f"mean length {self.tokens / n:.1f} tokens, {100 * self.short / n:.1f}% under "
                f"{max_seq_length // 2}, {self.predictions / n:.1f} predictions per instance "
                f"({self.predictions / max(self.maskable_tokens, 1):.3f} of non-special "
                f"tokens), [MASK] {100 * m / p:.1f}% / kept {100 * k / p:.1f}% / random "
                f"{100 * r / p:.1f}%")
        if nsp:
            text += f", IsNext {100 * (1 - self.random_next / n):.1f}%"
        return text


@dataclasses.dataclass
class TaskResult:
    """What a worker returns for one chunk."""

    index: int
    frames: np.ndarray  # uint8: the TFRecord frames of the task's records, back to back
    frame_lengths: np.ndarray  # int64 [records]
    num_documents: int
    num_bytes: int
    stats: InstanceStats
    examples: List[Dict[str, object]]


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


def task_rng(random_seed: int, index: int) -> np.random.Generator:
    """The generator of task `index`: depends only on the seed and the task index."""
    return np.random.default_rng(
        np.random.SeedSequence(random_seed % (1 << 64), spawn_key=(0, index)))


def shuffle_rng(random_seed: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(random_seed % (1 << 64), spawn_key=(1,)))


def masking_config(config: PipelineConfig, tokenizer: tokenization.FullTokenizer
                   ) -> masking.MaskingConfig:
    vocab = tokenizer.vocab
    return masking.MaskingConfig(
        masked_lm_prob=config.masked_lm_prob,
        max_predictions_per_seq=config.max_predictions_per_seq,
        vocab_size=len(vocab), mask_id=vocab[tokenization.MASK], cls_id=vocab[tokenization.CLS],
        sep_id=vocab[tokenization.SEP], do_whole_word_mask=config.do_whole_word_mask,
        whole_word_mask_mode=config.whole_word_mask_mode, max_ngram_size=config.max_ngram_size)


def build_instances(buf: instances.DocumentBuffer, config: PipelineConfig,
                    rng: np.random.Generator) -> instances.Spans:
    """Spans of every dupe of a buffer, truncated and shuffled."""
    stream = instances.RandomStream(rng)
    pack = instances.nsp_spans if config.packing.nsp else instances.full_sentence_spans
    parts = [pack(buf, config.packing, stream) for _ in range(config.dupe_factor)]
    spans = instances.Spans(*(np.concatenate([getattr(p, f.name) for p in parts])
                              for f in dataclasses.fields(instances.Spans)))
    spans = instances.truncate(spans, config.packing.max_num_tokens, rng)
    return spans.take(rng.permutation(len(spans)))


@dataclasses.dataclass
class InstanceBatch:
    """Instances of a task before serialisation (for the writer, the statistics and tests).

    Attributes:
        spans: the truncated spans of these instances.
        input_ids: int32 [n, max_seq_length] original tokens ([CLS] A [SEP] B [SEP], padded).
        segment_ids: int32 [n, max_seq_length].
        lengths: int64 [n] real tokens.
        masked: the masked-LM choice (`masked.input_ids` are the ids written).
    """

    spans: instances.Spans
    input_ids: np.ndarray
    segment_ids: np.ndarray
    lengths: np.ndarray
    masked: masking.MaskedBatch

    def features(self, max_seq_length: int) -> Dict[str, np.ndarray]:
        """The schema features (v1 names) of the batch."""
        m = self.masked
        return {
            schema.INPUT_IDS: m.input_ids,
            schema.INPUT_MASK: (np.arange(max_seq_length)[None, :]
                                < self.lengths[:, None]).astype(np.int32),
            schema.SEGMENT_IDS: self.segment_ids,
            schema.MASKED_LM_POSITIONS: m.positions,
            schema.MASKED_LM_IDS: m.label_ids,
            schema.MASKED_LM_WEIGHTS: m.weights,
            schema.NEXT_SENTENCE_LABELS: self.spans.is_random_next[:, None],
        }


def instance_batches(chunk: corpus.Chunk, config: PipelineConfig,
                     tokenizer: tokenization.FullTokenizer
                     ) -> Iterator[Tuple[InstanceBatch, int]]:
    """Tokenizes and packs a chunk, then yields its masked instances in batches, in order.

    Yields:
        (batch, number of documents of the chunk).
    """
    vocab = tokenizer.vocab
    cls_id, sep_id = vocab[tokenization.CLS], vocab[tokenization.SEP]
    docs = [tokenizer.encode_batch(doc) for doc in chunk.documents]
    buf = instances.DocumentBuffer.from_documents(docs, sep_id)
    del docs
    if not buf.num_documents:
        return
    rng = task_rng(config.random_seed, chunk.index)
    spans = build_instances(buf, config, rng)
    mcfg = masking_config(config, tokenizer)
    seq = config.packing.max_seq_length
    for lo in range(0, len(spans), _BATCH_ROWS):
        part = spans.take(np.arange(lo, min(lo + _BATCH_ROWS, len(spans))))
        ids, segment_ids, lengths = instances.materialize(part, buf.ids, cls_id, sep_id, seq)
        masked = masking.mask_batch(ids, lengths, mcfg, rng, tokenizer.is_continuation)
        yield InstanceBatch(part, ids, segment_ids, lengths, masked), buf.num_documents


def process_chunk(chunk: corpus.Chunk, config: PipelineConfig,
                  tokenizer: tokenization.FullTokenizer, num_examples: int = 0) -> TaskResult:
    """Tokenizes, packs, masks, serialises and frames one chunk (runs in a worker).

    Args:
        chunk: the task.
        config: the job.
        tokenizer: the WordPiece tokenizer.
        num_examples: how many instances to return decoded for logging.
    """
    seq = config.packing.max_seq_length
    mcfg = masking_config(config, tokenizer)
    stats = InstanceStats()
    examples: List[Dict[str, object]] = []
    frames: List[Rows] = []
    num_documents = 0
    for batch, num_documents in instance_batches(chunk, config, tokenizer):
        features = batch.features(seq)
        records = example_codec.encode_examples(
            features, seq, config.max_predictions_per_seq, config.use_v2_feature_names)
        frames.append(tfrecord_writer.frame_records(records))
        stats.add(batch_stats(batch, mcfg, seq))
        if len(examples) < num_examples:
            examples += _examples(features, batch.lengths, num_examples - len(examples))
    data = np.concatenate([f.data for f in frames]) if frames else np.zeros(0, np.uint8)
    lens = (np.concatenate([f.lengths for f in frames]) if frames
            else np.zeros(0, np.int64))
    return TaskResult(chunk.index, data, lens, num_documents, chunk.num_bytes, stats,
                      examples)


def batch_stats(batch: InstanceBatch, mcfg: masking.MaskingConfig, seq: int) -> InstanceStats:
    """The statistics of one batch of instances."""
    dec = batch.masked.decisions
    lengths = batch.lengths
    return InstanceStats(
        instances=len(lengths), tokens=int(lengths.sum()),
        maskable_tokens=int(masking.candidates(batch.input_ids, lengths, mcfg).sum()),
        short=int((lengths < seq // 2).sum()),
        predictions=int(batch.masked.num_predictions.sum()),
        decisions=tuple(int((dec == d).sum()) for d in (masking.DECISION_MASK,
                                                         masking.DECISION_KEEP,
                                                         masking.DECISION_RANDOM)),
        random_next=int(batch.spans.is_random_next.sum()))


def _examples(features: Dict[str, np.ndarray], lengths: np.ndarray,
              count: int) -> List[Dict[str, object]]:
    out = []
    for i in range(min(count, len(lengths))):
        ex = {name: np.asarray(values[i]).tolist() for name, values in features.items()}
        ex["length"] = int(lengths[i])
        out.append(ex)
    return out


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
    # forking is unsafe, so spawn (the tokenizer is then pickled to each worker).
    method = "spawn" if "tensorflow" in sys.modules else "fork"
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
    documents = 0
    with tfrecord_writer.ShardedWriter(config.output_files, config.output_compression) as w:
        dealer = ShardDealer(w, len(config.output_files), config.shuffle_buffer_size,
                             shuffle_rng(config.random_seed))
        chunks = corpus.iter_chunks(config.input_files, config.chunk_bytes, corpus_stats)
        for result in _map_ordered(chunks, config, tokenizer):
            for example in result.examples:
                log_example(example, tokenizer, config.use_v2_feature_names)
            dealer.add(result.frames, result.frame_lengths)
            stats.add(result.stats)
            documents += result.num_documents
            progress.update(result)
        dealer.flush()
        if dealer.records == 0:
            raise UserError(
                f"no text to write: the {len(config.input_files)} input file(s) hold no "
                "document with a token (empty, blank or unreadable lines only)")
        bytes_written = sum(w.bytes_written)
    seconds = time.monotonic() - start
    summary = RunSummary(dealer.records, documents, corpus_stats.lines,
                         len(config.output_files), bytes_written, seconds,
                         corpus_stats.warnings, stats)
    logging.info("wrote %d instances to %d shard(s), %.1f MB, in %.1f s (%.0f instances/s); "
                 "%d documents, %d lines; %d warning(s)", summary.instances, summary.shards,
                 bytes_written / 1e6, seconds, summary.instances / max(seconds, 1e-9),
                 documents, corpus_stats.lines, len(corpus_stats.warnings))
    logging.info("statistics: %s", stats.describe(config.packing.nsp,
                                                  config.packing.max_seq_length))
    logging.info("peak RSS: main process %.0f MB, largest worker %.0f MB",
                 *peak_rss_mb())
    return summary


def peak_rss_mb() -> Tuple[float, float]:
    """(this process, the largest finished child process) peak resident memory, in MB."""
    import resource

    scale = 1024 if sys.platform != "darwin" else 1  # ru_maxrss: KB on Linux, bytes on macOS
    return (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 1e6,
            resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * scale / 1e6)
