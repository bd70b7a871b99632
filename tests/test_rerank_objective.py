"""Tests of bert_tf.finetune.reranking.rerank_objective: binary cross-entropy of the one logit
against torch's BCEWithLogitsLoss formula by hand, padding rows left out, the share of the
global batch, accuracy and the uniform bound; the listwise softmax over each group by hand, and
its forward pass running a group's pairs as rows."""

import math

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.finetune.objectives import EXAMPLE_INDEX
from bert_tf.finetune.reranking.rerank_objective import (
    BinaryCrossEntropyObjective,
    ListwiseObjective,
)

LOGITS = np.array([2.0, -1.0, 0.0, 30.0, -3.0], np.float32)
LABELS = np.array([1.0, 1.0, 0.0, 0.0, 0.0], np.float32)


def _bce(z, y):
    # -y log s(z) - (1 - y) log(1 - s(z)), written out in float64.
    s = 1.0 / (1.0 + np.exp(-z.astype(np.float64)))
    return -(y * np.log(s) + (1 - y) * np.log1p(-s))


def test_loss_sums_and_metrics_by_hand():
    objective = BinaryCrossEntropyObjective()
    batch = {"input_ids": tf.zeros([5, 4], tf.int32), "label_ids": tf.constant(LABELS),
             EXAMPLE_INDEX: tf.constant([0, 1, 2, 3, -1])}  # the last row is padding
    outputs = {"logits": tf.constant(LOGITS[:, None])}
    assert float(objective.denominators(batch)["num_examples"]) == 4.0
    # A global batch of 10 real examples over the replicas: this replica's share.
    share, sums = objective.loss_and_sums(outputs, batch, {"num_examples": tf.constant(10.0)})
    per_example = np.concatenate([_bce(LOGITS[:3], LABELS[:3]),
                                  [30.0 + math.log1p(math.exp(-30.0))]])  # stable form
    assert float(sums["loss_sum"]) == pytest.approx(per_example.sum(), rel=1e-6)
    assert float(share) == pytest.approx(per_example.sum() / 10.0, rel=1e-6)
    # Correct: 2 > 0 with label 1, 0 (not > 0) with label 0; wrong: -1 with 1, 30 with 0.
    assert float(sums["correct"]) == 2.0 and float(sums["num_examples"]) == 4.0
    metrics = objective.metrics(sums)
    assert float(metrics["loss"]) == pytest.approx(per_example.mean(), rel=1e-6)
    assert float(metrics["accuracy"]) == 0.5


def test_uniform_loss_is_the_loss_of_a_zero_logit():
    objective = BinaryCrossEntropyObjective()
    assert objective.uniform_loss == pytest.approx(math.log(2.0))
    batch = {"input_ids": tf.zeros([2, 4], tf.int32), "label_ids": tf.constant([1.0, 0.0])}
    _, sums = objective.loss_and_sums({"logits": tf.zeros([2, 1])}, batch,
                                      {"num_examples": tf.constant(2.0)})
    assert float(objective.metrics(sums)["loss"]) == pytest.approx(math.log(2.0), rel=1e-6)


GROUP_LOGITS = np.array([[2.0, 0.5, -1.0], [0.0, 3.0, 1.0]], np.float32)


def _group_ce(logits: np.ndarray) -> np.ndarray:
    # -log softmax(row)[0], in float64: the positive is first.
    z = logits.astype(np.float64)
    return np.log(np.exp(z).sum(axis=1)) - z[:, 0]


def test_listwise_loss_sums_and_metrics_by_hand():
    objective = ListwiseObjective(group_size=3)
    assert objective.uniform_loss == pytest.approx(math.log(3.0))
    labels = np.array([[1.0, 0.0, 0.0]] * 2, np.float32)
    batch = {"input_ids": tf.zeros([2, 3, 4], tf.int32), "label_ids": tf.constant(labels)}
    assert float(objective.denominators(batch)["num_examples"]) == 2.0  # groups, not pairs
    share, sums = objective.loss_and_sums({"logits": tf.constant(GROUP_LOGITS)}, batch,
                                          {"num_examples": tf.constant(8.0)})
    expected = _group_ce(GROUP_LOGITS)
    assert float(sums["loss_sum"]) == pytest.approx(expected.sum(), rel=1e-6)
    assert float(share) == pytest.approx(expected.sum() / 8.0, rel=1e-6)
    # Group 0's positive scores highest; group 1's does not.
    assert float(sums["correct"]) == 1.0
    metrics = objective.metrics(sums)
    assert float(metrics["loss"]) == pytest.approx(expected.mean(), rel=1e-6)
    assert float(metrics["accuracy"]) == 0.5
    _, zero = objective.loss_and_sums({"logits": tf.zeros([2, 3])}, batch,
                                      {"num_examples": tf.constant(2.0)})
    assert float(objective.metrics(zero)["loss"]) == pytest.approx(math.log(3.0), rel=1e-6)


def test_listwise_forward_runs_the_pairs_of_each_group_as_rows():
    seen = {}

    def model(batch, training):  # the logit of a row: the sum of its input ids
        seen.update({k: tuple(v.shape) for k, v in batch.items()})
        return {"logits": tf.cast(tf.reduce_sum(batch["input_ids"], axis=1, keepdims=True),
                                  tf.float32)}

    ids = np.arange(2 * 3 * 4, dtype=np.int32).reshape(2, 3, 4)
    grouped = {"input_ids": tf.constant(ids), "input_mask": tf.ones([2, 3, 4], tf.int32),
               "segment_ids": tf.zeros([2, 3, 4], tf.int32),
               "label_ids": tf.zeros([2, 3], tf.float32)}
    out = ListwiseObjective(3).forward(model, grouped, training=True)
    assert seen == {"input_ids": (6, 4), "input_mask": (6, 4), "segment_ids": (6, 4)}
    np.testing.assert_array_equal(out["logits"].numpy(), ids.sum(axis=2))
    flat = {k: tf.reshape(grouped[k], [6, 4]) for k in ("input_ids", "input_mask")}
    out = ListwiseObjective(3).forward(model, flat, training=False)  # rerank candidates
    assert out["logits"].shape == (6, 1)
    with pytest.raises(ValueError, match="needs a negative"):
        ListwiseObjective(1)
