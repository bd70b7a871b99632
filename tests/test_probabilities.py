"""Tests for bert_tf.finetune.probabilities: log_softmax by hand and at extreme logits."""

from __future__ import annotations

import math

import numpy as np

from bert_tf.finetune import probabilities


def test_log_softmax_by_hand():
    got = probabilities.log_softmax([[0.0, math.log(3.0)], [1.0, 1.0]])
    # exp: [1, 3] -> probabilities [1/4, 3/4]; equal logits -> [1/2, 1/2].
    np.testing.assert_allclose(got, np.log([[0.25, 0.75], [0.5, 0.5]]), rtol=0, atol=1e-15)
    assert got.dtype == np.float64


def test_log_softmax_is_stable_at_large_logits():
    # exp(1000) overflows float64; shifted by the max it does not.
    got = probabilities.log_softmax(np.array([[1000.0, 1000.0 - math.log(3.0)]], np.float32))
    np.testing.assert_allclose(got, np.log([[0.75, 0.25]]), atol=1e-4)
    assert np.isfinite(got).all()


def test_log_sigmoid_by_hand_and_at_extreme_logits():
    got = probabilities.log_sigmoid([0.0, math.log(3.0), -math.log(3.0), 800.0, -800.0])
    # sigmoid(ln 3) = 3/4, sigmoid(-ln 3) = 1/4; log(1 - s(x)) = log_sigmoid(-x).
    np.testing.assert_allclose(got[:3], np.log([0.5, 0.75, 0.25]), rtol=0, atol=1e-15)
    assert got[3] == 0.0 and got[4] == -800.0  # no overflow to inf or nan
