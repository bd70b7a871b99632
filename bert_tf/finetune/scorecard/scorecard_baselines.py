"""What a model that learned nothing scores on each task of a scorecard: the floor of its row.

A score means little without the level that needs no model: on a small or unbalanced dev
set, always answering the commonest class can beat fine-tuned models (GLUE's MRPC: 74.8
points, F1 and accuracy, for always answering "paraphrase"). Per task:

* classification: the majority class of the dev labels, scored with the task's own metrics
  (`classification_metrics`, the code that scores the runs), each evaluation on its own dev
  set (MNLI's matched and mismatched). Ties go to the class listed first.
* a task scored only by MCC (CoLA) or by correlations (STS-B, regression): chance, 0. Any
  constant answer has MCC 0, and its correlation is undefined (classification_metrics
  reports NaN); 0 is what an answer unrelated to the labels scores on average.
* tagging, SQuAD, or metrics no constant answer defines (a suite's own keys): none.

The level is in the task's points (its metrics' mean times its scale), as the scores are.
"""

from __future__ import annotations

from collections import Counter
from typing import Dict, List, Optional

import numpy as np

from bert_tf.finetune.classification import classification_metrics
from bert_tf.finetune.scorecard.suite import ScoredTask

MAJORITY = "majority class (dev)"
CHANCE = "chance (0)"
# Metrics whose level for a constant or unrelated answer is 0 whatever the labels.
ZERO_AT_CHANCE = ("eval_mcc", "eval_pearson", "eval_spearman")


def _constant_answer_metrics(task: ScoredTask, evaluation, do_lower_case: bool
                             ) -> Dict[str, float]:
    """The metrics of always answering the dev set's majority class, or {} for regression."""
    built = task.build(evaluation, 0, 0, do_lower_case)
    built.read(True, True, False, "")  # the training labels fix the class ids
    if built.regression:
        return {}
    labels = [str(e.label) for e in built.splits["eval"].examples]
    counts = Counter(labels)
    ids = {name: i for i, name in enumerate(built.label_list)}
    majority = max(built.label_list, key=lambda name: (counts[name], -ids[name]))
    gold = np.array([ids[name] for name in labels], np.int64)
    logits = np.zeros((len(gold), len(built.label_list)))  # [dev examples, classes]
    logits[:, ids[majority]] = 1.0
    return classification_metrics.classification_metrics("classification", gold, logits,
                                                         with_mcc=True)


def task_level(task: ScoredTask, do_lower_case: bool = True) -> Optional[Dict[str, object]]:
    """{"level": points, "kind": MAJORITY or CHANCE}, or None (module docstring).

    Raises:
        UserError: unreadable data (as the scorecard's own check of the task).
    """
    if task.kind != "classification":
        return None
    keys = [key for key, _ in task.metrics]
    if all(key.split("/")[-1] in ZERO_AT_CHANCE for key in keys):
        return {"level": 0.0, "kind": CHANCE}
    values: Dict[str, float] = {}
    for evaluation in task.evaluations:
        if not evaluation.eval_split:
            continue
        prefix = f"{evaluation.suffix}/" if evaluation.suffix else ""
        found = _constant_answer_metrics(task, evaluation, do_lower_case)
        values.update({prefix + k: v for k, v in found.items()})
    for key in keys:  # MCC and correlations: 0 (module docstring)
        if key not in values and key.split("/")[-1] in ZERO_AT_CHANCE:
            values[key] = 0.0
    if any(key not in values for key in keys):
        return None
    level = task.scale * sum(values[key] for key in keys) / len(keys)
    return {"level": float(level), "kind": MAJORITY}


def levels(tasks: List[ScoredTask], do_lower_case: bool = True
           ) -> Dict[str, Optional[Dict[str, object]]]:
    """`task_level` of every task, by task name."""
    return {task.name: task_level(task, do_lower_case) for task in tasks}
