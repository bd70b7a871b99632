"""What a worker does with one chunk of the create-pretraining-data job: documents -> framed
TFRecords.

A worker packs instances from its chunk's tokens for every dupe
(`data_tools.pretraining_data.instances`), shuffles them, masks them
(`data_tools.pretraining_data.masking`), serialises them (`data_tools.records.example_codec`)
and frames them (`data_tools.records.tfrecord_frames`), all vectorised with numpy and without
TensorFlow. The generator of chunk i is seeded from (random_seed, i) only, so a chunk's output
does not depend on which process runs it, or when.

A job runs in two passes (`data_tools.pretraining_data.token_store`): `store_chunk` tokenizes a
chunk into the store, then `process_stored` packs it, NSP instances drawing random next segments
from the whole stored corpus. `process_chunk` does both at once, B from the chunk's own
documents (a quick trial of the job on its first chunk).
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Iterator, List, Optional, Tuple

import numpy as np

from bert_tf.core import schema, tokenization
from bert_tf.core.errors import UserError, reason
from data_tools.inputs import documents
from data_tools.pretraining_data import instances, masking, negatives, packed_rows, token_store
from data_tools.pretraining_data.create_config import CreateConfig
from data_tools.records import example_codec, tfrecord_frames
from data_tools.records.byte_rows import Rows

_BATCH_ROWS = 4096  # instances masked and serialised at once (bounds worker memory)


@dataclasses.dataclass
class InstanceStats:
    """Counters over instances (summed over chunks)."""

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

    def padding_share(self, max_seq_length: int) -> float:
        """The share of the instances' max_seq_length slots that are padding."""
        return 1.0 - self.tokens / max(self.instances * max_seq_length, 1)

    def describe(self, nsp: bool, max_seq_length: int) -> str:
        n = max(self.instances, 1)
        p = max(self.predictions, 1)
        m, k, r = self.decisions
        text = (f"mean length {self.tokens / n:.1f} tokens, {100 * self.short / n:.1f}% under "
                f"{max_seq_length // 2}, {self.predictions / n:.1f} predictions per instance "
                f"({self.predictions / max(self.maskable_tokens, 1):.3f} of non-special "
                f"tokens), [MASK] {100 * m / p:.1f}% / kept {100 * k / p:.1f}% / random "
                f"{100 * r / p:.1f}%, padding {100 * self.padding_share(max_seq_length):.1f}% "
                "of the slots")
        if nsp:
            text += f", IsNext {100 * (1 - self.random_next / n):.1f}%"
        return text


@dataclasses.dataclass
class ChunkRecords:
    """What a worker returns for one chunk."""

    index: int
    frames: np.ndarray  # uint8: the TFRecord frames of the chunk's records, back to back
    frame_lengths: np.ndarray  # int64 [records]
    num_documents: int
    num_bytes: int
    stats: InstanceStats
    examples: List[Dict[str, object]]


def chunk_rng(random_seed: int, index: int) -> np.random.Generator:
    """The generator of chunk `index`: depends only on the seed and the chunk index."""
    return np.random.default_rng(
        np.random.SeedSequence(random_seed % (1 << 64), spawn_key=(0, index)))


def masking_config(config: CreateConfig, tokenizer: tokenization.FullTokenizer
                   ) -> masking.MaskingConfig:
    """The masking settings of the job, with the special ids of the tokenizer's vocab."""
    return masking.MaskingConfig.from_vocab(
        tokenizer.vocab, config.max_predictions_per_seq, config.masked_lm_prob,
        config.do_whole_word_mask, vocab_name=config.vocab_file,
        whole_word_mask_mode=config.whole_word_mask_mode, max_ngram_size=config.max_ngram_size)


def build_instances(buf: instances.DocumentBuffer, config: CreateConfig,
                    rng: np.random.Generator,
                    random_next: Optional[instances.RandomNextSource] = None
                    ) -> instances.Spans:
    """Spans of every dupe of a buffer, truncated and shuffled (B of NSP instances from
    `random_next` when given, see `instances.nsp_spans`)."""
    stream = instances.RandomStream(rng)
    if config.packing.nsp:
        parts = [instances.nsp_spans(buf, config.packing, stream, random_next)
                 for _ in range(config.dupe_factor)]
    else:
        parts = [instances.full_sentence_spans(buf, config.packing, stream)
                 for _ in range(config.dupe_factor)]
    spans = instances.Spans(*(np.concatenate([getattr(p, f.name) for p in parts])
                              for f in dataclasses.fields(instances.Spans)))
    spans = instances.truncate(spans, config.packing.max_num_tokens, rng)
    return spans.take(rng.permutation(len(spans)))


@dataclasses.dataclass
class InstanceBatch:
    """Instances of a chunk before serialisation (for the writer, the statistics and tests).

    Attributes:
        spans: the truncated spans of these instances.
        input_ids: int32 [n, max_seq_length] original tokens ([CLS] A [SEP] B [SEP], padded).
        segment_ids: int32 [n, max_seq_length].
        lengths: int64 [n] real tokens.
        masked: the masked-LM choice (`masked.input_ids` are the ids written).
        doc_ids, position_ids: int32 [n, max_seq_length] of packed rows (`packed_rows`),
            else None.
    """

    spans: instances.Spans
    input_ids: np.ndarray
    segment_ids: np.ndarray
    lengths: np.ndarray
    masked: masking.MaskedBatch
    doc_ids: Optional[np.ndarray] = None
    position_ids: Optional[np.ndarray] = None

    def features(self, max_seq_length: int) -> Dict[str, np.ndarray]:
        """The schema features (v1 names) of the batch (of packed rows: their two more)."""
        m = self.masked
        features = {
            schema.INPUT_IDS: m.input_ids,
            schema.INPUT_MASK: (np.arange(max_seq_length)[None, :]
                                < self.lengths[:, None]).astype(np.int32),
            schema.SEGMENT_IDS: self.segment_ids,
            schema.MASKED_LM_POSITIONS: m.positions,
            schema.MASKED_LM_IDS: m.label_ids,
            schema.MASKED_LM_WEIGHTS: m.weights,
            schema.NEXT_SENTENCE_LABELS: self.spans.is_random_next[:, None],
        }
        if self.doc_ids is not None:
            features[schema.DOC_IDS] = self.doc_ids
            features[schema.POSITION_IDS] = self.position_ids
        return features


def truncation_stats(buf: instances.DocumentBuffer, max_num_tokens: int) -> InstanceStats:
    """Lines longer than an instance: what truncation must cut from them."""
    if not buf.num_documents:
        return InstanceStats()
    lengths = np.asarray(buf.sent_end, np.int64) - np.asarray(buf.sent_start, np.int64)
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


@dataclasses.dataclass(frozen=True)
class StoredChunk:
    """A chunk once stored (`store_chunk`): what its second pass needs.

    Attributes:
        index: the chunk's index.
        num_bytes: the chunk's text bytes (`documents.Chunk`).
        info: its report for `token_store.IndexBuilder` (None once given to it).
    """

    index: int
    num_bytes: int
    info: Optional[token_store.ChunkInfo] = None


def tokenize(chunk: documents.Chunk, tokenizer: tokenization.FullTokenizer
             ) -> List[List[List[int]]]:
    """The chunk's documents -> sentences -> token ids."""
    return [tokenizer.encode_batch(doc) for doc in chunk.documents]


def store_chunk(chunk: documents.Chunk, tokenizer: tokenization.FullTokenizer,
                directory: str) -> StoredChunk:
    """The first pass of a chunk: tokenizes the chunk into the store.

    Raises:
        UserError: the store cannot be written (a full disk, say).
    """
    docs = tokenize(chunk, tokenizer)
    try:
        info = token_store.write_chunk(directory, chunk.index, docs,
                                       chunk.doc_ids or range(len(chunk.documents)))
    except OSError as e:
        raise UserError(f"cannot write the tokenized corpus under {directory}: {reason(e)} "
                        "(--temp_dir chooses where it goes)") from None
    return StoredChunk(chunk.index, chunk.num_bytes, info)


def stored_buffer(directory: str, index: int, sep_id: int) -> instances.DocumentBuffer:
    """The `DocumentBuffer` of a stored chunk (as `from_documents` builds it)."""
    doc_ids, doc_first, sent_off, ids = token_store.read_chunk(directory, index)
    doc_of_sent = np.repeat(np.arange(len(doc_ids)), np.diff(doc_first))
    return instances.DocumentBuffer(
        np.insert(ids, sent_off[doc_first[1:]], sep_id).astype(np.int32),
        (sent_off[:-1] + doc_of_sent).tolist(), (sent_off[1:] + doc_of_sent).tolist(),
        list(zip(doc_first[:-1].tolist(), doc_first[1:].tolist())), doc_ids.tolist())


def instance_batches(buf: instances.DocumentBuffer, index: int, config: CreateConfig,
                     tokenizer: tokenization.FullTokenizer,
                     reader: Optional[token_store.Reader] = None
                     ) -> Iterator[InstanceBatch]:
    """Packs a chunk's buffer, then yields its masked instances in batches, in order.

    Args:
        buf: the chunk's documents.
        index: the chunk's index: seeds its generator.
        config: the job.
        tokenizer: the WordPiece tokenizer (special ids, word continuations).
        reader: the stored corpus that NSP instances draw random next segments from; None:
            from the buffer's other documents (the original, when it holds the corpus).
    """
    if not buf.num_documents:
        return
    vocab = tokenizer.vocab
    cls_id, sep_id = vocab[tokenization.CLS], vocab[tokenization.SEP]
    rng = chunk_rng(config.random_seed, index)
    if config.packing.packed:
        yield from packed_batches(buf, config, tokenizer, rng)
        return
    source = (negatives.RandomNext(reader, index, buf.ids, buf.doc_ids)
              if reader is not None and config.packing.nsp else None)
    spans = build_instances(buf, config, rng, source)
    ids = source.ids() if source is not None else buf.ids
    mcfg = masking_config(config, tokenizer)
    seq = config.packing.max_seq_length
    for lo in range(0, len(spans), _BATCH_ROWS):
        part = spans.take(np.arange(lo, min(lo + _BATCH_ROWS, len(spans))))
        input_ids, segment_ids, lengths = instances.materialize(part, ids, cls_id, sep_id, seq)
        masked = masking.mask_batch(input_ids, lengths, mcfg, rng, tokenizer.is_continuation)
        yield InstanceBatch(part, input_ids, segment_ids, lengths, masked)


def packed_batches(buf: instances.DocumentBuffer, config: CreateConfig,
                   tokenizer: tokenization.FullTokenizer, rng: np.random.Generator
                   ) -> Iterator[InstanceBatch]:
    """`instance_batches` of the packed MLM-only feature set: the chunk's documents packed
    into full rows once per dupe (`packed_rows`), then masked, in batches, in row order."""
    vocab = tokenizer.vocab
    cls_id, sep_id = vocab[tokenization.CLS], vocab[tokenization.SEP]
    seq = config.packing.max_seq_length
    pieces, placement = packed_rows.pack_dupes(buf, seq, config.dupe_factor, rng)
    mcfg = masking_config(config, tokenizer)
    for lo in range(0, placement.num_rows, _BATCH_ROWS):
        hi = min(lo + _BATCH_ROWS, placement.num_rows)
        rows = packed_rows.materialize(buf.ids, pieces, placement, lo, hi, cls_id, sep_id, seq)
        masked = masking.mask_batch(rows.input_ids, rows.lengths, mcfg, rng,
                                    tokenizer.is_continuation)
        zeros = np.zeros(hi - lo, np.int64)  # no segment pairs: NSP labels and spans 0
        yield InstanceBatch(instances.Spans(zeros, zeros, zeros, zeros, zeros),
                            rows.input_ids, np.zeros_like(rows.input_ids), rows.lengths,
                            masked, rows.doc_ids, rows.position_ids)


def chunk_buffer(chunk: documents.Chunk, tokenizer: tokenization.FullTokenizer
                 ) -> instances.DocumentBuffer:
    """The chunk, tokenized into a `DocumentBuffer`."""
    return instances.DocumentBuffer.from_documents(
        tokenize(chunk, tokenizer), tokenizer.vocab[tokenization.SEP], chunk.doc_ids or None)


def process_chunk(chunk: documents.Chunk, config: CreateConfig,
                  tokenizer: tokenization.FullTokenizer, num_examples: int = 0) -> ChunkRecords:
    """Tokenizes, packs, masks, serialises and frames one chunk in one pass (B of NSP
    instances from the chunk's own documents: a trial of the job, not its output)."""
    return process_buffer(chunk_buffer(chunk, tokenizer), chunk.index, chunk.num_bytes,
                          config, tokenizer, num_examples)


def process_stored(chunk: StoredChunk, config: CreateConfig,
                   tokenizer: tokenization.FullTokenizer, reader: token_store.Reader,
                   num_examples: int = 0) -> ChunkRecords:
    """The second pass of a chunk: packs the stored chunk, B from the whole corpus."""
    buf = stored_buffer(reader.directory, chunk.index, tokenizer.vocab[tokenization.SEP])
    return process_buffer(buf, chunk.index, chunk.num_bytes, config, tokenizer, num_examples,
                          reader)


def process_buffer(buf: instances.DocumentBuffer, index: int, num_bytes: int,
                   config: CreateConfig,
                   tokenizer: tokenization.FullTokenizer, num_examples: int = 0,
                   reader: Optional[token_store.Reader] = None) -> ChunkRecords:
    """Packs, masks, serialises and frames one chunk's buffer (runs in a worker).

    Args:
        buf: the chunk's documents.
        index: the chunk's index.
        num_bytes: the chunk's text bytes (for progress).
        config: the job.
        tokenizer: the WordPiece tokenizer.
        num_examples: how many instances to return decoded for logging.
        reader: the stored corpus, for random next segments (see `instance_batches`).
    """
    seq = config.packing.max_seq_length
    stats = truncation_stats(buf, config.packing.max_num_tokens)
    if config.packing.packed:  # packed rows cut long lines instead of truncating them
        stats = InstanceStats(text_tokens=stats.text_tokens)
    examples: List[Dict[str, object]] = []
    frames: List[Rows] = []
    for batch in instance_batches(buf, index, config, tokenizer, reader):
        features = batch.features(seq)
        records = example_codec.encode_examples(
            features, seq, config.max_predictions_per_seq, config.use_v2_feature_names,
            config.packing.packed)
        frames.append(tfrecord_frames.frame_records(records))
        stats.add(batch_stats(batch, seq))
        if len(examples) < num_examples:
            examples += _examples(features, batch.lengths, num_examples - len(examples))
    data = np.concatenate([f.data for f in frames]) if frames else np.zeros(0, np.uint8)
    lens = (np.concatenate([f.lengths for f in frames]) if frames
            else np.zeros(0, np.int64))
    return ChunkRecords(index, data, lens, buf.num_documents, num_bytes, stats, examples)


def job_batches(config: CreateConfig, tokenizer: tokenization.FullTokenizer,
                directory: str) -> Iterator[Tuple[int, InstanceBatch]]:
    """(chunk index, batch) of a whole job, in this process and in chunk order: what the job
    writes before its shuffle (for tests and benchmarks that trace instances). The corpus is
    stored under `directory` first, as the job stores it."""
    chunks = documents.iter_chunks(config.input_files, config.chunk_bytes)
    builder = token_store.IndexBuilder(directory)
    try:
        for chunk in chunks:
            builder.add(store_chunk(chunk, tokenizer, directory).info)
        reader = token_store.Reader(builder.finish())
    finally:
        builder.close()
    sep_id = tokenizer.vocab[tokenization.SEP]
    try:
        for index in reader.index.chunk_ids.tolist():
            buf = stored_buffer(directory, index, sep_id)
            for batch in instance_batches(buf, index, config, tokenizer, reader):
                yield index, batch
    finally:
        reader.close()


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
