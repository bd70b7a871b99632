"""Tests for bert_tf.finetune.retrieval.contrastive_loss: the in-batch loss against a NumPy
MultipleNegativesRankingLoss, padding rows, the trainer's contract, and GradCache giving the
plain loss and gradients on one batch (dropout off and on)."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
from _pretraining_helpers import VOCAB, tiny_bert_config

from bert_tf.finetune.retrieval import contrastive_loss as cl
from bert_tf.finetune.retrieval.embedder import BertEmbedder
from bert_tf.training import checkpointing


def numpy_mnrl(queries, passages, scale=20.0):
    """sentence-transformers' loss: cos_sim * scale, cross entropy, target column i."""
    q = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    p = passages / np.linalg.norm(passages, axis=1, keepdims=True)
    logits = (q @ p.T) * scale
    logits -= logits.max(axis=1, keepdims=True)
    log_softmax = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return -log_softmax[np.arange(len(q)), np.arange(len(q))]


def test_in_batch_losses_equal_the_reference():
    rng = np.random.default_rng(0)
    queries = rng.standard_normal((4, 6)).astype(np.float32)
    passages = rng.standard_normal((12, 6)).astype(np.float32)  # 4 positives, 2 x 4 negatives
    losses, correct = cl.in_batch_losses(queries, passages)
    np.testing.assert_allclose(losses.numpy(), numpy_mnrl(queries, passages), rtol=1e-5)
    scores = queries @ passages.T / np.linalg.norm(queries, axis=1)[:, None] / np.linalg.norm(
        passages, axis=1)[None, :]
    np.testing.assert_array_equal(correct.numpy(), (scores.argmax(1) == np.arange(4)) * 1.0)
    # Orthogonal texts, each query its own positive: log(1 + 2 exp(scale * (0 - 1))).
    same = np.eye(3, dtype=np.float32) * 5
    losses, correct = cl.in_batch_losses(same, same, scale=1.0)
    np.testing.assert_allclose(losses.numpy(), np.log(1 + 2 * np.exp(-1.0)), rtol=1e-6)
    assert correct.numpy().tolist() == [1.0, 1.0, 1.0]


def test_passages_are_ordered_as_sentence_transformers_orders_them():
    ids = np.arange(2 * 3 * 4, dtype=np.int32).reshape(2, 3, 4)  # [batch, 1 + n, len]
    batch = {f"passage_{name}": ids for name in ("input_ids", "input_mask", "segment_ids")}
    rows = cl.passage_rows(batch)["input_ids"].numpy()
    # positives of examples 0, 1, then their first negatives, then their second.
    np.testing.assert_array_equal(rows, [ids[0, 0], ids[1, 0], ids[0, 1], ids[1, 1],
                                         ids[0, 2], ids[1, 2]])


def make_batch(seed, batch=8, negatives=1, query_len=6, passage_len=10):
    rng = np.random.default_rng(seed)

    def texts(shape):
        length = shape[-1]
        lengths = rng.integers(2, length + 1, size=shape[:-1])
        mask = (np.arange(length) < lengths[..., None]).astype(np.int32)
        ids = rng.integers(5, VOCAB, size=shape).astype(np.int32) * mask
        return ids, mask

    q_ids, q_mask = texts((batch, query_len))
    p_ids, p_mask = texts((batch, 1 + negatives, passage_len))
    return {"query_input_ids": q_ids, "query_input_mask": q_mask,
            "query_segment_ids": np.zeros_like(q_ids),
            "passage_input_ids": p_ids, "passage_input_mask": p_mask,
            "passage_segment_ids": np.zeros_like(p_ids)}


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(1)
    embedder = BertEmbedder(tiny_bert_config(hidden_act="relu"), pooling="mean")
    embedder({k[len("query_"):]: v for k, v in make_batch(0).items() if k.startswith("query_")})
    return embedder


def test_objective_loss_is_the_mean_and_padding_rows_do_not_count(model):
    objective = cl.BiEncoderObjective()
    batch = {k: tf.constant(v) for k, v in make_batch(2, batch=5).items()}
    outputs = objective.forward(model, batch, training=False)
    assert outputs["query_embedding"].shape == (5, 32)
    assert outputs["passage_embedding"].shape == (10, 32)
    share, sums = objective.loss_and_sums(outputs, batch, objective.denominators(batch))
    expected = numpy_mnrl(outputs["query_embedding"].numpy(),
                          outputs["passage_embedding"].numpy())
    np.testing.assert_allclose(share.numpy(), expected.mean(), rtol=1e-5)
    assert objective.metrics(sums)["loss"].numpy() == pytest.approx(expected.mean(), rel=1e-5)
    # Rows 3 and 4 as padding: the loss of rows 0-2 alone, whose negatives exclude them.
    padded = dict(batch, example_index=tf.constant([0, 1, 2, -1, -1]))
    share, sums = objective.loss_and_sums(outputs, padded, objective.denominators(padded))
    keep = [0, 1, 2, 5, 6, 7]  # rows 0-2's positives and negatives
    alone = numpy_mnrl(outputs["query_embedding"].numpy()[:3],
                       outputs["passage_embedding"].numpy()[keep])
    np.testing.assert_allclose(share.numpy(), alone.mean(), rtol=1e-5)
    assert sums["num_examples"].numpy() == 3.0


def plain_gradients(model, objective, batch):
    denominators = objective.denominators(batch)
    with tf.GradientTape() as tape:
        outputs = objective.forward(model, batch, training=True)
        share, sums = objective.loss_and_sums(outputs, batch, denominators)
    grads = tape.gradient(share, model.trainable_variables)
    return share, [None if g is None else tf.convert_to_tensor(g) for g in grads]


def test_grad_cache_equals_the_plain_loss_and_gradients(model):
    objective = cl.BiEncoderObjective()
    batch = {k: tf.constant(v) for k, v in make_batch(3, batch=8, negatives=1).items()}

    share, plain = plain_gradients(model, objective, batch)

    @tf.function(autograph=False)  # as the trainer runs it: the loops in graph mode
    def cached_step():
        # 3 texts at a time: 8 queries in 3 + 3 + 2, 16 passages in 5 x 3 + 1.
        cached, sums = objective.cached_gradients(model, batch, objective.denominators(batch),
                                                  mini_batch_size=3)
        return objective.metrics(sums)["loss"], cached

    cached_loss, cached = cached_step()
    assert abs(float(share) - float(cached_loss)) < 1e-5
    assert [g is None for g in plain] == [g is None for g in cached]
    assert sum(g is not None for g in plain) > 10 and any(g is None for g in plain)  # pooler
    worst = max(float(tf.reduce_max(tf.abs(a - b))) for a, b in zip(plain, cached)
                if a is not None)
    scale = max(float(tf.reduce_max(tf.abs(a))) for a in plain if a is not None)
    assert worst < 1e-5 and scale > 1e-3


def test_grad_cache_replays_the_dropout_masks():
    # With dropout on, the cached gradients must equal those of the same mini-batch forward
    # passes taken with a tape: step 3 draws the masks of step 1 again.
    keras.utils.set_random_seed(4)
    model = BertEmbedder(tiny_bert_config(hidden_act="relu", hidden_dropout_prob=0.3,
                                          attention_probs_dropout_prob=0.2))
    objective = cl.BiEncoderObjective()
    batch = {k: tf.constant(v) for k, v in make_batch(5, batch=4).items()}
    model(cl.query_inputs(batch))
    seeds = checkpointing.seed_state_variables(model)
    assert seeds
    start = [s.numpy() for s in seeds]
    cached, sums = objective.cached_gradients(model, batch, objective.denominators(batch), 2)
    for state, value in zip(seeds, start):
        state.assign(value)
    with tf.GradientTape() as tape:
        parts = [[model({k: v[i:i + 2] for k, v in inputs.items()}, training=True)["embedding"]
                  for i in range(0, int(inputs["input_ids"].shape[0]), 2)]
                 for inputs in (cl.query_inputs(batch), cl.passage_rows(batch))]
        share, _ = objective.loss_and_sums({"query_embedding": tf.concat(parts[0], 0),
                                            "passage_embedding": tf.concat(parts[1], 0)},
                                           batch, objective.denominators(batch))
    reference = tape.gradient(share, model.trainable_variables)
    assert abs(float(share) - float(objective.metrics(sums)["loss"])) < 1e-5
    worst = max(float(tf.reduce_max(tf.abs(tf.convert_to_tensor(a) - b)))
                for a, b in zip(reference, cached) if a is not None)
    assert worst < 1e-5
    # Without the replay the masks differ: the same batch gives another loss.
    again, _ = plain_gradients(model, objective, batch)
    assert abs(float(again) - float(share)) > 1e-4
