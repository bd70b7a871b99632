"""Random-next (NSP negative) segments drawn from the whole corpus, as the original draws them.

The original `create_pretraining_data.py` holds every document in memory and draws the B
segment of an IsRandom instance from a document picked uniformly from the whole corpus,
starting at a sentence picked uniformly within it. This package streams chunks of
consecutive documents instead, so a chunk alone would give same-source negatives on a
corpus ordered by source or topic (a PubMed dump by journal, code by repository).

A first pass (`sample_corpus`) therefore takes a seeded, bounded, uniform sample of the
corpus' documents and, in each, `starts_per_document` uniformly drawn start sentences with
the text that follows each start (up to `segment_bytes`): a random-next segment of the
original's kind. Documents are kept by bottom-k sampling: each document id gets a key from a
hash of (seed, id), and the sample is the `num_documents` ids with the smallest keys, which
is a uniform sample without replacement whatever the corpus order, computed in one streaming
pass with memory bounded by the sample. Starts are drawn per document with a seeded
generator of its own (reservoir sampling: O(log lines) draws per start slot), so the sample
depends only on the input and the seed.

Every chunk then gets its own draw of `per_chunk` segments from that sample
(`NegativeSample.for_chunk`, seeded by the chunk's index): over the corpus, B's document is
uniform over all documents, as in the original, while a task carries only a bounded pool.
The packing (`data_tools.instances.nsp_spans`) never takes B from A's own document id.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
from absl import logging

from data_tools import corpus

_MASK64 = (1 << 64) - 1


@dataclasses.dataclass(frozen=True)
class SampleConfig:
    """How large the sample is.

    Attributes:
        num_documents: documents in the corpus-wide sample (all of them if fewer).
        starts_per_document: start sentences drawn (with replacement) in each.
        segment_bytes: text kept from each start, in UTF-8 bytes: whole lines until at
            least this much (a random-next segment needs at most max_seq_length tokens).
        per_chunk: segments each chunk draws from the sample for its negatives.
    """

    num_documents: int = 4096
    starts_per_document: int = 4
    segment_bytes: int = 1024
    per_chunk: int = 64

    @classmethod
    def for_job(cls, max_seq_length: int, chunk_bytes: int) -> "SampleConfig":
        """The defaults for a job: segments of 8 bytes per token of max_seq_length, and a
        chunk's pool of at most an eighth of its text (so it adds at most ~1/8 to the
        tokenizing)."""
        segment = 8 * max_seq_length
        return cls(segment_bytes=segment, per_chunk=max(8, chunk_bytes // 8 // segment))


def _key(seed: int, doc_id: int) -> int:
    """A 64-bit hash of (seed, id) (splitmix64): the bottom-k sampling key of a document."""
    z = (seed * 0x9E3779B97F4A7C15 + doc_id + 1) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


class _Starts:
    """Uniform start lines of one document, drawn while it streams by (one reservoir of size
    one per slot), each with the lines that follow it up to `segment_bytes`."""

    def __init__(self, seed: int, doc_id: int, slots: int, segment_bytes: int):
        self.rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(2, doc_id)))
        self.segment_bytes = segment_bytes
        self.seen = 0
        self.next = [1] * slots  # 1-based line at which each slot next takes a new start
        self.soonest = 1
        self.segments: List[List[str]] = [[] for _ in range(slots)]
        self.sizes = [0] * slots
        self.growing: List[int] = []  # slots whose segment is still below segment_bytes

    def _grow(self, lines: Sequence[str], lo: int, hi: int) -> None:
        """Appends lines[lo:hi] to the slots still short of segment_bytes."""
        for s in self.growing:
            segment, size = self.segments[s], self.sizes[s]
            for j in range(lo, hi):
                if size >= self.segment_bytes:
                    break
                segment.append(lines[j])
                size += len(lines[j].encode("utf-8")) + 1
            self.sizes[s] = size
        self.growing = [s for s in self.growing if self.sizes[s] < self.segment_bytes]

    def add_lines(self, lines: Sequence[str]) -> None:
        """Feeds the document's next lines; the cost is in the events, not in the lines."""
        base, end = self.seen, self.seen + len(lines)
        i = 0
        while True:
            event = min(self.soonest, end + 1) - base - 1  # batch index of the next start
            self._grow(lines, i, event)
            if event >= len(lines):
                break
            line = lines[event]
            self._grow(lines, event, event + 1)
            t = base + event + 1
            for s, at in enumerate(self.next):
                if at == t:
                    # Line t replaces the slot's start with probability 1/t (a reservoir of
                    # one): the next replacement is after a gap with P(next > m) = t / m.
                    self.segments[s], self.sizes[s] = [line], len(line.encode("utf-8")) + 1
                    self.next[s] = int(t / (1.0 - self.rng.random())) + 1
            self.soonest = min(self.next)
            self.growing = [s for s in range(len(self.sizes))
                            if self.sizes[s] < self.segment_bytes]
            i = event + 1
        self.seen = end


@dataclasses.dataclass
class NegativeSample:
    """The corpus-wide sample: `segments[k]` comes from document `doc_ids[k]`.

    Each sampled document contributes exactly `starts_per_document` segments (repeats
    allowed), so drawing a segment uniformly draws a document uniformly.
    """

    segments: List[List[str]]
    doc_ids: List[int]
    num_corpus_documents: int
    seed: int
    per_chunk: int

    def for_chunk(self, index: int) -> Tuple[List[List[str]], List[int]]:
        """Chunk `index`'s pool: `per_chunk` segments drawn uniformly (without replacement)
        from the sample by a generator seeded from (seed, index) only.

        Returns:
            (segments, their document ids), in sample order.
        """
        n = len(self.segments)
        if n <= self.per_chunk:
            picked = np.arange(n)
        else:
            rng = np.random.default_rng(np.random.SeedSequence(self.seed,
                                                               spawn_key=(3, index)))
            picked = np.sort(rng.choice(n, self.per_chunk, replace=False))
        return [self.segments[k] for k in picked], [self.doc_ids[k] for k in picked]


def sample_corpus(paths: Sequence[str], seed: int, chunk_bytes: int,
                  config: SampleConfig) -> NegativeSample:
    """The first pass: a uniform sample of documents and of start sentences in each.

    Args:
        paths: the job's input files (document ids are numbered as `corpus.iter_chunks`
            numbers them, so the ids match the chunks').
        seed: the job's --random_seed.
        chunk_bytes: the job's chunk size (documents are read in pieces of at most this).
        config: the sample's size.

    Returns:
        The sample, its documents in key order.
    """
    seed = seed % (1 << 63)
    k = config.num_documents
    heap: List[Tuple[int, int, _Starts]] = []  # (-key, id, starts): the k smallest keys
    current: Optional[_Starts] = None
    current_id = -1
    num_docs = 0

    def close() -> None:
        if current is not None and current.seen:
            entry = (-_key(seed, current_id), current_id, current)
            if len(heap) < k:
                heapq.heappush(heap, entry)
            else:
                heapq.heappushpop(heap, entry)

    for doc_id, lines in corpus.iter_pieces(paths, corpus.CorpusStats(quiet=True),
                                                  chunk_bytes):
        if doc_id != current_id:
            close()
            num_docs += 1
            current_id = doc_id
            # Only a document that can enter the sample is sampled within.
            qualifies = len(heap) < k or _key(seed, doc_id) < -heap[0][0]
            current = (_Starts(seed, doc_id, config.starts_per_document,
                               config.segment_bytes) if qualifies else None)
        if current is not None:
            current.add_lines(lines)
    close()
    kept = sorted(heap, key=lambda e: -e[0])
    segments: List[List[str]] = []
    ids: List[int] = []
    for _, doc_id, starts in kept:
        for seg in starts.segments:
            segments.append(seg)
            ids.append(doc_id)
    return NegativeSample(segments, ids, num_docs, seed, config.per_chunk)


def mean_distance(a_docs: np.ndarray, b_docs: np.ndarray, num_documents: int) -> float:
    """Mean |i - j| / num_documents over IsRandom instances (about 1/3 for a uniform draw
    of j; small when B comes from A's neighbourhood)."""
    if not len(a_docs):
        return math.nan
    return float(np.mean(np.abs(np.asarray(a_docs) - np.asarray(b_docs))) / num_documents)


def describe(sample: NegativeSample) -> Dict[str, int]:
    """Sizes for the job's log line."""
    return {"documents": len(set(sample.doc_ids)), "segments": len(sample.segments),
            "corpus_documents": sample.num_corpus_documents,
            "bytes": sum(len(line) + 1 for seg in sample.segments for line in seg)}


PoolFn = Callable[[int], Tuple[List[List[str]], List[int]]]


def pools_for_job(input_files: Sequence[str], random_seed: int, chunk_bytes: int,
                  max_seq_length: int, nsp: bool) -> Optional[PoolFn]:
    """The first pass of an NSP job: the sample, as `corpus.iter_chunks`' `pool_for`.

    MLM-only packing draws no random next segments, so it makes no sample (None).
    """
    if not nsp:
        return None
    start = time.monotonic()
    config = SampleConfig.for_job(max_seq_length, chunk_bytes)
    sample = sample_corpus(input_files, random_seed, chunk_bytes, config)
    sizes = describe(sample)
    logging.info("random next segments: %d segments from %d of the %d documents (%.1f MB), "
                 "%d per chunk, sampled in %.1f s", sizes["segments"], sizes["documents"],
                 sizes["corpus_documents"], sizes["bytes"] / 1e6, config.per_chunk,
                 time.monotonic() - start)
    return sample.for_chunk
