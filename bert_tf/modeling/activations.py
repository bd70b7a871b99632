"""Keras activation functions for the `hidden_act` names of `BertConfig`.

Both GELUs are registered as Keras-serializable functions under the package "bert_tf", so a
saved model records which one it used and reloads without custom_objects.
"""

from __future__ import annotations

from typing import Callable

import keras

from bert_tf.modeling.config import ACTIVATIONS


@keras.saving.register_keras_serializable(package="bert_tf")
def gelu_exact(x):
    """GELU with the erf: x * Phi(x) = 0.5 x (1 + erf(x / sqrt(2)))."""
    return keras.activations.gelu(x, approximate=False)


@keras.saving.register_keras_serializable(package="bert_tf")
def gelu_approximate(x):
    """GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return keras.activations.gelu(x, approximate=True)


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
