"""Tests for bert_tf.training.losses: hand-computed values and the global-batch reduction."""

from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.training import losses


def np_(t) -> np.ndarray:
    return np.asarray(t.numpy() if hasattr(t, "numpy") else t)


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def test_uniform_logits_give_log_vocab():
    vocab = 5
    logits = tf.zeros([2, 3, vocab])
    ids = tf.constant([[1, 2, 0], [4, 0, 0]])
    weights = tf.constant([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    ce_sum, w_sum = losses.masked_lm_loss(logits, ids, weights)
    np.testing.assert_allclose(np_(ce_sum), [2 * math.log(5), math.log(5)], rtol=1e-6)
    np.testing.assert_array_equal(np_(w_sum), [2.0, 1.0])
    assert ce_sum.dtype == tf.float32 and w_sum.dtype == tf.float32


def test_one_hot_logits():
    # Logit 3 on the right id, 0 on the 4 others: CE = ln(1 + 4 e^-3) = ln(1.19915) = 0.18161
    vocab, ids = 5, np.array([[2, 3]])
    logits = np.zeros([1, 2, vocab], np.float32)
    logits[0, 0, 2] = 3.0
    logits[0, 1, 0] = 3.0  # wrong: the argmax is 0, the id 3
    ce_sum, w_sum = losses.masked_lm_loss(logits, ids, np.array([[1.0, 1.0]]))
    right = math.log(1 + 4 * math.exp(-3))
    wrong = math.log(math.exp(3) + 4) - 0.0  # -log(e^0 / (e^3 + 4))
    assert float(ce_sum[0]) == pytest.approx(right + wrong, rel=1e-6)
    assert right == pytest.approx(0.1816115, abs=1e-6)
    correct = losses.masked_lm_correct(logits, ids, np.array([[1.0, 1.0]]))
    assert np_(correct).tolist() == [1.0]
    # Weights scale both terms.
    ce_w, w_w = losses.masked_lm_loss(logits, ids, np.array([[0.5, 0.0]]))
    assert float(ce_w[0]) == pytest.approx(0.5 * right, rel=1e-6)
    assert float(w_w[0]) == 0.5
    assert np_(losses.masked_lm_correct(logits, ids, np.array([[0.5, 0.0]]))).tolist() == [0.5]


def test_masked_lm_loss_matches_numpy_log_softmax():
    rng = np.random.default_rng(0)
    logits = (rng.standard_normal((3, 4, 11)) * 4).astype(np.float32)
    ids = rng.integers(0, 11, (3, 4))
    weights = (rng.random((3, 4)) > 0.3).astype(np.float32)
    ce = -np.take_along_axis(log_softmax(logits), ids[..., None], axis=-1)[..., 0]
    ce_sum, w_sum = losses.masked_lm_loss(logits, ids, weights)
    np.testing.assert_allclose(np_(ce_sum), (ce * weights).sum(-1), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np_(w_sum), weights.sum(-1))
    correct = (logits.argmax(-1) == ids) * weights
    np.testing.assert_array_equal(np_(losses.masked_lm_correct(logits, ids, weights)),
                                  correct.sum(-1))


def test_padding_ids_with_zero_weight_do_not_count():
    logits = np.zeros([1, 3, 4], np.float32)
    logits[0, 2, 1] = 50.0  # a confident, wrong prediction at a padded slot
    ce_sum, w_sum = losses.masked_lm_loss(logits, np.array([[1, 2, 0]]),
                                          np.array([[1.0, 1.0, 0.0]]))
    assert float(ce_sum[0]) == pytest.approx(2 * math.log(4), rel=1e-6)
    assert float(w_sum[0]) == 2.0


def test_next_sentence_loss_and_correct():
    logits = tf.constant([[0.0, 0.0], [2.0, 0.0], [0.0, 3.0]])
    labels = tf.constant([[0], [0], [0]])
    ce = np_(losses.next_sentence_loss(logits, labels))
    np.testing.assert_allclose(
        ce, [math.log(2), math.log(1 + math.exp(-2)), math.log(1 + math.exp(3))], rtol=1e-6
    )
    np.testing.assert_array_equal(np_(losses.next_sentence_loss(logits, [0, 0, 0])), ce)
    # Ties go to class 0 (argmax takes the first).
    np.testing.assert_array_equal(np_(losses.next_sentence_correct(logits, labels)), [1, 1, 0])
    np.testing.assert_array_equal(np_(losses.next_sentence_correct(logits, [1, 1, 1])), [0, 0, 1])


def test_low_precision_logits_give_float32():
    logits = tf.cast(tf.constant([[[1.0, 2.0, 3.0]]]), tf.bfloat16)
    ce_sum, w_sum = losses.masked_lm_loss(logits, [[2]], [[1.0]])
    assert ce_sum.dtype == tf.float32 and w_sum.dtype == tf.float32
    assert float(ce_sum[0]) == pytest.approx(math.log(1 + math.exp(-1) + math.exp(-2)), rel=1e-5)
    nsp = losses.next_sentence_loss(tf.cast([[0.0, 0.0]], tf.float16), [[1]])
    assert nsp.dtype == tf.float32 and float(nsp[0]) == pytest.approx(math.log(2), rel=1e-6)


def make_batch(rng: np.random.Generator, batch: int, num_pred: int, vocab: int, counts):
    logits = (rng.standard_normal((batch, num_pred, vocab)) * 3).astype(np.float32)
    weights = (np.arange(num_pred)[None] < np.asarray(counts)[:, None]).astype(np.float32)
    return {
        "mlm_logits": logits,
        "nsp_logits": rng.standard_normal((batch, 2)).astype(np.float32),
        "masked_lm_ids": rng.integers(0, vocab, (batch, num_pred)) * (weights > 0),
        "masked_lm_weights": weights,
        "next_sentence_labels": rng.integers(0, 2, (batch, 1)),
    }


def test_reduce_matches_the_original_formulas():
    rng = np.random.default_rng(1)
    b = make_batch(rng, batch=3, num_pred=4, vocab=7, counts=[4, 1, 0])
    terms = losses.compute_loss_terms(b, b)
    out = losses.reduce_pretraining_losses(terms, global_mlm_weight=5.0, global_batch_size=3)
    ce = -np.take_along_axis(log_softmax(b["mlm_logits"]), b["masked_lm_ids"][..., None],
                             -1)[..., 0]
    mlm = (ce * b["masked_lm_weights"]).sum() / (b["masked_lm_weights"].sum() + 1e-5)
    nsp_ce = -np.take_along_axis(log_softmax(b["nsp_logits"]), b["next_sentence_labels"], -1)
    assert float(out["masked_lm_loss"]) == pytest.approx(mlm, rel=1e-5)
    assert float(out["next_sentence_loss"]) == pytest.approx(nsp_ce.mean(), rel=1e-5)
    assert float(out["loss"]) == pytest.approx(mlm + nsp_ce.mean(), rel=1e-5)


def test_split_batch_with_global_sums_equals_whole_batch():
    # Two "replicas" with very different numbers of masked tokens (7 vs 1 per example).
    rng = np.random.default_rng(2)
    whole = make_batch(rng, batch=4, num_pred=7, vocab=13, counts=[7, 6, 1, 1])
    halves = [{k: v[:2] for k, v in whole.items()}, {k: v[2:] for k, v in whole.items()}]

    whole_terms = losses.compute_loss_terms(whole, whole)
    whole_sums = whole_terms.local_sums()
    expected = losses.reduce_pretraining_losses(
        whole_terms, whole_sums["mlm_weight"], whole_sums["num_examples"]
    )
    half_terms = [losses.compute_loss_terms(h, h) for h in halves]
    # The all-reduce: SUM of the local sums.
    half_sums = [t.local_sums() for t in half_terms]
    global_sums = {k: half_sums[0][k] + half_sums[1][k] for k in half_sums[0]}
    assert float(global_sums["mlm_weight"]) == 15.0 and float(global_sums["num_examples"]) == 4
    shares = [
        losses.reduce_pretraining_losses(t, global_sums["mlm_weight"], global_sums["num_examples"])
        for t in half_terms
    ]
    for key in ("loss", "masked_lm_loss", "next_sentence_loss"):
        total = float(shares[0][key]) + float(shares[1][key])
        assert total == pytest.approx(float(expected[key]), rel=1e-6), key
    # A per-replica mean averaged over replicas is NOT the global loss here.
    local = [
        losses.reduce_pretraining_losses(t, s["mlm_weight"], s["num_examples"])
        for t, s in zip(half_terms, half_sums)
    ]
    naive = (float(local[0]["masked_lm_loss"]) + float(local[1]["masked_lm_loss"])) / 2
    assert abs(naive - float(expected["masked_lm_loss"])) > 1e-3
    # Metrics from the global sums equal those of the whole batch.
    m_global = losses.metrics_from_sums(global_sums)
    m_whole = losses.metrics_from_sums(whole_sums)
    for key in m_whole:
        assert float(m_global[key]) == pytest.approx(float(m_whole[key]), rel=1e-6), key


def test_metrics_from_sums_hand_values():
    sums = {"mlm_weighted_ce": 6.0, "mlm_weight": 4.0, "mlm_correct": 3.0, "num_examples": 2.0,
            "nsp_ce": 1.0, "nsp_correct": 1.0}
    m = losses.metrics_from_sums({k: tf.constant(v) for k, v in sums.items()})
    assert float(m["masked_lm_loss"]) == pytest.approx(6.0 / (4.0 + 1e-5))
    assert float(m["masked_lm_accuracy"]) == 0.75
    assert float(m["next_sentence_loss"]) == 0.5
    assert float(m["next_sentence_accuracy"]) == 0.5
    assert float(m["loss"]) == pytest.approx(6.0 / (4.0 + 1e-5) + 0.5)


def test_batch_without_predictions_and_without_nsp():
    b = make_batch(np.random.default_rng(3), batch=2, num_pred=3, vocab=5, counts=[0, 0])
    outputs = {"mlm_logits": b["mlm_logits"]}  # a --no_nsp model
    terms = losses.compute_loss_terms(outputs, b)
    assert terms.nsp_ce is None and terms.nsp_correct is None
    sums = terms.local_sums()
    assert set(sums) == {"mlm_weighted_ce", "mlm_weight", "mlm_correct", "num_examples"}
    out = losses.reduce_pretraining_losses(terms, sums["mlm_weight"], sums["num_examples"])
    assert set(out) == {"loss", "masked_lm_loss"}
    assert float(out["loss"]) == 0.0
    m = losses.metrics_from_sums(sums)
    assert float(m["masked_lm_accuracy"]) == 0.0 and "next_sentence_accuracy" not in m


def test_works_inside_tf_function():
    b = make_batch(np.random.default_rng(4), batch=2, num_pred=3, vocab=6, counts=[3, 2])
    eager = losses.compute_loss_terms(b, b).local_sums()
    graph = tf.function(lambda: losses.compute_loss_terms(b, b).local_sums())()
    for key in eager:
        assert float(graph[key]) == pytest.approx(float(eager[key]), rel=1e-6)
