"""End-to-end tests of `python -m bert_tf.run_tagging` on the bundled conll_tiny NER set.

- a tiny model from random weights learns the training file by heart (entity F1 scored on
  the training file itself), sentences longer than --max_seq_length included (windowed);
- eval_predictions.conll holds token, gold and predicted tag, consistent with eval_accuracy;
  test_predictions.conll tags every token of the predict file, in order, with known tags;
- bad input (a one-column line in the training file, an eval tag unknown to training) is one
  `error:` line naming the file (and line), exit 2, no traceback, before any training.
"""

from __future__ import annotations

import json
import os
import pathlib

import pytest
from _pretraining_helpers import AUTOGRAPH_LOG, TINY_FINETUNE_BERT, error_lines

MODULE = "bert_tf.run_tagging"
CONLL = pathlib.Path(__file__).resolve().parent.parent / "data" / "finetune" / "conll_tiny"
TINY = TINY_FINETUNE_BERT
EPOCHS = 30  # calibrated: entity F1 0.96 at 15 epochs, 1.0 at 25


def _sentences(path: pathlib.Path):
    """[[columns of each token line]] per sentence; -DOCSTART- lines skipped."""
    sentences, current = [], []
    for line in path.read_text(encoding="utf-8").split("\n"):
        fields = line.split()
        if not fields or fields[0] == "-DOCSTART-":
            if current:
                sentences.append(current)
            current = []
        else:
            current.append(fields)
    if current:
        sentences.append(current)
    return sentences


def _args(tmp, google_vocab_path, **overrides):
    config = tmp / "bert_config.json"
    config.write_text(json.dumps(TINY))
    flags = {"bert_config_file": config, "vocab_file": google_vocab_path,
             "output_dir": tmp / "out", "max_seq_length": 64, "num_train_epochs": EPOCHS,
             "learning_rate": 2e-3, "train_batch_size": 8, "eval_batch_size": 32,
             "do_train": "true", "do_eval": "true"}
    flags.update(overrides)
    return [f"--{k}={v}" for k, v in flags.items()]


@pytest.fixture(scope="module")
def overfit(tmp_path_factory, google_vocab_path, cli):
    tmp = tmp_path_factory.mktemp("ner")
    train = CONLL / "train.txt"
    proc = cli.run(MODULE, _args(tmp, google_vocab_path, train_file=train, eval_file=train,
                                    predict_file=CONLL / "test.txt", do_predict="true"),
                   env={AUTOGRAPH_LOG: os.fspath(tmp / "autograph.log")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return tmp / "out", proc


def test_fine_tuning_converts_none_of_the_library_s_functions_with_autograph(overfit):
    # Training, eval and predict inputs and loops are plain graph code (the logging itself
    # is shown to work by test_run_pretraining's autograph test; no file: nothing converted).
    log = overfit[0].parent / "autograph.log"
    converted = log.read_text().split() if log.exists() else []
    assert [name for name in converted if name.startswith("bert_tf.")] == []


def test_overfits_the_training_set(overfit):
    out, proc = overfit
    lines = (out / "eval_results.txt").read_text().splitlines()
    results = {k: float(v) for k, v in (line.split(" = ") for line in lines)}
    assert sorted(results) == ["eval_accuracy", "eval_f1", "eval_loss", "eval_precision",
                               "eval_recall", "global_step"]
    assert results["eval_f1"] >= 0.95
    assert results["eval_precision"] >= 0.9 and results["eval_recall"] >= 0.9
    assert results["eval_accuracy"] >= 0.98
    assert 0.0 <= results["eval_loss"] < 0.2
    # 3 training sentences need two or more windows of 64: more rows than sentences.
    assert "train.txt: 3 sentence(s) longer than --max_seq_length=64 split into" in proc.stderr
    assert results["global_step"] > int(61 / 8 * EPOCHS)


def test_eval_predictions_hold_gold_and_predicted_tags(overfit):
    out, _ = overfit
    gold = _sentences(CONLL / "train.txt")
    written = _sentences(out / "eval_predictions.conll")
    assert [[row[:2] for row in s] for s in written] == gold  # token and gold tag
    assert all(len(row) == 3 for s in written for row in s)
    right = sum(row[1] == row[2] for s in written for row in s)
    total = sum(len(s) for s in written)
    assert total == 791
    results = dict(line.split(" = ") for line in
                   (out / "eval_results.txt").read_text().splitlines())
    assert float(results["eval_accuracy"]) == pytest.approx(right / total, abs=1e-6)


def test_test_predictions_tag_every_token_in_order(overfit):
    out, _ = overfit
    labels = json.loads((out / "label_list.json").read_text())
    train_tags = {row[-1] for s in _sentences(CONLL / "train.txt") for row in s}
    assert labels == ["O"] + sorted(train_tags - {"O"})  # "O" first, then sorted
    source = _sentences(CONLL / "test.txt")
    written = _sentences(out / "test_predictions.conll")
    assert [[row[0] for row in s] for s in written] == [[row[0] for row in s] for s in source]
    assert sum(len(s) for s in written) == 140
    assert all(len(row) == 2 and row[1] in labels for s in written for row in s)
    # One line per token and one blank line after each sentence, nothing else.
    text = (out / "test_predictions.conll").read_text(encoding="utf-8")
    assert text.count("\n") == 140 + 10
    task = json.loads((out / "finetune_task.json").read_text())
    assert task["kind"] == "tagger" and task["num_labels"] == len(labels)


def _assert_one_error(proc, expected: str, out: pathlib.Path) -> None:
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert error_lines(proc.stderr) == [expected]
    assert "Traceback" not in proc.stderr
    assert not list(out.glob("ckpt-*"))  # refused before training


def test_one_column_line_in_the_training_file(tmp_path, google_vocab_path, cli):
    train = tmp_path / "train.txt"
    train.write_text("Anna B-PER\nBerg I-PER\nsleeps\n. O\n", encoding="utf-8")
    proc = cli.run(MODULE, _args(tmp_path, google_vocab_path, train_file=train,
                                    eval_file=train))
    _assert_one_error(proc, f"error: {train}:3: expected a token and a tag, found one column "
                      "'sleeps'", tmp_path / "out")


def test_eval_tag_unknown_to_training(tmp_path, google_vocab_path, cli):
    train = tmp_path / "train.txt"
    train.write_text("Anna B-PER\nsleeps O\n\nBerg B-PER\nwakes O\n", encoding="utf-8")
    dev = tmp_path / "dev.txt"
    dev.write_text("Anna B-PER\nsleeps O\nin O\nMay B-DATE\n", encoding="utf-8")
    proc = cli.run(MODULE, _args(tmp_path, google_vocab_path, train_file=train,
                                    eval_file=dev))
    _assert_one_error(proc, f"error: {dev}: tag 'B-DATE' is not among the training tags "
                      "(1 unknown tag(s))", tmp_path / "out")
