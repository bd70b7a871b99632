"""configs/two_phase_recipe.sh end to end on the bundled corpus, at toy scale.

Raw JSON Lines (articles with paragraphs, gzip) -> prepare_corpus -> build_vocab -> TFRecords
at two lengths -> phase 1 from scratch -> phase 2 warm-started from phase 1's last
checkpoint. Checks each stage's output, not only the exit code: the text keeps every
article, the vocabulary has the asked size, each phase's records have its length, phase 2
restores every model variable of phase 1 (none missing) and evaluates at its own step.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys

import tensorflow as tf
from _pretraining_helpers import fresh_pythonpath, write_bert_config

from bert_tf.core import schema

ARTICLES = 30
TRAIN_FLAGS = " ".join([
    "--distribution_strategy=one_device",
    "--tpu=", "--dtype_policy=float32", "--train_batch_size=8", "--eval_batch_size=8",
    "--num_train_steps=3", "--num_warmup_steps=1", "--steps_per_loop=1",
    "--save_checkpoints_steps=3", "--log_every_n_steps=1", "--max_eval_steps=2"])


def raw_articles(corpus_lines, count):
    """The first `count` articles of the bundled corpus as raw documents: one paragraph of
    sentences per article joined by spaces, the way a crawler exports them."""
    articles, sentences = [], []
    for line in corpus_lines + [""]:
        if line.strip():
            sentences.append(line.strip())
        elif sentences:
            articles.append(" ".join(sentences))
            sentences = []
            if len(articles) == count:
                break
    return articles


def test_two_phase_recipe_from_raw_text(tmp_path, corpus_lines, repo_root):
    raw = tmp_path / "raw.jsonl.gz"
    articles = raw_articles(corpus_lines, ARTICLES)
    with gzip.open(raw, "wt", encoding="utf-8") as f:
        for n, text in enumerate(articles):
            f.write(json.dumps({"id": n, "text": text}) + "\n")
    work = tmp_path / "work"
    # The tests' tiny BERT with the vocabulary's 3,000 rows: the recipe's flow is the
    # subject, and each phase's trace and steps cost a quarter of BERT-Tiny's (L-2/H-128,
    # 30,522 rows).
    config = write_bert_config(tmp_path / "bert_config.json", vocab_size=3000,
                               max_position_embeddings=128, hidden_dropout_prob=0.1,
                               attention_probs_dropout_prob=0.1)
    env = dict(os.environ, PY=sys.executable, RAW=str(raw), WORK=str(work),
               INPUT_FORMAT="jsonl", VOCAB_SIZE="3000", SEQ1="64", PRED1="10", SEQ2="128",
               PRED2="20", DUPE1="2", DUPE2="1", TEXT_SHARDS="2", DATA_SHARDS="2",
               PREPARE_FLAGS="--num_workers=2 --progress_seconds=0",
               TRAIN_FLAGS=f"--bert_config_file={config} {TRAIN_FLAGS}",
               PYTHONPATH=fresh_pythonpath(repo_root), TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(["bash", "configs/two_phase_recipe.sh"], cwd=repo_root, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]

    # 1. Text: every article, one sentence per line, a blank line between documents.
    documents = [d for name in sorted(os.listdir(work / "text"))
                 for d in (work / "text" / name).read_text().split("\n\n") if d.strip()]
    assert len(documents) == ARTICLES
    assert sum(len(d.strip().splitlines()) for d in documents) > 5 * ARTICLES  # split
    # 2. Vocabulary of the asked size.
    assert len((work / "vocab.txt").read_text().splitlines()) == 3000
    # 3. Records of each phase's length.
    for seq, preds in ((64, 10), (128, 20)):
        files = sorted(tf.io.gfile.glob(str(work / f"seq{seq}" / "train-*.tfrecord")))
        assert len(files) == 2
        record = next(iter(tf.data.TFRecordDataset(files[0]).take(1))).numpy()
        example = tf.train.Example.FromString(record).features.feature
        assert len(example[schema.INPUT_IDS].int64_list.value) == seq
        assert len(example[schema.MASKED_LM_POSITIONS].int64_list.value) == preds
    # 4./5. Both phases trained to step 3; phase 2 warm-started from phase 1's checkpoint with
    # no model variable missing, and evaluated at its own step.
    for phase in ("phase1", "phase2"):
        assert tf.train.latest_checkpoint(str(work / phase)).endswith("ckpt-3")
        assert "global_step = 3\n" in (work / phase / "eval_results.txt").read_text()
    phase1 = re.escape(str(work / "phase1"))
    assert re.search(rf"init_checkpoint {phase1}/ckpt-3: restored \d+ variables", proc.stderr)
    assert "NOT in the checkpoint" not in proc.stderr
    for stage in ("1/5", "2/5", "3/5", "4/5", "5/5"):
        assert f"== {stage}" in proc.stdout
