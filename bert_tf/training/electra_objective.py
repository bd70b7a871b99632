"""ELECTRA's objective: replaced-token detection on the generator's samples.

One train step of `ElectraObjective` (an `objectives.Objective`, so the trainer's exact global
reduction, accumulation, resume, eval and distribution hold unchanged):

1. the generator predicts the masked positions of the batch's masked input (the records'
   static masks, or `--dynamic_masking`'s fresh ones);
2. at each real masked position a replacement is sampled from the generator's softmax
   (`sample_replacements`); the sample is a token id, so no gradient flows back through it
   into the generator (as ELECTRA's stop_gradient at the sample);
3. the discriminator reads the original tokens with the samples written in
   (`corrupt_inputs`) and predicts, at every real token (`input_mask`), whether it was
   replaced. A masked position whose sample equals the original token counts as original;
4. loss = generator MLM + disc_weight x discriminator, each reduced over the GLOBAL batch:

       masked_lm_loss     = sum(w * CE) / (sum(w) + 1e-5)            generator, masked slots
       discriminator_loss = sum(m * BCE) / (sum(m) + 1e-5)           every real token (m)
       loss               = masked_lm_loss + disc_weight * discriminator_loss

   with the sums over all replicas and micro-batches (the denominators are all-reduced
   before the forward pass, `train_loop`).

Randomness: the training samples come from the model's `sampler` seed generator, seeded from
the run's seed. Its state is a variable that every draw advances (each micro-batch draws
afresh), that the trainer shifts per replica for the step (each replica draws its own), and
that every checkpoint saves with the dropout RNG: a resumed run draws exactly the samples
of the uninterrupted one. Evaluation samples with a fixed stateless seed, so every
evaluation of a run (and of another run) scores the same kind of draw.

Metrics (progress lines, eval_results.txt): the generator's masked_lm_loss and
masked_lm_accuracy, discriminator_loss, discriminator_accuracy (logit > 0 read as
"replaced", over real tokens), replaced_fraction (of the real tokens) and
discriminator_auc. The AUC comes from fixed-bin histograms of the discriminator's
probability for replaced and original tokens (`AUC_BINS` bins of [0, 1], sums that add over
replicas and steps like every other sum): two scores in one bin count as a tie, so it is
exact when no replaced and original token share a bin, and off by at most half the share
of the (replaced, original) pairs that do.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Dict, List, Mapping

import numpy as np
import tensorflow as tf

from bert_tf.core import schema
from bert_tf.core.errors import UserError
from bert_tf.data import dynamic_masking
from bert_tf.training import losses, objectives

DEFAULT_DISC_WEIGHT = 50.0
# Bins of the discriminator's probability for the AUC (see the module docstring).
AUC_BINS = 1000
# Evaluation's sampling seed: fixed, so every evaluation draws alike.
EVAL_SAMPLING_SEED = 20200311
EPSILON = losses.MLM_WEIGHT_EPSILON
# Below this held-out AUC the discriminator tells the generator's samples from the original
# tokens little better than chance (0.5), so its loss sits at the entropy of the replaced
# fraction and the encoder gets little signal (`ElectraObjective.eval_notes`).
WEAK_DISCRIMINATOR_AUC = 0.6


@dataclasses.dataclass(frozen=True)
class ElectraConfig:
    """ELECTRA's settings beyond the bert_config (the discriminator's).

    Attributes:
        generator_hidden_fraction: the generator's hidden size over the discriminator's
            (`bert_tf.modeling.electra.generator_config`).
        disc_weight: lambda, the weight of the discriminator's loss in the total.
        init_discriminator_only: --init_checkpoint starts the discriminator only (any
            BERT-layout encoder; `interop.electra_warm_start`), the generator from scratch.
    """

    generator_hidden_fraction: float = 0.25
    disc_weight: float = DEFAULT_DISC_WEIGHT
    init_discriminator_only: bool = False

    def __post_init__(self) -> None:
        if not 0 < self.generator_hidden_fraction <= 1:
            raise UserError("--generator_hidden_fraction must be in (0, 1], got "
                            f"{self.generator_hidden_fraction}")
        if not (math.isfinite(self.disc_weight) and self.disc_weight > 0):
            raise UserError(f"--disc_weight must be positive, got {self.disc_weight}")


def sample_replacements(mlm_logits: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    """One token per masked slot, drawn from softmax(mlm_logits), with no gradient.

    The Gumbel-max draw, argmax(logits - log(-log(u))) for u uniform in (0, 1), as ELECTRA
    samples: exact, and made of ops XLA compiles (TensorFlow's stateless multinomial has no
    XLA kernel, and the train step is XLA-compiled by default on TPUs and GPUs).

    Args:
        mlm_logits: float [batch, num_predictions, vocab_size].
        seed: [2] int, the stateless seed of this draw.

    Returns:
        int32 [batch, num_predictions].
    """
    logits = tf.stop_gradient(tf.cast(mlm_logits, tf.float32))
    # u in [tiny, 1): both logarithms finite.
    u = tf.random.stateless_uniform(tf.shape(logits), seed=tf.cast(seed, tf.int64),
                                    minval=np.finfo(np.float32).tiny, maxval=1.0)
    return tf.argmax(logits - tf.math.log(-tf.math.log(u)), axis=-1, output_type=tf.int32)


def corrupt_inputs(original_ids: tf.Tensor, input_mask: tf.Tensor, masked_lm_positions: tf.Tensor,
                   masked_lm_weights: tf.Tensor, sampled_ids: tf.Tensor) -> Dict[str, tf.Tensor]:
    """The discriminator's input and labels: the samples written at the real masked slots.

    Args:
        original_ids: int32 [batch, seq_len], the unmasked tokens.
        input_mask: int [batch, seq_len], 1 for real tokens.
        masked_lm_positions: int32 [batch, num_predictions] (distinct where weighted).
        masked_lm_weights: float [batch, num_predictions], 0 for padding slots.
        sampled_ids: int32 [batch, num_predictions].

    Returns:
        {"input_ids": int32 [batch, seq_len], the corrupted tokens;
         "replaced": int32 [batch, seq_len], 1 where a real token differs from the original
         (a sample equal to the original is not a replacement)}.
    """
    # Writing values at the positions is what undoing a stored mask does.
    ids = dynamic_masking.restore_original_ids(
        original_ids, masked_lm_positions, tf.cast(sampled_ids, original_ids.dtype),
        masked_lm_weights)
    replaced = tf.cast(tf.not_equal(ids, original_ids), tf.int32) * tf.cast(input_mask, tf.int32)
    return {"input_ids": ids, "replaced": replaced}


def discriminator_terms(disc_logits: tf.Tensor, replaced: tf.Tensor, input_mask: tf.Tensor,
                        num_bins: int = AUC_BINS) -> Dict[str, tf.Tensor]:
    """The discriminator's sums over one (local) batch.

    Args:
        disc_logits: float [batch, seq_len].
        replaced: int [batch, seq_len], the labels (1 = replaced).
        input_mask: int [batch, seq_len], 1 for the real tokens, which alone count.
        num_bins: histogram bins of the probability, for the AUC.

    Returns:
        float32 {"disc_ce": sum of m * BCE (scalar), "disc_tokens": sum m,
        "disc_correct": sum m * [(logit > 0) == label], "disc_replaced": sum m * label,
        "auc_positive", "auc_negative": [num_bins] counts of the replaced / original real
        tokens by bin of sigmoid(logit)}.
    """
    logits = tf.cast(disc_logits, tf.float32)
    labels = tf.cast(replaced, tf.float32)
    mask = tf.cast(input_mask, tf.float32)
    ce = tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
    predicted = tf.cast(logits > 0, tf.float32)
    correct = tf.cast(tf.equal(predicted, labels), tf.float32)
    bins = tf.clip_by_value(tf.cast(tf.floor(tf.sigmoid(logits) * num_bins), tf.int32),
                            0, num_bins - 1)
    flat_bins = tf.reshape(bins, [-1])
    return {
        "disc_ce": tf.reduce_sum(ce * mask),
        "disc_tokens": tf.reduce_sum(mask),
        "disc_correct": tf.reduce_sum(correct * mask),
        "disc_replaced": tf.reduce_sum(labels * mask),
        "auc_positive": tf.math.unsorted_segment_sum(
            tf.reshape(labels * mask, [-1]), flat_bins, num_bins),
        "auc_negative": tf.math.unsorted_segment_sum(
            tf.reshape((1.0 - labels) * mask, [-1]), flat_bins, num_bins),
    }


def auc_from_histograms(positive, negative) -> tf.Tensor:
    """ROC AUC from per-bin counts of positive and negative scores (bins ascending).

    AUC = P(score of a positive > score of a negative), a tie (one bin) counting 1/2:
    sum_k pos[k] * (neg[j < k] + neg[k] / 2) / (sum pos * sum neg); 0 without both classes.

    Args:
        positive, negative: float [num_bins] counts (tensors or arrays).

    Returns:
        float32 scalar.
    """
    positive = tf.cast(positive, tf.float32)
    negative = tf.cast(negative, tf.float32)
    below = tf.cumsum(negative, exclusive=True)  # negatives in lower bins
    wins = tf.reduce_sum(positive * (below + 0.5 * negative))
    return tf.math.divide_no_nan(wins, tf.reduce_sum(positive) * tf.reduce_sum(negative))


class ElectraObjective(objectives.Objective):
    """Generator MLM + disc_weight x replaced-token detection (see the module docstring).

    Args:
        vocab_size: the model's vocabulary (for `uniform_loss`).
        disc_weight: lambda.
        num_bins: the AUC histograms' bins.

    The model is an `bert_tf.modeling.electra.ElectraPretrainingModel`.
    """

    sum_keys = ("mlm_weighted_ce", "mlm_weight", "mlm_correct", "num_examples", "disc_ce",
                "disc_tokens", "disc_correct", "disc_replaced", "auc_positive", "auc_negative")

    def __init__(self, vocab_size: int, disc_weight: float = DEFAULT_DISC_WEIGHT,
                 num_bins: int = AUC_BINS):
        self.vocab_size = vocab_size
        self.disc_weight = float(disc_weight)
        self.num_bins = num_bins
        # The histograms are vectors: the train loop's accumulators take this shape.
        self.sum_shapes = {"auc_positive": [num_bins], "auc_negative": [num_bins]}
        # What heads guessing uniformly would score: the divergence stop's absolute bound.
        self.uniform_loss = math.log(vocab_size) + self.disc_weight * math.log(2.0)

    def denominators(self, batch):
        return {"mlm_weight": tf.reduce_sum(tf.cast(batch[schema.MASKED_LM_WEIGHTS], tf.float32)),
                "disc_tokens": tf.reduce_sum(tf.cast(batch[schema.INPUT_MASK], tf.float32))}

    def forward(self, model, batch, training):
        """Generator logits, the sampled corruption and the discriminator's logits.

        Returns:
            {"mlm_logits": float32 [batch, num_predictions, vocab], "sampled_ids": int32
             [batch, num_predictions], "replaced": int32 [batch, seq_len], "disc_logits":
             float32 [batch, seq_len]}.
        """
        mlm_logits = model.generator_logits(batch, training=training)
        seed = (model.sampler.next() if training
                else tf.constant([EVAL_SAMPLING_SEED, 0], tf.int64))
        return self.discriminate(model, batch, mlm_logits,
                                 sample_replacements(mlm_logits, seed), training)

    def discriminate(self, model, batch, mlm_logits, sampled, training):
        """`forward`'s second half: the samples written in, the discriminator's logits.

        Args:
            sampled: int32 [batch, num_predictions], the replacements (the generator's
                samples in training; others in a control experiment).

        Returns:
            As `forward`.
        """
        positions = batch[schema.MASKED_LM_POSITIONS]
        weights = batch[schema.MASKED_LM_WEIGHTS]
        original = dynamic_masking.restore_original_ids(
            batch[schema.INPUT_IDS], positions, batch[schema.MASKED_LM_IDS], weights)
        corrupted = corrupt_inputs(original, batch[schema.INPUT_MASK], positions, weights, sampled)
        disc_inputs = {"input_ids": corrupted["input_ids"],
                       "input_mask": batch[schema.INPUT_MASK],
                       "segment_ids": batch[schema.SEGMENT_IDS]}
        for name in (schema.DOC_IDS, schema.POSITION_IDS):  # a packed batch's
            if name in batch:
                disc_inputs[name] = batch[name]
        return {"mlm_logits": mlm_logits, "sampled_ids": sampled,
                "replaced": corrupted["replaced"],
                "disc_logits": model.discriminator_logits(disc_inputs, training=training)}

    def loss_and_sums(self, outputs, batch, global_denominators):
        ids, weights = batch[schema.MASKED_LM_IDS], batch[schema.MASKED_LM_WEIGHTS]
        weighted_ce, weight = losses.masked_lm_loss(outputs["mlm_logits"], ids, weights)
        sums = {
            "mlm_weighted_ce": tf.reduce_sum(weighted_ce),
            "mlm_weight": tf.reduce_sum(weight),
            "mlm_correct": tf.reduce_sum(
                losses.masked_lm_correct(outputs["mlm_logits"], ids, weights)),
            "num_examples": tf.cast(tf.shape(weights)[0], tf.float32),
        }
        sums.update(discriminator_terms(outputs["disc_logits"], outputs["replaced"],
                                        batch[schema.INPUT_MASK], self.num_bins))
        # This replica's share of the global loss: local sums over the global denominators.
        generator = sums["mlm_weighted_ce"] / (global_denominators["mlm_weight"] + EPSILON)
        discriminator = sums["disc_ce"] / (global_denominators["disc_tokens"] + EPSILON)
        return generator + self.disc_weight * discriminator, sums

    def metrics(self, sums: Mapping[str, object]) -> Dict[str, tf.Tensor]:
        """Figures from GLOBAL sums (tensors in the step, NumPy values on the host).

        Returns:
            float32 scalars {"loss", "masked_lm_loss", "masked_lm_accuracy",
            "discriminator_loss", "discriminator_accuracy", "discriminator_auc",
            "replaced_fraction"}.
        """
        s = {key: tf.cast(value, tf.float32) for key, value in sums.items()}
        mlm = s["mlm_weighted_ce"] / (s["mlm_weight"] + EPSILON)
        disc = s["disc_ce"] / (s["disc_tokens"] + EPSILON)
        return {
            "loss": mlm + self.disc_weight * disc,
            "masked_lm_loss": mlm,
            "masked_lm_accuracy": tf.math.divide_no_nan(s["mlm_correct"], s["mlm_weight"]),
            "discriminator_loss": disc,
            "discriminator_accuracy": tf.math.divide_no_nan(s["disc_correct"], s["disc_tokens"]),
            "discriminator_auc": auc_from_histograms(s["auc_positive"], s["auc_negative"]),
            "replaced_fraction": tf.math.divide_no_nan(s["disc_replaced"], s["disc_tokens"]),
        }

    def eval_notes(self, metrics: Mapping[str, float]) -> List[str]:
        """A warning when the held-out discriminator AUC is below `WEAK_DISCRIMINATOR_AUC`.

        Early in training the generator is near a unigram model and its samples are frequent
        words, which a small discriminator tells from the originals barely better than
        chance; if that lasts, the objective is not teaching the encoder much at this size
        and budget (docs/results/pretraining.md has a measured case).
        """
        auc = metrics.get("discriminator_auc")
        if auc is None or not math.isfinite(auc) or auc >= WEAK_DISCRIMINATOR_AUC:
            return []
        return [f"the discriminator's held-out AUC is {auc:.3f} (0.5 is chance): it barely "
                f"tells the generator's samples from the original tokens, so the encoder "
                f"learns little from its loss; if this lasts, train longer or a larger "
                f"discriminator"]

    def predictions(self, outputs, batch):
        return {"disc_logits": outputs["disc_logits"], "replaced": outputs["replaced"],
                "sampled_ids": outputs["sampled_ids"]}
