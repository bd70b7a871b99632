"""Tests for bert_tf.modeling.activations: both GELUs against hand-computed values."""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest

import reference_bert as ref
from bert_tf.modeling.activations import gelu_approximate, gelu_exact, get_activation

# x, x * Phi(x) (exact), 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))) (approximate).
HAND_VALUES = [
    (0.0, 0.0, 0.0),
    (1.0, 0.8413447460685429, 0.8411919906082768),
    (-1.0, -0.15865525393145707, -0.15880800939172324),
    (2.0, 1.9544997361036416, 1.9545976940871754),
    (-3.0, -0.0040496940948903, -0.0036373920817729),
]


@pytest.mark.parametrize("x, exact, approximate", HAND_VALUES)
def test_gelu_hand_values(x, exact, approximate):
    def run(f):
        return float(keras.ops.convert_to_numpy(f(keras.ops.convert_to_tensor([x]))[0]))

    assert run(gelu_exact) == pytest.approx(exact, abs=1e-6)
    assert run(gelu_approximate) == pytest.approx(approximate, abs=1e-6)


def test_hand_values_are_the_formulas():
    for x, exact, approximate in HAND_VALUES:
        assert 0.5 * x * (1 + math.erf(x / math.sqrt(2))) == pytest.approx(exact, abs=1e-9)
        assert float(ref.gelu_tanh(np.float64(x))) == pytest.approx(approximate, abs=1e-12)


def test_gelus_on_a_grid():
    x = np.linspace(-6, 6, 2401).astype(np.float32)
    exact = keras.ops.convert_to_numpy(gelu_exact(x))
    approx = keras.ops.convert_to_numpy(gelu_approximate(x))
    np.testing.assert_allclose(exact, ref.gelu_exact(x.astype(np.float64)), atol=2e-6)
    np.testing.assert_allclose(approx, ref.gelu_tanh(x.astype(np.float64)), atol=2e-6)
    # The documented bound: the two differ, by less than 5e-4 (the maximum is 4.73e-4).
    gap = np.abs(exact - approx).max()
    assert 3e-4 < gap < 5e-4, gap


@pytest.mark.parametrize(
    "name, x, expected",
    [("relu", -2.0, 0.0), ("relu", 3.0, 3.0), ("tanh", 0.5, math.tanh(0.5)),
     ("gelu_new", 1.0, 0.8411919906082768), ("gelu", 1.0, 0.8411919906082768),
     ("gelu_exact", 1.0, 0.8413447460685429)],
)
def test_get_activation(name, x, expected):
    f = get_activation(name)
    assert float(keras.ops.convert_to_numpy(f(np.array([x], np.float32)))[0]) == pytest.approx(
        expected, abs=1e-6
    )


def test_registered_for_serialization():
    for f in (gelu_exact, gelu_approximate):
        restored = keras.activations.deserialize(keras.activations.serialize(f))
        assert restored is f
