"""Tests of data_tools.pretraining_data.beam_create: create_pretraining_data on Apache Beam's
DirectRunner with two worker processes writes, shard for shard, the bytes of the local runner
(with several key buckets per shard), also when the runner reports no metrics; bad input fails
with one line before the pipeline starts."""

import os
import subprocess
import sys

import pytest

beam = pytest.importorskip("apache_beam")

from _beam_jobs import DIRECT, error_line, run_job, shard_bytes, small_corpus  # noqa: E402
from _records import count_frames  # noqa: E402

from data_tools.pretraining_data import beam_create  # noqa: E402
from data_tools.runtime import beam_runtime  # noqa: E402


@pytest.mark.parametrize("packing", [[], ["--no_nsp", "--do_whole_word_mask"],
                                     ["--feature_set=packed_mlm"]],
                         ids=["nsp", "mlm_only", "packed_mlm"])
def test_create_pretraining_data_on_direct_runner_writes_the_local_bytes(
        tmp_path, corpus_lines, google_vocab_path, repo_root, packing):
    small = small_corpus(tmp_path, corpus_lines, 3000)
    # 2.3 MB of records in 2 shards with a 1 MB budget: 2 key buckets per shard.
    args = [f"--input_file={small}", f"--vocab_file={google_vocab_path}", "--dupe_factor=3",
            "--num_output_shards=2", "--chunk_mb=0.05", "--shuffle_memory_mb=1",
            "--progress_seconds=0", "--log_examples=0"] + packing
    out = {}
    for mode, extra in (("local", ["--num_workers=2"]),
                        ("beam", [f"--beam_pipeline_options={DIRECT}"])):
        proc = run_job("create_pretraining_data", args + extra + [
            f"--output_file={tmp_path / mode / 'train-{shard}-of-{num_shards}.tfrecord'}"],
            repo_root)
        assert proc.returncode == 0, proc.stderr[-3000:]
        out[mode] = shard_bytes(tmp_path / mode)
    names, local = out["local"]
    assert names == ["train-00000-of-00002.tfrecord", "train-00001-of-00002.tfrecord"]
    assert out["beam"] == out["local"] and all(len(b) > 500_000 for b in local)
    # The counters came back from the workers: the instances of every shard.
    frames = sum(count_frames(b) for b in local)
    assert f"Beam: wrote {frames} instances to 2 shard(s)" in proc.stderr
    assert "in 2 group(s) per shard" in proc.stderr  # parts were concatenated
    # --progress_seconds was given: the Beam run says it ignores it.
    assert "--progress_seconds is ignored with --beam_pipeline_options" in proc.stderr


def test_bad_input_fails_with_one_line_before_the_pipeline(tmp_path, google_vocab_path,
                                                           repo_root):
    text = tmp_path / "in.txt"
    text.write_text("One sentence.\nTwo sentences.\n")
    out = tmp_path / "out" / "x.tfrecord"
    base = [f"--input_file={text}", f"--output_file={out}", "--progress_seconds=0"]
    proc = run_job("create_pretraining_data", base + [
        f"--vocab_file={tmp_path / 'missing.txt'}", f"--beam_pipeline_options={DIRECT}"],
        repo_root)
    assert "vocab file not found" in error_line(proc)
    proc = run_job("create_pretraining_data", base + [
        f"--vocab_file={google_vocab_path}", "--beam_pipeline_options=--runner=DataflowRunner"],
        repo_root)
    assert "cannot read the local path" in error_line(proc)
    assert not os.path.exists(out.parent) or not os.listdir(out.parent)


@pytest.mark.parametrize("total, groups, budget, bits", [
    (0, 2, 1 << 20, 0), (2 << 20, 2, 1 << 20, 0), (2 * 2**20 + 2, 2, 2**20, 1),
    (10 << 30, 4, 16 << 20, 8), (1 << 62, 1, 1, 24)])
def test_bucket_bits_bound_each_group_by_the_budget(total, groups, budget, bits):
    assert beam_create.bucket_bits(total, groups, budget) == bits


def test_success_is_read_from_the_outputs_when_the_runner_reports_no_metrics(
        tmp_path, corpus_lines, google_vocab_path, repo_root):
    # Spark's job server returns no metrics (apache/beam#20177): the launcher's counters are
    # replaced by {} here, and the job must still publish the local runner's bytes.
    small = small_corpus(tmp_path, corpus_lines, 800)
    args = [f"--input_file={small}", f"--vocab_file={google_vocab_path}", "--dupe_factor=2",
            "--chunk_mb=0.05", "--progress_seconds=0", "--log_examples=0",
            "--output_compression=gzip"]
    local = tmp_path / "local.tfrecord.gz"
    proc = run_job("create_pretraining_data", args + ["--num_workers=1", f"--output_file={local}"],
                   repo_root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    beam_out = tmp_path / "beam.tfrecord.gz"
    argv = ["create_pretraining_data"] + args + [f"--output_file={beam_out}",
                                                 f"--beam_pipeline_options={DIRECT}"]
    code = ("import runpy, sys\nfrom data_tools.runtime import beam_runtime\n"
            "beam_runtime.read_counters = lambda result: {}\n"
            f"sys.argv = {argv!r}\n"
            "runpy.run_module('data_tools.create_pretraining_data', run_name='__main__')\n")
    env = dict(os.environ, PYTHONPATH=str(repo_root), TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, "-c", code], cwd=repo_root, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "the Beam runner reported no metrics" in proc.stderr
    # No counts are made up: no "0 instances", no statistics line.
    assert "Beam: wrote 1 shard(s), " in proc.stderr and "statistics:" not in proc.stderr
    assert beam_out.read_bytes() == local.read_bytes()
    assert beam_runtime.written_bytes(str(local), "gzip") > 100_000
