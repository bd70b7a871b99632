"""Pooling an encoder's sequence output into one vector per text, as sentence-transformers.

The modes of sentence-transformers' `Pooling` module that a bi-encoder uses, with its
arithmetic, so that a sentence-transformers model read into bert_tf gives the same vectors:

* mean: sum of the real tokens' vectors / max(number of real tokens, 1e-9);
* cls: the first position ([CLS]);
* max: element-wise max over the real tokens, padding set to -1e9 first;

then, by default, L2 normalisation as its `Normalize` module: v / max(||v||, 1e-12). Always
computed in float32 (under mixed precision too: the vectors are compared by dot products).

`mode_from_sentence_transformers` reads a `1_Pooling/config.json`; a configuration with
another mode (mean_sqrt_len_tokens, weightedmean, lasttoken) or several modes at once
(their vectors concatenated) is refused with one line.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

import keras

from bert_tf.core.errors import UserError

POOLING_MODES = ("mean", "cls", "max")
MASKED_VALUE = -1e9  # sentence-transformers' value for padding before the max
# sentence-transformers' `pooling_mode_*` booleans and their constructor defaults.
ST_MODE_KEYS = {"pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True,
                "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False,
                "pooling_mode_weightedmean_tokens": False, "pooling_mode_lasttoken": False}
_ST_NAMES = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean",
             "pooling_mode_max_tokens": "max",
             "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
             "pooling_mode_weightedmean_tokens": "weightedmean",
             "pooling_mode_lasttoken": "lasttoken"}


def l2_normalize(vectors: Any) -> Any:
    """float32 [batch, hidden] rows divided by max(their L2 norm, 1e-12)."""
    vectors = keras.ops.cast(vectors, "float32")
    norm = keras.ops.sqrt(keras.ops.sum(keras.ops.square(vectors), axis=-1, keepdims=True))
    return vectors / keras.ops.maximum(norm, 1e-12)


def pool(sequence: Any, input_mask: Any, mode: str = "mean", normalize: bool = True) -> Any:
    """One vector per row of the sequence output.

    Args:
        sequence: [batch, seq_len, hidden], any float dtype.
        input_mask: int [batch, seq_len], 1 for real tokens, 0 for padding.
        mode: "mean", "cls" or "max" (module docstring).
        normalize: L2-normalise the vectors.

    Returns:
        float32 [batch, hidden].
    """
    if mode not in POOLING_MODES:
        raise ValueError(f"unknown pooling mode {mode!r} (expected one of "
                         f"{', '.join(POOLING_MODES)})")
    sequence = keras.ops.cast(sequence, "float32")
    mask = keras.ops.cast(input_mask, "float32")[:, :, None]  # [batch, seq_len, 1]
    if mode == "cls":
        vectors = sequence[:, 0, :]
    elif mode == "max":
        vectors = keras.ops.max(keras.ops.where(mask > 0, sequence, MASKED_VALUE), axis=1)
    else:
        total = keras.ops.sum(sequence * mask, axis=1)  # [batch, hidden]
        vectors = total / keras.ops.maximum(keras.ops.sum(mask, axis=1), 1e-9)
    return l2_normalize(vectors) if normalize else vectors


@keras.saving.register_keras_serializable(package="bert_tf")
class Pooling(keras.layers.Layer):
    """`pool` as a layer: call(sequence [batch, seq_len, hidden], input_mask [batch, seq_len])
    -> float32 [batch, hidden]."""

    def __init__(self, mode: str = "mean", normalize: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if mode not in POOLING_MODES:
            raise ValueError(f"unknown pooling mode {mode!r} (expected one of "
                             f"{', '.join(POOLING_MODES)})")
        self.mode = mode
        self.normalize = normalize

    def call(self, sequence, input_mask):
        return pool(sequence, input_mask, self.mode, self.normalize)

    def compute_output_shape(self, sequence_shape, input_mask_shape=None):
        return (sequence_shape[0], sequence_shape[-1])

    def get_config(self) -> Dict[str, Any]:
        return {**super().get_config(), "mode": self.mode, "normalize": self.normalize}


def mode_from_sentence_transformers(config: Mapping[str, Any], path: str = "1_Pooling") -> str:
    """The pooling mode of a sentence-transformers `1_Pooling/config.json`.

    Reads the `pooling_mode` string when present, else the `pooling_mode_*` booleans (absent
    ones take sentence-transformers' defaults: mean on, the others off).

    Raises:
        UserError: naming `path`, for a mode other than mean, cls or max, or several modes.
    """
    named: Optional[str] = config.get("pooling_mode")
    if named is not None:
        chosen = [str(named).lower()]
    else:
        chosen = [_ST_NAMES[key] for key, default in ST_MODE_KEYS.items()
                  if bool(config.get(key, default))]
    if len(chosen) != 1:
        what = f"pooling modes {', '.join(chosen)} at once" if chosen else "no pooling mode on"
        raise UserError(f"{path}: {what}: bert_tf pools with exactly one of "
                        f"{', '.join(POOLING_MODES)}")
    if chosen[0] not in POOLING_MODES:
        raise UserError(f"{path}: pooling mode {chosen[0]!r} is not supported (bert_tf pools "
                        f"with {', '.join(POOLING_MODES)})")
    return chosen[0]
