#!/usr/bin/env bash
# Creates .venv (if missing) and installs bert_tf with its test extra into it.
# Sourced by run_main.sh and run_tests.sh so both work on a fresh machine.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
if [ ! -x "$ROOT/.venv/bin/python" ]; then
  "$PY" -m venv "$ROOT/.venv"
fi
VENV_PY="$ROOT/.venv/bin/python"
# Reinstall only when the package metadata changed since the last install.
STAMP="$ROOT/.venv/.bert_tf_installed"
if [ ! -f "$STAMP" ] || [ "$ROOT/setup.cfg" -nt "$STAMP" ] || [ "$ROOT/pyproject.toml" -nt "$STAMP" ]; then
  "$VENV_PY" -m pip install --quiet --upgrade pip
  "$VENV_PY" -m pip install --quiet -e "$ROOT[test]"
  touch "$STAMP"
fi
