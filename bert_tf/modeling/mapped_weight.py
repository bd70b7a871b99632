"""`MappedWeight`: one model variable seen in its canonical shape (for the weight maps).

`bert_tf.modeling.weight_map` (BERT) and `bert_tf.modeling.modern_weights` (the modern
encoder) map canonical names to these; converters read and assign through them.
"""

from __future__ import annotations

import dataclasses
from typing import Tuple

import keras
import numpy as np

from bert_tf.core.errors import UserError


@dataclasses.dataclass(frozen=True)
class MappedWeight:
    """One model variable seen in its canonical shape.

    Attributes:
        variable: the Keras variable.
        shape: the canonical shape (a reshape of `variable.shape`).
    """

    variable: keras.Variable
    shape: Tuple[int, ...]

    def numpy(self) -> np.ndarray:
        """The value in the canonical shape (float32 numpy)."""
        value = keras.ops.convert_to_numpy(self.variable.value)
        return np.reshape(value, self.shape)

    def assign(self, value: np.ndarray, name: str = "weight") -> None:
        """Sets the variable from a value in the canonical shape.

        Raises:
            UserError: the value has the wrong shape.
        """
        value = np.asarray(value)
        if tuple(value.shape) != tuple(self.shape):
            raise UserError(
                f"weight {name}: shape {tuple(value.shape)} does not match the model's "
                f"{tuple(self.shape)}"
            )
        self.variable.assign(np.reshape(value, self.variable.shape).astype(self.variable.dtype))


@dataclasses.dataclass(frozen=True)
class TransposedWeight(MappedWeight):
    """A 2-D variable whose canonical value is its transpose (`shape` is the canonical one)."""

    def numpy(self) -> np.ndarray:
        return np.ascontiguousarray(keras.ops.convert_to_numpy(self.variable.value).T)

    def assign(self, value: np.ndarray, name: str = "weight") -> None:
        value = np.asarray(value)
        if tuple(value.shape) != tuple(self.shape):
            raise UserError(
                f"weight {name}: shape {tuple(value.shape)} does not match the model's "
                f"{tuple(self.shape)}"
            )
        self.variable.assign(np.ascontiguousarray(value.T).astype(self.variable.dtype))
