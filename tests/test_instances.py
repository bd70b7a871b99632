"""Tests of data_tools.pretraining_data.instances: NSP packing against a list-based
transcription of the original algorithm, truncation counts against the original's token-by-token
loop, MLM-only packing, and materialisation."""

import numpy as np
import pytest

from data_tools.pretraining_data import instances
from data_tools.pretraining_data.instances import (
    DocumentBuffer,
    PackingConfig,
    RandomStream,
    Spans,
    full_sentence_spans,
    materialize,
    nsp_spans,
    removal_counts,
    truncate,
    truncate_seq_pair,
)

SEP, CLS = 3, 2


def _documents(seed, num_docs=12, max_sents=9, max_len=25):
    """Documents whose token values encode (doc, sentence, position), all >= 10."""
    rng = np.random.default_rng(seed)
    docs = []
    for d in range(num_docs):
        n_sent = 1 if d % 5 == 0 else int(rng.integers(1, max_sents + 1))
        docs.append([[10 + d * 100000 + s * 100 + t for t in range(int(rng.integers(1, max_len)))]
                     for s in range(n_sent)])
    return docs


def _reference_nsp(docs, doc_index, max_num_tokens, short_seq_prob, stream):
    """The original create_instances_from_document (before truncation and masking), on
    lists, drawing from `stream` in the original's order."""
    document = docs[doc_index]
    target = max_num_tokens
    if stream.uniform() < short_seq_prob:
        target = stream.randint(2, max_num_tokens)
    out, chunk, length, i = [], [], 0, 0
    while i < len(document):
        chunk.append(document[i])
        length += len(document[i])
        if i == len(document) - 1 or length >= target:
            a_end = stream.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
            tokens_a = [t for s in chunk[:a_end] for t in s]
            if len(chunk) == 1 or stream.uniform() < 0.5:
                target_b = target - len(tokens_a)
                for _ in range(10):
                    r = stream.randint(0, len(docs) - 1)
                    if r != doc_index:
                        break
                other = docs[r]
                tokens_b = []
                for j in range(stream.randint(0, len(other) - 1), len(other)):
                    tokens_b.extend(other[j])
                    if len(tokens_b) >= target_b:
                        break
                i -= len(chunk) - a_end  # put the unused sentences back
                is_random = 1
            else:
                tokens_b = [t for s in chunk[a_end:] for t in s]
                is_random = 0
            out.append((tokens_a, tokens_b, is_random))
            chunk, length = [], 0
        i += 1
    return out


def _segments(spans, buf):
    ids = buf.ids.tolist()
    return [(ids[a:a + la], ids[b:b + lb], int(r)) for a, la, b, lb, r in zip(
        spans.a_start, spans.a_len, spans.b_start, spans.b_len, spans.is_random_next)]


@pytest.mark.parametrize("seed,max_seq_length,short_seq_prob", [
    (0, 32, 0.1), (1, 20, 0.5), (2, 64, 0.0), (3, 8, 1.0)])
def test_nsp_packing_equals_the_original_algorithm(seed, max_seq_length, short_seq_prob):
    docs = _documents(seed)
    buf = DocumentBuffer.from_documents(docs, SEP)
    config = PackingConfig(max_seq_length=max_seq_length, short_seq_prob=short_seq_prob)
    got = _segments(nsp_spans(buf, config, RandomStream(np.random.default_rng(seed))), buf)
    ref_stream = RandomStream(np.random.default_rng(seed))
    expected = [inst for d in range(len(docs)) for inst in
                _reference_nsp(docs, d, config.max_num_tokens, short_seq_prob, ref_stream)]
    assert got == expected
    assert len(got) > 20 and sum(r for _, _, r in got) > 0
    if max_seq_length >= 20:  # with longer targets, chunks of 2+ sentences give IsNext pairs
        assert sum(r for _, _, r in got) < len(got)


def test_single_document_draws_its_random_next_from_itself():
    docs = [[[10, 11], [12], [13, 14, 15]]]
    buf = DocumentBuffer.from_documents(docs, SEP)
    spans = nsp_spans(buf, PackingConfig(max_seq_length=8, short_seq_prob=0.0),
                      RandomStream(np.random.default_rng(0)))
    for a, b, _ in _segments(spans, buf):
        assert a and b and set(a + b) <= {10, 11, 12, 13, 14, 15}


def test_empty_sentences_and_documents_are_dropped():
    buf = DocumentBuffer.from_documents([[[], [5, 6]], [[]], [], [[7]]], SEP)
    assert buf.ids.tolist() == [5, 6, SEP, 7, SEP]
    assert (buf.sent_start, buf.sent_end, buf.doc_sents) == ([0, 3], [2, 4], [(0, 1), (1, 2)])


def _original_truncation_sides(la, lb, max_num_tokens):
    """Which segment the original's loop trims at each step (the coin only picks the end)."""
    removed_a = removed_b = 0
    while la + lb > max_num_tokens:
        if la > lb:
            la, removed_a = la - 1, removed_a + 1
        else:
            lb, removed_b = lb - 1, removed_b + 1
    return removed_a, removed_b


def test_removal_counts_equal_the_original_loop():
    cases = [(la, lb, m) for la in range(1, 25) for lb in range(1, 25) for m in (2, 5, 17, 30)]
    la, lb, m = (np.array(x) for x in zip(*cases))
    got_a, got_b = [], []
    for mm in (2, 5, 17, 30):
        sel = m == mm
        ra, rb = removal_counts(la[sel], lb[sel], mm)
        got_a += ra.tolist()
        got_b += rb.tolist()
    expected = [_original_truncation_sides(a, b, mm)
                for mm in (2, 5, 17, 30) for a, b, m2 in cases if m2 == mm]
    assert list(zip(got_a, got_b)) == expected


def test_truncate_seq_pair_hand_made():
    rng = np.random.default_rng(0)
    a, b = truncate_seq_pair(list(range(10)), [100, 101, 102], 8, rng)
    # A is longer by 7 >= the excess 5: A alone loses 5 tokens, from its ends; B is intact.
    assert b == [100, 101, 102] and len(a) == 5
    assert a == list(range(a[0], a[0] + 5)) and 0 <= a[0] <= 5
    # Ties go to B: (5, 5) -> B loses one, then A loses one.
    a, b = truncate_seq_pair(list("abcde"), list("vwxyz"), 8, rng)
    assert (len(a), len(b)) == (4, 4)
    assert "".join(a) in ("abcd", "bcde") and "".join(b) in ("vwxy", "wxyz")
    # Nothing to do.
    assert truncate_seq_pair([1], [2, 3], 3, rng) == ([1], [2, 3])


def test_front_removals_follow_the_coin_flips_distribution():
    # Removing 6 tokens one coin flip each: the number taken from the front is Binomial(6, 1/2).
    rng = np.random.default_rng(42)
    fronts = [truncate_seq_pair(list(range(20)), [0], 15, rng)[0][0] for _ in range(4000)]
    counts = np.bincount(fronts, minlength=7) / 4000
    expected = np.array([1, 6, 15, 20, 15, 6, 1]) / 64
    # 4000 draws: the standard error of each frequency is at most 0.008; allow 4 of them.
    np.testing.assert_allclose(counts, expected, atol=0.032)


def test_truncate_handles_a_huge_segment_in_constant_time():
    n = 5_000_000
    spans = Spans(np.array([0]), np.array([n]), np.array([n]), np.array([7]), np.array([1]))
    t = truncate(spans, 125, np.random.default_rng(0))
    assert (int(t.a_len[0]), int(t.b_len[0])) == (118, 7)
    assert 0 <= int(t.a_start[0]) <= n - 118 and int(t.b_start[0]) == n


def test_full_sentence_packing_crosses_documents_and_fills_to_length():
    docs = _documents(5, num_docs=10, max_sents=6, max_len=12)
    docs.append([[7] * 50])  # one sentence longer than the room
    buf = DocumentBuffer.from_documents(docs, SEP)
    config = PackingConfig(max_seq_length=32, short_seq_prob=0.0, nsp=False)
    spans = full_sentence_spans(buf, config, RandomStream(np.random.default_rng(0)))
    assert (spans.b_len == 0).all() and (spans.is_random_next == 0).all()
    starts, ends = buf.sent_start, buf.sent_end
    blocks = list(zip(spans.a_start.tolist(), (spans.a_start + spans.a_len).tolist()))
    # Blocks are whole sentences, in order, covering every sentence once.
    assert blocks[0][0] == 0 and blocks[-1][1] == ends[-1]
    for (_s0, e0), (s1, _) in zip(blocks, blocks[1:]):
        assert e0 in ends and s1 in starts and starts[starts.index(s1) - 1] == \
            starts[ends.index(e0)]
    ids = buf.ids.tolist()
    crossing = 0
    for s, e in blocks[:-1]:
        if e - s <= config.max_num_tokens:
            # Greedy: the next sentence would not have fitted.
            nxt = ends[ends.index(e) + 1]
            assert nxt - s > config.max_num_tokens
        crossing += SEP in ids[s:e]
    assert crossing >= 3  # several blocks hold a document boundary ([SEP] inside)
    t = truncate(spans, config.max_num_tokens, np.random.default_rng(0))
    assert (t.a_len <= 30).all() and t.a_len.max() == 30


def test_full_sentence_short_targets():
    docs = [[[10] * 3 for _ in range(200)]]
    buf = DocumentBuffer.from_documents(docs, SEP)
    spans = full_sentence_spans(buf, PackingConfig(max_seq_length=64, short_seq_prob=1.0,
                                                   nsp=False),
                                RandomStream(np.random.default_rng(0)))
    # Every block has a random target in [2, 62]; blocks of 3-token sentences stay below it
    # (or are one sentence), so lengths vary well below the room.
    assert spans.a_len.min() == 3 and spans.a_len.max() <= 62 and spans.a_len.std() > 5


def test_materialize_hand_made():
    ids = np.array([10, 11, 12, 13, SEP, 20, 21], dtype=np.int32)
    spans = Spans(np.array([1, 0]), np.array([2, 4]), np.array([5, 0]), np.array([2, 0]),
                  np.array([1, 0]))
    tokens, segments, lengths = materialize(spans, ids, CLS, SEP, 8)
    assert tokens.tolist() == [[CLS, 11, 12, SEP, 20, 21, SEP, 0],
                               [CLS, 10, 11, 12, 13, SEP, 0, 0]]
    assert segments.tolist() == [[0, 0, 0, 0, 1, 1, 1, 0], [0] * 8]
    assert lengths.tolist() == [7, 6]


def test_random_stream_bounds_and_determinism():
    s1, s2 = RandomStream(np.random.default_rng(7), block=16), RandomStream(
        np.random.default_rng(7), block=5)
    draws = [s1.randint(2, 4) for _ in range(3000)]
    assert set(draws) == {2, 3, 4}
    assert draws == [s2.randint(2, 4) for _ in range(3000)]  # block size does not matter
    assert abs(np.mean(draws) - 3.0) < 0.06
    assert instances.RandomStream(np.random.default_rng(1)).uniform() < 1.0


def _doc_of(buf, offset):
    return next(k for k, (lo, hi) in enumerate(buf.doc_sents)
                if buf.sent_start[lo] <= offset < buf.sent_end[hi - 1])


def test_random_next_never_comes_from_a_piece_of_the_same_document():
    # Pieces 0 and 1 are one document (id 7), cut in two; piece 2 is another (id 8) but
    # short, so the original's 10 tries often land on id 7 again.
    docs = _documents(1, num_docs=3, max_sents=9)
    docs[0] = [[10 + t for t in range(20)] for _ in range(40)]
    docs[1] = [[20 + t for t in range(20)] for _ in range(40)]
    buf = DocumentBuffer.from_documents(docs, SEP, doc_ids=[7, 7, 8])
    config = PackingConfig(max_seq_length=32, short_seq_prob=0.0)
    spans = nsp_spans(buf, config, RandomStream(np.random.default_rng(0)))
    rnd = spans.is_random_next == 1
    a_docs = np.array([buf.doc_ids[_doc_of(buf, a)] for a in spans.a_start.tolist()])
    b_docs = np.array([buf.doc_ids[_doc_of(buf, b)] for b in spans.b_start.tolist()])
    assert rnd.sum() > 20 and (a_docs[rnd] != b_docs[rnd]).all()
    assert (a_docs[~rnd] == b_docs[~rnd]).all()


class _FakeSource:
    """Random next segments of 7 tokens (ids 500...) appended after the buffer's ids."""

    def __init__(self, buf):
        self.end = len(buf.ids)
        self.calls = []

    def draw(self, uniform_int, doc, target):
        self.calls.append((doc, target))
        start, self.end = self.end, self.end + 7
        return start, self.end


def test_a_random_next_source_supplies_every_random_b_and_is_never_packed_as_a():
    docs = [[[10 + t for t in range(15)] for _ in range(60)], [[900, 901]]]
    buf = DocumentBuffer.from_documents(docs, SEP, doc_ids=[3, 4])
    source = _FakeSource(buf)
    spans = nsp_spans(buf, PackingConfig(max_seq_length=32, short_seq_prob=0.0),
                      RandomStream(np.random.default_rng(1)), source)
    rnd = spans.is_random_next == 1
    assert (spans.a_start + spans.a_len <= len(buf.ids)).all()  # A only from the buffer
    assert rnd.sum() > 10 and len(source.calls) == rnd.sum()
    # Every random B is the source's, in order; the target is what A leaves of the length.
    assert spans.b_start[rnd].tolist() == list(range(len(buf.ids), source.end, 7))
    assert [t for _, t in source.calls] == (29 - spans.a_len[rnd]).tolist()
    assert {d for d, _ in source.calls} == {0, 1}
    assert (spans.b_start[~rnd] < len(buf.ids)).all()  # IsNext B: the document's own text


def test_a_single_document_corpus_falls_back_to_its_own_text():
    docs = [[[10 + t for t in range(15)] for _ in range(200)]]
    buf = DocumentBuffer.from_documents(docs, SEP)
    spans = nsp_spans(buf, PackingConfig(max_seq_length=32),
                      RandomStream(np.random.default_rng(2)))
    # As the original: with nothing else to draw from, B comes from the same document.
    assert 30 < (spans.is_random_next == 1).sum() < len(spans) - 30
