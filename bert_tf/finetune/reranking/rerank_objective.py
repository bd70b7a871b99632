"""The cross-encoder's losses, as `Objective`s: binary cross-entropy of each pair's logit, or
softmax cross-entropy over each query's group of candidates.

bce (`BinaryCrossEntropyObjective`), over (query, passage, label) rows:

    loss = sum over pairs of BCE(label, logit) / global pairs
    BCE(y, z) = max(z, 0) - z y + log(1 + exp(-|z|))      (= -y log s(z) - (1-y) log(1-s(z)))

as sentence-transformers' `BinaryCrossEntropyLoss` (torch's BCEWithLogitsLoss, mean
reduction, no positive weight) computes it. `uniform_loss` is ln 2, the loss of a logit of 0.

listwise (`ListwiseObjective`), over groups: a query with its positive first and its
`group_size - 1` mined negatives, input arrays [groups, group_size, seq_len]:

    loss = sum over groups of -log softmax(logits of the group)[positive] / global groups

the localized contrastive estimation of Gao et al. (ECIR 2021, "Rethink training of BERT
rerankers"). Each step compares a query's candidates with each other, so the label prior of
bce (about 1 positive in 5) is no answer: on SciFact with all-MiniLM-L6-v2, bce's loss sits
at the prior's entropy for hundreds of steps (docs/results/retrieval.md). The forward pass
runs the group's pairs as one batch of groups x group_size rows; prediction rows (flat
[rows, seq_len], the rerank candidates) pass through as they are. `uniform_loss` is
ln(group_size).

Both reduce over the GLOBAL batch through the all-reduced count, as every fine-tuning loss
does (`bert_tf.finetune.objectives`).
"""

from __future__ import annotations

import math

import tensorflow as tf

from bert_tf.finetune.objectives import FineTuneObjective, real_rows
from bert_tf.modeling.encoder import INPUT_NAMES

LOSSES = ("bce", "listwise")


class _LossAndAccuracy(FineTuneObjective):
    """What both losses share: the sums of a per-row loss and hit, and their means."""

    sum_keys = ("loss_sum", "correct", "num_examples")

    @staticmethod
    def share_and_sums(per_row, correct, real, global_denominators):
        per_row, correct = per_row * real, correct * real
        share = tf.reduce_sum(per_row) / tf.maximum(global_denominators["num_examples"], 1.0)
        return share, {"loss_sum": tf.reduce_sum(per_row), "correct": tf.reduce_sum(correct),
                       "num_examples": tf.reduce_sum(real)}

    def metrics(self, sums):
        n = tf.cast(sums["num_examples"], tf.float32)
        return {"loss": tf.math.divide_no_nan(tf.cast(sums["loss_sum"], tf.float32), n),
                "accuracy": tf.math.divide_no_nan(tf.cast(sums["correct"], tf.float32), n)}


class BinaryCrossEntropyObjective(_LossAndAccuracy):
    """BCE of `outputs["logits"][:, 0]` against float labels `batch["label_ids"]` (0 or 1).

    Metrics: "loss" (the mean BCE) and "accuracy" (logit > 0 agrees with label > 0.5).
    """

    uniform_loss = math.log(2.0)

    def loss_and_sums(self, outputs, batch, global_denominators):
        logits = tf.cast(outputs["logits"][:, 0], tf.float32)
        labels = tf.cast(batch["label_ids"], tf.float32)
        per_example = tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
        correct = tf.cast(tf.equal(logits > 0, labels > 0.5), tf.float32)
        return self.share_and_sums(per_example, correct, real_rows(batch), global_denominators)


class ListwiseObjective(_LossAndAccuracy):
    """Softmax cross-entropy over each group's logits, the positive at index 0.

    Training batches: {"input_ids", "input_mask", "segment_ids": int32 [groups, group_size,
    seq_len], "label_ids": float32 [groups, group_size]} (1 for the positive, 0 for the
    negatives; the target distribution is the labels over their sum). Metrics: "loss" (the
    mean group CE) and "accuracy" (the share of groups whose positive scores highest).

    Args:
        group_size: pairs per group (1 + negatives), for `uniform_loss`.
    """

    def __init__(self, group_size: int):
        if group_size < 2:
            raise ValueError(f"a listwise group needs a negative, got group_size {group_size}")
        self.group_size = group_size
        self.uniform_loss = math.log(group_size)

    def forward(self, model, batch, training):
        if batch["input_ids"].shape.rank != 3:  # prediction: flat candidate rows
            return model(batch, training=training)
        shape = tf.shape(batch["input_ids"])  # [groups, group_size, seq_len]
        flat = {k: tf.reshape(batch[k], [-1, shape[2]]) for k in INPUT_NAMES}
        logits = model(flat, training=training)["logits"]  # [groups * group_size, 1]
        return {"logits": tf.reshape(tf.cast(logits, tf.float32), shape[:2])}

    def loss_and_sums(self, outputs, batch, global_denominators):
        logits = outputs["logits"]  # [groups, group_size]
        labels = tf.cast(batch["label_ids"], tf.float32)
        target = labels / tf.maximum(tf.reduce_sum(labels, axis=1, keepdims=True), 1e-9)
        per_group = tf.nn.softmax_cross_entropy_with_logits(labels=target, logits=logits)
        best = tf.argmax(logits, axis=1, output_type=tf.int32)
        correct = tf.cast(tf.gather(labels, best, batch_dims=1) > 0.5, tf.float32)
        # Training batches have no padding rows: real_rows is 1 for every group.
        return self.share_and_sums(per_group, correct, real_rows(batch), global_denominators)
