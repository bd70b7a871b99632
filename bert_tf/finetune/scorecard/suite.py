"""The tasks a scorecard scores: GLUE's, or a suite file of any task the package fine-tunes.

A `ScoredTask` says how to build the fine-tuning task (`ClassificationTask`, `TaggingTask`,
`SquadTask`) for each of its evaluations and which eval_results.txt keys make its score. GLUE
tasks come from `bert_tf.finetune.scorecard.glue`; a suite file (`--suite=FILE`) lists tasks of any
kind, so a domain user can score a model on their own benchmarks (a BLURB-like suite):

    {"tasks": [
      {"name": "sst2", "kind": "glue", "glue_dir": "glue"},
      {"name": "ncbi", "kind": "tagging", "train_file": "ncbi/train.tsv",
       "eval_file": "ncbi/devel.tsv", "predict_file": "ncbi/test.tsv"},
      {"name": "reviews", "kind": "classification", "data_dir": "reviews",
       "task_name": "tsv", "text_column": "text", "label_column": "label"},
      {"name": "squad", "kind": "squad", "train_file": "train-v1.1.json",
       "predict_file": "dev-v1.1.json", "max_seq_length": 384}
    ]}

Relative paths are relative to the suite file. Optional keys of every entry: "metrics" (the
eval_results.txt keys whose mean is the task's score) and "max_seq_length". The other keys
are the task's own settings (`ClassificationSettings`, `TaggingSettings`, `SquadSettings`).
A "classification" or "glue" task may name its own "classifier_readout" ("pooler", "cls",
"mean"); the others take run_glue's --classifier_readout.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Dict, List, Optional, Tuple

from bert_tf.core import fileio
from bert_tf.core.errors import UserError, reason
from bert_tf.finetune.classification import classification_data
from bert_tf.finetune.scorecard import glue

KINDS = ("classification", "tagging", "squad", "glue")
_PATH_KEYS = ("data_dir", "train_file", "eval_file", "predict_file", "glue_dir")


@dataclasses.dataclass(frozen=True)
class ScoredTask:
    """A task of a scorecard.

    Attributes:
        name: its row name in the report (unique).
        kind: "classification", "tagging" or "squad" (the fine-tuning task it builds).
        settings: that task's settings, paths absolute.
        metrics: (eval_results key, label) pairs; the task's score is their mean.
        scale: multiplies the metrics into points (100 for fractions; SQuAD's are percent).
        evaluations: GLUE's evaluations of one model (`glue.Evaluation`); one for other tasks.
        glue_task: the GLUE task name, or "" (decides submission files).
        max_seq_length: overrides the protocol's (0 = the protocol's).
        subsettable: whether --max_train_examples applies (not to SQuAD's questions).
    """

    name: str
    kind: str
    settings: Tuple[Tuple[str, Any], ...]
    metrics: Tuple[Tuple[str, str], ...]
    scale: float = 100.0
    evaluations: Tuple[glue.Evaluation, ...] = (glue.Evaluation("", "dev", "", ""),)
    glue_task: str = ""
    max_seq_length: int = 0
    subsettable: bool = True

    def build(self, evaluation: glue.Evaluation, max_train_examples: int, subset_seed: int,
              do_lower_case: bool, classifier_readout: str = "pooler",
              classifier_head: str = "auto"):
        """The fine-tuning task object for one evaluation (see `runner.Task`).

        `classifier_readout` is the protocol's, for classification tasks whose settings do
        not name their own; `classifier_head` the protocol's (`ClassificationSettings`).
        """
        settings = dict(self.settings)
        if self.kind == "classification":
            from bert_tf.finetune.classification.classification_task import (
                ClassificationSettings,
                ClassificationTask,
            )

            predict = evaluation.predict_file
            if predict:
                settings["predict_file"] = os.path.join(settings["data_dir"], predict)
                settings["predictions_file"] = results_name("test_results", evaluation, "tsv")
            settings["eval_split"] = evaluation.eval_split or "dev"
            settings.setdefault("classifier_readout", classifier_readout)
            settings.setdefault("classifier_head", classifier_head)
            return ClassificationTask(ClassificationSettings(
                max_train_examples=max_train_examples, subset_seed=subset_seed, **settings))
        if self.kind == "tagging":
            from bert_tf.finetune.tagging.tagging_task import TaggingSettings, TaggingTask

            return TaggingTask(TaggingSettings(max_train_examples=max_train_examples,
                                               subset_seed=subset_seed, **settings))
        from bert_tf.finetune.squad.squad_task import SquadSettings, SquadTask

        return SquadTask(SquadSettings(do_lower_case=do_lower_case, **settings))

    def predict_path(self, evaluation: glue.Evaluation) -> Optional[str]:
        """The test file an evaluation predicts, or None when there is none to predict."""
        settings = dict(self.settings)
        if self.kind == "classification":
            if not evaluation.predict_file:
                return None
            path = os.path.join(settings["data_dir"], evaluation.predict_file)
        else:
            path = settings.get("predict_file", "")
        return path if path and fileio.exists(path) else None


def results_name(stem: str, evaluation: glue.Evaluation, ext: str) -> str:
    """`stem.ext` for the main evaluation, `stem_<suffix>.ext` for another one."""
    return f"{stem}_{evaluation.suffix}.{ext}" if evaluation.suffix else f"{stem}.{ext}"


def glue_task(glue_dir: str, task: glue.GlueTask, name: str = "") -> ScoredTask:
    """The ScoredTask of a GLUE task whose folder is in `glue_dir`."""
    return ScoredTask(
        name=name or task.name, kind="classification",
        settings=(("task_name", task.name),
                  ("data_dir", os.path.abspath(glue.task_dir(glue_dir, task)))),
        metrics=task.metrics, evaluations=task.evaluations, glue_task=task.name)


def glue_tasks(glue_dir: str, names: List[str]) -> List[ScoredTask]:
    """ScoredTasks of the named GLUE tasks (every task present when `names` is empty).

    Raises:
        UserError: see `glue.present_tasks`, `glue.resolve_tasks`.
    """
    names = names or glue.present_tasks(glue_dir)
    return [glue_task(glue_dir, task) for task in glue.resolve_tasks(glue_dir, names)]


def _default_metrics(kind: str, settings: Dict[str, Any]) -> Tuple[Tuple[str, str], ...]:
    if kind == "tagging":
        return (("eval_f1", "entity F1"),)
    if kind == "squad":
        return (("exact_match", "EM"), ("f1", "F1"))
    if settings.get("regression"):
        return (("eval_pearson", "Pearson"), ("eval_spearman", "Spearman"))
    return (("eval_accuracy", "accuracy"),)


def _suite_entry(path: str, number: int, entry: Any) -> List[ScoredTask]:
    where = f"{path}: task {number}"
    if not isinstance(entry, dict):
        raise UserError(f"{where}: expected a JSON object, found {type(entry).__name__}")
    entry = dict(entry)
    kind = entry.pop("kind", None)
    name = entry.pop("name", None)
    if not isinstance(name, str) or not name:
        raise UserError(f"{where}: no \"name\"")
    where = f"{path}: task {number} ({name!r})"
    if kind not in KINDS:
        raise UserError(f"{where}: unknown kind {kind!r}; choose one of {', '.join(KINDS)}")
    base = os.path.dirname(os.path.abspath(path))
    for key in _PATH_KEYS:
        if isinstance(entry.get(key), str) and entry[key]:
            entry[key] = os.path.join(base, entry[key])
    metrics = entry.pop("metrics", None)
    max_seq_length = int(entry.pop("max_seq_length", 0))
    if kind == "glue":
        glue_dir = entry.pop("glue_dir", "")
        task_name = entry.pop("task", name)
        readout = entry.pop("classifier_readout", None)
        if entry:
            raise UserError(f"{where}: unknown keys for kind glue: {', '.join(sorted(entry))}")
        (scored,) = glue_tasks(glue_dir, [task_name])
        scored = dataclasses.replace(scored, name=name, max_seq_length=max_seq_length)
        if readout is not None:
            scored = dataclasses.replace(scored, settings=scored.settings + (
                ("classifier_readout", readout),))
            try:  # checks the readout's name now
                scored.build(glue.Evaluation("", "dev", "", ""), 0, 0, True)
            except UserError as e:
                raise UserError(f"{where}: {e}") from None
        return [scored]
    if kind == "classification":
        classification_data.get_task(entry.get("task_name", ""), entry.get("text_column"),
                                     entry.get("text_pair_column"), entry.get("label_column"),
                                     bool(entry.get("regression")))
    default = _default_metrics(kind, entry)
    if metrics is None:
        pairs = default
    elif isinstance(metrics, list) and metrics and all(isinstance(m, str) for m in metrics):
        pairs = tuple((m, m) for m in metrics)
    else:
        raise UserError(f"{where}: \"metrics\" must be a non-empty list of eval_results keys")
    try:  # unknown settings are caught here, not after the first model trained
        ScoredTask(name, kind, tuple(sorted(entry.items())), pairs).build(
            glue.Evaluation("", "dev", "", ""), 0, 0, True)
    except TypeError as e:
        raise UserError(f"{where}: {reason(e)}") from None
    except UserError as e:
        raise UserError(f"{where}: {e}") from None
    return [ScoredTask(name, kind, tuple(sorted(entry.items())), pairs,
                       scale=1.0 if kind == "squad" else 100.0, max_seq_length=max_seq_length,
                       subsettable=kind != "squad")]


def read_suite(path: str) -> List[ScoredTask]:
    """The tasks of a suite file (format in the module docstring).

    Raises:
        UserError: unreadable JSON, no tasks, an entry without a name, of an unknown kind,
            with unknown settings, or two entries with one name.
    """
    if not fileio.exists(path):
        raise UserError(f"--suite={path}: no such file")
    with fileio.open_file(path, "r") as f:
        try:
            doc = json.load(f)
        except ValueError as e:
            raise UserError(f"{path}: not valid JSON ({reason(e)})") from None
    entries = doc.get("tasks") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not entries:
        raise UserError(f"{path}: expected {{\"tasks\": [...]}} with at least one task")
    tasks = [t for number, entry in enumerate(entries, 1)
             for t in _suite_entry(path, number, entry)]
    names = [t.name for t in tasks]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise UserError(f"{path}: task names must be unique ({', '.join(dupes)} repeated)")
    return tasks
