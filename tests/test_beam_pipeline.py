"""Tests of the data jobs on Apache Beam (`--beam_pipeline_options`): the DirectRunner with two
worker processes writes, shard for shard, the bytes of the local runner (create_pretraining_data
with several key buckets per shard, prepare_corpus with --dedup and several chunk groups per
shard); bad input fails with one line before the pipeline starts; the core install never
imports Beam."""

import json
import os
import subprocess
import sys

import pytest

beam = pytest.importorskip("apache_beam")

from _records import count_frames  # noqa: E402

from data_tools.prepare import beam_prepare, prepare_job  # noqa: E402
from data_tools.prepare.prepare_config import PrepareConfig  # noqa: E402
from data_tools.pretraining_data import beam_create  # noqa: E402
from data_tools.runtime import beam_runtime, sharded_output  # noqa: E402

DIRECT = ("--runner=DirectRunner --direct_num_workers=2 "
          "--direct_running_mode=multi_processing")


def _run(module, args, repo_root, python=sys.executable):
    env = dict(os.environ, PYTHONPATH=str(repo_root), TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([python, "-m", f"data_tools.{module}"] + list(args), cwd=repo_root,
                          env=env, capture_output=True, text=True, timeout=300)


def _error_line(proc):
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def _small_corpus(tmp_path, corpus_lines, num_lines):
    small = tmp_path / "small.txt"
    small.write_text("\n".join(corpus_lines[:num_lines]) + "\n", encoding="utf-8")
    return small


def _shards(directory):
    names = sorted(n for n in os.listdir(directory))
    return names, [(directory / n).read_bytes() for n in names]


@pytest.mark.parametrize("packing", [[], ["--no_nsp", "--do_whole_word_mask"]],
                         ids=["nsp", "mlm_only"])
def test_create_pretraining_data_on_direct_runner_writes_the_local_bytes(
        tmp_path, corpus_lines, google_vocab_path, repo_root, packing):
    small = _small_corpus(tmp_path, corpus_lines, 3000)
    # 2.3 MB of records in 2 shards with a 1 MB budget: 2 key buckets per shard.
    args = [f"--input_file={small}", f"--vocab_file={google_vocab_path}", "--dupe_factor=3",
            "--num_output_shards=2", "--chunk_mb=0.05", "--shuffle_memory_mb=1",
            "--progress_seconds=0", "--log_examples=0"] + packing
    out = {}
    for mode, extra in (("local", ["--num_workers=2"]),
                        ("beam", [f"--beam_pipeline_options={DIRECT}"])):
        proc = _run("create_pretraining_data", args + extra + [
            f"--output_file={tmp_path / mode / 'train-{shard}-of-{num_shards}.tfrecord'}"],
            repo_root)
        assert proc.returncode == 0, proc.stderr[-3000:]
        out[mode] = _shards(tmp_path / mode)
    names, local = out["local"]
    assert names == ["train-00000-of-00002.tfrecord", "train-00001-of-00002.tfrecord"]
    assert out["beam"] == out["local"] and all(len(b) > 500_000 for b in local)
    # The counters came back from the workers: the instances of every shard.
    frames = sum(count_frames(b) for b in local)
    assert f"Beam: wrote {frames} instances to 2 shard(s)" in proc.stderr
    assert "in 2 group(s) per shard" in proc.stderr  # parts were concatenated
    # --progress_seconds was given: the Beam run says it ignores it.
    assert "--progress_seconds is ignored with --beam_pipeline_options" in proc.stderr


def test_prepare_corpus_on_direct_runner_writes_the_local_bytes(
        tmp_path, corpus_lines, repo_root, monkeypatch):
    # JSON Lines with duplicate articles (a later copy is dropped), in two files.
    articles, lines = [], []
    for line in corpus_lines[:2500] + [""]:
        if line.strip():
            lines.append(line)
        elif lines:
            articles.append(" ".join(lines[:40]) + "\n" + " ".join(lines[40:80]))
            lines = []
    docs = articles + articles[3:9] + [""]  # 6 duplicates, 1 empty
    src = tmp_path / "src"
    src.mkdir()
    half = len(docs) // 2
    for name, part in (("a.jsonl", docs[:half]), ("b.jsonl", docs[half:])):
        (src / name).write_text("".join(json.dumps({"text": d}) + "\n" for d in part))
    config = dict(input_files=(str(src / "a.jsonl"), str(src / "b.jsonl")),
                  input_format="jsonl", dedup=True, chunk_bytes=20_000, num_workers=1,
                  progress_seconds=0)
    local = prepare_job.run(PrepareConfig(output_files=tuple(
        str(tmp_path / "local" / f"c-{i}") for i in range(3)), **config))
    assert (local.duplicates, local.empty) == (6, 1)
    # Groups of 3 chunks per shard: several part files per shard, concatenated in order.
    monkeypatch.setattr(beam_prepare, "_GROUP_BYTES", 20_000)
    monkeypatch.setenv("PYTHONPATH", str(repo_root))  # for the worker processes
    beam_summary = beam_prepare.run(PrepareConfig(output_files=tuple(
        str(tmp_path / "beam" / f"c-{i}") for i in range(3)), **config), DIRECT)
    assert _shards(tmp_path / "beam") == _shards(tmp_path / "local")
    for field in ("documents", "sentences", "empty", "short", "duplicates"):
        assert getattr(beam_summary, field) == getattr(local, field), field
    assert sorted(os.listdir(tmp_path / "beam")) == ["c-0", "c-1", "c-2"]  # no temp left


def test_bad_input_fails_with_one_line_before_the_pipeline(tmp_path, google_vocab_path,
                                                           repo_root):
    text = tmp_path / "in.txt"
    text.write_text("One sentence.\nTwo sentences.\n")
    out = tmp_path / "out" / "x.tfrecord"
    base = [f"--input_file={text}", f"--output_file={out}", "--progress_seconds=0"]
    proc = _run("create_pretraining_data", base + [
        f"--vocab_file={tmp_path / 'missing.txt'}", f"--beam_pipeline_options={DIRECT}"],
        repo_root)
    assert "vocab file not found" in _error_line(proc)
    proc = _run("create_pretraining_data", base + [
        f"--vocab_file={google_vocab_path}", "--beam_pipeline_options=--runner=DataflowRunner"],
        repo_root)
    assert "cannot read the local path" in _error_line(proc)
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text(json.dumps({"body": "no text field"}) + "\n")
    proc = _run("prepare_corpus", [f"--input_file={jsonl}", "--input_format=jsonl",
                                   f"--output_file={tmp_path / 'out' / 'c.txt'}",
                                   f"--beam_pipeline_options={DIRECT}"], repo_root)
    assert "--text_field='text': no such field" in _error_line(proc)
    assert "[while running" not in proc.stderr  # failed in the launcher, not on a worker
    assert not os.path.exists(out.parent) or not os.listdir(out.parent)


def test_core_install_never_imports_beam_and_says_so_when_missing(tmp_path, repo_root):
    # As if Beam were not installed: importing it raises ImportError, so the entry point's
    # import (a traceback) would fail here if it imported Beam without the flag.
    code = ("import sys; sys.modules['apache_beam'] = None\n"
            "from bert_tf import errors\n"
            "from data_tools import create_pretraining_data as m\n"
            "errors.run_app(m.main)\n")
    text = tmp_path / "in.txt"
    text.write_text("One sentence.\n")
    env = dict(os.environ, PYTHONPATH=str(repo_root), TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(
        [sys.executable, "-c", code, f"--input_file={text}", f"--vocab_file={text}",
         f"--output_file={tmp_path / 'o.tfrecord'}", f"--beam_pipeline_options={DIRECT}"],
        cwd=repo_root, env=env, capture_output=True, text=True, timeout=120)
    assert "needs Apache Beam: pip install 'bert_tf[beam]'" in _error_line(proc)
    assert not os.path.exists(tmp_path / "o.tfrecord")
    proc = subprocess.run([sys.executable, "-c", "import sys, data_tools.prepare_corpus; "
                           "print('apache_beam' in sys.modules)"],
                          cwd=repo_root, env=env, capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "False", proc.stderr


def test_gzip_shards_equal_the_local_writers_whatever_the_part_sizes(tmp_path):
    records = [bytes([i % 251]) * (100 + 37 * i) for i in range(300)]
    with sharded_output.ShardedWriter([str(tmp_path / "local.gz")], "gzip") as w:
        for i in range(0, 300, 7):  # the local runner writes in its own pieces
            w.write(0, b"".join(records[i:i + 7]))
    cuts = [0, 1, 50, 51, 200, 300]
    parts = [beam_runtime.write_part(str(tmp_path), 0, b, b"".join(records[lo:hi]))[1]
             for b, (lo, hi) in enumerate(zip(cuts, cuts[1:]))]
    temp = str(tmp_path / "beam.gz")
    open(temp, "wb").close()  # made by the launcher (prepare_outputs)
    beam_runtime.concat_shard((0, {"parts": parts[::-1], "shard": [None]}), [temp], "gzip")
    assert (tmp_path / "beam.gz").read_bytes() == (tmp_path / "local.gz").read_bytes()


@pytest.mark.parametrize("total, groups, budget, bits", [
    (0, 2, 1 << 20, 0), (2 << 20, 2, 1 << 20, 0), (2 * 2**20 + 2, 2, 2**20, 1),
    (10 << 30, 4, 16 << 20, 8), (1 << 62, 1, 1, 24)])
def test_bucket_bits_bound_each_group_by_the_budget(total, groups, budget, bits):
    assert beam_create.bucket_bits(total, groups, budget) == bits


def test_success_is_read_from_the_outputs_when_the_runner_reports_no_metrics(
        tmp_path, corpus_lines, google_vocab_path, repo_root):
    # Spark's job server returns no metrics (apache/beam#20177): the launcher's counters are
    # replaced by {} here, and the job must still publish the local runner's bytes.
    small = _small_corpus(tmp_path, corpus_lines, 800)
    args = [f"--input_file={small}", f"--vocab_file={google_vocab_path}", "--dupe_factor=2",
            "--chunk_mb=0.05", "--progress_seconds=0", "--log_examples=0",
            "--output_compression=gzip"]
    local = tmp_path / "local.tfrecord.gz"
    proc = _run("create_pretraining_data", args + ["--num_workers=1", f"--output_file={local}"],
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


def test_a_shard_whose_temporary_file_the_launcher_removed_is_not_written_again(tmp_path):
    # A cancelled job whose workers run on (the Python job service's cancel only marks it)
    # must not bring back a temporary output the interrupted launcher removed.
    part = beam_runtime.write_part(str(tmp_path), 0, 0, b"records")[1]
    temp = str(tmp_path / "out.tfrecord.tmp-0123")
    with pytest.raises(beam_runtime.UserError, match="is gone: the launcher stopped"):
        beam_runtime.concat_shard((0, {"parts": [part], "shard": [None]}), [temp], "")
    assert not os.path.exists(temp)


def test_prepare_corpus_succeeds_from_its_outputs_when_the_runner_reports_no_metrics(
        tmp_path, corpus_lines, monkeypatch, caplog):
    src = _small_corpus(tmp_path, corpus_lines, 400)
    # Splits of 3 KB: blank-line documents cross split boundaries.
    config = dict(input_files=(str(src),), dedup=True, num_workers=1, progress_seconds=0,
                  chunk_bytes=3000)
    prepare_job.run(PrepareConfig(output_files=(str(tmp_path / "local"),),
                                  **config))
    monkeypatch.setattr(beam_runtime, "read_counters", lambda result: {})
    summary = beam_prepare.run(PrepareConfig(
        output_files=(str(tmp_path / "beam"),), **config), "--runner=DirectRunner")
    assert (tmp_path / "beam").read_bytes() == (tmp_path / "local").read_bytes()
    assert len((tmp_path / "local").read_bytes()) > 10_000
    assert summary.documents == 0  # unknown, and not reported as a count:
    assert "0 documents" not in caplog.text
    # Nothing written (every document too short) and no counts: still a failure, no output.
    with pytest.raises(beam_runtime.UserError, match="the Beam runner reported no counts"):
        beam_prepare.run(PrepareConfig(
            input_files=(str(src),), output_files=(str(tmp_path / "none"),),
            min_sentences=10_000), "--runner=DirectRunner")
    assert sorted(os.listdir(tmp_path)) == ["beam", "local", "small.txt"]


def test_part_files_are_renamed_into_place(tmp_path):
    shard, (bucket, path) = beam_runtime.write_part(str(tmp_path), 3, 7, b"records")
    assert (shard, bucket) == (3, 7) and os.listdir(tmp_path) == ["part-00003-00000007"]
    assert open(path, "rb").read() == b"records"


def test_an_interrupt_while_the_job_runs_cancels_it():
    class Result:
        cancelled = False

        def wait_until_finish(self):
            raise KeyboardInterrupt  # Ctrl-C, or SIGTERM turned into one by the entry point

        def cancel(self):
            Result.cancelled = True

    class Pipeline:
        def run(self):
            return Result()

    with pytest.raises(KeyboardInterrupt):
        beam_runtime.execute(Pipeline())
    assert Result.cancelled


def test_an_interrupt_while_the_job_is_submitted_says_it_may_run(caplog):
    class Pipeline:
        def run(self):
            raise KeyboardInterrupt  # before the runner returned the job's handle

    with pytest.raises(KeyboardInterrupt):
        beam_runtime.execute(Pipeline())
    assert "interrupted while the Beam job was being submitted: if the runner has started " \
        "it, cancel it there" in caplog.text


def test_prepare_corpus_workers_locate_lines_and_count_bad_bytes_of_their_splits(
        tmp_path, caplog):
    """A split inside a file: its worker says "line n from byte b"; a bad --text_field there
    fails on the worker with that line; invalid UTF-8 is counted per file from counters."""
    lines = [json.dumps({"text": f"Document {i}. It has two sentences."}) for i in range(60)]
    lines[40] = '{"text": "broken'
    src = tmp_path / "in.jsonl"
    src.write_bytes(("\n".join(lines) + "\n").encode() + b'{"text": "bad \xff byte."}\n')
    config = dict(input_files=(str(src),), input_format="jsonl", chunk_bytes=1000,
                  num_workers=1, progress_seconds=0)
    local = prepare_job.run(PrepareConfig(
        output_files=(str(tmp_path / "local"),), **config))
    summary = beam_prepare.run(PrepareConfig(
        output_files=(str(tmp_path / "beam"),), **config), "--runner=DirectRunner")
    assert (tmp_path / "beam").read_bytes() == (tmp_path / "local").read_bytes()
    assert summary.documents == local.documents == 60
    assert summary.text_bytes == local.text_bytes == src.stat().st_size
    bad = f"{src}: 1 invalid UTF-8 byte sequence(s) replaced by U+FFFD"
    assert bad in summary.warnings and bad in local.warnings
    assert f"{src}:41: broken JSON line skipped" in local.warnings[0]
    offset = 1000 * (len("\n".join(lines[:40])) // 1000)  # the split holding line 41
    assert f"{src}, line " in caplog.text and f"from byte {offset}: broken JSON" in caplog.text
    lines[50] = json.dumps({"body": "x"})
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(beam_runtime.UserError, match=rf"no such field in {src}, line \d+ from "
                                                r"byte \d+ \(its fields: body\)"):
        beam_prepare.run(PrepareConfig(
            output_files=(str(tmp_path / "beam2"),), **config), "--runner=DirectRunner")
    # Blank text only, in many splits: the launcher reads them all and says so.
    blank = tmp_path / "blank.txt"
    blank.write_text(" \n\n\t\n" * 500)
    with pytest.raises(beam_runtime.UserError, match=r"^no text in the 1 input file\(s\)"):
        beam_prepare.run(PrepareConfig(
            input_files=(str(blank),), output_files=(str(tmp_path / "beam3"),),
            chunk_bytes=100), "--runner=DirectRunner")
    assert sorted(os.listdir(tmp_path)) == ["beam", "blank.txt", "in.jsonl", "local"]
