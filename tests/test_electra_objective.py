"""Tests of bert_tf.training.electra_objective: the corrupted input and its labels, the
discriminator's loss and counts by hand, the total loss and its global-batch reduction, the
AUC from summed histograms against an exact pairwise count, the stopped gradient at the
sample, the shared embeddings' two gradients, the sampler, and (in the trainer, on one CPU
device) gradient accumulation equal to one big batch and a mixed-precision first step close to
float32's.
"""

from __future__ import annotations

import itertools
import math
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from _pretraining_helpers import blocks_dataset_fn, synthetic_examples, tiny_bert_config

from bert_tf.modeling.electra import ElectraPretrainingModel
from bert_tf.training import optimization, trainer
from bert_tf.training.electra_objective import (
    ElectraObjective,
    auc_from_histograms,
    corrupt_inputs,
    discriminator_terms,
    sample_replacements,
)
from bert_tf.training.objectives import Objective

VOCAB = 128


def constant(x, dtype=tf.int32):
    return tf.constant(np.asarray(x), dtype)


def test_samples_are_written_at_real_slots_and_equal_ones_count_as_original():
    original = constant([[2, 10, 11, 12, 13, 3, 0, 0]])
    mask = constant([[1, 1, 1, 1, 1, 1, 0, 0]])
    positions = constant([[1, 3, 4, 0]])  # the last slot is padding (weight 0)
    weights = constant([[1, 1, 1, 0]], tf.float32)
    sampled = constant([[10, 20, 21, 99]])  # slot 0 draws the original token back
    out = corrupt_inputs(original, mask, positions, weights, sampled)
    np.testing.assert_array_equal(out["input_ids"], [[2, 10, 11, 20, 21, 3, 0, 0]])
    # Position 1 got its own token back: "original". [CLS] (position 0) keeps its id.
    np.testing.assert_array_equal(out["replaced"], [[0, 0, 0, 1, 1, 0, 0, 0]])


def test_discriminator_terms_by_hand():
    logits = np.array([[2.0, -1.0, 0.5, -3.0], [0.0, 1.5, -0.5, 4.0]], np.float32)
    labels = np.array([[1, 0, 0, 0], [0, 1, 1, 0]])
    mask = np.array([[1, 1, 1, 0], [1, 1, 1, 1]])  # one padding token
    terms = discriminator_terms(constant(logits, tf.float32), constant(labels), constant(mask),
                                num_bins=10)
    p = 1 / (1 + np.exp(-logits.astype(np.float64)))
    bce = -(labels * np.log(p) + (1 - labels) * np.log(1 - p))
    assert float(terms["disc_ce"]) == pytest.approx((bce * mask).sum(), rel=1e-6)
    assert float(terms["disc_tokens"]) == 7
    # "Replaced" where logit > 0: row 0 right at tokens 0 and 1 (0.5 is a wrong "replaced",
    # token 3 is padding), row 1 right at 0 (0.0 reads "original") and 1.5, wrong at -0.5
    # and 4.0.
    correct = ((logits > 0) == (labels == 1)) * mask
    assert float(terms["disc_correct"]) == correct.sum() == 4
    assert float(terms["disc_replaced"]) == 3
    # Bins of sigmoid(logit) in tenths, real tokens only.
    bins = np.minimum((p * 10).astype(int), 9)
    expected_pos = np.bincount(bins[(labels == 1) & (mask == 1)], minlength=10)
    expected_neg = np.bincount(bins[(labels == 0) & (mask == 1)], minlength=10)
    np.testing.assert_array_equal(terms["auc_positive"], expected_pos)
    np.testing.assert_array_equal(terms["auc_negative"], expected_neg)


def exact_auc(scores, labels):
    """P(positive's score > negative's), ties 1/2, over every (positive, negative) pair."""
    pos = [s for s, y in zip(scores, labels) if y]
    neg = [s for s, y in zip(scores, labels) if not y]
    wins = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a, b in itertools.product(pos, neg))
    return wins / (len(pos) * len(neg))


@pytest.mark.parametrize("logits", [
    [3.0, -2.0, 0.3, 1.2, -0.7, 2.2, -4.0, 0.9],    # every score in its own bin
    [1.0, 1.0, -1.0, 1.0, -1.0, 2.0, -3.0, -1.0],    # ties between classes
])
def test_auc_from_summed_histograms_equals_the_exact_pairwise_auc(logits):
    labels = [1, 0, 0, 1, 1, 0, 0, 1]
    x = np.array([logits], np.float32)
    y = np.array([labels])
    whole = discriminator_terms(constant(x, tf.float32), constant(y), constant(np.ones_like(y)))
    expected = exact_auc(list(1 / (1 + np.exp(-x[0]))), labels)
    assert float(auc_from_histograms(whole["auc_positive"], whole["auc_negative"])) == (
        pytest.approx(expected, abs=1e-6))
    # Sums of two halves (two replicas, two steps) give the same figure.
    halves = [discriminator_terms(constant(x[:, s], tf.float32), constant(y[:, s]),
                                  constant(np.ones_like(y[:, s])))
              for s in (slice(0, 3), slice(3, 8))]
    pos = halves[0]["auc_positive"] + halves[1]["auc_positive"]
    neg = halves[0]["auc_negative"] + halves[1]["auc_negative"]
    assert float(auc_from_histograms(pos.numpy(), neg.numpy())) == pytest.approx(expected, abs=1e-6)
    assert float(auc_from_histograms(np.zeros(4), np.ones(4))) == 0  # one class only


def test_total_loss_is_mlm_plus_lambda_disc_over_the_global_batch():
    objective = ElectraObjective(VOCAB, disc_weight=50.0, num_bins=10)
    assert objective.uniform_loss == pytest.approx(math.log(VOCAB) + 50 * math.log(2))
    rng = np.random.default_rng(0)
    batch = {k: tf.constant(v) for k, v in synthetic_examples(4, seed=3).items()}
    outputs = {"mlm_logits": tf.constant(rng.normal(size=(4, 4, VOCAB)), tf.float32),
               "disc_logits": tf.constant(rng.normal(size=(4, 16)), tf.float32),
               "replaced": tf.constant(rng.integers(0, 2, size=(4, 16)), tf.int32)}
    # Reference: the whole batch's MLM mean CE over masked slots, BCE mean over real tokens.
    logits = outputs["mlm_logits"].numpy().astype(np.float64)
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    ids, w = batch["masked_lm_ids"].numpy(), batch["masked_lm_weights"].numpy()
    ce = -np.take_along_axis(log_p, ids[..., None], -1)[..., 0]
    mlm = (ce * w).sum() / (w.sum() + 1e-5)
    z, y = outputs["disc_logits"].numpy().astype(np.float64), outputs["replaced"].numpy()
    m = batch["input_mask"].numpy()
    bce = np.maximum(z, 0) - z * y + np.log1p(np.exp(-np.abs(z)))
    disc = (bce * m).sum() / (m.sum() + 1e-5)
    share, sums = objective.loss_and_sums(outputs, batch, objective.denominators(batch))
    assert float(share) == pytest.approx(mlm + 50 * disc, rel=1e-5)
    metrics = objective.metrics({k: v.numpy() for k, v in sums.items()})
    assert float(metrics["masked_lm_loss"]) == pytest.approx(mlm, rel=1e-5)
    assert float(metrics["discriminator_loss"]) == pytest.approx(disc, rel=1e-5)
    assert float(metrics["loss"]) == pytest.approx(mlm + 50 * disc, rel=1e-5)
    # Two replicas' shares, each over the GLOBAL denominators, add up to the global loss.
    halves = [{k: v[s] for k, v in d.items()} for d in (batch, outputs)
              for s in (slice(0, 1), slice(1, 4))]
    total = sum(float(objective.loss_and_sums(halves[2 + i], halves[i],
                                              objective.denominators(batch))[0])
                for i in range(2))
    assert total == pytest.approx(mlm + 50 * disc, rel=1e-5)


def test_sampling_is_seeded_and_follows_the_softmax():
    peaked = np.full((2, 3, VOCAB), -30.0, np.float32)
    peaked[..., 7] = 30.0
    np.testing.assert_array_equal(sample_replacements(tf.constant(peaked), constant([1, 2])), 7)
    # Frequencies follow the softmax: p = 1/6, 2/6, 3/6.
    logits = tf.broadcast_to(tf.math.log([1.0, 2.0, 3.0]), (60000, 1, 3))
    counts = np.bincount(sample_replacements(logits, constant([5, 6])).numpy().ravel(), minlength=3)
    np.testing.assert_allclose(counts / 60000, [1 / 6, 2 / 6, 3 / 6], atol=0.01)
    flat = tf.zeros((4, 16, VOCAB))
    a = sample_replacements(flat, constant([1, 2]))
    np.testing.assert_array_equal(a, sample_replacements(flat, constant([1, 2])))
    assert not np.array_equal(a, sample_replacements(flat, constant([1, 3])))


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(3)
    return ElectraPretrainingModel(tiny_bert_config(embedding_size=16), sampling_seed=4)


def test_the_generator_gets_no_gradient_from_the_discriminator_loss(model):
    objective = ElectraObjective(VOCAB)
    batch = {k: tf.constant(v) for k, v in synthetic_examples(8, seed=5).items()}
    shared = model.encoder.token_embedding.embeddings
    discriminator = {id(v) for v in model.encoder.trainable_variables}
    generator_only = [v for v in (model.generator.trainable_variables
                                  + model.generator_head.trainable_variables)
                      if id(v) not in discriminator]  # the head's list holds the tied table
    assert len(generator_only) > 10
    with tf.GradientTape(persistent=True) as tape:
        outputs = objective.forward(model, batch, training=True)
        _, sums = objective.loss_and_sums(outputs, batch, objective.denominators(batch))
        disc = sums["disc_ce"] / sums["disc_tokens"]
        mlm = sums["mlm_weighted_ce"] / sums["mlm_weight"]
    # The sample is an id: nothing flows from the discriminator back into the generator.
    assert all(g is None for g in tape.gradient(disc, generator_only))
    # The one shared word table learns from both losses.
    for loss in (disc, mlm):
        grad = tf.convert_to_tensor(tape.gradient(loss, shared))
        assert float(tf.reduce_max(tf.abs(grad))) > 0
    # The discriminator's own weights get nothing from the generator's loss.
    assert all(g is None for g in tape.gradient(
        mlm, model.discriminator_head.trainable_variables))


def test_the_step_compiles_with_xla(model):
    # XLA is the default on TPUs and GPUs: every op of the forward pass, the sampler's draw
    # included, must have an XLA kernel (TensorFlow's stateless multinomial has none).
    objective = ElectraObjective(VOCAB)
    batch = {k: tf.constant(v) for k, v in synthetic_examples(4, seed=9).items()}

    @tf.function(jit_compile=True, autograph=False)
    def loss():
        outputs = objective.forward(model, batch, training=True)
        return objective.loss_and_sums(outputs, batch, objective.denominators(batch))[0]

    assert math.isfinite(float(loss()))


def test_training_draws_advance_the_sampler_and_eval_draws_do_not(model):
    objective = ElectraObjective(VOCAB)
    batch = {k: tf.constant(v) for k, v in synthetic_examples(4, seed=6).items()}
    before = model.sampler.state.numpy().copy()
    objective.forward(model, batch, training=False)
    np.testing.assert_array_equal(model.sampler.state.numpy(), before)
    objective.forward(model, batch, training=True)
    assert not np.array_equal(model.sampler.state.numpy(), before)


def peaked_model():
    """The tiny ELECTRA whose generator puts all its mass on id 7: every sample is 7 whatever
    the draws, so that one batch and two micro-batches (or two precisions) corrupt alike."""
    model = ElectraPretrainingModel(tiny_bert_config(embedding_size=16), sampling_seed=7)
    bias = np.zeros(VOCAB, np.float32)
    bias[7] = 30.0  # p(7) = 1 - 1e-11; the MLM loss stays below the divergence bound
    model.generator_head._bias.assign(bias)
    return model


def make_trainer(output_dir, **overrides):
    config = dict(output_dir=os.fspath(output_dir), train_batch_size=8, eval_batch_size=8,
                  num_train_steps=3, save_checkpoints_steps=3, log_every_n_steps=3,
                  use_xla=False, use_nsp=False, seed=7)
    config.update(overrides)
    opt = optimization.OptimizerConfig(learning_rate=1e-3, num_train_steps=3, num_warmup_steps=1)

    return trainer.Trainer(
        trainer.TrainerConfig(**config), tf.distribute.OneDeviceStrategy("/cpu:0"),
        model_fn=peaked_model, optimizer_fn=lambda: optimization.create_optimizer(opt),
        objective=ElectraObjective(VOCAB))


@pytest.fixture(scope="module")
def examples():
    return synthetic_examples(32, seed=8)


def test_gradient_accumulation_equals_one_big_batch(tmp_path, examples):
    # 2 micro-batches of 4 (with 16 and 4 masked tokens) == one batch of 8.
    one = make_trainer(tmp_path / "one")
    two = make_trainer(tmp_path / "two", gradient_accumulation_steps=2)
    ours, ref = two.train(blocks_dataset_fn(examples)), one.train(blocks_dataset_fn(examples))
    np.testing.assert_allclose(ours.losses, ref.losses, rtol=2e-6)
    assert len(set(np.round(ref.losses, 5))) == 3  # it trains
    for a, b in zip(two.model.trainable_variables, one.model.trainable_variables):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=2e-6, err_msg=a.path)


def test_mixed_precision_loss_is_close_to_float32(examples):
    # The same seeded initial weights, batch and samples; bfloat16 compute only. (The trainer's
    # precision handling is the same for every objective: tests/test_trainer.py.)
    batch = {k: tf.constant(v[:8]) for k, v in examples.items()}

    def first_loss():
        keras.utils.set_random_seed(7)
        model = peaked_model()
        objective = ElectraObjective(VOCAB)
        outputs = objective.forward(model, batch, training=True)
        return model, float(objective.loss_and_sums(outputs, batch,
                                                    objective.denominators(batch))[0])

    _, reference = first_loss()
    keras.mixed_precision.set_dtype_policy("mixed_bfloat16")
    try:
        model, loss = first_loss()
    finally:
        keras.mixed_precision.set_dtype_policy("float32")
    assert model.encoder.compute_dtype == "bfloat16"
    assert model.encoder.token_embedding.embeddings.dtype == "float32"
    assert loss == pytest.approx(reference, rel=1e-2)
    assert loss != reference  # bfloat16 did compute


def test_a_weak_discriminator_is_named_after_an_evaluation():
    objective = ElectraObjective(vocab_size=100)
    notes = objective.eval_notes({"discriminator_auc": 0.553, "discriminator_loss": 0.4001})
    assert len(notes) == 1
    assert notes[0].startswith("the discriminator's held-out AUC is 0.553 (0.5 is chance)")
    assert objective.eval_notes({"discriminator_auc": 0.6}) == []
    assert objective.eval_notes({"discriminator_auc": float("nan")}) == []
    assert objective.eval_notes({"loss": 1.0}) == []  # not an ELECTRA evaluation
    assert Objective().eval_notes({"discriminator_auc": 0.5}) == []
