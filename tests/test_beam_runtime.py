"""Tests of data_tools.runtime.beam_runtime: part files and their concatenation into shards
(gzip included, byte-identical to the local writer's), a shard the launcher removed is not
written again, interrupts cancel the job, and the core install never imports Beam."""

import os
import subprocess
import sys

import pytest

beam = pytest.importorskip("apache_beam")

from _beam_jobs import DIRECT, error_line  # noqa: E402

from data_tools.runtime import beam_runtime, sharded_output  # noqa: E402


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


def test_a_shard_whose_temporary_file_the_launcher_removed_is_not_written_again(tmp_path):
    # A cancelled job whose workers run on (the Python job service's cancel only marks it)
    # must not bring back a temporary output the interrupted launcher removed.
    part = beam_runtime.write_part(str(tmp_path), 0, 0, b"records")[1]
    temp = str(tmp_path / "out.tfrecord.tmp-0123")
    with pytest.raises(beam_runtime.UserError, match="is gone: the launcher stopped"):
        beam_runtime.concat_shard((0, {"parts": [part], "shard": [None]}), [temp], "")
    assert not os.path.exists(temp)


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


def test_core_install_never_imports_beam_and_says_so_when_missing(tmp_path, repo_root):
    # As if Beam were not installed: importing it raises ImportError, so the entry point's
    # import (a traceback) would fail here if it imported Beam without the flag.
    code = ("import sys; sys.modules['apache_beam'] = None\n"
            "from bert_tf.core import errors\n"
            "from data_tools import create_pretraining_data as m\n"
            "errors.run_app(m.main)\n")
    text = tmp_path / "in.txt"
    text.write_text("One sentence.\n")
    env = dict(os.environ, PYTHONPATH=str(repo_root), TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(
        [sys.executable, "-c", code, f"--input_file={text}", f"--vocab_file={text}",
         f"--output_file={tmp_path / 'o.tfrecord'}", f"--beam_pipeline_options={DIRECT}"],
        cwd=repo_root, env=env, capture_output=True, text=True, timeout=120)
    assert "needs Apache Beam: pip install 'bert_tf[beam]'" in error_line(proc)
    assert not os.path.exists(tmp_path / "o.tfrecord")
    proc = subprocess.run([sys.executable, "-c", "import sys, data_tools.prepare_corpus; "
                           "print('apache_beam' in sys.modules)"],
                          cwd=repo_root, env=env, capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "False", proc.stderr
