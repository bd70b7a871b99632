"""Tagging, extractive QA and the scorecard on a modern encoder, end to end: transformers'
ModernBERT folder (tests/data/modernbert_tiny, rotary positions, GeGLU, a sliding window
narrower than the rows, with a WordPiece vocabulary of the bundled data's words) is the
--init_checkpoint of `run_tagging`, `run_squad` and `run_glue`.

- each run starts its encoder from every weight of the folder, trains and evaluates;
- the tagger's serving SavedModel tags raw text as the restored model and the host
  featurizer do;
- the span extractor's SavedModel answers the predict file's questions with the answers
  run_squad wrote to predictions.json;
- the scorecard fine-tunes the folder with ModernBERT's classifier head and scores it.
(Classification itself: tests/test_modern_classifier.py.)
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil

import numpy as np
import pytest
import tensorflow as tf
from _glue_data import write_sst2
from _pretraining_helpers import REPO_ROOT, short_tagging_flags

from bert_tf.core.tokenization import BasicTokenizer, FullTokenizer
from bert_tf.finetune import heads
from bert_tf.finetune.label_list import load_label_list
from bert_tf.finetune.tagging import tagging_data
from bert_tf.interop import hf_checkpoint
from bert_tf.training.checkpoint_paths import read_strictly

DATA = REPO_ROOT / "data" / "finetune"
FOLDER = REPO_ROOT / "tests" / "data" / "modernbert_tiny"
SPECIAL = ["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"]
SEQ = 64  # the folder's max_position_embeddings


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> pathlib.Path:
    """The ModernBERT folder with a vocab.txt of the most frequent words of the data read
    here (its vocab_size is 256)."""
    counts = {}
    texts = [(DATA / "conll_tiny" / "train.txt").read_text(encoding="utf-8"),
             (DATA / "squad_tiny" / "tiny-v1.1.json").read_text(encoding="utf-8"),
             (DATA / "vader_tiny" / "binary" / "train.tsv").read_text(encoding="utf-8")]
    for word in BasicTokenizer(do_lower_case=True).tokenize(" ".join(texts)):
        counts[word] = counts.get(word, 0) + 1
    words = sorted(counts, key=lambda w: (-counts[w], w))[:256 - len(SPECIAL)]
    path = tmp_path_factory.mktemp("modern_ft") / "hf"
    shutil.copytree(FOLDER, path)
    (path / "vocab.txt").write_text("\n".join(SPECIAL + words) + "\n", encoding="utf-8")
    return path


def _initialised_every_weight(stderr: str, folder: pathlib.Path) -> None:
    files = hf_checkpoint.read(os.fspath(folder))
    encoder = [n for n in files.weights if not n.startswith("mlm/")]
    assert re.search(rf"initialised {len(encoder)} encoder weights from", stderr), stderr[-3000:]


def test_run_tagging_trains_and_serves_a_modern_tagger(cli, folder, tmp_path):
    out = tmp_path / "out"
    proc = cli.run("bert_tf.run_tagging", short_tagging_flags(folder, out, SEQ, 16, 4, 2e-3))
    assert proc.returncode == 0, proc.stderr[-3000:]
    _initialised_every_weight(proc.stderr, folder)
    results = dict(line.split(" = ") for line in
                   (out / "eval_results.txt").read_text().splitlines())
    assert results["global_step"] == "4" and 0 <= float(results["eval_accuracy"]) <= 1
    export_dir = tmp_path / "sm" / "1"
    proc = cli.run("bert_tf.export", [f"--output_dir={out}", f"--export_dir={export_dir}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops)

    tags = load_label_list(os.fspath(out / "label_list.json"))
    model = heads.model_of_kind("tagger", hf_checkpoint.read(os.fspath(folder)).config,
                                len(tags))
    read_strictly(tf.train.latest_checkpoint(os.fspath(out)), {"model": model}, what="test")
    texts = ["the man went to paris with john smith .", "germany beat england in london",
             " ".join(["the cup of the world"] * 20)]  # longer than a row: windows
    features = tagging_data.featurize([tagging_data.Sentence(t.split(), None) for t in texts],
                                      None, FullTokenizer(os.fspath(folder / "vocab.txt"), True),
                                      SEQ)
    inputs = {k: features.arrays[k] for k in heads.INPUT_NAMES}
    want = tagging_data.predictions_to_tags(features, model(inputs)["logits"].numpy(), tags)
    served = tf.saved_model.load(os.fspath(export_dir)).signatures["tag"](
        text=tf.constant(texts))
    for i, text in enumerate(texts):
        n = len(text.split())
        assert [t.decode() for t in served["tags"].numpy()[i, :n]] == want[i]


def test_run_squad_trains_and_serves_a_modern_span_extractor(cli, folder, tmp_path):
    full = json.loads((DATA / "squad_tiny" / "tiny-v1.1.json").read_text(encoding="utf-8"))
    paragraphs = [p for a in full["data"] for p in a["paragraphs"]][:3]
    squad = tmp_path / "squad.json"
    squad.write_text(json.dumps(dict(full, data=[{"title": "t", "paragraphs": paragraphs}])))
    out = tmp_path / "out"
    proc = cli.run("bert_tf.run_squad", [
        f"--init_checkpoint={folder}", f"--output_dir={out}", f"--train_file={squad}",
        f"--predict_file={squad}", "--do_train", "--do_predict", f"--max_seq_length={SEQ}",
        "--doc_stride=24", "--max_query_length=16", "--train_batch_size=16",
        "--max_steps_per_run=4", "--learning_rate=2e-3"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    _initialised_every_weight(proc.stderr, folder)
    predictions = json.loads((out / "predictions.json").read_text())
    questions = [(qa["id"], qa["question"], p["context"]) for p in paragraphs
                 for qa in p["qas"]]
    assert sorted(predictions) == sorted(q for q, _, _ in questions)
    export_dir = tmp_path / "sm" / "1"
    proc = cli.run("bert_tf.export", [f"--output_dir={out}", f"--export_dir={export_dir}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    import tensorflow_text  # noqa: F401

    served = tf.saved_model.load(os.fspath(export_dir)).signatures["answer"](
        question=tf.constant([q for _, q, _ in questions]),
        context=tf.constant([c for _, _, c in questions]))
    answers = [a.decode() for a in served["answer"].numpy()]
    assert answers == [predictions[q] for q, _, _ in questions]
    assert len(set(answers)) > 1


def test_run_glue_scores_a_modern_encoder_with_its_head(cli, folder, tmp_path):
    glue = tmp_path / "glue"
    write_sst2(glue, dev_is_train=True)
    out = tmp_path / "out"
    proc = cli.run("bert_tf.run_glue", [
        f"--glue_dir={glue}", "--tasks=sst2", f"--init_checkpoint={folder}",
        f"--output_dir={out}", "--protocol=fixed", "--learning_rate=1e-3", "--seeds=1",
        "--max_train_examples=96", "--num_train_epochs=1", "--train_batch_size=32",
        f"--max_seq_length={SEQ}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = json.loads((out / "scorecard.json").read_text())["rows"][0]
    score = row["tasks"]["sst2"]["score"]["mean"]
    assert np.isfinite(score) and 0 <= score <= 100
    [task_file] = out.glob("**/finetune_task.json")
    assert json.loads(task_file.read_text())["classifier_head"] == "modernbert"
