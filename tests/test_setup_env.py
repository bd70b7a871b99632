"""scripts/setup_env.sh stops with one line when the Python is older than setup.cfg needs.

Each case runs a copy of the script beside a copy of setup.cfg in a temporary root, with
PYTHON pointing at a fake interpreter that prints a version (and fails `-m venv`, so that a
Python that passes the check stops the script right after it): no venv is made, nothing
is installed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VENV_FAILED = 7


def _fake_python(path: Path, version: str, log: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n"
                    f'echo "$@" >> "{log}"\n'
                    f'if [ "$1" = "-m" ]; then exit {VENV_FAILED}; fi\n'
                    f"echo {version}\n")
    path.chmod(0o755)
    return path


def _root(tmp_path: Path, python_requires: str = "") -> Path:
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "setup_env.sh", root / "scripts" / "setup_env.sh")
    setup_cfg = (ROOT / "setup.cfg").read_text(encoding="utf-8")
    if python_requires:
        setup_cfg = re.sub(r"(?m)^python_requires = .*$",
                           f"python_requires = {python_requires}", setup_cfg)
    (root / "setup.cfg").write_text(setup_cfg, encoding="utf-8")
    return root


def _run(root: Path, python: str) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key != "PYTHON"}
    env["PYTHON"] = python
    return subprocess.run(["bash", str(root / "scripts" / "setup_env.sh")], env=env,
                          capture_output=True, text=True, timeout=60)


def _minimum() -> str:
    match = re.search(r"(?m)^python_requires = >=(\d+\.\d+)$",
                      (ROOT / "setup.cfg").read_text(encoding="utf-8"))
    assert match, "setup.cfg's python_requires is not >=X.Y"
    return match.group(1)


@pytest.mark.parametrize("version", ["3.10.12", "3.9.18", "2.7.18"])
def test_an_older_python_stops_with_one_line_before_making_a_venv(tmp_path, version):
    root = _root(tmp_path)
    log = tmp_path / "calls.log"
    python = _fake_python(tmp_path / "bin" / "python3", version, log)
    result = _run(root, str(python))
    assert result.returncode == 1
    need = _minimum()
    assert result.stderr == (f"error: bert_tf needs Python >= {need}; {python} is {version} "
                             f"(set PYTHON=/path/to/python{need})\n")
    assert result.stdout == ""
    assert not (root / ".venv").exists()
    assert "-m" not in log.read_text()


@pytest.mark.parametrize("version", ["3.11.0", "3.12.1", "4.0.0"])
def test_a_new_enough_python_goes_on_to_make_the_venv(tmp_path, version):
    root = _root(tmp_path)
    log = tmp_path / "calls.log"
    result = _run(root, str(_fake_python(tmp_path / "bin" / "python3", version, log)))
    assert result.returncode == VENV_FAILED, result.stderr
    assert "error:" not in result.stderr
    assert log.read_text().splitlines()[-1] == f"-m venv {root}/.venv"


def test_the_minimum_is_read_from_setup_cfg(tmp_path):
    root = _root(tmp_path, python_requires=">=3.12")
    python = _fake_python(tmp_path / "bin" / "python3", "3.11.4", tmp_path / "calls.log")
    result = _run(root, str(python))
    assert result.returncode == 1
    assert result.stderr == (f"error: bert_tf needs Python >= 3.12; {python} is 3.11.4 "
                             "(set PYTHON=/path/to/python3.12)\n")


def test_a_venv_made_by_an_older_python_is_named(tmp_path):
    root = _root(tmp_path)
    log = tmp_path / "calls.log"
    _fake_python(root / ".venv" / "bin" / "python", "3.10.12", log)
    good = _fake_python(tmp_path / "bin" / "python3", "3.11.4", log)
    result = _run(root, str(good))
    assert result.returncode == 1
    need = _minimum()
    assert result.stderr == (f"error: bert_tf needs Python >= {need}; .venv/bin/python is "
                             f"3.10.12 (remove .venv and set PYTHON=/path/to/python{need})\n")


def test_a_missing_interpreter_is_named(tmp_path):
    root = _root(tmp_path)
    missing = tmp_path / "no" / "python3.11"
    result = _run(root, str(missing))
    assert result.returncode == 1
    need = _minimum()
    assert result.stderr == (f"error: bert_tf needs Python >= {need}; {missing} did not run "
                             f"(set PYTHON=/path/to/python{need})\n")
