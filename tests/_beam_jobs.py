"""Running the data jobs in the Beam tests: the DirectRunner's options, a job in a subprocess,
its one error line, a small corpus and the output shards' bytes."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import List, Tuple

DIRECT = ("--runner=DirectRunner --direct_num_workers=2 "
          "--direct_running_mode=multi_processing")


def run_job(module, args, repo_root, python=sys.executable) -> subprocess.CompletedProcess:
    """`python -m data_tools.<module> <args>` from the repository, output captured."""
    env = dict(os.environ, PYTHONPATH=str(repo_root), TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([python, "-m", f"data_tools.{module}"] + list(args), cwd=repo_root,
                          env=env, capture_output=True, text=True, timeout=300)


def error_line(proc: subprocess.CompletedProcess) -> str:
    """The one `error:` line of a job that failed with exit code 2 and no traceback."""
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def small_corpus(tmp_path, corpus_lines, num_lines):
    """The bundled corpus' first `num_lines` lines in tmp_path/small.txt."""
    small = tmp_path / "small.txt"
    small.write_text("\n".join(corpus_lines[:num_lines]) + "\n", encoding="utf-8")
    return small


def shard_bytes(directory) -> Tuple[List[str], List[bytes]]:
    """(the file names of `directory`, sorted, and their bytes)."""
    names = sorted(n for n in os.listdir(directory))
    return names, [(directory / n).read_bytes() for n in names]
