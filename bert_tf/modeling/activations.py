"""Keras activation functions for the `hidden_act` names of `BertConfig`.

Both GELUs are registered as Keras-serializable functions under the package "bert_tf", so a
saved model records which one it used and reloads without custom_objects.

The GELUs compute their forward pass with Keras' own `gelu` (so an exported inference graph
is plain TensorFlow ops) and their gradient with one XLA-compiled element-wise function. As
separate TensorFlow ops the gradient of the tanh GELU is about ten passes over a
[batch * seq_len, intermediate] tensor; fused it is one, and markedly faster on a CPU
(docs/results/pretraining.md; benchmarks/pretraining/bench_pretraining.py measures the whole step).
Nested inside an XLA-compiled
step (TPU, `--use_xla`) the compiled function is simply inlined.
"""

from __future__ import annotations

import math
from typing import Callable

import keras
import tensorflow as tf

from bert_tf.modeling.config import ACTIVATIONS

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT_2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_TANH_CUBIC = 0.044715  # the tanh approximation's cubic coefficient


@tf.function(jit_compile=True, autograph=False, reduce_retracing=True)
def _gelu_tanh_grad(x, dy):
    """dy * d/dx [0.5 x (1 + tanh(u))], u = sqrt(2/pi) (x + 0.044715 x^3)."""
    t = tf.tanh(_SQRT_2_OVER_PI * (x + _TANH_CUBIC * x * x * x))
    du = _SQRT_2_OVER_PI * (1.0 + 3.0 * _TANH_CUBIC * x * x)
    return dy * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du)


@tf.function(jit_compile=True, autograph=False, reduce_retracing=True)
def _gelu_erf_grad(x, dy):
    """dy * d/dx [x Phi(x)] = dy * (Phi(x) + x phi(x))."""
    cdf = 0.5 * (1.0 + tf.math.erf(x * _INV_SQRT_2))
    pdf = _INV_SQRT_2PI * tf.exp(-0.5 * x * x)
    return dy * (cdf + x * pdf)


def _with_fused_gradient(forward: Callable, gradient: Callable) -> Callable:
    """forward(x), differentiated by gradient(x, dy) instead of through forward's ops."""

    @tf.custom_gradient
    def function(x):
        x = tf.convert_to_tensor(x)
        return forward(x), lambda dy: gradient(x, dy)

    return function


_gelu_tanh = _with_fused_gradient(lambda x: keras.activations.gelu(x, approximate=True),
                                  _gelu_tanh_grad)
_gelu_erf = _with_fused_gradient(lambda x: keras.activations.gelu(x, approximate=False),
                                 _gelu_erf_grad)


@keras.saving.register_keras_serializable(package="bert_tf")
def gelu_exact(x):
    """GELU with the erf: x * Phi(x) = 0.5 x (1 + erf(x / sqrt(2)))."""
    return _gelu_erf(x)


@keras.saving.register_keras_serializable(package="bert_tf")
def gelu_approximate(x):
    """GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return _gelu_tanh(x)


_FUNCTIONS = {
    "gelu_exact": gelu_exact,
    "gelu_approximate": gelu_approximate,
    "relu": keras.activations.relu,
    "tanh": keras.activations.tanh,
}


def get_activation(hidden_act: str) -> Callable:
    """The Keras activation for a `hidden_act` name (any alias accepted by BertConfig).

    Raises:
        KeyError: an unknown name (BertConfig has already rejected it for user input).
    """
    return _FUNCTIONS[ACTIVATIONS[hidden_act]]
