#!/usr/bin/env bash
# The original BERT recipe end to end, from raw text to a phase-2 checkpoint:
#
#   1. data_tools.prepare_corpus   raw documents -> one sentence per line, blank line between
#                                  documents (sharded text);
#   2. data_tools.build_vocab      a WordPiece vocabulary learned on that text;
#   3. data_tools.create_pretraining_data, twice: sequences of 128 tokens with 20 predictions
#                                  (phase 1) and of 512 with 80 (phase 2);
#   4. bert_tf.run_pretraining --flagfile=configs/base.flags          (phase 1, 128 tokens);
#   5. bert_tf.run_pretraining --flagfile=configs/base_phase2.flags   (phase 2, 512 tokens,
#                                  warm-started from phase 1 with --init_checkpoint).
#
# Usage (every setting is an environment variable; WORK may be a gs:// path):
#
#   RAW='gs://my-bucket/raw/*.jsonl.gz' INPUT_FORMAT=jsonl WORK=gs://my-bucket/bert_base \
#   TRAIN_FLAGS='--tpu=my-tpu' bash configs/two_phase_recipe.sh
#
# RAW            input files or globs for prepare_corpus (comma-separated).
# WORK           where everything goes: text/, vocab.txt, seq128/, seq512/, phase1/, phase2/.
# INPUT_FORMAT   text (default) or jsonl;  PREPARE_FLAGS: more prepare_corpus flags
#                (e.g. --document_per=line --dedup).
# VOCAB_SIZE     30522 (must not exceed the bert_config's vocab_size).
# SEQ1/PRED1     128/20 and SEQ2/PRED2 512/80: lengths and predictions of the two phases.
# DUPE1/DUPE2    dupe_factor of each phase's data (10 and 5).
# FEATURE_SET    the records' --feature_set: bert (default) or packed_mlm (several documents
#                per row, MLM only: give TRAIN_FLAGS --no_nsp; docs/modern-encoder.md has the
#                recipe for rotary models at 1,024 tokens and beyond).
# DATA_SHARDS    TFRecord files per phase (64); TEXT_SHARDS text files (16).
# PHASE1_FLAGS / PHASE2_FLAGS   the flagfiles (configs/base.flags, configs/base_phase2.flags).
# TRAIN_FLAGS    flags for both training runs, after the flagfile (TPU name, steps, ...);
#                PHASE1_EXTRA / PHASE2_EXTRA for one phase only.
# PY             the Python to run (default: python).
#
# tests/test_two_phase_recipe.py runs this script on the bundled corpus with a tiny model and
# a few steps per phase.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PY:-python}"
: "${RAW:?set RAW to the raw input files (comma-separated globs)}"
: "${WORK:?set WORK to the output directory (local or gs://)}"
INPUT_FORMAT="${INPUT_FORMAT:-text}"
VOCAB_SIZE="${VOCAB_SIZE:-30522}"
SEQ1="${SEQ1:-128}" PRED1="${PRED1:-20}" DUPE1="${DUPE1:-10}"
SEQ2="${SEQ2:-512}" PRED2="${PRED2:-80}" DUPE2="${DUPE2:-5}"
FEATURE_SET="${FEATURE_SET:-bert}"
TEXT_SHARDS="${TEXT_SHARDS:-16}" DATA_SHARDS="${DATA_SHARDS:-64}"
PHASE1_FLAGS="${PHASE1_FLAGS:-configs/base.flags}"
PHASE2_FLAGS="${PHASE2_FLAGS:-configs/base_phase2.flags}"
read -r -a prepare_flags <<< "${PREPARE_FLAGS:-}"
read -r -a train_flags <<< "${TRAIN_FLAGS:-}"
read -r -a phase1_extra <<< "${PHASE1_EXTRA:-}"
read -r -a phase2_extra <<< "${PHASE2_EXTRA:-}"

echo "== 1/5 prepare_corpus: $RAW -> $WORK/text"
"$PY" -m data_tools.prepare_corpus --input_file="$RAW" --input_format="$INPUT_FORMAT" \
  --output_file="$WORK/text/corpus-{shard}-of-{num_shards}.txt" \
  --num_output_shards="$TEXT_SHARDS" "${prepare_flags[@]}"

echo "== 2/5 build_vocab: $VOCAB_SIZE pieces -> $WORK/vocab.txt"
"$PY" -m data_tools.build_vocab --input_file="$WORK/text/corpus-*.txt" \
  --vocab_file="$WORK/vocab.txt" --vocab_size="$VOCAB_SIZE" --do_lower_case=true

for phase in 1 2; do
  if [ "$phase" = 1 ]; then seq=$SEQ1 pred=$PRED1 dupe=$DUPE1; else seq=$SEQ2 pred=$PRED2 dupe=$DUPE2; fi
  echo "== 3/5 create_pretraining_data: phase $phase, $seq tokens, $pred predictions"
  "$PY" -m data_tools.create_pretraining_data --input_file="$WORK/text/corpus-*.txt" \
    --output_file="$WORK/seq$seq/train-{shard}-of-{num_shards}.tfrecord" \
    --num_output_shards="$DATA_SHARDS" --vocab_file="$WORK/vocab.txt" --do_lower_case=true \
    --max_seq_length="$seq" --max_predictions_per_seq="$pred" --dupe_factor="$dupe" \
    --feature_set="$FEATURE_SET" --random_seed="$((12345 + phase))"
done

echo "== 4/5 phase 1: $PHASE1_FLAGS at $SEQ1 tokens -> $WORK/phase1"
# No held-out records are made here: eval reads the training records, named explicitly (the
# run says so); give PHASE1_EXTRA=--eval_input_file=... to evaluate on held-out text.
"$PY" -m bert_tf.run_pretraining --flagfile="$PHASE1_FLAGS" \
  --input_file="$WORK/seq$SEQ1/train-*.tfrecord" --output_dir="$WORK/phase1" \
  --eval_input_file="$WORK/seq$SEQ1/train-*.tfrecord" \
  --max_seq_length="$SEQ1" --max_predictions_per_seq="$PRED1" \
  "${train_flags[@]}" "${phase1_extra[@]}"

echo "== 5/5 phase 2: $PHASE2_FLAGS at $SEQ2 tokens, from phase 1 -> $WORK/phase2"
"$PY" -m bert_tf.run_pretraining --flagfile="$PHASE2_FLAGS" \
  --input_file="$WORK/seq$SEQ2/train-*.tfrecord" --output_dir="$WORK/phase2" \
  --eval_input_file="$WORK/seq$SEQ2/train-*.tfrecord" \
  --init_checkpoint="$WORK/phase1" \
  --max_seq_length="$SEQ2" --max_predictions_per_seq="$PRED2" \
  "${train_flags[@]}" "${phase2_extra[@]}"
