"""Pretraining losses and metrics: per-example terms, and the one reduction formula.

Every function here returns per-example values (shape [batch]); nothing is averaged, because
under a distribution strategy each replica sees only part of the global batch and a local
mean would weight replicas wrongly when they hold different numbers of masked tokens. The
trainer all-reduces the two normalizers over the global batch and calls
`reduce_pretraining_losses`, which implements the original BERT definitions:

    masked_lm_loss     = sum_{b,p} w[b,p] * CE[b,p] / (sum_{b,p} w[b,p] + 1e-5)
    next_sentence_loss = sum_b CE_nsp[b] / global_batch_size          (mean CE)
    loss               = masked_lm_loss + next_sentence_loss
    masked_lm_accuracy = sum_{b,p} w[b,p] * [argmax == id] / sum_{b,p} w[b,p]
    next_sentence_accuracy = sum_b [argmax == label] / global_batch_size

with sums over the GLOBAL batch. Given the global normalizers, each replica's reduced loss is
its share, and the shares add up (SUM all-reduce of losses or gradients) to the global loss.

All results are float32 whatever the logits' dtype.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Mapping, Optional, Tuple

import tensorflow as tf

# The original added this to the weight sum so a batch without predictions gives loss 0.
MLM_WEIGHT_EPSILON = 1e-5


def _cross_entropy(logits: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
    logits = tf.cast(logits, tf.float32)
    return tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.cast(labels, tf.int32), logits=logits
    )


def masked_lm_loss(
    mlm_logits: tf.Tensor, masked_lm_ids: tf.Tensor, masked_lm_weights: tf.Tensor
) -> tuple[tf.Tensor, tf.Tensor]:
    """Per-example weighted MLM cross-entropy and weight sum.

    Args:
        mlm_logits: [batch, num_predictions, vocab_size].
        masked_lm_ids: int [batch, num_predictions], the original ids (any id, typically 0,
            where the weight is 0).
        masked_lm_weights: float [batch, num_predictions], 1.0 for real predictions and 0.0
            for padding.

    Returns:
        (weighted_ce_sum [batch], weight_sum [batch]), float32: sum_p w * CE and sum_p w.
    """
    weights = tf.cast(masked_lm_weights, tf.float32)
    ce = _cross_entropy(mlm_logits, masked_lm_ids)  # [batch, num_predictions]
    return tf.reduce_sum(ce * weights, axis=-1), tf.reduce_sum(weights, axis=-1)


def _flat_labels(labels: tf.Tensor) -> tf.Tensor:
    # The TFRecords store next_sentence_labels as [batch, 1]; accept [batch] too.
    return tf.reshape(labels, [-1])


def next_sentence_loss(nsp_logits: tf.Tensor, next_sentence_labels: tf.Tensor) -> tf.Tensor:
    """Per-example NSP cross-entropy.

    Args:
        nsp_logits: [batch, 2].
        next_sentence_labels: int [batch, 1] or [batch]; 0 = B follows A, 1 = B is random.

    Returns:
        float32 [batch].
    """
    return _cross_entropy(nsp_logits, _flat_labels(next_sentence_labels))


def masked_lm_correct(
    mlm_logits: tf.Tensor, masked_lm_ids: tf.Tensor, masked_lm_weights: tf.Tensor
) -> tf.Tensor:
    """Per-example weighted count of masked tokens whose argmax is the original id.

    Returns:
        float32 [batch]: sum_p w[b,p] * [argmax_v logits[b,p,v] == id[b,p]].
    """
    predicted = tf.argmax(mlm_logits, axis=-1, output_type=tf.int32)
    hit = tf.cast(tf.equal(predicted, tf.cast(masked_lm_ids, tf.int32)), tf.float32)
    return tf.reduce_sum(hit * tf.cast(masked_lm_weights, tf.float32), axis=-1)


def next_sentence_correct(nsp_logits: tf.Tensor, next_sentence_labels: tf.Tensor) -> tf.Tensor:
    """Per-example 1.0 where the NSP argmax equals the label, else 0.0: float32 [batch]."""
    predicted = tf.argmax(nsp_logits, axis=-1, output_type=tf.int32)
    labels = tf.cast(_flat_labels(next_sentence_labels), tf.int32)
    return tf.cast(tf.equal(predicted, labels), tf.float32)


def sum_keys(use_nsp: bool) -> Tuple[str, ...]:
    """Keys of `PretrainingLossTerms.local_sums` (and of the global sums the trainer reports)."""
    keys = ("mlm_weighted_ce", "mlm_weight", "mlm_correct", "num_examples")
    return keys + (("nsp_ce", "nsp_correct") if use_nsp else ())


@dataclasses.dataclass(frozen=True)
class PretrainingLossTerms:
    """The per-example terms of one (local) batch; every field is float32 [batch].

    Attributes:
        mlm_weighted_ce: sum_p w * CE.
        mlm_weight: sum_p w (the number of real predictions).
        mlm_correct: sum_p w * [correct].
        nsp_ce: NSP cross-entropy, or None without an NSP head.
        nsp_correct: 1.0 where NSP is right, or None without an NSP head.
    """

    mlm_weighted_ce: tf.Tensor
    mlm_weight: tf.Tensor
    mlm_correct: tf.Tensor
    nsp_ce: Optional[tf.Tensor] = None
    nsp_correct: Optional[tf.Tensor] = None

    @property
    def num_examples(self) -> tf.Tensor:
        """The local batch size as a float32 scalar (for the global NSP normalizer)."""
        return tf.cast(tf.shape(self.mlm_weight)[0], tf.float32)

    def local_sums(self) -> Dict[str, tf.Tensor]:
        """Scalar sums of every term over the local batch (to all-reduce with SUM).

        Keys: `sum_keys(use_nsp)`, in that order.
        """
        values = [tf.reduce_sum(self.mlm_weighted_ce), tf.reduce_sum(self.mlm_weight),
                  tf.reduce_sum(self.mlm_correct), self.num_examples]
        if self.nsp_ce is not None:
            values += [tf.reduce_sum(self.nsp_ce), tf.reduce_sum(self.nsp_correct)]
        return dict(zip(sum_keys(self.nsp_ce is not None), values))


def compute_loss_terms(
    outputs: Mapping[str, tf.Tensor], batch: Mapping[str, tf.Tensor]
) -> PretrainingLossTerms:
    """All per-example terms from the model outputs and the input-pipeline batch.

    Args:
        outputs: `BertPretrainingModel` outputs ("mlm_logits", optional "nsp_logits").
        batch: features with "masked_lm_ids", "masked_lm_weights" and, when the model has
            an NSP head, "next_sentence_labels".
    """
    ids, weights = batch["masked_lm_ids"], batch["masked_lm_weights"]
    weighted_ce, weight = masked_lm_loss(outputs["mlm_logits"], ids, weights)
    terms = dict(
        mlm_weighted_ce=weighted_ce,
        mlm_weight=weight,
        mlm_correct=masked_lm_correct(outputs["mlm_logits"], ids, weights),
    )
    if "nsp_logits" in outputs:
        labels = batch["next_sentence_labels"]
        terms["nsp_ce"] = next_sentence_loss(outputs["nsp_logits"], labels)
        terms["nsp_correct"] = next_sentence_correct(outputs["nsp_logits"], labels)
    return PretrainingLossTerms(**terms)


def reduce_pretraining_losses(
    terms: PretrainingLossTerms,
    global_mlm_weight: tf.Tensor,
    global_batch_size: tf.Tensor,
) -> Dict[str, tf.Tensor]:
    """This batch's share of the global-batch losses (see the module docstring).

    Args:
        terms: the per-example terms of the local batch.
        global_mlm_weight: sum of masked_lm_weights over the GLOBAL batch (all replicas).
        global_batch_size: number of examples in the GLOBAL batch.

    Returns:
        float32 scalars {"loss", "masked_lm_loss", "next_sentence_loss" (with NSP)}; on one
        replica with its own totals these are the losses of the batch, on many they add up
        across replicas to those of the global batch.
    """
    mlm_weight = tf.cast(global_mlm_weight, tf.float32)
    batch_size = tf.cast(global_batch_size, tf.float32)
    mlm = tf.reduce_sum(terms.mlm_weighted_ce) / (mlm_weight + MLM_WEIGHT_EPSILON)
    losses = {"masked_lm_loss": mlm, "loss": mlm}
    if terms.nsp_ce is not None:
        nsp = tf.reduce_sum(terms.nsp_ce) / batch_size
        losses["next_sentence_loss"] = nsp
        losses["loss"] = mlm + nsp
    return losses


def metrics_from_sums(sums: Mapping[str, object]) -> Dict[str, tf.Tensor]:
    """Accuracies and losses from GLOBAL sums (`local_sums()` all-reduced with SUM).

    The one place these are computed: in the train step (tensors), and on the host for the
    progress lines and eval results (sums accumulated as NumPy values; `float()` of each
    result gives the number to print).

    Returns:
        float32 scalars {"masked_lm_loss", "masked_lm_accuracy", "loss", and with NSP
        "next_sentence_loss", "next_sentence_accuracy"}. The accuracy of a batch without
        predictions is 0.
    """
    sums = {key: tf.cast(value, tf.float32) for key, value in sums.items()}
    weight = sums["mlm_weight"]
    n = tf.cast(sums["num_examples"], tf.float32)
    mlm = sums["mlm_weighted_ce"] / (weight + MLM_WEIGHT_EPSILON)
    metrics = {
        "masked_lm_loss": mlm,
        "masked_lm_accuracy": tf.math.divide_no_nan(sums["mlm_correct"], weight),
        "loss": mlm,
    }
    if "nsp_ce" in sums:
        metrics["next_sentence_loss"] = tf.math.divide_no_nan(sums["nsp_ce"], n)
        metrics["next_sentence_accuracy"] = tf.math.divide_no_nan(sums["nsp_correct"], n)
        metrics["loss"] = mlm + metrics["next_sentence_loss"]
    return metrics
