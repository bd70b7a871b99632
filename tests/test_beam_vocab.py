"""Tests of build_vocab on Apache Beam (`--beam_pipeline_options`, data_tools.vocab.beam_vocab): the
DirectRunner with two worker processes learns, byte for byte, the local runner's vocabulary,
with several splits, a gzip file read whole, an invalid byte and a cap on the words kept.
(The sample is the same part list, `word_counting.plan_parts`: tests/test_word_counting.py.)"""

import gzip
import os
import subprocess
import sys

import pytest

pytest.importorskip("apache_beam")

DIRECT = ("--runner=DirectRunner --direct_num_workers=2 "
          "--direct_running_mode=multi_processing")


def _run(args, repo_root):
    env = dict(os.environ, PYTHONPATH=str(repo_root), TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable, "-m", "data_tools.build_vocab"] + list(args),
                          cwd=repo_root, env=env, capture_output=True, text=True, timeout=300)


def test_direct_runner_learns_the_local_vocabulary(tmp_path, corpus_lines, repo_root):
    text = ("\n".join(corpus_lines[:6000]) + "\n").encode()
    (tmp_path / "a.txt").write_bytes(text[: len(text) // 2] + b"caf\xe9\n")
    (tmp_path / "b.txt.gz").write_bytes(gzip.compress(text[len(text) // 2:]))
    args = [f"--input_file={tmp_path}/a.txt,{tmp_path}/b.txt.gz", "--split_mb=0.1",
            "--max_words=4000", "--vocab_size=1500", "--num_unused=10"]
    out = {}
    for where, extra in (("local", ["--num_workers=2"]),
                         ("beam", [f"--beam_pipeline_options={DIRECT}"])):
        path = tmp_path / f"{where}.txt"
        proc = _run(args + extra + [f"--vocab_file={path}"], repo_root)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert proc.stderr.count("warning: ") == 1, proc.stderr[-3000:]
        # The summary without the file name and the time.
        summary = proc.stdout.strip().splitlines()[-1].split(": ", 1)[1]
        out[where] = (path.read_bytes(), summary.split(" warning(s)")[0])
    assert out["local"] == out["beam"]
    assert ", learned from the 4000 most frequent of " in out["beam"][1]
    assert out["beam"][1].endswith("distinct words, 1")  # the invalid byte
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".beam")]
