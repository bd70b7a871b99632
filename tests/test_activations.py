"""Tests for bert_tf.modeling.activations: both GELUs against hand-computed values."""

from __future__ import annotations

import math

import _reference_bert as ref
import keras
import numpy as np
import pytest
import tensorflow as tf

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


def _numeric_derivative(f64, x):
    """Central difference of a float64 NumPy function (error ~1e-10 at h=1e-5)."""
    h = 1e-5
    return (f64(x + h) - f64(x - h)) / (2 * h)


@pytest.mark.parametrize("function, reference", [(gelu_exact, ref.gelu_exact),
                                                 (gelu_approximate, ref.gelu_tanh)])
def test_gelu_gradients_match_the_derivative(function, reference):
    # The gradient is a hand-written, XLA-compiled function: check it against the float64
    # derivative of the reference formula and against autodiff through Keras' own gelu.
    x = tf.constant(np.linspace(-6, 6, 2401), tf.float32)
    dy = tf.constant(np.random.default_rng(0).normal(size=2401), tf.float32)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        ours = tf.reduce_sum(function(x) * dy)
        approximate = function is gelu_approximate
        keras_own = tf.reduce_sum(keras.activations.gelu(x, approximate=approximate) * dy)
    got = tape.gradient(ours, x).numpy()
    expected = dy.numpy() * _numeric_derivative(reference, x.numpy().astype(np.float64))
    keras_grad = tape.gradient(keras_own, x).numpy()
    # Beyond |x| ~ 4.5, 1 + tanh(u) is a few float32 ulps (then exactly 0): both this
    # gradient and autodiff through Keras' gelu are off by up to 1e-5 there.
    np.testing.assert_allclose(got, expected, atol=1e-5)
    np.testing.assert_allclose(got, keras_grad, atol=1e-5)
    inner = np.abs(x.numpy()) < 4
    np.testing.assert_allclose(got[inner], expected[inner], atol=3e-6, rtol=1e-5)
    np.testing.assert_allclose(got[inner], keras_grad[inner], atol=3e-6, rtol=1e-5)


@pytest.mark.parametrize("dtype, atol", [("bfloat16", 2e-2), ("float16", 2e-3)])
def test_gelu_gradient_in_half_precision(dtype, atol):
    # Mixed precision runs the feed-forward in bf16/fp16: the gradient keeps that dtype.
    x = tf.cast(tf.linspace(-4.0, 4.0, 161), dtype)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = gelu_approximate(x)
    grad = tape.gradient(y, x)
    assert y.dtype == grad.dtype == tf.as_dtype(dtype)
    expected = _numeric_derivative(ref.gelu_tanh, tf.cast(x, tf.float64).numpy())
    np.testing.assert_allclose(tf.cast(grad, tf.float64).numpy(), expected, atol=atol)


def test_gelu_gradient_inside_a_graph_and_under_xla():
    x = tf.constant(np.linspace(-3, 3, 64).reshape(8, 8), tf.float32)

    def grad(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.reduce_sum(gelu_approximate(x) ** 2)
        return tape.gradient(y, x)

    eager = grad(x).numpy()
    np.testing.assert_allclose(tf.function(grad)(x).numpy(), eager, atol=1e-6)
    np.testing.assert_allclose(tf.function(grad, jit_compile=True)(x).numpy(), eager, atol=1e-6)
