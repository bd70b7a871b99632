"""Tests of data_tools.pipeline.run: byte-identical output for any worker count, round-robin
shards, gzip, and remote paths through tf.io.gfile (the ram:// filesystem)."""

import pytest

from data_tools import pipeline
from data_tools.job_config import PipelineConfig


def _config(vocab, tmp="/nonexistent", **kw):
    base = dict(input_files=(), output_files=(f"{tmp}/out.tfrecord",), vocab_file=vocab,
                dupe_factor=1, num_workers=1, log_examples=0, progress_seconds=0)
    base.update(kw)
    return PipelineConfig(**base)


def _small_corpus(tmp_path, corpus_lines, n_lines=2500):
    path = tmp_path / "small.txt"
    path.write_text("\n".join(corpus_lines[:n_lines]) + "\n", encoding="utf-8")
    return path


def test_run_is_identical_for_any_worker_count_and_deals_shards(
        tmp_path, corpus_lines, google_vocab_path):
    tf = pytest.importorskip("tensorflow")
    small = _small_corpus(tmp_path, corpus_lines)
    outs = {}
    for workers in (1, 2):
        files = tuple(str(tmp_path / f"w{workers}-{s}.tfrecord") for s in range(3))
        config = _config(google_vocab_path, input_files=(str(small),), output_files=files,
                         num_workers=workers, chunk_bytes=60_000, dupe_factor=2,
                         shuffle_buffer_size=1000)
        summary = pipeline.run(config)
        outs[workers] = [open(f, "rb").read() for f in files]
    assert outs[1] == outs[2]
    counts = [sum(1 for _ in tf.data.TFRecordDataset(str(tmp_path / f"w1-{s}.tfrecord")))
              for s in range(3)]
    # Round-robin dealing: shard sizes differ by at most one record.
    assert sum(counts) == summary.instances and max(counts) - min(counts) <= 1
    assert summary.documents > 10 and summary.bytes_written == sum(len(b) for b in outs[1])


def test_gzip_output_reads_back(tmp_path, corpus_lines, google_vocab_path):
    tf = pytest.importorskip("tensorflow")
    small = _small_corpus(tmp_path, corpus_lines, 600)
    plain, gz = str(tmp_path / "p.tfrecord"), str(tmp_path / "g.tfrecord.gz")
    for out, comp in ((plain, ""), (gz, "gzip")):
        pipeline.run(_config(google_vocab_path, input_files=(str(small),), output_files=(out,),
                             output_compression=comp))
    a = [r.numpy() for r in tf.data.TFRecordDataset(plain)]
    b = [r.numpy() for r in tf.data.TFRecordDataset(gz, compression_type="GZIP")]
    assert a == b and len(a) > 50
    with open(gz, "rb") as f:
        assert f.read(2) == b"\x1f\x8b"


def test_remote_paths_through_tf_gfile(corpus_lines, google_vocab_path):
    """ram:// is a TensorFlow filesystem: inputs, outputs and temporary names go through
    tf.io.gfile exactly like gs:// (TensorFlow is loaded, so workers are spawned)."""
    tf = pytest.importorskip("tensorflow")
    src = "ram://cpd_test/in.txt"
    with tf.io.gfile.GFile(src, "w") as f:
        f.write("\n".join(corpus_lines[:600]) + "\n")
    outs = [f"ram://cpd_test/out/t-{i}.tfrecord" for i in range(2)]
    summary = pipeline.run(_config(google_vocab_path, input_files=(src,),
                                   output_files=tuple(outs), num_workers=2,
                                   chunk_bytes=20_000))
    assert sorted(tf.io.gfile.listdir("ram://cpd_test/out")) == ["t-0.tfrecord", "t-1.tfrecord"]
    n = sum(1 for _ in tf.data.TFRecordDataset(outs))
    assert n == summary.instances > 50
