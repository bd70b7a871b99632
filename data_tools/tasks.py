"""One task of the create-pretraining-data job: a chunk of documents -> framed TFRecords.

A worker tokenizes its chunk, packs instances for every dupe (`data_tools.instances`),
shuffles them, masks them (`data_tools.masking`), serialises them
(`data_tools.example_codec`) and frames them (`data_tools.tfrecord_writer`), all vectorised
with numpy and without TensorFlow. The generator of task i is seeded from (random_seed, i)
only, so a task's output does not depend on which process runs it, or when.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Iterator, List, Tuple

import numpy as np

from bert_tf.data import schema
from bert_tf.text import tokenization
from data_tools import corpus, example_codec, instances, masking, tfrecord_writer
from data_tools.bytes_ops import Rows
from data_tools.job_config import PipelineConfig

_BATCH_ROWS = 4096  # instances masked and serialised at once (bounds worker memory)


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
    text_tokens: int = 0  # tokens of the packed documents' lines (once, not per dupe)
    long_lines: int = 0  # lines with more tokens than an instance holds
    lost_tokens: int = 0  # their tokens beyond that, cut by truncation (at least; per dupe)

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
    input_bytes: int = 0  # the chunk's `input_bytes`: input read up to its end, as stored


def task_rng(random_seed: int, index: int) -> np.random.Generator:
    """The generator of task `index`: depends only on the seed and the task index."""
    return np.random.default_rng(
        np.random.SeedSequence(random_seed % (1 << 64), spawn_key=(0, index)))


def masking_config(config: PipelineConfig, tokenizer: tokenization.FullTokenizer
                   ) -> masking.MaskingConfig:
    """The masking settings of the job, with the special ids of the tokenizer's vocab."""
    return masking.MaskingConfig.from_vocab(
        tokenizer.vocab, config.max_predictions_per_seq, config.masked_lm_prob,
        config.do_whole_word_mask, vocab_name=config.vocab_file,
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


def truncation_stats(buf: instances.DocumentBuffer, max_num_tokens: int) -> InstanceStats:
    """Lines longer than an instance: what truncation must cut from them (the documents'
    lines only, not the pool's)."""
    if not buf.num_main:
        return InstanceStats()
    last = buf.doc_sents[buf.num_main - 1][1]
    lengths = np.asarray(buf.sent_end[:last], np.int64) - np.asarray(buf.sent_start[:last],
                                                                     np.int64)
    over = lengths[lengths > max_num_tokens] - max_num_tokens
    return InstanceStats(text_tokens=int(lengths.sum()), long_lines=len(over),
                         lost_tokens=int(over.sum()))


def truncation_warning(stats: InstanceStats, max_seq_length: int, max_num_tokens: int) -> str:
    """The job's warning about text lost to truncation ("" when no line is too long)."""
    if not stats.long_lines:
        return ""
    share = stats.lost_tokens / max(stats.text_tokens, 1)
    text = (f"{stats.long_lines} line(s) have more than {max_num_tokens} tokens (what "
            f"--max_seq_length={max_seq_length} leaves for text): truncation cuts at least "
            f"{stats.lost_tokens} of the corpus' {stats.text_tokens} tokens "
            f"({100 * share:.1f}%) from every dupe")
    if share > 0.05:
        text += (". Is the text split into sentences, one per line? python -m "
                 "data_tools.prepare_corpus splits raw text")
    return text


def instance_batches(chunk: corpus.Chunk, config: PipelineConfig,
                     tokenizer: tokenization.FullTokenizer
                     ) -> Iterator[Tuple[InstanceBatch, instances.DocumentBuffer]]:
    """Tokenizes and packs a chunk, then yields its masked instances in batches, in order.

    Yields:
        (batch, the chunk's `DocumentBuffer`).
    """
    vocab = tokenizer.vocab
    cls_id, sep_id = vocab[tokenization.CLS], vocab[tokenization.SEP]
    docs = [tokenizer.encode_batch(doc) for doc in chunk.documents]
    # The pool only supplies random next segments, so MLM-only packing ignores it.
    pool = ([tokenizer.encode_batch(doc) for doc in chunk.pool] if config.packing.nsp
            else [])
    buf = instances.DocumentBuffer.from_documents(
        docs, sep_id, chunk.doc_ids or None, pool, chunk.pool_ids[:len(pool)])
    del docs, pool
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
        yield InstanceBatch(part, ids, segment_ids, lengths, masked), buf


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
    stats = InstanceStats()
    examples: List[Dict[str, object]] = []
    frames: List[Rows] = []
    num_documents = 0
    for batch, buf in instance_batches(chunk, config, tokenizer):
        if not num_documents:
            num_documents = buf.num_documents
            stats.add(truncation_stats(buf, config.packing.max_num_tokens))
        features = batch.features(seq)
        records = example_codec.encode_examples(
            features, seq, config.max_predictions_per_seq, config.use_v2_feature_names)
        frames.append(tfrecord_writer.frame_records(records))
        stats.add(batch_stats(batch, seq))
        if len(examples) < num_examples:
            examples += _examples(features, batch.lengths, num_examples - len(examples))
    data = np.concatenate([f.data for f in frames]) if frames else np.zeros(0, np.uint8)
    lens = (np.concatenate([f.lengths for f in frames]) if frames
            else np.zeros(0, np.int64))
    return TaskResult(chunk.index, data, lens, num_documents, chunk.num_bytes, stats,
                      examples, chunk.input_bytes)


def batch_stats(batch: InstanceBatch, seq: int) -> InstanceStats:
    """The statistics of one batch of instances."""
    dec = batch.masked.decisions
    lengths = batch.lengths
    return InstanceStats(
        instances=len(lengths), tokens=int(lengths.sum()),
        maskable_tokens=int(batch.masked.num_candidates.sum()),
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
