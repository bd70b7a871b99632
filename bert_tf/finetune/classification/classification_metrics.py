"""Sentence-level evaluation metrics: accuracy, binary F1, MCC, Pearson and Spearman.

Pure NumPy, computed on the host from the labels and the model's outputs gathered over the
whole evaluation set (none of these is a mean of per-batch values: F1, MCC and the
correlations do not decompose over batches). The definitions are the ones GLUE reports:

    accuracy = mean(prediction == label)
    F1       = 2 P R / (P + R) for the positive class, P = TP / (TP + FP), R = TP / (TP + FN)
    MCC      = (c s - t.p) / sqrt((s^2 - p.p) (s^2 - t.t))      (Gorodkin's multi-class form)
               c = correct predictions, s = examples, t[k] / p[k] = true / predicted count of k
    Pearson  = cov(x, y) / (std(x) std(y))
    Spearman = Pearson of the ranks, tied values sharing the average of their ranks

Undefined cases: F1 is 0 when there is no positive label and no positive prediction (P and R
are 0/0), MCC is 0 when every label or every prediction is one class (its denominator is 0);
both as scikit-learn reports them. A correlation with a constant input (or a single example)
is NaN, as scipy reports it: 0 would claim "no linear relation" where there is no variance
to relate.

`classification_metrics` gathers the figures an evaluation writes (`eval_accuracy`, `eval_f1`,
`eval_mcc`, `eval_pearson`, `eval_spearman`); the caller adds the loss.
"""

from __future__ import annotations

from typing import Dict, Optional

import numpy as np
from numpy.typing import ArrayLike

from bert_tf.core.errors import UserError

TASK_KINDS = ("classification", "regression")


def _pair(labels: ArrayLike, predictions: ArrayLike, what: str) -> tuple:
    """Both arguments as 1-D arrays of one length, at least one element."""
    y = np.asarray(labels)
    p = np.asarray(predictions)
    if y.ndim != 1 or p.ndim != 1:
        raise UserError(f"{what}: labels and predictions must be 1-D, got shapes "
                        f"{y.shape} and {p.shape}")
    if y.shape != p.shape:
        raise UserError(f"{what}: {y.shape[0]} labels but {p.shape[0]} predictions")
    if y.size == 0:
        raise UserError(f"{what}: no examples to evaluate")
    return y, p


def _class_ids(values: np.ndarray, what: str) -> np.ndarray:
    if values.dtype.kind not in "iub":
        if values.dtype.kind != "f" or not np.all(np.mod(values, 1) == 0):
            raise UserError(f"{what}: class ids must be integers, got dtype {values.dtype}")
    ids = values.astype(np.int64)
    if ids.size and ids.min() < 0:
        raise UserError(f"{what}: negative class id {int(ids.min())}")
    return ids


def accuracy(labels: ArrayLike, predictions: ArrayLike) -> float:
    """Fraction of examples whose prediction equals the label.

    Args:
        labels: [n] class ids.
        predictions: [n] predicted class ids.

    Returns:
        A float in [0, 1].
    """
    y, p = _pair(labels, predictions, "accuracy")
    return float(np.mean(y == p))


def confusion_matrix(
    labels: ArrayLike, predictions: ArrayLike, num_classes: Optional[int] = None
) -> np.ndarray:
    """Counts of (label, prediction) pairs.

    Args:
        labels: [n] class ids >= 0.
        predictions: [n] predicted class ids >= 0.
        num_classes: the matrix size; default one more than the largest id seen.

    Returns:
        int64 [num_classes, num_classes]; entry [i, j] counts examples of label i predicted j.
    """
    y, p = _pair(labels, predictions, "confusion_matrix")
    y, p = _class_ids(y, "confusion_matrix"), _class_ids(p, "confusion_matrix")
    largest = int(max(y.max(), p.max()))
    if num_classes is None:
        num_classes = largest + 1
    elif largest >= num_classes:
        raise UserError(f"confusion_matrix: class id {largest} but only {num_classes} classes")
    flat = np.bincount(y * num_classes + p, minlength=num_classes * num_classes)
    return flat.reshape(num_classes, num_classes)


def binary_precision_recall_f1(
    labels: ArrayLike, predictions: ArrayLike, positive_label: int = 1
) -> tuple:
    """Precision, recall and F1 of one class against all others.

    Args:
        labels: [n] class ids.
        predictions: [n] predicted class ids.
        positive_label: the class scored as positive (index 1 for GLUE's MRPC and QQP).

    Returns:
        (precision, recall, f1) as floats; a 0/0 ratio counts as 0 (see the module docstring).
    """
    y, p = _pair(labels, predictions, "binary_f1")
    true_pos = int(np.sum((y == positive_label) & (p == positive_label)))
    predicted_pos = int(np.sum(p == positive_label))
    actual_pos = int(np.sum(y == positive_label))
    precision = true_pos / predicted_pos if predicted_pos else 0.0
    recall = true_pos / actual_pos if actual_pos else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def binary_f1(labels: ArrayLike, predictions: ArrayLike, positive_label: int = 1) -> float:
    """F1 of the class `positive_label`: 2 P R / (P + R), 0 when P + R is 0.

    Args:
        labels: [n] class ids.
        predictions: [n] predicted class ids.
        positive_label: the class scored as positive.

    Returns:
        A float in [0, 1].
    """
    return binary_precision_recall_f1(labels, predictions, positive_label)[2]


def matthews_corrcoef(
    labels: ArrayLike, predictions: ArrayLike, num_classes: Optional[int] = None
) -> float:
    """Matthews correlation coefficient, for two or more classes.

    Args:
        labels: [n] class ids >= 0.
        predictions: [n] predicted class ids >= 0.
        num_classes: optional; classes never seen add nothing to the sums.

    Returns:
        A float in [-1, 1]; 0 when all labels or all predictions are one class.
    """
    counts = confusion_matrix(labels, predictions, num_classes).astype(np.float64)
    total = counts.sum()
    correct = np.trace(counts)
    true_per_class = counts.sum(axis=1)
    predicted_per_class = counts.sum(axis=0)
    numerator = correct * total - true_per_class @ predicted_per_class
    denominator = (total**2 - predicted_per_class @ predicted_per_class) * (
        total**2 - true_per_class @ true_per_class)
    if denominator == 0:
        return 0.0
    return float(numerator / np.sqrt(denominator))


def _as_float_vectors(x: ArrayLike, y: ArrayLike, what: str) -> tuple:
    a, b = _pair(x, y, what)
    return a.astype(np.float64), b.astype(np.float64)


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    a = a - a.mean()
    b = b - b.mean()
    denominator = np.sqrt((a @ a) * (b @ b))
    if denominator == 0:
        return float("nan")
    # Rounding can put |r| a hair above 1 for perfectly related inputs.
    return float(np.clip((a @ b) / denominator, -1.0, 1.0))


def pearson_correlation(x: ArrayLike, y: ArrayLike) -> float:
    """Pearson's linear correlation coefficient.

    Args:
        x: [n] numbers (e.g. the gold scores).
        y: [n] numbers (e.g. the predicted scores).

    Returns:
        A float in [-1, 1]; NaN when x or y is constant (or n == 1), or either holds a NaN.
    """
    return _pearson(*_as_float_vectors(x, y, "pearson_correlation"))


def average_ranks(values: ArrayLike) -> np.ndarray:
    """Ranks 1..n of the values, tied values sharing the mean of the ranks they span.

    Args:
        values: [n] numbers.

    Returns:
        float64 [n]; e.g. [10, 20, 20, 5] -> [2, 3.5, 3.5, 1].
    """
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    order = np.argsort(v, kind="stable")
    ordered = v[order]
    # Positions in sorted order where a new run of equal values begins, and where runs end.
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    ends = np.r_[starts[1:], v.size]
    # A run at 0-based sorted positions [s, e) holds ranks s+1 .. e, whose mean is (s+1+e)/2.
    run_rank = (starts + 1 + ends) / 2.0
    ranks = np.empty(v.size, dtype=np.float64)
    ranks[order] = np.repeat(run_rank, ends - starts)
    return ranks


def spearman_correlation(x: ArrayLike, y: ArrayLike) -> float:
    """Spearman's rank correlation: Pearson of the average ranks (ties handled).

    Args:
        x: [n] numbers.
        y: [n] numbers.

    Returns:
        A float in [-1, 1]; NaN when x or y is constant (or n == 1), or either holds a NaN.
    """
    a, b = _as_float_vectors(x, y, "spearman_correlation")
    if np.isnan(a).any() or np.isnan(b).any():
        return float("nan")  # NaNs have no rank
    return _pearson(average_ranks(a), average_ranks(b))


def classification_metrics(
    task_kind: str,
    labels: ArrayLike,
    predictions: ArrayLike,
    *,
    num_classes: Optional[int] = None,
    with_f1: Optional[bool] = None,
    with_mcc: bool = False,
    positive_label: int = 1,
) -> Dict[str, float]:
    """The metrics a sentence(-pair) task writes after evaluation (the caller adds the loss).

    Args:
        task_kind: "classification" or "regression" (STS-B).
        labels: [n] gold class ids, or gold scores for regression.
        predictions: for classification either [n] predicted class ids or
            [n, num_classes] probabilities or logits (the argmax is the prediction);
            for regression [n] or [n, 1] predicted scores.
        num_classes: the number of classes; taken from `predictions` when they are scores,
            otherwise needed to tell a binary task (unless `with_f1` is given).
        with_f1: add `eval_f1` (F1 of `positive_label`); default: when there are 2 classes.
        with_mcc: add `eval_mcc` (CoLA reports it).
        positive_label: the class F1 scores as positive.

    Returns:
        Classification: {"eval_accuracy"} plus "eval_f1" and "eval_mcc" as asked;
        regression: {"eval_pearson", "eval_spearman"}. Values are Python floats.

    Raises:
        UserError: an unknown task kind, mismatched lengths, no examples, class ids out of
            range, or a binary question that cannot be answered from the arguments.
    """
    if task_kind not in TASK_KINDS:
        raise UserError(f"unknown task kind {task_kind!r}; expected one of {TASK_KINDS}")
    scores = np.asarray(predictions)
    if task_kind == "regression":
        if scores.ndim == 2 and scores.shape[1] == 1:
            scores = scores[:, 0]
        return {"eval_pearson": pearson_correlation(labels, scores),
                "eval_spearman": spearman_correlation(labels, scores)}

    if scores.ndim == 2:
        if num_classes is not None and num_classes != scores.shape[1]:
            raise UserError(f"num_classes is {num_classes} but predictions have "
                            f"{scores.shape[1]} scores per example")
        num_classes = scores.shape[1]
        predicted = np.argmax(scores, axis=1)
    elif scores.ndim == 1:
        predicted = scores
    else:
        raise UserError(f"predictions must be [n] class ids or [n, num_classes] scores, got "
                        f"shape {scores.shape}")
    y, p = _pair(labels, predicted, "classification_metrics")
    y, p = _class_ids(y, "labels"), _class_ids(p, "predictions")
    if num_classes is not None and max(y.max(), p.max()) >= num_classes:
        raise UserError(f"class id {int(max(y.max(), p.max()))} is out of range for "
                        f"{num_classes} classes")
    if with_f1 is None:
        if num_classes is None:
            raise UserError("classification_metrics: pass num_classes (or with_f1) to tell "
                            "whether the task is binary")
        with_f1 = num_classes == 2
    result = {"eval_accuracy": accuracy(y, p)}
    if with_f1:
        result["eval_f1"] = binary_f1(y, p, positive_label)
    if with_mcc:
        result["eval_mcc"] = matthews_corrcoef(y, p, num_classes)
    return result
