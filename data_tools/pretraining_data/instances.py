"""Packs tokenized documents into training instances: NSP sentence pairs or MLM-only blocks.

All token ids of a chunk of documents live in one flat array, each document followed by a
[SEP] id. A sentence is a range of that array, and so is every segment of an instance: `A`
(consecutive sentences of a document), `B` (the rest of the chunk, or sentences of a random
other document) and an MLM-only block (consecutive sentences, possibly crossing documents,
with the [SEP] between documents inside). The packing loop therefore only deals with
integers (offsets and lengths, via `bisect`), and `materialize` builds every token matrix in
one vectorised gather.

NSP packing follows the original `create_instances_from_document` step by step (target length
per document, chunk accumulation, random split point `a_end`, random next with "put back",
`truncate_seq_pair`). The random next segment comes from the whole corpus, as in the original,
through a `RandomNext` source (`data_tools.pretraining_data.negatives`: a uniformly drawn
document, a uniformly drawn start sentence, never A's own document); its tokens are appended
after the buffer's. Without one, B comes from the buffer's other documents, which is the
original exactly when the buffer holds the whole corpus; only a buffer of a single document
takes B from A's own document, as the original does. Truncation removes from the longer segment
(ties: `B`), front or back with probability 1/2 per token, exactly as the original; since which
segment loses each token does not depend on the coin flips, only the counts are computed, and
the number of front removals is one binomial draw (same distribution, O(1) for a 10 MB line).
"""

from __future__ import annotations

import bisect
import dataclasses
from typing import List, Optional, Protocol, Sequence, Tuple

import numpy as np


@dataclasses.dataclass(frozen=True)
class PackingConfig:
    """How instances are packed.

    Attributes:
        max_seq_length: tokens per instance, special tokens included.
        short_seq_prob: probability of a shorter random target length.
        nsp: True for [CLS] A [SEP] B [SEP] pairs with NSP labels; False for MLM-only
            [CLS] sentences... [SEP] blocks that cross documents (RoBERTa FULL-SENTENCES).
        packed: MLM-only rows of several documents, each [CLS] ... [SEP], with document
            and position ids (`data_tools.pretraining_data.packed_rows`; nsp must be False).
    """

    max_seq_length: int = 128
    short_seq_prob: float = 0.1
    nsp: bool = True
    packed: bool = False

    @property
    def max_num_tokens(self) -> int:
        """Room for text tokens: [CLS] A [SEP] B [SEP] uses 3 specials, [CLS] X [SEP] uses 2."""
        return self.max_seq_length - (3 if self.nsp else 2)


class RandomStream:
    """Scalar uniforms and integers from a numpy Generator, drawn in blocks.

    `Generator.random()` / `.integers()` cost microseconds per scalar call; the packing loop
    makes a few calls per instance, so draws come from a pre-drawn block instead.
    """

    def __init__(self, rng: np.random.Generator, block: int = 4096):
        self._rng = rng
        self._block = block
        self._buf: List[float] = []
        self._i = 0

    def uniform(self) -> float:
        """A float in [0, 1)."""
        if self._i >= len(self._buf):
            self._buf = self._rng.random(self._block).tolist()
            self._i = 0
        u = self._buf[self._i]
        self._i += 1
        return u

    def randint(self, lo: int, hi: int) -> int:
        """An int in [lo, hi], both inclusive (like `random.randint`)."""
        return lo + int(self.uniform() * (hi - lo + 1))


@dataclasses.dataclass
class DocumentBuffer:
    """Token ids of consecutive documents, each followed by a [SEP] id.

    Attributes:
        ids: int32 [num_tokens]: document 0, [SEP], document 1, [SEP], ...
        sent_start: start offset in `ids` of each sentence (all documents, in order).
        sent_end: end offset (exclusive) of each sentence.
        doc_sents: (first, last + 1) sentence indices of each document.
        doc_ids: the corpus-wide document id of each document.
    """

    ids: np.ndarray
    sent_start: List[int]
    sent_end: List[int]
    doc_sents: List[Tuple[int, int]]
    doc_ids: List[int] = dataclasses.field(default_factory=list)

    def __post_init__(self):
        if not self.doc_ids:
            self.doc_ids = list(range(len(self.doc_sents)))

    @classmethod
    def from_documents(cls, documents: Sequence[Sequence[Sequence[int]]], sep_id: int,
                       doc_ids: Optional[Sequence[int]] = None) -> "DocumentBuffer":
        """Builds the buffer; empty sentences and documents without tokens are dropped.

        Args:
            documents: documents -> sentences -> token ids.
            sep_id: the [SEP] id written after each document.
            doc_ids: the id of each document (default: all distinct).
        """
        doc_ids = list(range(len(documents))) if doc_ids is None else list(doc_ids)
        flat: List[int] = []
        sent_start: List[int] = []
        sent_end: List[int] = []
        doc_sents: List[Tuple[int, int]] = []
        kept_ids: List[int] = []
        for doc, doc_id in zip(documents, doc_ids):
            first = len(sent_start)
            for sent in doc:
                if len(sent):
                    sent_start.append(len(flat))
                    flat.extend(sent)
                    sent_end.append(len(flat))
            if len(sent_start) > first:
                doc_sents.append((first, len(sent_start)))
                kept_ids.append(doc_id)
                flat.append(sep_id)
        return cls(np.asarray(flat, dtype=np.int32), sent_start, sent_end, doc_sents,
                   kept_ids)

    @property
    def num_documents(self) -> int:
        """Documents packed into instances."""
        return len(self.doc_sents)

    def other_documents(self, doc: int) -> List[int]:
        """Documents with another id than `doc`'s."""
        mine = self.doc_ids[doc]
        return [r for r in range(len(self.doc_sents)) if self.doc_ids[r] != mine]


class RandomNextSource(Protocol):
    """Where random next segments come from (`data_tools.pretraining_data.negatives.RandomNext`)."""

    def draw(self, uniform_int, doc: int, target: int) -> Tuple[int, int]:
        """(start, end) of a segment for A from buffer document `doc`, `target` tokens."""


@dataclasses.dataclass
class Spans:
    """Instances as ranges of a `DocumentBuffer` (before truncation and materialisation).

    Attributes (int64 arrays [num_instances]):
        a_start, a_len: segment A (or the whole block in MLM-only mode).
        b_start, b_len: segment B (b_len 0 in MLM-only mode).
        is_random_next: 1 if B comes from another document, else 0.
    """

    a_start: np.ndarray
    a_len: np.ndarray
    b_start: np.ndarray
    b_len: np.ndarray
    is_random_next: np.ndarray

    def __len__(self) -> int:
        return int(self.a_start.shape[0])

    def take(self, index: np.ndarray) -> "Spans":
        return Spans(*(getattr(self, f.name)[index] for f in dataclasses.fields(self)))

    @classmethod
    def from_lists(cls, a_start, a_end, b_start, b_end, is_random) -> "Spans":
        a0 = np.asarray(a_start, dtype=np.int64)
        b0 = np.asarray(b_start, dtype=np.int64)
        return cls(a0, np.asarray(a_end, dtype=np.int64) - a0, b0,
                   np.asarray(b_end, dtype=np.int64) - b0, np.asarray(is_random, dtype=np.int64))


def nsp_spans(buf: DocumentBuffer, config: PackingConfig, stream: RandomStream,
              random_next: Optional[RandomNextSource] = None) -> Spans:
    """One pass of the original NSP packing over every document of the buffer (one dupe).

    Args:
        buf: the chunk's documents.
        config: the packing.
        stream: the chunk's random stream.
        random_next: where random next segments come from (the whole corpus; spans of B
            then point past `buf.ids`, into the source's `ids()`); None: the buffer's
            other documents.

    Returns:
        Untruncated spans (see `truncate`).
    """
    starts, ends, docs = buf.sent_start, buf.sent_end, buf.doc_sents
    doc_ids = buf.doc_ids
    max_num_tokens = config.max_num_tokens
    short_seq_prob = config.short_seq_prob
    last_doc = len(docs) - 1
    uniform, randint = stream.uniform, stream.randint
    others: dict = {}  # document id -> documents of other ids (when 10 tries are not enough)

    def other_document(d: int) -> int:
        """A buffer document whose id is not d's: the original's 10 tries, then a direct
        draw among the others; d itself when there is no other."""
        for _ in range(10):
            r = randint(0, last_doc)
            if doc_ids[r] != doc_ids[d]:
                return r
        if doc_ids[d] not in others:
            others[doc_ids[d]] = buf.other_documents(d)
        choices = others[doc_ids[d]]
        return choices[randint(0, len(choices) - 1)] if choices else r

    a0s: List[int] = []
    a1s: List[int] = []
    b0s: List[int] = []
    b1s: List[int] = []
    rnd: List[int] = []
    for d in range(len(docs)):
        lo, hi = docs[d]
        target = max_num_tokens
        if uniform() < short_seq_prob:
            target = randint(2, max_num_tokens)
        i = lo
        while i < hi:
            # The chunk is sentences i..j: it ends at the first sentence that brings it to
            # `target` tokens, or at the end of the document.
            j = bisect.bisect_left(ends, starts[i] + target, i, hi - 1)
            n = j - i + 1
            a_end = 1 if n == 1 else randint(1, n - 1)
            a0, a1 = starts[i], ends[i + a_end - 1]
            if n == 1 or uniform() < 0.5:
                target_b = target - (a1 - a0)
                if random_next is not None:
                    b0, b1 = random_next.draw(randint, d, target_b)
                else:
                    r = other_document(d)
                    rlo, rhi = docs[r]
                    rs = randint(rlo, rhi - 1)
                    re = bisect.bisect_left(ends, starts[rs] + target_b, rs, rhi - 1)
                    b0, b1 = starts[rs], ends[re]
                rnd.append(1)
                i += a_end  # the unused sentences of the chunk are "put back"
            else:
                b0, b1 = starts[i + a_end], ends[j]
                rnd.append(0)
                i = j + 1
            a0s.append(a0)
            a1s.append(a1)
            b0s.append(b0)
            b1s.append(b1)
    return Spans.from_lists(a0s, a1s, b0s, b1s, rnd)


def full_sentence_spans(buf: DocumentBuffer, config: PackingConfig,
                        stream: RandomStream) -> Spans:
    """MLM-only packing: consecutive whole sentences, crossing documents, up to the target.

    A block grows while the next sentence still fits the target length (the [SEP] between
    two documents counts as a token); with probability `short_seq_prob` a block gets a
    shorter random target, as in NSP mode. A single sentence longer than the room
    (max_seq_length - 2) becomes a block of its own and is truncated by `truncate`.
    """
    starts, ends = buf.sent_start, buf.sent_end
    room = config.max_num_tokens
    short_seq_prob = config.short_seq_prob
    uniform, randint = stream.uniform, stream.randint

    def new_target() -> int:
        return randint(2, room) if uniform() < short_seq_prob else room

    a0s: List[int] = []
    a1s: List[int] = []
    block_start = -1
    block_end = -1
    target = new_target()
    for s, e in zip(starts, ends):
        if block_start >= 0 and e - block_start > target:
            a0s.append(block_start)
            a1s.append(block_end)
            block_start = -1
            target = new_target()
        if block_start < 0:
            block_start = s
        block_end = e
    if block_start >= 0:
        a0s.append(block_start)
        a1s.append(block_end)
    zeros = [0] * len(a0s)
    return Spans.from_lists(a0s, a1s, zeros, zeros, zeros)


def removal_counts(len_a: np.ndarray, len_b: np.ndarray,
                   max_num_tokens: int) -> Tuple[np.ndarray, np.ndarray]:
    """How many tokens the original `truncate_seq_pair` removes from A and from B.

    The original removes one token at a time from the longer segment (B on ties). So first
    the longer one loses the difference, then B and A alternate, B first.

    Returns:
        (remove_a, remove_b), int64 arrays like the inputs.
    """
    la = np.asarray(len_a, dtype=np.int64)
    lb = np.asarray(len_b, dtype=np.int64)
    excess = np.maximum(la + lb - max_num_tokens, 0)
    first = np.minimum(excess, np.abs(la - lb))  # all from the longer segment
    rest = excess - first
    a_longer = la > lb
    remove_a = np.where(a_longer, first, 0) + rest // 2
    remove_b = np.where(a_longer, 0, first) + (rest - rest // 2)
    return remove_a, remove_b


def truncate(spans: Spans, max_num_tokens: int, rng: np.random.Generator) -> Spans:
    """Truncates every instance to at most `max_num_tokens` text tokens, as the original.

    Each removed token comes from the front or the back with probability 1/2, so the number
    of front removals of a segment that loses k tokens is Binomial(k, 1/2).
    """
    remove_a, remove_b = removal_counts(spans.a_len, spans.b_len, max_num_tokens)
    front_a = rng.binomial(remove_a, 0.5)
    front_b = rng.binomial(remove_b, 0.5)
    return Spans(spans.a_start + front_a, spans.a_len - remove_a,
                 spans.b_start + front_b, spans.b_len - remove_b, spans.is_random_next)


def truncate_seq_pair(tokens_a: Sequence, tokens_b: Sequence, max_num_tokens: int,
                      rng: np.random.Generator) -> Tuple[list, list]:
    """The original `truncate_seq_pair` on two lists (returns new lists, same distribution).

    Args:
        tokens_a, tokens_b: the two segments (tokens or ids).
        max_num_tokens: the maximum of len(a) + len(b) afterwards.
        rng: the generator deciding front/back removals.
    """
    spans = Spans(np.zeros(1, np.int64), np.array([len(tokens_a)]), np.zeros(1, np.int64),
                  np.array([len(tokens_b)]), np.zeros(1, np.int64))
    t = truncate(spans, max_num_tokens, rng)
    a0, la, b0, lb = int(t.a_start[0]), int(t.a_len[0]), int(t.b_start[0]), int(t.b_len[0])
    return list(tokens_a[a0:a0 + la]), list(tokens_b[b0:b0 + lb])


def materialize(spans: Spans, ids: np.ndarray, cls_id: int, sep_id: int,
                max_seq_length: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Token and segment matrices of (truncated) spans.

    Row i is [CLS] A [SEP] B [SEP] (or [CLS] A [SEP] when b_len is 0) then zero padding;
    segment ids are 0 for [CLS] A [SEP] and 1 for B [SEP].

    Args:
        spans: truncated spans (every instance fits max_seq_length).
        ids: the `DocumentBuffer.ids` the spans point into.

    Returns:
        input_ids int32 [n, max_seq_length], segment_ids int32 [n, max_seq_length],
        lengths int64 [n] (number of real tokens).
    """
    la = spans.a_len[:, None]
    lb = spans.b_len[:, None]
    has_b = lb > 0
    pos = np.arange(max_seq_length, dtype=np.int64)[None, :]
    in_a = (pos >= 1) & (pos <= la)
    b_first = la + 2
    in_b = (pos >= b_first) & (pos < b_first + lb)
    src = np.where(in_a, spans.a_start[:, None] + pos - 1, spans.b_start[:, None] + pos - b_first)
    np.clip(src, 0, max(ids.shape[0] - 1, 0), out=src)
    out = np.where(in_a | in_b, ids[src] if ids.size else 0, 0).astype(np.int32)
    out[:, 0] = cls_id
    rows = np.arange(len(spans))
    out[rows, spans.a_len + 1] = sep_id
    lengths = spans.a_len + 2 + np.where(spans.b_len > 0, spans.b_len + 1, 0)
    with_b = rows[spans.b_len > 0]
    out[with_b, lengths[with_b] - 1] = sep_id
    segment_ids = (has_b & (pos >= b_first) & (pos < b_first + lb + 1)).astype(np.int32)
    return out, segment_ids, lengths
