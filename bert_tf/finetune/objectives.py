"""The losses of the fine-tuning tasks, as `Objective`s for the shared trainer.

Per-example losses, reduced over the GLOBAL batch only through the all-reduced denominators
(`bert_tf.training.objectives`):

    classification  sum(CE) / global examples
    regression      sum((y - y_hat)^2) / global examples                (STS-B)
    tagging         sum(w * CE) / global sum(w)   w = 1 at the scored first pieces
    span (QA)       sum((CE_start + CE_end) / 2) / global examples       (run_squad's loss)

`uniform_loss` (the absolute divergence bound's reference, `bert_tf.training.health`) is the
loss of a head that guesses uniformly: ln(num_labels) for classification and tagging,
ln(seq_len) for each of the span's start and end (so ln(seq_len) for their mean); for
regression the loss of predicting 0, where the fresh head starts: the mean squared label.

Batches may carry an "example_index" feature (int32 [batch], -1 for padding rows); eval sums
skip padding rows and `predictions` passes the index on, so the host can put predictions
back in input order whatever the replica layout.
"""

from __future__ import annotations

import math
from typing import Dict, Optional

import tensorflow as tf

from bert_tf.training.objectives import Objective

EXAMPLE_INDEX = "example_index"


def real_rows(batch) -> tf.Tensor:
    """float32 [batch]: 1 for real examples, 0 for padding rows (example_index -1)."""
    if EXAMPLE_INDEX in batch:
        return tf.cast(batch[EXAMPLE_INDEX] >= 0, tf.float32)
    return tf.ones(tf.shape(batch["input_ids"])[:1], tf.float32)


def _cross_entropy(logits: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
    return tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.cast(labels, tf.int32), logits=tf.cast(logits, tf.float32))


class FineTuneObjective(Objective):
    """What every fine-tuning objective shares: the example count as the denominator, the
    model's outputs as they are, and predictions that carry the example index."""

    def denominators(self, batch):
        return {"num_examples": tf.reduce_sum(real_rows(batch))}

    def forward(self, model, batch, training):
        return model(batch, training=training)

    def predictions(self, outputs, batch) -> Dict[str, tf.Tensor]:
        out = dict(outputs)
        if EXAMPLE_INDEX in batch:
            out[EXAMPLE_INDEX] = batch[EXAMPLE_INDEX]
        return out


def _log_of(choices: Optional[int]) -> Optional[float]:
    return math.log(choices) if choices and choices > 1 else None


class ClassificationObjective(FineTuneObjective):
    """Softmax cross-entropy over `num_labels` classes, or squared error when regression.

    Args:
        regression: squared error on one float output.
        num_labels: the classes, for `uniform_loss` (None: no absolute bound).
        label_mean_square: regression: the training labels' mean square, the zero guess's
            loss, for `uniform_loss` (None: no absolute bound).
    """

    sum_keys = ("loss_sum", "correct", "num_examples")

    def __init__(self, regression: bool = False, num_labels: Optional[int] = None,
                 label_mean_square: Optional[float] = None):
        self.regression = regression
        if regression:
            self.uniform_loss = label_mean_square if label_mean_square else None
        else:
            self.uniform_loss = _log_of(num_labels)

    def loss_and_sums(self, outputs, batch, global_denominators):
        real = real_rows(batch)
        logits = outputs["logits"]
        if self.regression:
            labels = tf.cast(batch["label_ids"], tf.float32)
            per_example = tf.square(logits[:, 0] - labels)
            correct = tf.zeros_like(per_example)
        else:
            per_example = _cross_entropy(logits, batch["label_ids"])
            correct = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32),
                                       tf.cast(batch["label_ids"], tf.int32)), tf.float32)
        per_example *= real
        share = tf.reduce_sum(per_example) / tf.maximum(global_denominators["num_examples"], 1.0)
        sums = {"loss_sum": tf.reduce_sum(per_example), "correct": tf.reduce_sum(correct * real),
                "num_examples": tf.reduce_sum(real)}
        return share, sums

    def metrics(self, sums):
        n = tf.cast(sums["num_examples"], tf.float32)
        out = {"loss": tf.math.divide_no_nan(tf.cast(sums["loss_sum"], tf.float32), n)}
        if not self.regression:
            out["accuracy"] = tf.math.divide_no_nan(tf.cast(sums["correct"], tf.float32), n)
        return out


class TaggingObjective(FineTuneObjective):
    """Token cross-entropy at the weighted positions (first pieces of words).

    Args:
        num_labels: the tags, for `uniform_loss` (None: no absolute bound).
    """

    sum_keys = ("weighted_ce", "weight", "correct", "num_examples")

    def __init__(self, num_labels: Optional[int] = None):
        self.uniform_loss = _log_of(num_labels)

    def denominators(self, batch):
        weights = tf.cast(batch["label_weights"], tf.float32) * real_rows(batch)[:, None]
        return {"weight": tf.reduce_sum(weights), "num_examples": tf.reduce_sum(real_rows(batch))}

    def loss_and_sums(self, outputs, batch, global_denominators):
        weights = tf.cast(batch["label_weights"], tf.float32) * real_rows(batch)[:, None]
        logits = outputs["logits"]  # [batch, seq, labels]
        ce = _cross_entropy(logits, batch["label_ids"]) * weights
        correct = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32),
                                   tf.cast(batch["label_ids"], tf.int32)), tf.float32) * weights
        share = tf.reduce_sum(ce) / tf.maximum(global_denominators["weight"], 1.0)
        sums = {"weighted_ce": tf.reduce_sum(ce), "weight": tf.reduce_sum(weights),
                "correct": tf.reduce_sum(correct), "num_examples": tf.reduce_sum(real_rows(batch))}
        return share, sums

    def metrics(self, sums):
        weight = tf.cast(sums["weight"], tf.float32)
        return {"loss": tf.math.divide_no_nan(tf.cast(sums["weighted_ce"], tf.float32), weight),
                "token_accuracy": tf.math.divide_no_nan(tf.cast(sums["correct"], tf.float32),
                                                        weight)}


class SpanObjective(FineTuneObjective):
    """Mean of the start and end cross-entropies (position 0, [CLS], means no answer).

    Args:
        seq_length: the positions each softmax covers (the padding included), for
            `uniform_loss` (None: no absolute bound).
    """

    sum_keys = ("loss_sum", "start_correct", "end_correct", "num_examples")

    def __init__(self, seq_length: Optional[int] = None):
        self.uniform_loss = _log_of(seq_length)

    def loss_and_sums(self, outputs, batch, global_denominators):
        real = real_rows(batch)
        start = _cross_entropy(outputs["start_logits"], batch["start_positions"])
        end = _cross_entropy(outputs["end_logits"], batch["end_positions"])
        per_example = (start + end) / 2.0 * real

        def hit(logits, positions):
            guess = tf.argmax(logits, -1, output_type=tf.int32)
            return tf.reduce_sum(
                tf.cast(tf.equal(guess, tf.cast(positions, tf.int32)), tf.float32) * real)

        share = tf.reduce_sum(per_example) / tf.maximum(global_denominators["num_examples"], 1.0)
        sums = {"loss_sum": tf.reduce_sum(per_example),
                "start_correct": hit(outputs["start_logits"], batch["start_positions"]),
                "end_correct": hit(outputs["end_logits"], batch["end_positions"]),
                "num_examples": tf.reduce_sum(real)}
        return share, sums

    def metrics(self, sums):
        n = tf.cast(sums["num_examples"], tf.float32)
        return {"loss": tf.math.divide_no_nan(tf.cast(sums["loss_sum"], tf.float32), n),
                "start_accuracy": tf.math.divide_no_nan(
                    tf.cast(sums["start_correct"], tf.float32), n),
                "end_accuracy": tf.math.divide_no_nan(tf.cast(sums["end_correct"], tf.float32), n)}
