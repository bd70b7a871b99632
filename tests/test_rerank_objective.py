"""Tests of bert_tf.finetune.reranking.rerank_objective: binary cross-entropy of the one logit
against torch's BCEWithLogitsLoss formula by hand, padding rows left out, the share of the
global batch, accuracy and the uniform bound."""

import math

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.finetune.objectives import EXAMPLE_INDEX
from bert_tf.finetune.reranking.rerank_objective import BinaryCrossEntropyObjective

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
