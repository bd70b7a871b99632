"""End-to-end tests of the GLUE scorecard (`python -m bert_tf.run_glue`, `finetune.scorecard`).

A tiny model from random weights (1 layer, hidden 64, dropout on so seeds differ, a
vocabulary of the bundled data's own words) on tiny GLUE-layout folders built from that data
(tests/_glue_data.py):

- the CLI, 2 tasks x 2 learning rates x 2 seeds, killed after its first finished runs and
  run again with one finished run damaged: the rerun skips exactly the intact runs, reruns
  the damaged one, and its table equals statistics computed here from every run's own
  eval_results.txt (grid selection, mean, std, median, the GLUE score per seed);
- the GLUE server's files and submission.zip in GLUE's format, WNLI by majority class;
- MNLI's two dev sets and the diagnostic set (AX), a second model row, a suite of a tagging
  and a classification task, in process;
- a real Hugging Face checkpoint (MiniLM-L6) as --init_checkpoint: the run starts from its
  weights;
- bad input: one line naming the problem.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import signal
import statistics
import time
import zipfile

import numpy as np
import pytest
from _glue_data import write_mnli, write_rte, write_sst2, write_wnli
from _pretraining_helpers import TINY_FINETUNE_BERT, error_lines, minilm_dir

from bert_tf.core.errors import UserError
from bert_tf.core.tokenization import BasicTokenizer
from bert_tf.finetune import warm_start
from bert_tf.finetune.scorecard import scorecard, scorecard_runs, suite
from bert_tf.finetune.scorecard.scorecard_runs import Model, Protocol

MODULE = "bert_tf.run_glue"
DATA = pathlib.Path(__file__).resolve().parent.parent / "data" / "finetune"
TINY = {**TINY_FINETUNE_BERT, "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
        "max_position_embeddings": 64}  # dropout on, so that seeds differ
LRS, SEEDS, TASKS = ("2e-3", "1e-3"), (1, 2), ("sst2", "rte")


def _records(out: pathlib.Path):
    return sorted((out / "runs").glob("*/*/*/" + scorecard_runs.RUN_RECORD_FILE))


def _eval_results(path: pathlib.Path) -> dict:
    return {k: float(v) for k, v in
            (line.split(" = ") for line in path.read_text().splitlines())}


def _data_words(path: pathlib.Path) -> list:
    """The uncased words of one bundled data file (of a .jsonl file, its values)."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        text = " ".join(str(v) for line in text.splitlines() for v in json.loads(line).values())
    return BasicTokenizer(do_lower_case=True).tokenize(text)


@pytest.fixture(scope="module")
def data_vocab(tmp_path_factory) -> str:
    """A vocabulary of the words of the bundled data these tests read (about 3,000): every
    word is one id, as with Google's 30,522, but the embedding table, its AdamW update and
    the checkpoints are a tenth the size (killed_and_resumed's grid took 31 CPU s with
    Google's, 24 with this, and learnt as well: 84-93 % dev accuracy, 88-94 with Google's)."""
    words = set()
    for pattern in ("vader_tiny/binary/*.tsv", "snli_tiny/*.jsonl", "conll_tiny/*.txt"):
        for path in sorted(DATA.glob(pattern)):
            words.update(_data_words(path))
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(words))
                    + "\n", encoding="utf-8")
    return os.fspath(path)


@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory, data_vocab) -> str:
    """TINY with data_vocab's size."""
    size = len(pathlib.Path(data_vocab).read_text(encoding="utf-8").splitlines())
    path = tmp_path_factory.mktemp("cfg") / "bert_config.json"
    path.write_text(json.dumps({**TINY, "vocab_size": size}))
    return os.fspath(path)


@pytest.fixture(scope="module")
def killed_and_resumed(tmp_path_factory, tiny_config, data_vocab, cli):
    root = tmp_path_factory.mktemp("glue_cli")
    glue = root / "glue"
    write_sst2(glue, dev_is_train=True)
    write_rte(glue, dev_is_train=True)
    write_wnli(glue)
    out = root / "out"
    args = [f"--glue_dir={glue}", f"--tasks={','.join(TASKS)}",
            f"--bert_config_file={tiny_config}", f"--vocab_file={data_vocab}",
            f"--output_dir={out}", "--protocol=grid", f"--learning_rates={','.join(LRS)}",
            f"--seeds={','.join(map(str, SEEDS))}", "--max_train_examples=160",
            "--num_train_epochs=8", "--train_batch_size=16", "--max_seq_length=32",
            "--do_predict"]
    first = cli.start(MODULE, args)
    deadline = time.monotonic() + 300
    while len(_records(out)) < 3 and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    first.send_signal(signal.SIGKILL)
    assert first.wait().returncode == -signal.SIGKILL, "the first run must be killed"
    finished = {p: p.stat().st_mtime_ns for p in _records(out)}
    assert 3 <= len(finished) < 8, "the kill must land between runs 3 and 8"
    damaged = sorted(finished)[0]
    (damaged.parent / "eval_results.txt").write_text("eval_accuracy = 0.5\ngarbage\n")
    rerun = cli.run(MODULE, args, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    return out, glue, finished, damaged, rerun


def test_rerun_skips_the_finished_runs_and_reruns_a_damaged_one(killed_and_resumed):
    out, _, finished, damaged, rerun = killed_and_resumed
    intact = [p for p in finished if p != damaged]
    assert f"scorecard: {len(intact)} of 8 runs already finished" in rerun.stdout
    for path in intact:
        assert path.stat().st_mtime_ns == finished[path]
    assert damaged.stat().st_mtime_ns != finished[damaged]
    assert "eval_accuracy" in _eval_results(damaged.parent / "eval_results.txt")
    assert len(_records(out)) == 8
    progress = [line for line in rerun.stdout.splitlines() if line.startswith("[")]
    assert len(progress) == 8 - len(intact)
    assert all("ETA" in line and "seed=" in line for line in progress)


def test_table_equals_the_runs_own_eval_results(killed_and_resumed):
    out = killed_and_resumed[0]
    doc = json.loads((out / "scorecard.json").read_text())
    (row,) = doc["rows"]
    metric_keys = {"sst2": ["eval_accuracy"], "rte": ["eval_accuracy"]}
    per_seed_glue = {s: [] for s in SEEDS}
    stds = []
    for task in TASKS:
        def score(lr, seed, task=task):
            found = _eval_results(out / "runs" / "random" / task / f"lr{float(lr):g}-seed{seed}"
                                  / "eval_results.txt")
            return 100 * statistics.fmean(found[k] for k in metric_keys[task])

        means = {lr: statistics.fmean(score(lr, s) for s in SEEDS) for lr in LRS}
        best = max(LRS, key=lambda lr: (means[lr], -float(lr)))
        got = row["tasks"][task]
        assert got["learning_rate"] == pytest.approx(float(best))
        assert got["grid"] == {f"{float(lr):g}": pytest.approx(m) for lr, m in means.items()}
        values = [score(best, s) for s in SEEDS]
        assert got["score"]["mean"] == pytest.approx(statistics.fmean(values))
        assert got["score"]["std"] == pytest.approx(statistics.stdev(values))
        assert got["score"]["median"] == pytest.approx(statistics.median(values))
        assert got["train_examples"] == [160, 300 if task == "sst2" else 200]
        stds.append(got["score"]["std"])
        for s, v in zip(SEEDS, values):
            per_seed_glue[s].append(v)
    glue_values = [statistics.fmean(v) for v in per_seed_glue.values()]
    assert row["glue_score"]["mean"] == pytest.approx(statistics.fmean(glue_values))
    assert row["glue_score"]["per_seed"] == {str(s): pytest.approx(v)
                                             for s, v in zip(SEEDS, glue_values)}
    assert max(stds) > 0, "seeds gave identical scores: the statistics would test nothing"
    md = (out / "scorecard.md").read_text()
    assert "protocol: grid" in md and "sst2 160 of 300" in md and "machine:" in md
    assert f"{row['glue_score']['mean']:.2f} ± {row['glue_score']['std']:.2f}" in md


def test_submission_files_are_in_glue_format(killed_and_resumed):
    out, glue, *_ = killed_and_resumed
    doc = json.loads((out / "scorecard.json").read_text())
    with zipfile.ZipFile(out / "submission.zip") as z:
        assert sorted(z.namelist()) == ["RTE.tsv", "SST-2.tsv", "WNLI.tsv"]
        files = {name: z.read(name).decode().splitlines() for name in z.namelist()}
    labels = {"SST-2.tsv": {"0", "1"}, "RTE.tsv": {"entailment", "not_entailment"},
              "WNLI.tsv": {"1"}}  # WNLI: the training majority (2 of 3 rows are 1)
    for name, lines in files.items():
        assert lines[0] == "index\tprediction"
        folder = name[:-4]
        test_rows = (glue / folder / "test.tsv").read_text().splitlines()[1:]
        assert [line.split("\t")[0] for line in lines[1:]] == [
            row.split("\t")[0] for row in test_rows]
        assert {line.split("\t")[1] for line in lines[1:]} <= labels[name]
    task = doc["rows"][0]["tasks"]["sst2"]
    run = out / task["predictions"]["SST-2.tsv"]
    predicted = [line.split("\t")[-1] for line in run.read_text().splitlines()[1:]]
    assert [line.split("\t")[1] for line in files["SST-2.tsv"][1:]] == predicted


def test_missing_task_folder_is_one_line(tmp_path, tiny_config, data_vocab, cli):
    write_sst2(tmp_path / "glue")
    proc = cli.run(MODULE, [f"--glue_dir={tmp_path / 'glue'}", "--tasks=sst2,cola",
                               f"--bert_config_file={tiny_config}",
                               f"--vocab_file={data_vocab}",
                               f"--output_dir={tmp_path / 'out'}"])
    assert proc.returncode != 0
    assert error_lines(proc.stderr) == [
        f"error: task cola: no folder {tmp_path / 'glue' / 'CoLA'} in --glue_dir"]
    assert "Traceback" not in proc.stderr


def _config(out, glue_dir="", suite_file="", tasks=(), models=None, **protocol):
    settings = dict(name="fixed", learning_rates=(2e-3,), seeds=(1,), train_batch_size=16,
                    num_train_epochs=1, max_seq_length=32, max_train_examples=64)
    settings.update(protocol)
    return scorecard.ScorecardConfig(
        output_dir=os.fspath(out), models=models, protocol=Protocol(**settings),
        glue_dir=os.fspath(glue_dir) if glue_dir else "", tasks=tuple(tasks),
        suite_file=os.fspath(suite_file) if suite_file else "", do_predict=True)


def test_mnli_two_dev_sets_diagnostic_and_two_rows(tmp_path, tiny_config, data_vocab):
    write_mnli(tmp_path / "glue")
    models = (Model("a", "", tiny_config, data_vocab),
              Model("b", "", tiny_config, data_vocab))
    lines = []
    doc = scorecard.run(_config(tmp_path / "out", tmp_path / "glue", tasks=["mnli"],
                                models=models), say=lines.append)
    assert [r["name"] for r in doc["rows"]] == ["a", "b"]
    run = tmp_path / "out" / "runs" / "a" / "mnli" / "lr0.002-seed1"
    matched = _eval_results(run / "eval_results.txt")["eval_accuracy"]
    mismatched = _eval_results(run / "eval_results_mismatched.txt")["eval_accuracy"]
    task = doc["rows"][0]["tasks"]["mnli"]
    assert task["score"]["mean"] == pytest.approx(50 * (matched + mismatched))
    assert doc["rows"][0]["glue_score"]["mean"] == pytest.approx(task["score"]["mean"])
    with zipfile.ZipFile(tmp_path / "out" / "submission.zip") as z:
        names = sorted(z.namelist())
        ax = z.read("AX.tsv").decode().splitlines()
    assert names == ["AX.tsv", "MNLI-m.tsv", "MNLI-mm.tsv"]
    assert len(ax) == 21 and {x.split("\t")[1] for x in ax[1:]} <= {
        "contradiction", "entailment", "neutral"}
    assert any("GLUE's server also needs CoLA.tsv" in line for line in lines)


def test_scores_a_hugging_face_checkpoint_from_its_weights(tmp_path):
    """--init_checkpoint in Hugging Face format, the real MiniLM-L6: the run takes the config
    and vocabulary beside it and starts from its weights. A learning rate of 1e-20 leaves the
    weights where they start, so the run's kept checkpoint holds MiniLM's encoder."""
    directory = minilm_dir()
    write_sst2(tmp_path / "glue")
    config = dataclasses.replace(
        _config(tmp_path / "out", tmp_path / "glue", tasks=["sst2"],
                models=(Model("minilm", directory),), learning_rates=(1e-20,),
                train_batch_size=8, max_seq_length=16, max_train_examples=16),
        keep_checkpoints=True, do_predict=False)
    doc = scorecard.run(config, say=lambda _: None)
    run = tmp_path / "out" / "runs" / "minilm" / "sst2" / "lr1e-20-seed1"
    accuracy = _eval_results(run / "eval_results.txt")["eval_accuracy"]
    assert doc["rows"][0]["tasks"]["sst2"]["score"]["mean"] == pytest.approx(100 * accuracy)
    base = warm_start.resolve(directory, "", "").files
    tuned = warm_start.resolve(os.fspath(run), "", "").files
    assert (tuned.config.hidden_size, tuned.config.num_hidden_layers,
            tuned.config.vocab_size) == (384, 6, 30522)
    assert (run / "vocab.txt").read_bytes() == pathlib.Path(directory, "vocab.txt").read_bytes()
    assert len(base.weights) > 100 and set(base.weights) <= set(tuned.weights)
    for name, value in base.weights.items():
        np.testing.assert_allclose(tuned.weights[name], value, atol=1e-6, err_msg=name)


def test_suite_scores_tagging_and_classification(tmp_path, tiny_config, data_vocab):
    (tmp_path / "suite.json").write_text(json.dumps({"tasks": [
        {"name": "ner", "kind": "tagging", "train_file": os.fspath(DATA / "conll_tiny" /
                                                                    "train.txt"),
         "eval_file": os.fspath(DATA / "conll_tiny" / "dev.txt")},
        {"name": "nli", "kind": "classification", "data_dir": os.fspath(DATA / "snli_tiny"),
         "task_name": "jsonl", "text_column": "sentence1", "text_pair_column": "sentence2",
         "label_column": "gold_label", "classifier_readout": "mean"}]}))
    model = Model("m", "", tiny_config, data_vocab)
    doc = scorecard.run(_config(tmp_path / "out", suite_file=tmp_path / "suite.json",
                                models=(model,), classifier_readout="cls"),
                        say=lambda _: None)
    # The task's own readout wins over the protocol's.
    task_file = tmp_path / "out" / "runs" / "m" / "nli" / "lr0.002-seed1" / "finetune_task.json"
    assert json.loads(task_file.read_text())["classifier_readout"] == "mean"
    assert doc["score_name"] == "average score"
    tasks = doc["rows"][0]["tasks"]
    for name, key in (("ner", "eval_f1"), ("nli", "eval_accuracy")):
        found = _eval_results(tmp_path / "out" / "runs" / "m" / name / "lr0.002-seed1" /
                              "eval_results.txt")
        assert tasks[name]["score"]["mean"] == pytest.approx(100 * found[key])
    assert tasks["ner"]["metric"] == "entity F1"


@pytest.mark.parametrize("entry, message", [
    ({"name": "x", "kind": "regression_tree"}, "unknown kind 'regression_tree'"),
    ({"kind": "tagging"}, "no \"name\""),
    ({"name": "x", "kind": "tagging", "train_fil": "a"}, "unexpected keyword"),
])
def test_bad_suite_entries_are_one_line(tmp_path, entry, message):
    path = tmp_path / "suite.json"
    path.write_text(json.dumps({"tasks": [entry]}))
    with pytest.raises(UserError, match=message) as info:
        suite.read_suite(os.fspath(path))
    assert str(info.value).startswith(f"{path}: task 1")


def test_classifier_readout_reaches_classification_tasks_and_their_fingerprints(tmp_path):
    write_sst2(tmp_path / "glue")
    (tmp_path / "suite.json").write_text(json.dumps({"tasks": [
        {"name": "own", "kind": "glue", "task": "sst2", "glue_dir": "glue",
         "classifier_readout": "cls"},
        {"name": "ner", "kind": "tagging", "train_file": "t.txt", "eval_file": "d.txt"}]}))
    own, ner = suite.read_suite(os.fspath(tmp_path / "suite.json"))
    (plain,) = suite.glue_tasks(os.fspath(tmp_path / "glue"), ["sst2"])
    evaluation = plain.evaluations[0]
    assert plain.build(evaluation, 0, 0, True, "mean").settings.classifier_readout == "mean"
    assert own.build(evaluation, 0, 0, True, "mean").settings.classifier_readout == "cls"
    model = Model("m", "", "c.json", "v.txt")

    def print_of(task, readout):
        protocol = Protocol("fixed", (1e-4,), (1,), classifier_readout=readout)
        return scorecard_runs.fingerprint(scorecard_runs.Run(model, task, 1e-4, 1), protocol)

    # At its default the readout is left out, so that records written before it resume.
    assert "classifier_readout" not in print_of(plain, "pooler")["protocol"]
    assert print_of(plain, "mean")["protocol"]["classifier_readout"] == "mean"
    assert print_of(plain, "mean") != print_of(plain, "cls")
    # Where it does not apply (tagging) or the task names its own, the protocol's is left out.
    assert print_of(ner, "mean") == print_of(ner, "pooler")
    assert print_of(own, "mean") == print_of(own, "pooler")
    with pytest.raises(UserError, match="^--classifier_readout must be one of pooler, cls, "
                       "mean, got 'max'$"):
        Protocol("fixed", (1e-4,), (1,), classifier_readout="max")
    (tmp_path / "bad.json").write_text(json.dumps({"tasks": [
        {"name": "own", "kind": "glue", "task": "sst2", "glue_dir": "glue",
         "classifier_readout": "max"}]}))
    with pytest.raises(UserError, match=r"^.*bad.json: task 1 \('own'\): "
                       "--classifier_readout must be one of pooler, cls, mean, got 'max'$"):
        suite.read_suite(os.fspath(tmp_path / "bad.json"))


def test_dev_file_without_labels_stops_before_training(tmp_path, tiny_config,
                                                       data_vocab):
    glue = tmp_path / "glue"
    write_sst2(glue)
    dev = glue / "SST-2" / "dev.tsv"
    dev.write_text("\n".join(line.split("\t")[0] for line in dev.read_text().splitlines())
                   + "\n")
    model = Model("m", "", tiny_config, data_vocab)
    with pytest.raises(UserError, match=r"--do_eval needs labels, but .*dev.tsv has none"):
        scorecard.run(_config(tmp_path / "out", glue, tasks=["sst2"], models=(model,)),
                      say=lambda _: None)
    assert not (tmp_path / "out" / "runs").exists()


def test_a_diverged_run_is_reported_as_diverged_and_counts_as_finished(
        tmp_path, tiny_config, data_vocab):
    """At lr 50 the run stops on its loss (bert_tf.training.health): the scorecard records it
    as diverged, goes on, and the grid keeps the rate that did not diverge."""
    write_sst2(tmp_path / "glue")
    model = Model("m", "", tiny_config, data_vocab)
    config = dataclasses.replace(
        _config(tmp_path / "out", tmp_path / "glue", tasks=["sst2"], models=(model,),
                name="grid", learning_rates=(2e-3, 50.0), train_batch_size=8,
                max_seq_length=16, max_train_examples=32), do_predict=False)
    lines = []
    doc = scorecard.run(config, say=lines.append)
    run = tmp_path / "out" / "runs" / "m" / "sst2" / "lr50-seed1"
    record = json.loads((run / scorecard_runs.RUN_RECORD_FILE).read_text())
    assert record["diverged"].startswith("loss diverged at step ")
    assert record["metrics"] == {} and record["predictions"] == {}
    assert f"error: {record['diverged']}" in (run / "run.log").read_text()
    assert not list(run.glob("ckpt-*"))
    assert "[2/2] m sst2 lr=50 seed=1: diverged (see its run.log)" in " ".join(lines)
    task = doc["rows"][0]["tasks"]["sst2"]
    accuracy = _eval_results(tmp_path / "out" / "runs" / "m" / "sst2" / "lr0.002-seed1" /
                             "eval_results.txt")["eval_accuracy"]
    assert task["learning_rate"] == 2e-3 and task["grid"]["50"] is None
    assert task["score"]["mean"] == pytest.approx(100 * accuracy)
    assert (f"| m | sst2 | {100 * accuracy:.2f} | diverged |"
            in (tmp_path / "out" / "scorecard.md").read_text().splitlines())
    # A diverged run is a result: the rerun does not train it again.
    again = []
    scorecard.run(config, say=again.append)
    assert "scorecard: 2 of 2 runs already finished" in again[1]
