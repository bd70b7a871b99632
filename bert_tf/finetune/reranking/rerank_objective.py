"""The cross-encoder's loss: binary cross-entropy of its one logit, as an `Objective`.

    loss = sum over examples of BCE(label, logit) / global examples
    BCE(y, z) = max(z, 0) - z y + log(1 + exp(-|z|))      (= -y log s(z) - (1-y) log(1-s(z)))

as sentence-transformers' `BinaryCrossEntropyLoss` (torch's BCEWithLogitsLoss, mean
reduction, no positive weight) computes it, but reduced over the GLOBAL batch through the
all-reduced example count, as every fine-tuning loss is (`bert_tf.finetune.objectives`).
`uniform_loss` is ln 2, the loss of a logit of 0 (a probability of 1/2) on any label.
"""

from __future__ import annotations

import math

import tensorflow as tf

from bert_tf.finetune.objectives import FineTuneObjective, real_rows


class BinaryCrossEntropyObjective(FineTuneObjective):
    """BCE of `outputs["logits"][:, 0]` against float labels `batch["label_ids"]` (0 or 1).

    Metrics: "loss" (the mean BCE) and "accuracy" (logit > 0 agrees with label > 0.5).
    """

    sum_keys = ("loss_sum", "correct", "num_examples")
    uniform_loss = math.log(2.0)

    def loss_and_sums(self, outputs, batch, global_denominators):
        real = real_rows(batch)
        logits = tf.cast(outputs["logits"][:, 0], tf.float32)
        labels = tf.cast(batch["label_ids"], tf.float32)
        per_example = tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
        per_example *= real
        correct = tf.cast(tf.equal(logits > 0, labels > 0.5), tf.float32) * real
        share = tf.reduce_sum(per_example) / tf.maximum(global_denominators["num_examples"], 1.0)
        sums = {"loss_sum": tf.reduce_sum(per_example), "correct": tf.reduce_sum(correct),
                "num_examples": tf.reduce_sum(real)}
        return share, sums

    def metrics(self, sums):
        n = tf.cast(sums["num_examples"], tf.float32)
        return {"loss": tf.math.divide_no_nan(tf.cast(sums["loss_sum"], tf.float32), n),
                "accuracy": tf.math.divide_no_nan(tf.cast(sums["correct"], tf.float32), n)}
