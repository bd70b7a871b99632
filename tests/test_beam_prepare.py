"""Tests of data_tools.prepare.beam_prepare: prepare_corpus on Apache Beam's DirectRunner writes
the local runner's bytes (with --dedup and several chunk groups per shard), also when the
runner reports no metrics; its workers locate lines and count bad bytes of their splits; bad
input fails with one line before the pipeline starts."""

import json
import os

import pytest

beam = pytest.importorskip("apache_beam")

from _beam_jobs import DIRECT, error_line, run_job, shard_bytes, small_corpus  # noqa: E402

from data_tools.prepare import beam_prepare, prepare_job  # noqa: E402
from data_tools.prepare.prepare_config import PrepareConfig  # noqa: E402
from data_tools.runtime import beam_runtime  # noqa: E402


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
    assert shard_bytes(tmp_path / "beam") == shard_bytes(tmp_path / "local")
    for field in ("documents", "sentences", "empty", "short", "duplicates"):
        assert getattr(beam_summary, field) == getattr(local, field), field
    assert sorted(os.listdir(tmp_path / "beam")) == ["c-0", "c-1", "c-2"]  # no temp left
    # With a held-out file: the same four files as the local run's.
    for run, where in ((lambda c: prepare_job.run(c), "local_h"),
                       (lambda c: beam_prepare.run(c, DIRECT), "beam_h")):
        summary = run(PrepareConfig(output_files=tuple(
            str(tmp_path / where / f"c-{i}") for i in range(3)),
            heldout_file=str(tmp_path / where / "heldout"), heldout_every=7, **config))
        assert summary.heldout == local.documents // 7
    assert sorted(os.listdir(tmp_path / "beam_h")) == ["c-0", "c-1", "c-2", "heldout"]
    assert shard_bytes(tmp_path / "beam_h") == shard_bytes(tmp_path / "local_h")


def test_a_missing_text_field_fails_with_one_line_before_the_pipeline(tmp_path, repo_root):
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text(json.dumps({"body": "no text field"}) + "\n")
    proc = run_job("prepare_corpus", [f"--input_file={jsonl}", "--input_format=jsonl",
                                      f"--output_file={tmp_path / 'out' / 'c.txt'}",
                                      f"--beam_pipeline_options={DIRECT}"], repo_root)
    assert "--text_field='text': no such field" in error_line(proc)
    assert "[while running" not in proc.stderr  # failed in the launcher, not on a worker


def test_prepare_corpus_succeeds_from_its_outputs_when_the_runner_reports_no_metrics(
        tmp_path, corpus_lines, monkeypatch, caplog):
    src = small_corpus(tmp_path, corpus_lines, 400)
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
