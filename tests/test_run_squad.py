"""End-to-end tests of `python -m bert_tf.run_squad` on the bundled squad_tiny sets.

- SQuAD v1.1: a tiny model from random weights learns the 40 questions by heart (the training
  file is also the predict file), EM and F1 as the official script computes them; the long
  paragraph is cut into windows; predictions.json answers every question and each
  nbest_predictions.json list is a probability distribution;
- SQuAD v2.0 (--version_2_with_negative, --do_eval): null_odds.json and the HasAns/NoAns/best
  threshold figures;
- a training answer whose text is not at answer_start is skipped with a counted warning, and
  a context longer than --max_seq_length is windowed;
- --do_eval on a predict file without answers is one `error:` line, before any training.
"""

from __future__ import annotations

import json
import logging
import pathlib
import re

import numpy as np
import pytest
from _pretraining_helpers import TINY_FINETUNE_BERT, error_lines

from bert_tf.core.tokenization import FullTokenizer
from bert_tf.finetune.squad.squad_task import SquadSettings, SquadTask

MODULE = "bert_tf.run_squad"
SQUAD = pathlib.Path(__file__).resolve().parent.parent / "data" / "finetune" / "squad_tiny"
TINY = TINY_FINETUNE_BERT
# The training set: 3 of the 10 paragraphs (12 questions), among them Selwyn_River, whose
# ~500 WordPieces need several windows; a smaller set keeps the suite short.
PARAGRAPHS = slice(4, 7)
NUM_QUESTIONS = 12
EPOCHS = 100


def _args(tmp: pathlib.Path, google_vocab_path, **overrides):
    config = tmp / "bert_config.json"
    config.write_text(json.dumps(TINY))
    flags = {"bert_config_file": config, "vocab_file": google_vocab_path,
             "output_dir": tmp / "out", "max_seq_length": 128, "doc_stride": 64,
             "max_query_length": 32, "num_train_epochs": EPOCHS, "learning_rate": 2e-3,
             "train_batch_size": 16, "eval_batch_size": 32, "do_train": "true"}
    flags.update(overrides)
    return [f"--{k}={v}" for k, v in flags.items()]


def _question_ids(path: pathlib.Path):
    data = json.loads(path.read_text(encoding="utf-8"))["data"]
    return [qa["id"] for article in data for p in article["paragraphs"] for qa in p["qas"]]


def _results(out: pathlib.Path):
    lines = (out / "eval_results.txt").read_text().splitlines()
    return {k: float(v) for k, v in (line.split(" = ") for line in lines)}


def _windows(log: str, split: str):
    """(questions, windows) of the "N questions in M windows" log line of `split`."""
    found = re.findall(rf"{split}: (\d+) questions in (\d+) windows of", log)
    assert len(found) == 1, log[-3000:]
    return tuple(int(x) for x in found[0])


@pytest.fixture(scope="module")
def v1_run(tmp_path_factory, google_vocab_path, cli):
    tmp = tmp_path_factory.mktemp("squad1")
    data = _subset(tmp)
    proc = cli.run(MODULE, _args(tmp, google_vocab_path, train_file=data, predict_file=data,
                                    do_predict="true"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return tmp / "out", proc, data


def _subset(tmp: pathlib.Path) -> pathlib.Path:
    full = json.loads((SQUAD / "tiny-v1.1.json").read_text(encoding="utf-8"))
    paragraphs = [p for article in full["data"] for p in article["paragraphs"]][PARAGRAPHS]
    subset = dict(full, data=[{"title": "subset", "paragraphs": paragraphs}])
    path = tmp / "tiny-subset.json"
    path.write_text(json.dumps(subset), encoding="utf-8")
    return path


def test_v1_overfits_the_training_questions(v1_run):
    out, proc, _ = v1_run
    results = _results(out)
    assert sorted(results) == ["exact_match", "f1"]
    assert results["exact_match"] >= 95.0
    assert results["f1"] >= 95.0
    assert results["f1"] >= results["exact_match"]
    # Selwyn_River (~500 WordPieces) needs several 128-token windows.
    questions, windows = _windows(proc.stderr, "train")
    assert questions == NUM_QUESTIONS and windows > questions
    assert _windows(proc.stderr, "predict") == (NUM_QUESTIONS, windows)


def test_v1_prediction_files(v1_run):
    out, _, data = v1_run
    ids = _question_ids(data)
    predictions = json.loads((out / "predictions.json").read_text(encoding="utf-8"))
    assert sorted(predictions) == sorted(ids) and len(ids) == NUM_QUESTIONS
    assert all(isinstance(v, str) and v for v in predictions.values())
    nbest = json.loads((out / "nbest_predictions.json").read_text(encoding="utf-8"))
    assert sorted(nbest) == sorted(ids)
    for qid, entries in nbest.items():
        assert 1 <= len(entries) <= 20
        assert sum(e["probability"] for e in entries) == pytest.approx(1.0, abs=1e-6)
        probabilities = [e["probability"] for e in entries]
        assert probabilities == sorted(probabilities, reverse=True)
        assert entries[0]["text"] == predictions[qid]  # the best entry is the prediction
    assert not (out / "null_odds.json").exists()  # v1.1: no null answers


def test_v2_writes_null_odds_and_threshold_figures(tmp_path, google_vocab_path, cli):
    data = SQUAD / "tiny-v2.0.json"
    proc = cli.run(MODULE, _args(tmp_path, google_vocab_path, train_file=data,
                                    predict_file=data, do_eval="true", do_predict="true",
                                    version_2_with_negative="true", num_train_epochs=3))
    assert proc.returncode == 0, proc.stderr[-3000:]
    # --do_eval and --do_predict read the same file: the model runs over it once.
    assert len(re.findall(r"(eval|predict): running the model on", proc.stderr)) == 1
    out = tmp_path / "out"
    results = _results(out)
    for key in ("exact", "f1", "HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1",
                "best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh", "global_step"):
        assert key in results, sorted(results)
    assert (results["total"], results["HasAns_total"], results["NoAns_total"]) == (52, 40, 12)
    assert results["best_f1"] >= results["f1"] - 1e-4  # the best threshold is no worse
    for key in ("f1", "HasAns_f1", "NoAns_f1", "best_f1"):
        assert 0.0 <= results[key] <= 100.0
    ids = _question_ids(data)
    null_odds = json.loads((out / "null_odds.json").read_text())
    assert sorted(null_odds) == sorted(ids) and len(ids) == 52
    assert all(isinstance(v, float) for v in null_odds.values())
    assert sorted(json.loads((out / "predictions.json").read_text())) == sorted(ids)


LONG_CONTEXT = " ".join(
    f"In year {1900 + i} the village of Arden built a stone bridge number {i} over the river."
    for i in range(12))


def test_misplaced_answer_is_skipped_and_long_context_windowed(tmp_path, google_vocab_path,
                                                              caplog):
    # The task's own read and featurization, as runner.run calls them before training.
    start = LONG_CONTEXT.index("bridge number 11")
    bad = {"version": "1.1", "data": [{"title": "Arden", "paragraphs": [{
        "context": LONG_CONTEXT,
        "qas": [
            {"id": "good", "question": "Which bridge came last?",
             "answers": [{"text": "bridge number 11", "answer_start": start}]},
            {"id": "misplaced", "question": "Which village?",  # "Arden" is not at 3
             "answers": [{"text": "Arden", "answer_start": 3}]},
            {"id": "first", "question": "When was the first bridge built?",
             "answers": [{"text": "1900", "answer_start": LONG_CONTEXT.index("1900")}]},
        ]}]}]}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad), encoding="utf-8")
    task = SquadTask(SquadSettings(train_file=str(path), doc_stride=32, max_query_length=16))
    tokenizer = FullTokenizer(google_vocab_path, do_lower_case=True)
    with caplog.at_level(logging.INFO, logger="absl"):  # whatever verbosity others set
        task.read(True, False, False, str(tmp_path))
        arrays = task.arrays("train", tokenizer, 64)
    assert [e.qas_id for e in task.examples["train"]] == ["good", "first"]
    assert f"{path}: skipped 1 answers whose text is not at answer_start" in caplog.text
    # The ~200-piece context does not fit 64 tokens: each question gets several windows.
    questions, windows = _windows(caplog.text, "train")
    assert questions == 2 and windows == len(arrays["input_ids"]) > 2 * 3
    # Each answer is labelled in the windows that hold it whole, and only there.
    for row in np.flatnonzero(arrays["start_positions"]):
        first, last = arrays["start_positions"][row], arrays["end_positions"][row]
        span = tokenizer.convert_ids_to_tokens(arrays["input_ids"][row][first:last + 1])
        assert span in (["bridge", "number", "11"], ["1900"]), span
    assert len(np.flatnonzero(arrays["start_positions"])) >= 2


def test_eval_on_a_predict_file_without_answers(tmp_path, google_vocab_path, cli):
    data = json.loads((SQUAD / "tiny-v1.1.json").read_text(encoding="utf-8"))
    for article in data["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                del qa["answers"]
    predict = tmp_path / "questions.json"
    predict.write_text(json.dumps(data), encoding="utf-8")
    proc = cli.run(MODULE, _args(tmp_path, google_vocab_path,
                                    train_file=SQUAD / "tiny-v1.1.json", predict_file=predict,
                                    do_eval="true"))
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert error_lines(proc.stderr) == [
        f"error: --do_eval needs answers, but {predict} has none (use --do_predict to write "
        "predictions only)"]
    assert "Traceback" not in proc.stderr
    assert not list((tmp_path / "out").glob("ckpt-*"))
