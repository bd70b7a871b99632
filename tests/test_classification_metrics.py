"""Tests for bert_tf.finetune.classification.classification_metrics: hand-computed accuracy,
F1, MCC, r."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bert_tf.core.errors import UserError
from bert_tf.finetune.classification import classification_metrics as metrics

# Binary example: TP = 3, FN = 1, TN = 4, FP = 2.
BINARY_LABELS = np.array([1, 1, 1, 1, 0, 0, 0, 0, 0, 0])
BINARY_PREDS = np.array([1, 1, 1, 0, 0, 0, 0, 0, 1, 1])

# 3-class confusion matrix, rows = label, columns = prediction.
CONFUSION = np.array([[3, 1, 0],
                      [0, 2, 2],
                      [1, 0, 1]])


def pairs_from_confusion(counts: np.ndarray):
    labels, preds = [], []
    for i in range(counts.shape[0]):
        for j in range(counts.shape[1]):
            labels += [i] * int(counts[i, j])
            preds += [j] * int(counts[i, j])
    return np.array(labels), np.array(preds)


def test_accuracy():
    assert metrics.accuracy(BINARY_LABELS, BINARY_PREDS) == pytest.approx(7 / 10)
    assert metrics.accuracy([2, 0, 1], [2, 0, 1]) == 1.0


def test_binary_precision_recall_f1():
    # P = TP / (TP + FP) = 3/5, R = TP / (TP + FN) = 3/4, F1 = 2 * 0.6 * 0.75 / 1.35 = 2/3.
    p, r, f1 = metrics.binary_precision_recall_f1(BINARY_LABELS, BINARY_PREDS)
    assert (p, r) == (pytest.approx(3 / 5), pytest.approx(3 / 4))
    assert f1 == pytest.approx(2 / 3)
    # Class 0 as positive: TP = 4, FP = 1, FN = 2 -> F1 = 2TP / (2TP + FP + FN) = 8/11.
    assert metrics.binary_f1(BINARY_LABELS, BINARY_PREDS, positive_label=0) == pytest.approx(
        8 / 11)


def test_f1_is_zero_without_any_positive():
    # P and R are both 0/0: reported as 0, as scikit-learn does.
    assert metrics.binary_f1([0, 0, 0], [0, 0, 0]) == 0.0
    assert metrics.binary_f1([1, 1, 0], [0, 0, 0]) == 0.0


def test_confusion_matrix():
    labels, preds = pairs_from_confusion(CONFUSION)
    np.testing.assert_array_equal(metrics.confusion_matrix(labels, preds), CONFUSION)
    np.testing.assert_array_equal(metrics.confusion_matrix([0], [1], num_classes=3),
                                  [[0, 1, 0], [0, 0, 0], [0, 0, 0]])
    with pytest.raises(UserError, match="class id 2 but only 2 classes"):
        metrics.confusion_matrix([0, 2], [0, 1], num_classes=2)


def test_mcc_binary():
    # (TP TN - FP FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)) = (12 - 2) / sqrt(5*4*6*5)
    #   = 10 / sqrt(600) = 0.4082483
    mcc = metrics.matthews_corrcoef(BINARY_LABELS, BINARY_PREDS)
    assert mcc == pytest.approx(10 / math.sqrt(600))
    assert mcc == pytest.approx(0.4082483, abs=1e-7)
    assert metrics.matthews_corrcoef([0, 1, 1, 0], [1, 0, 0, 1]) == pytest.approx(-1.0)
    assert metrics.matthews_corrcoef([0, 1, 1, 0], [0, 1, 1, 0]) == pytest.approx(1.0)


def test_mcc_three_classes():
    # s = 10 examples, c = 6 correct, t = label counts [4, 4, 2], p = prediction counts
    # [4, 3, 3]: t.p = 16 + 12 + 6 = 34, p.p = 34, t.t = 36.
    # MCC = (c s - t.p) / sqrt((s^2 - p.p)(s^2 - t.t)) = (60 - 34) / sqrt(66 * 64) = 0.4000473
    labels, preds = pairs_from_confusion(CONFUSION)
    mcc = metrics.matthews_corrcoef(labels, preds)
    assert mcc == pytest.approx(26 / math.sqrt(66 * 64))
    assert mcc == pytest.approx(0.4000473, abs=1e-7)
    # Shuffling the examples changes nothing; an unused 4th class adds nothing.
    order = np.random.default_rng(3).permutation(labels.size)
    assert metrics.matthews_corrcoef(labels[order], preds[order], num_classes=4) == (
        pytest.approx(mcc))


def test_mcc_is_zero_when_undefined():
    # Constant predictions (or constant labels) make the denominator 0: reported as 0.
    assert metrics.matthews_corrcoef([0, 1, 1, 0, 2], [1, 1, 1, 1, 1]) == 0.0
    assert metrics.matthews_corrcoef([1, 1, 1], [0, 1, 0]) == 0.0


def test_pearson():
    # x - mean = [-1.5, -0.5, 0.5, 1.5], y - mean = [-3, -1, 0, 4]:
    # r = 11 / sqrt(5 * 26) = 0.9647638
    r = metrics.pearson_correlation([1, 2, 3, 4], [2, 4, 5, 9])
    assert r == pytest.approx(11 / math.sqrt(130))
    assert r == pytest.approx(0.9647638, abs=1e-7)
    assert metrics.pearson_correlation([1, 2, 3], [6, 4, 2]) == pytest.approx(-1.0)


def test_average_ranks():
    np.testing.assert_array_equal(metrics.average_ranks([10, 20, 20, 5]), [2, 3.5, 3.5, 1])
    np.testing.assert_array_equal(metrics.average_ranks([3, 3, 3]), [2, 2, 2])
    np.testing.assert_array_equal(metrics.average_ranks([0.5, -1, 7, 0.5, 0.5, -1]),
                                  [4, 1.5, 6, 4, 4, 1.5])


def test_spearman_with_ties():
    # Ranks of x = [1, 2.5, 2.5, 4], of y = [1, 3, 2, 4]; centred: [-1.5, 0, 0, 1.5] and
    # [-1.5, 0.5, -0.5, 1.5]. r = 4.5 / sqrt(4.5 * 5) = sqrt(0.9) = 0.9486833
    rho = metrics.spearman_correlation([1, 2, 2, 3], [10, 30, 20, 40])
    assert rho == pytest.approx(math.sqrt(0.9))
    # Monotone but not linear: Spearman 1, Pearson below 1 (see test_pearson).
    assert metrics.spearman_correlation([1, 2, 3, 4], [2, 4, 5, 9]) == pytest.approx(1.0)


def test_correlations_are_nan_when_undefined():
    # A constant side has no variance: NaN (as scipy), not 0.
    assert math.isnan(metrics.pearson_correlation([1, 2, 3], [4, 4, 4]))
    assert math.isnan(metrics.spearman_correlation([4, 4, 4], [1, 2, 3]))
    assert math.isnan(metrics.pearson_correlation([1.0], [2.0]))
    assert math.isnan(metrics.spearman_correlation([1, float("nan"), 3], [1, 2, 3]))


def test_classification_metrics_binary_from_probabilities():
    probabilities = np.stack([1 - BINARY_PREDS * 0.8 - 0.1, BINARY_PREDS * 0.8 + 0.1], axis=1)
    result = metrics.classification_metrics("classification", BINARY_LABELS, probabilities,
                                            with_mcc=True)
    assert result == {"eval_accuracy": pytest.approx(0.7), "eval_f1": pytest.approx(2 / 3),
                      "eval_mcc": pytest.approx(10 / math.sqrt(600))}
    assert all(type(v) is float for v in result.values())


def test_classification_metrics_multiclass_ids_and_options():
    labels, preds = pairs_from_confusion(CONFUSION)
    assert metrics.classification_metrics("classification", labels, preds, num_classes=3) == {
        "eval_accuracy": pytest.approx(0.6)}
    # F1 of class 2 only when asked: TP = 1, FP = 2, FN = 1 -> 2/5.
    assert metrics.classification_metrics(
        "classification", labels, preds, with_f1=True, positive_label=2) == {
        "eval_accuracy": pytest.approx(0.6), "eval_f1": pytest.approx(2 / 5)}
    # Binary ids without num_classes: F1 needs to know the task is binary.
    with pytest.raises(UserError, match="num_classes"):
        metrics.classification_metrics("classification", [0, 1], [1, 1])
    assert metrics.classification_metrics("classification", [0, 1], [1, 1], num_classes=2) == {
        "eval_accuracy": 0.5, "eval_f1": pytest.approx(2 / 3)}


def test_classification_metrics_regression():
    result = metrics.classification_metrics("regression", [1, 2, 3, 4],
                                            np.array([[2.0], [4.0], [5.0], [9.0]]))
    assert result == {"eval_pearson": pytest.approx(11 / math.sqrt(130)),
                      "eval_spearman": pytest.approx(1.0)}


@pytest.mark.parametrize("call, message", [
    (lambda: metrics.classification_metrics("ranking", [1], [1]), "unknown task kind"),
    (lambda: metrics.accuracy([1, 0], [1]), "2 labels but 1 predictions"),
    (lambda: metrics.accuracy([], []), "no examples"),
    (lambda: metrics.classification_metrics("classification", [0, 3], np.zeros([2, 3])),
     "class id 3 is out of range for 3 classes"),
    (lambda: metrics.classification_metrics("classification", [0, 1], np.zeros([2, 2]),
                                            num_classes=3), "num_classes is 3"),
    (lambda: metrics.matthews_corrcoef([0.5, 1], [0, 1]), "must be integers"),
    (lambda: metrics.matthews_corrcoef([-1, 1], [0, 1]), "negative class id"),
])
def test_bad_input_is_a_user_error(call, message):
    with pytest.raises(UserError, match=message):
        call()
