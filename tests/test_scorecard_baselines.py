"""scorecard_baselines: each task's majority-class or chance level, against hand-computed
values on tiny GLUE-layout folders, and the report's row and table of them."""

from __future__ import annotations

import pathlib

import pytest

from bert_tf.finetune.scorecard import scorecard_baselines, scorecard_report, suite
from bert_tf.finetune.scorecard.scorecard_runs import Model, Protocol, Run, RunRecord


def _write(path: pathlib.Path, header, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = (["\t".join(header)] if header else []) + ["\t".join(r) for r in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _mrpc(glue: pathlib.Path, dev_labels) -> None:
    header = ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"]
    rows = lambda labels: [[y, str(i), str(i), f"a {i}", f"b {i}"]  # noqa: E731
                           for i, y in enumerate(labels)]
    _write(glue / "MRPC" / "train.tsv", header, rows("0011"))
    _write(glue / "MRPC" / "dev.tsv", header, rows(dev_labels))


def _level(glue, name):
    (task,) = suite.glue_tasks(str(glue), [name])
    return scorecard_baselines.task_level(task)


def test_mrpc_majority_is_scored_with_f1_and_accuracy(tmp_path):
    # 7 of 10 dev pairs are paraphrases: always "1" has accuracy 0.7, precision 0.7, recall
    # 1, F1 2 * 0.7 / 1.7 = 0.823529; the task's score is their mean, 76.18 points.
    _mrpc(tmp_path, "1101110101")
    level = _level(tmp_path, "mrpc")
    assert level["kind"] == "majority class (dev)"
    assert level["level"] == pytest.approx(100 * (0.7 + 1.4 / 1.7) / 2)
    assert level["level"] == pytest.approx(76.1765, abs=1e-4)


def test_a_negative_majority_has_f1_zero_and_a_tie_takes_the_first_class(tmp_path):
    _mrpc(tmp_path / "neg", "0001")  # always "0": accuracy 0.75, F1 0 (no positive answer)
    assert _level(tmp_path / "neg", "mrpc")["level"] == pytest.approx(37.5)
    _mrpc(tmp_path / "tie", "0110")  # a tie: "0", listed first: accuracy 0.5, F1 0
    assert _level(tmp_path / "tie", "mrpc")["level"] == pytest.approx(25.0)


def test_mnli_takes_each_dev_sets_own_majority(tmp_path):
    header = ["index", "sentence1", "sentence2", "gold_label"]
    rows = lambda labels: [[str(i), f"p {i}", f"h {i}", y]  # noqa: E731
                           for i, y in enumerate(labels)]
    _write(tmp_path / "MNLI" / "train.tsv", header,
           rows(["entailment", "neutral", "contradiction"]))
    _write(tmp_path / "MNLI" / "dev_matched.tsv", header,
           rows(["entailment"] * 3 + ["neutral", "contradiction"]))  # 3 of 5
    _write(tmp_path / "MNLI" / "dev_mismatched.tsv", header,
           rows(["neutral", "neutral", "entailment", "contradiction"]))  # 2 of 4
    level = _level(tmp_path, "mnli")
    assert level == {"level": pytest.approx(100 * (0.6 + 0.5) / 2),
                     "kind": "majority class (dev)"}


def test_mcc_and_correlations_are_at_chance_zero_without_reading_data(tmp_path):
    for folder in ("CoLA", "STS-B"):  # present, but the level needs none of their rows
        (tmp_path / folder).mkdir()
        for split in ("train", "dev"):
            (tmp_path / folder / f"{split}.tsv").write_text("")
    for name in ("cola", "stsb"):
        assert _level(tmp_path, name) == {"level": 0.0, "kind": "chance (0)"}
    tagging = suite.ScoredTask("ner", "tagging", (), (("eval_f1", "entity F1"),))
    assert scorecard_baselines.task_level(tagging) is None


def test_report_shows_the_levels_beside_the_scores(tmp_path):
    _mrpc(tmp_path, "1101110101")
    (mrpc,) = suite.glue_tasks(str(tmp_path), ["mrpc"])
    ner = suite.ScoredTask("ner", "tagging", (), (("eval_f1", "entity F1"),))
    protocol = Protocol("fixed", (1e-4,), (1, 2))
    model = Model("m")
    records = {Run(model, task, 1e-4, seed): RunRecord(metrics, {}, 1.0, (4, 4))
               for seed, values in ((1, (0.8, 0.7)), (2, (0.9, 0.8)))
               for task, metrics in ((mrpc, {"eval_f1": values[0], "eval_accuracy": values[1]}),
                                     (ner, {"eval_f1": values[0]}))}
    levels = scorecard_baselines.levels([mrpc, ner])
    doc = scorecard_report.summarize([model], [mrpc, ner], protocol, records, levels)
    lines = scorecard_report.markdown(doc).splitlines()
    first = lines.index("| model | average score | mrpc F1 / accuracy | ner entity F1 |")
    # The row's cells: mean ± std over the seeds (mrpc 75, 85; ner 80, 90; average 77.5,
    # 87.5), then the levels: mrpc 76.18, none for tagging, so no average.
    assert lines[first + 2] == "| m | 82.50 ± 7.07 | 80.00 ± 7.07 | 85.00 ± 7.07 |"
    assert lines[first + 3] == "| *majority / chance* | — | 76.18 | — |"
    table = lines.index("| task | level | which |")
    assert lines[table + 2:table + 4] == ["| mrpc | 76.18 | majority class (dev) |",
                                          "| ner | — | none for this kind of task |"]
    assert doc["chance_levels"]["mrpc"]["level"] == pytest.approx(76.1765, abs=1e-4)
    assert "classifier readout pooler" in lines[2]
    # A report without levels (an earlier scorecard.json) has neither.
    doc.pop("chance_levels")
    assert not any("majority" in line for line in scorecard_report.markdown(doc).splitlines())
