"""Tests of data_tools.negatives: a uniform corpus-wide sample for NSP random next segments.

The end-to-end test packs a corpus whose documents are in "topic" order, each document
marked by a word of its own, and traces every IsRandom instance's B segment back to its
document: the mean corpus distance |i - j| / N must be the uniform draw's (about 1/3, the
original's), not the neighbourhood's that chunk-local negatives give.
"""

from __future__ import annotations

import numpy as np
import pytest

from bert_tf.text import tokenization
from data_tools import corpus, instances, negatives, tasks
from data_tools.job_config import PipelineConfig


def _write_docs(path, docs):
    path.write_text("\n\n".join("\n".join(d) for d in docs) + "\n", encoding="utf-8")
    return str(path)


def test_the_sample_is_uniform_over_documents_and_the_same_for_a_seed(tmp_path):
    n, k = 60, 15
    path = _write_docs(tmp_path / "c.txt", [[f"doc {i} line {j}" for j in range(3)]
                                            for i in range(n)])
    config = negatives.SampleConfig(num_documents=k, starts_per_document=2, segment_bytes=10)
    hits = np.zeros(n)
    for seed in range(300):
        sample = negatives.sample_corpus([path], seed, 1 << 20, config)
        ids = sorted(set(sample.doc_ids))
        assert len(ids) == k and len(sample.segments) == 2 * k
        assert sample.num_corpus_documents == n
        # Every segment is text of its own document.
        assert all(seg[0].startswith(f"doc {i} ") for seg, i in zip(sample.segments,
                                                                     sample.doc_ids))
        hits[ids] += 1
    # Each document is kept with probability k / n = 0.25: 75 of 300 expected (sd 7.5).
    assert abs(hits.mean() - 75) < 1e-9 and hits.min() > 45 and hits.max() < 105
    again = negatives.sample_corpus([path], 7, 1 << 20, config)
    assert again == negatives.sample_corpus([path], 7, 1 << 20, config)
    assert again != negatives.sample_corpus([path], 8, 1 << 20, config)


def test_starts_are_uniform_and_segments_run_on_to_segment_bytes(tmp_path):
    # One document of 10 lines of 10 bytes ("line 0000" + newline).
    path = _write_docs(tmp_path / "c.txt", [[f"line {j:04d}" for j in range(10)]])
    config = negatives.SampleConfig(num_documents=1, starts_per_document=8, segment_bytes=25)
    starts = []
    for seed in range(400):
        sample = negatives.sample_corpus([path], seed, 1 << 20, config)
        for seg in sample.segments:
            first = int(seg[0].split()[1])
            starts.append(first)
            # Whole lines from the start until at least 25 bytes, or the document's end.
            assert seg == [f"line {j:04d}" for j in range(first, min(first + 3, 10))]
    counts = np.bincount(starts, minlength=10)
    assert counts.sum() == 3200 and counts.min() > 250 and counts.max() < 390  # 320 each


def test_a_long_document_is_sampled_once_across_its_pieces(tmp_path):
    # A 500-line book is read in pieces of ~1 KB; it is still one document of the sample.
    path = _write_docs(tmp_path / "c.txt", [[f"book line {j:05d}" for j in range(500)],
                                            ["short doc"]])
    config = negatives.SampleConfig(num_documents=5, starts_per_document=30, segment_bytes=1)
    sample = negatives.sample_corpus([path], 3, 1000, config)
    assert sorted(set(sample.doc_ids)) == [0, 1] and sample.num_corpus_documents == 2
    book_starts = {int(seg[0].split()[2]) for seg, i in zip(sample.segments, sample.doc_ids)
                   if i == 0}
    assert max(book_starts) > 250  # starts reach beyond the first piece (~55 lines)


def test_each_chunk_draws_its_own_bounded_pool(tmp_path):
    path = _write_docs(tmp_path / "c.txt", [[f"doc {i}"] for i in range(100)])
    sample = negatives.sample_corpus([path], 1, 1 << 20, negatives.SampleConfig(
        num_documents=100, starts_per_document=1, per_chunk=10))
    pools = [sample.for_chunk(i) for i in range(3)]
    assert all(len(docs) == len(ids) == 10 for docs, ids in pools)
    assert pools[0] == sample.for_chunk(0) and pools[0][1] != pools[1][1]
    assert all(d == [f"doc {i}"] for docs, ids in pools for d, i in zip(docs, ids))


@pytest.fixture(scope="module")
def topic_corpus(tmp_path_factory, google_vocab_path):
    """200 documents in order, 12 sentences each; every sentence starts with its document's
    own marker word (a whole word of the vocab)."""
    tokenizer = tokenization.FullTokenizer(google_vocab_path, True)
    words = [w for w in tokenizer.vocab if w.isalpha() and w.isascii() and len(w) >= 5]
    markers, filler = words[:200], words[200:260]
    rng = np.random.default_rng(0)
    docs = [[" ".join([markers[i]] + list(rng.choice(filler, 14))) for _ in range(12)]
            for i in range(len(markers))]
    path = _write_docs(tmp_path_factory.mktemp("topic") / "topic.txt", docs)
    marker_ids = {tokenizer.vocab[m]: i for i, m in enumerate(markers)}
    return path, tokenizer, marker_ids


def _trace(path, tokenizer, marker_ids, vocab, pools: bool):
    config = PipelineConfig(input_files=(path,), output_files=("unused",), vocab_file=vocab,
                            dupe_factor=2, random_seed=5, chunk_bytes=4000)
    pool_for = (negatives.pools_for_job(config.input_files, config.random_seed,
                                        config.chunk_bytes, 128, True) if pools else None)
    lookup = np.full(len(tokenizer.vocab), -1)
    lookup[list(marker_ids)] = list(marker_ids.values())
    a_docs, b_docs, rnd = [], [], []
    for chunk in corpus.iter_chunks(config.input_files, config.chunk_bytes, None, pool_for):
        for batch, _ in tasks.instance_batches(chunk, config, tokenizer):
            doc = lookup[batch.input_ids]  # the unmasked ids: document of each marker
            for r in range(len(doc)):
                a = doc[r][(batch.segment_ids[r] == 0) & (doc[r] >= 0)]
                b = doc[r][(batch.segment_ids[r] == 1) & (doc[r] >= 0)]
                if len(a) and len(b):
                    assert len(set(a)) == 1 and len(set(b)) == 1  # one document per segment
                    a_docs.append(a[0])
                    b_docs.append(b[0])
                    rnd.append(batch.spans.is_random_next[r])
    return np.array(a_docs), np.array(b_docs), np.array(rnd, bool)


def test_random_next_segments_come_from_the_whole_corpus(topic_corpus, google_vocab_path):
    path, tokenizer, marker_ids = topic_corpus
    a, b, rnd = _trace(path, tokenizer, marker_ids, google_vocab_path, pools=True)
    # Above 1/2: a document's last chunk is often one sentence, always IsRandom (as in the
    # original).
    assert rnd.sum() > 500 and 0.5 < rnd.mean() < 0.65
    assert (a[rnd] != b[rnd]).all()  # never from A's own document
    assert (a[~rnd] == b[~rnd]).all()  # IsNext: the same document
    distance = negatives.mean_distance(a[rnd], b[rnd], 200)
    # A uniform draw of B's document gives E|i - j| / N = (N^2 - 1) / (3 N (N - 1)) = 0.335.
    assert 0.30 < distance < 0.37, distance
    assert len(set(b[rnd])) > 150  # most documents serve as a negative somewhere
    # Chunk-local negatives (a chunk holds ~5 documents here) stay in the neighbourhood.
    a, b, rnd = _trace(path, tokenizer, marker_ids, google_vocab_path, pools=False)
    assert negatives.mean_distance(a[rnd], b[rnd], 200) < 0.05


def test_mlm_only_jobs_make_no_sample(tmp_path):
    path = _write_docs(tmp_path / "c.txt", [["a b c"]])
    assert negatives.pools_for_job((path,), 1, 1000, 128, nsp=False) is None
    assert instances.PackingConfig(nsp=False).max_num_tokens == 126
