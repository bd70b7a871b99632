#!/usr/bin/env bash
# Creates .venv (if missing) and installs bert_tf with its test extra into it.
# Sourced by run_main.sh and run_tests.sh so both work on a fresh machine.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
# The Python setup.cfg's python_requires names, checked before anything is created: with an
# older one pip fails later with a resolver error that does not say which version is needed.
MIN_PY="$(sed -n 's/^python_requires *= *>= *\([0-9][0-9.]*\) *$/\1/p' "$ROOT/setup.cfg")"
if [ -z "$MIN_PY" ]; then
  echo "error: scripts/setup_env.sh cannot read python_requires (>=X.Y) from setup.cfg" >&2
  exit 1
fi
bert_tf_check_python() {  # interpreter, its name in the message, what to do about it
  local version have need
  if ! version="$("$1" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null)"
  then
    echo "error: bert_tf needs Python >= $MIN_PY; $2 did not run ($3)" >&2
    exit 1
  fi
  IFS=. read -r -a have <<< "$version"
  IFS=. read -r -a need <<< "$MIN_PY"
  if (( have[0] < need[0] || (have[0] == need[0] && have[1] < ${need[1]:-0}) )); then
    echo "error: bert_tf needs Python >= $MIN_PY; $2 is $version ($3)" >&2
    exit 1
  fi
}
if [ -x "$ROOT/.venv/bin/python" ]; then
  bert_tf_check_python "$ROOT/.venv/bin/python" ".venv/bin/python" \
    "remove .venv and set PYTHON=/path/to/python$MIN_PY"
else
  bert_tf_check_python "$PY" "$PY" "set PYTHON=/path/to/python$MIN_PY"
fi
unset -f bert_tf_check_python
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
