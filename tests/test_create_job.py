"""Tests of data_tools.pretraining_data.create_job.run: byte-identical output for any worker
count and memory budget, gzip, remote paths through tf.io.gfile (the ram:// filesystem), and
properties of the whole output on corpora built to break them: a global shuffle (no corpus
order, no bunched dupes) and no random next segment from A's own document when documents are
long."""

import collections

import numpy as np
import tensorflow as tf

from bert_tf.core import schema
from data_tools.pretraining_data import create_job
from data_tools.pretraining_data.create_config import CreateConfig
from data_tools.pretraining_data.instances import PackingConfig


def _config(vocab, tmp="/nonexistent", **kw):
    base = dict(input_files=(), output_files=(f"{tmp}/out.tfrecord",), vocab_file=vocab,
                dupe_factor=1, num_workers=1, log_examples=0, progress_seconds=0)
    base.update(kw)
    return CreateConfig(**base)


def _small_corpus(tmp_path, corpus_lines, n_lines=2500):
    path = tmp_path / "small.txt"
    path.write_text("\n".join(corpus_lines[:n_lines]) + "\n", encoding="utf-8")
    return path


def test_run_is_identical_for_any_worker_count_and_memory_budget(
        tmp_path, corpus_lines, google_vocab_path):
    small = _small_corpus(tmp_path, corpus_lines)
    outs, summaries = {}, {}

    def run(workers, memory):
        files = tuple(str(tmp_path / f"w{workers}-{memory}-{s}.tfrecord") for s in range(3))
        config = _config(google_vocab_path, input_files=(str(small),), output_files=files,
                         num_workers=workers, chunk_bytes=60_000, dupe_factor=2,
                         shuffle_memory_bytes=memory, temp_dir=str(tmp_path / "spill"))
        summaries[workers, memory] = create_job.run(config)
        outs[workers, memory] = [open(f, "rb").read() for f in files]

    for workers, memory in ((1, 256 << 20), (2, 256 << 20), (2, 100_000)):
        run(workers, memory)
    summary = summaries[1, 256 << 20]
    assert summary.shuffle.buckets == 0 and summary.shuffle.written_bytes == 0  # in memory
    # A budget of a twelfth of the records: 32 buckets of at most half the budget, written
    # once and read once, by the workers when there are workers.
    run(1, 100_000)
    for workers in (1, 2):
        st = summaries[workers, 100_000].shuffle
        assert (st.buckets, st.split_buckets, st.records) == (32, 0, summary.instances)
        assert st.read_bytes == st.written_bytes < 1.05 * st.record_bytes
        assert (st.worker_written_bytes > 0) == (workers == 2)
    first = outs[1, 256 << 20]
    assert all(out == first for out in outs.values())
    assert list((tmp_path / "spill").iterdir()) == []  # the spilled buckets are gone
    counts = [sum(1 for _ in tf.data.TFRecordDataset(
                  str(tmp_path / f"w1-{256 << 20}-{s}.tfrecord")))
              for s in range(3)]
    # Each record goes to a uniformly random shard: sizes ~ n/3 +- a few sd.
    assert sum(counts) == summary.instances
    sd = (summary.instances * 2 / 9) ** 0.5
    assert all(abs(c - summary.instances / 3) < 4 * sd for c in counts)
    assert summary.documents > 10 and summary.bytes_written == sum(len(b) for b in first)


def test_gzip_output_reads_back(tmp_path, corpus_lines, google_vocab_path):
    small = _small_corpus(tmp_path, corpus_lines, 600)
    plain, gz = str(tmp_path / "p.tfrecord"), str(tmp_path / "g.tfrecord.gz")
    for out, comp in ((plain, ""), (gz, "gzip")):
        create_job.run(_config(google_vocab_path, input_files=(str(small),), output_files=(out,),
                               output_compression=comp))
    a = [r.numpy() for r in tf.data.TFRecordDataset(plain)]
    b = [r.numpy() for r in tf.data.TFRecordDataset(gz, compression_type="GZIP")]
    assert a == b and len(a) > 50
    with open(gz, "rb") as f:
        assert f.read(2) == b"\x1f\x8b"


def test_remote_paths_through_tf_gfile(corpus_lines, google_vocab_path):
    """ram:// is a TensorFlow filesystem: inputs, outputs and temporary names go through
    tf.io.gfile exactly like gs://. Its files live in this process's memory, so the job runs
    here (worker processes read their splits themselves, which gs:// allows and ram:// does
    not)."""
    src = "ram://cpd_test/in.txt"
    with tf.io.gfile.GFile(src, "w") as f:
        f.write("\n".join(corpus_lines[:600]) + "\n")
    outs = [f"ram://cpd_test/out/t-{i}.tfrecord" for i in range(2)]
    # A small shuffle budget: the spilled buckets go beside the outputs, through gfile too.
    summary = create_job.run(_config(google_vocab_path, input_files=(src,),
                                     output_files=tuple(outs), num_workers=1,
                                     chunk_bytes=20_000, shuffle_memory_bytes=50_000))
    assert sorted(tf.io.gfile.listdir("ram://cpd_test/out")) == ["t-0.tfrecord", "t-1.tfrecord"]
    n = sum(1 for _ in tf.data.TFRecordDataset(outs))
    assert n == summary.instances > 50


# ---- properties of the whole output ------------------------------------------------------

_WORDS = 5  # words per document (document k writes only "d<k>w0" ... "d<k>w4")


def _synthetic(tmp_path, num_docs, sents_per_doc, seed=0):
    """A corpus whose every word names its document, and a whole-word vocab for it."""
    rng = np.random.default_rng(seed)
    docs = []
    for k in range(num_docs):
        docs.append("\n".join(" ".join(f"d{k}w{j}" for j in rng.integers(0, _WORDS, n))
                              for n in rng.integers(4, 12, sents_per_doc)))
    corpus = tmp_path / "synthetic.txt"
    corpus.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [
        f"d{k}w{j}" for k in range(num_docs) for j in range(_WORDS)]) + "\n")
    return corpus, vocab


def _source_documents(path):
    """(document of segment A, document of segment B or -1, is_random) of every record, in
    file order: the majority document of each segment's unmasked tokens."""
    out = []
    for raw in tf.data.TFRecordDataset(path):
        f = tf.train.Example.FromString(raw.numpy()).features.feature
        ids = np.array(f[schema.INPUT_IDS].int64_list.value)
        seg = np.array(f[schema.SEGMENT_IDS].int64_list.value)
        masked = set(f[schema.MASKED_LM_POSITIONS].int64_list.value)
        keep = np.array([i not in masked for i in range(len(ids))]) & (ids >= 5)
        doc = (ids - 5) // _WORDS

        def majority(sel, doc=doc):
            votes = collections.Counter(doc[sel].tolist())
            return votes.most_common(1)[0][0] if votes else -1

        out.append((majority(keep & (seg == 0)), majority(keep & (seg == 1)),
                    f[schema.NEXT_SENTENCE_LABELS].int64_list.value[0]))
    return out


def test_output_order_is_independent_of_corpus_order_and_dupes_are_spread(tmp_path):
    """300 documents, dupe_factor 4, a memory budget of 1/20 of the output (so a windowed
    shuffle would leave corpus order): record position must not predict its document."""
    corpus, vocab = _synthetic(tmp_path, num_docs=300, sents_per_doc=12)
    files = tuple(str(tmp_path / f"o-{s}.tfrecord") for s in range(2))
    config = _config(str(vocab), input_files=(str(corpus),), output_files=files,
                     chunk_bytes=4000, dupe_factor=4, shuffle_memory_bytes=60_000,
                     packing=PackingConfig(max_seq_length=32))
    summary = create_job.run(config)
    assert summary.instances > 3000
    for path in files:
        docs = np.array([a for a, _, _ in _source_documents(path)])
        n = len(docs)
        # Spearman's rho: Pearson's on ranks, tied documents sharing their mean rank.
        _, inverse, counts = np.unique(docs, return_inverse=True, return_counts=True)
        ranks = (np.cumsum(counts) - counts + (counts - 1) / 2)[inverse]
        rho = np.corrcoef(np.arange(n), ranks)[0, 1]
        assert abs(rho) < 4 / n ** 0.5, rho  # 4 sd of rho under a random order
        # Adjacent records of one document, over what a random order gives: dupes of a
        # document are written together by one chunk, so any local shuffle bunches them.
        counts = np.bincount(docs)
        expected = float((counts * (counts - 1)).sum()) / (n * (n - 1))
        observed = float(np.mean(docs[1:] == docs[:-1]))
        assert observed / expected < 1.5, (observed, expected)


def test_random_next_segments_never_come_from_a_long_documents_own_text(tmp_path):
    """4 documents of ~24 KB cut into chunks of 6 KB: every chunk holds pieces of one
    document (the first one too, before any other was read)."""
    corpus, vocab = _synthetic(tmp_path, num_docs=4, sents_per_doc=600)
    config = _config(str(vocab), input_files=(str(corpus),),
                     output_files=(str(tmp_path / "o.tfrecord"),), chunk_bytes=6000,
                     dupe_factor=2, packing=PackingConfig(max_seq_length=32))
    create_job.run(config)
    records = _source_documents(str(tmp_path / "o.tfrecord"))
    random_next = [(a, b) for a, b, r in records if r == 1]
    is_next = [(a, b) for a, b, r in records if r == 0]
    assert len(random_next) > 500 and len(is_next) > 500
    assert sum(a == b for a, b in random_next) == 0  # never A's own document
    assert sum(a != b for a, b in is_next) == 0
    # Negatives come from every other document, not one neighbour.
    for doc in range(4):
        assert {b for a, b in random_next if a == doc} == {0, 1, 2, 3} - {doc}


def test_the_shuffle_spills_locally_when_the_outputs_are_remote(tmp_path):
    import tempfile

    from data_tools.pretraining_data.create_config import CreateConfig
    from data_tools.pretraining_data.create_job import shuffle_temp_dir

    def config(output, temp_dir=""):
        return CreateConfig(input_files=("in.txt",), output_files=(output,),
                            vocab_file="vocab.txt", temp_dir=temp_dir)

    assert shuffle_temp_dir(config("gs://bucket/data/train.tfrecord")) == tempfile.gettempdir()
    assert shuffle_temp_dir(config(str(tmp_path / "train.tfrecord"))) == str(tmp_path)
    assert shuffle_temp_dir(config("gs://b/t.tfrecord", "/scratch")) == "/scratch"
