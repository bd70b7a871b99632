#!/usr/bin/env bash
# README command 1: set everything up, then run the whole pipeline on the bundled corpus
# (data/corpus/wikitext2.bert.txt): WordPiece vocab -> pretraining TFRecords -> pretrain a
# small BERT on CPU -> evaluate. Outputs go to ./out (override with OUT=...).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup_env.sh"
cd "$ROOT"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
PY="$ROOT/.venv/bin/python"
OUT="${OUT:-$ROOT/out}"
CORPUS="$ROOT/data/corpus/wikitext2.bert.txt"
mkdir -p "$OUT"

echo "== 1/4 learn a WordPiece vocabulary from $CORPUS"
"$PY" -m data_tools.build_vocab --input_file="$CORPUS" --vocab_file="$OUT/vocab.txt" \
  --vocab_size=8192 --do_lower_case=true

echo "== 2/4 write pretraining TFRecords (last 11 of 121 articles held out for evaluation)"
mkdir -p "$OUT/corpus"
# Articles are separated by blank lines; article 111 onwards goes to the held-out file.
awk -v train="$OUT/corpus/train.txt" -v heldout="$OUT/corpus/heldout.txt" '
  BEGIN { doc = 0; blank = 1 }
  /^[[:space:]]*$/ { if (!blank) { doc++ } blank = 1; print > (doc < 110 ? train : heldout); next }
  { blank = 0; print > (doc < 110 ? train : heldout) }' "$CORPUS"
"$PY" -m data_tools.create_pretraining_data --input_file="$OUT/corpus/train.txt" \
  --output_file="$OUT/data/train-0.tfrecord,$OUT/data/train-1.tfrecord,$OUT/data/train-2.tfrecord,$OUT/data/train-3.tfrecord" \
  --vocab_file="$OUT/vocab.txt" --do_lower_case=true --max_seq_length=128 \
  --max_predictions_per_seq=20 --dupe_factor=10 --random_seed=12345
"$PY" -m data_tools.create_pretraining_data --input_file="$OUT/corpus/heldout.txt" \
  --output_file="$OUT/data/heldout.tfrecord" \
  --vocab_file="$OUT/vocab.txt" --do_lower_case=true --max_seq_length=128 \
  --max_predictions_per_seq=20 --dupe_factor=1 --random_seed=54321

if [ -f "$ROOT/bert_tf/run_pretraining.py" ]; then
  echo "== 3/4 pretrain a small BERT on CPU (configs/demo.flags)"
  "$PY" -m bert_tf.run_pretraining --flagfile=configs/demo.flags \
    --input_file="$OUT/data/train-*.tfrecord" --eval_input_file="$OUT/data/heldout.tfrecord" \
    --output_dir="$OUT/pretrain" \
    --do_train=true --do_eval=true
  echo "== 4/4 evaluation ($OUT/pretrain/eval_results.txt)"
  cat "$OUT/pretrain/eval_results.txt"
fi
