"""The GLUE benchmark as the scorecard sees it: folders, metrics, evaluations, submission files.

GLUE's download has one folder per task (CoLA, SST-2, MRPC, STS-B, QQP, MNLI, QNLI, RTE,
WNLI, and `diagnostic` for AX) with train/dev/test TSV files that `classification_data`
reads. Per task this module names:

* the metrics that make its GLUE score (a task with two metrics scores as their mean, as
  the leaderboard does; MNLI's matched and mismatched accuracies are its two metrics);
* the evaluations of one fine-tuned model: MNLI is scored on two dev sets, and its model
  also predicts GLUE's diagnostic set (AX);
* the file each evaluation's test predictions go to in a GLUE server submission, with the
  labels spelled as GLUE spells them (`index<TAB>prediction`).

WNLI is left out by default, as the BERT paper did (its train and dev sets contradict each
other); a submission still needs `WNLI.tsv`, which `majority_predictions` fills with the
training set's majority class, the paper's own answer.
"""

from __future__ import annotations

import dataclasses
import os
from collections import Counter
from typing import Dict, List, Tuple

from bert_tf.core import fileio
from bert_tf.core.errors import UserError
from bert_tf.finetune.classification import classification_data

DIAGNOSTIC_FOLDER = "diagnostic"
DIAGNOSTIC_FILE = "diagnostic.tsv"


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """One evaluation of a fine-tuned model.

    Attributes:
        suffix: "" for the task's main dev set (the run's own eval_results.txt), else the
            suffix of the files it writes (eval_results_<suffix>.txt,
            test_results_<suffix>.tsv) and of its metric names (`<suffix>/eval_accuracy`).
        eval_split: the labelled split it scores, or "" (predict only: AX).
        predict_file: the test file, relative to the task's folder ("../diagnostic/...").
        submission_file: the GLUE server's file name for its test predictions.
    """

    suffix: str
    eval_split: str
    predict_file: str
    submission_file: str


@dataclasses.dataclass(frozen=True)
class GlueTask:
    """A GLUE task: `name` is run_classifier's --task_name, `folder` GLUE's folder name.

    Attributes:
        metrics: (metric key, label) pairs whose mean is the task's GLUE score; keys are
            eval_results.txt keys, prefixed `<suffix>/` for a second evaluation.
        evaluations: the first trains the model; the others reuse it.
    """

    name: str
    folder: str
    metrics: Tuple[Tuple[str, str], ...]
    evaluations: Tuple[Evaluation, ...]


def _task(name: str, folder: str, *metrics: Tuple[str, str]) -> GlueTask:
    return GlueTask(name, folder, tuple(metrics),
                    (Evaluation("", "dev", "test.tsv", f"{folder}.tsv"),))


_ACC = ("eval_accuracy", "accuracy")
GLUE_TASKS: Dict[str, GlueTask] = {task.name: task for task in (
    _task("cola", "CoLA", ("eval_mcc", "MCC")),
    _task("sst2", "SST-2", _ACC),
    _task("mrpc", "MRPC", ("eval_f1", "F1"), _ACC),
    _task("stsb", "STS-B", ("eval_pearson", "Pearson"), ("eval_spearman", "Spearman")),
    _task("qqp", "QQP", ("eval_f1", "F1"), _ACC),
    GlueTask("mnli", "MNLI", (("eval_accuracy", "matched acc."),
                              ("mismatched/eval_accuracy", "mismatched acc.")), (
        Evaluation("", "dev", "test_matched.tsv", "MNLI-m.tsv"),
        Evaluation("mismatched", "dev_mismatched", "test_mismatched.tsv", "MNLI-mm.tsv"),
        Evaluation("ax", "", os.path.join("..", DIAGNOSTIC_FOLDER, DIAGNOSTIC_FILE),
                   "AX.tsv"))),
    _task("qnli", "QNLI", _ACC),
    _task("rte", "RTE", _ACC),
    _task("wnli", "WNLI", _ACC),
)}
LEFT_OUT_BY_DEFAULT = ("wnli",)
SUBMISSION_FILES = ("CoLA.tsv", "SST-2.tsv", "MRPC.tsv", "STS-B.tsv", "QQP.tsv", "MNLI-m.tsv",
                    "MNLI-mm.tsv", "QNLI.tsv", "RTE.tsv", "WNLI.tsv", "AX.tsv")


def task_dir(glue_dir: str, task: GlueTask) -> str:
    return os.path.join(glue_dir, task.folder)


def present_tasks(glue_dir: str) -> List[str]:
    """GLUE tasks whose folder holds a train.tsv, WNLI left out (the default `--tasks`).

    Raises:
        UserError: `glue_dir` missing, or none of GLUE's folders in it.
    """
    if not fileio.isdir(glue_dir):
        raise UserError(f"--glue_dir={glue_dir}: no such directory")
    found = [t.name for t in GLUE_TASKS.values()
             if t.name not in LEFT_OUT_BY_DEFAULT
             and fileio.exists(os.path.join(task_dir(glue_dir, t), "train.tsv"))]
    if not found:
        names = ", ".join(t.folder for t in GLUE_TASKS.values())
        raise UserError(f"--glue_dir={glue_dir}: none of GLUE's task folders ({names}) "
                        "holds a train.tsv")
    return found


def resolve_tasks(glue_dir: str, names: List[str]) -> List[GlueTask]:
    """The named tasks (run_classifier names or GLUE folder names, any case), checked.

    Raises:
        UserError: an unknown name, a task whose folder or train/dev file is missing.
    """
    by_folder = {t.folder.lower(): t for t in GLUE_TASKS.values()}
    tasks = []
    for name in names:
        task = GLUE_TASKS.get(name.lower()) or by_folder.get(name.lower())
        if task is None:
            raise UserError(f"--tasks: unknown GLUE task {name!r}; choose from "
                            f"{', '.join(GLUE_TASKS)}")
        folder = task_dir(glue_dir, task)
        if not fileio.isdir(folder):
            raise UserError(f"task {task.name}: no folder {folder} in --glue_dir")
        spec = classification_data.GLUE_TASKS[task.name]
        for split in ("train", "dev"):
            path = os.path.join(folder, spec.files[split])
            if not fileio.exists(path):
                raise UserError(f"task {task.name}: no {path}")
        tasks.append(task)
    return tasks


def submission_label(task_name: str, label: str) -> str:
    """A prediction spelled as GLUE's server reads it.

    Classification labels are the label list's strings already; STS-B's scores are clipped
    to GLUE's [0, 5] range and printed with 3 decimals.
    """
    if task_name == "stsb":
        return f"{min(5.0, max(0.0, float(label))):.3f}"
    return label


def submission_lines(task_name: str, test_results: str) -> List[str]:
    """`index<TAB>prediction` lines of a run's test_results file (header first).

    Args:
        task_name: the GLUE task (decides the label spelling).
        test_results: a `ClassificationTask.write_predictions` file: guid first, the
            predicted label (or STS-B's score) last.
    """
    with fileio.open_file(test_results, "r") as f:
        rows = [line.rstrip("\n").split("\t") for line in f if line.strip()]
    return ["index\tprediction"] + [f"{row[0]}\t{submission_label(task_name, row[-1])}"
                                    for row in rows[1:]]


def majority_predictions(glue_dir: str, task_name: str = "wnli") -> List[str]:
    """Submission lines predicting the training set's majority class for every test row.

    The BERT paper's answer for WNLI. Ties go to the first label in GLUE's label list.

    Raises:
        UserError: the task's train or test file is missing or malformed.
    """
    task = GLUE_TASKS[task_name]
    spec = classification_data.GLUE_TASKS[task_name]
    folder = task_dir(glue_dir, task)
    train = classification_data.read_split(spec, folder, "train")
    counts = Counter(str(e.label) for e in train.examples)
    labels = list(spec.label_list or sorted(counts))
    majority = max(labels, key=lambda x: (counts[x], -labels.index(x)))
    test = classification_data.read_split(spec, folder, "test")
    return ["index\tprediction"] + [f"{e.guid}\t{majority}" for e in test.examples]
