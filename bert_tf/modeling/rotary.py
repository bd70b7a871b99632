"""Rotary position embeddings (RoPE) and the attention bias of padded and sliding-window keys.

RoPE (Su et al., 2021) as transformers' ModernBERT computes it: for head size d, the inverse
frequencies are theta^(-2k/d), k = 0 .. d/2 - 1; a position p gives angles p * inv_freq,
repeated twice ([a, a], d wide), and a query or key vector x becomes
x * cos + rotate_half(x) * sin, where rotate_half([x1, x2]) = [-x2, x1] swaps the two halves
(the "half-split" pairing, not GPT-J's interleaved one). The angles are computed in float32
whatever the compute dtype, as transformers does, so long positions keep their resolution.

The sliding window is ModernBERT's: a query at position i attends to the keys j with
|i - j| <= window // 2 (its `sliding_window`, half its `local_attention`).
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import tensorflow as tf


def inverse_frequencies(head_size: int, theta: float) -> np.ndarray:
    """float32 [head_size // 2]: theta^(-2k / head_size), in float32 arithmetic."""
    exponents = np.arange(0, head_size, 2, dtype=np.float32) / np.float32(head_size)
    return (np.float32(1.0) / (np.float32(theta) ** exponents)).astype(np.float32)


def cos_sin(positions, inv_freq: np.ndarray):
    """cos and sin of the rotation angles.

    Args:
        positions: int [batch, n] (or [1, n], broadcast over the batch).
        inv_freq: float32 [head_size // 2] from `inverse_frequencies`.

    Returns:
        (cos, sin), float32 [batch, 1, n, head_size] (the 1 broadcasts over heads).
    """
    angles = tf.cast(positions, tf.float32)[:, :, None] * tf.constant(inv_freq)[None, None, :]
    angles = tf.concat([angles, angles], axis=-1)  # [batch, n, head_size]
    return tf.cos(angles)[:, None], tf.sin(angles)[:, None]


def rotate(x, cos, sin):
    """Applies RoPE to x [batch, heads, n, head_size] (in float32, returned in x's dtype)."""
    dtype = x.dtype
    x32 = tf.cast(x, tf.float32)
    x1, x2 = tf.split(x32, 2, axis=-1)
    rotated = tf.concat([-x2, x1], axis=-1)
    return tf.cast(x32 * cos + rotated * sin, dtype)


def large_negative(dtype: tf.DType) -> float:
    """Added to masked attention scores: exp() of it is 0; -3e4 still fits in float16."""
    return -3e4 if dtype == tf.float16 else -1e9


def attention_bias(query_positions, padding_mask, window: Optional[int], dtype: tf.DType,
                   same_document=None):
    """What to add to the attention scores: 0 where a query may attend, a large negative
    number at padded keys, with `window` at keys farther than window // 2 and, with
    `same_document`, at keys of other documents.

    Args:
        query_positions: int32 [batch, queries] (or [1, queries]): the queries' rows.
        padding_mask: int or bool [batch, seq_len], 1 for real tokens, or None.
        window: the local attention window, or None (global attention).
        dtype: the scores' dtype.
        same_document: bool [batch, 1, queries, seq_len] of a packed batch
            (`bert_tf.modeling.packing.same_document`), or None.

    Returns:
        [batch, 1, queries, seq_len] (batch may be 1 when both inputs broadcast), or None
        when nothing is masked.
    """
    masked = None
    if padding_mask is not None:
        masked = tf.logical_not(tf.cast(padding_mask, tf.bool))[:, None, None, :]
    if window is not None:
        seq_len = tf.shape(padding_mask)[1] if padding_mask is not None else None
        if seq_len is None:
            raise ValueError("a sliding window needs the padding mask (its length)")
        keys = tf.range(seq_len, dtype=tf.int32)
        distance = tf.abs(tf.cast(query_positions, tf.int32)[:, :, None] - keys[None, None, :])
        far = (distance > window // 2)[:, None]  # [batch, 1, queries, seq_len]
        masked = far if masked is None else tf.logical_or(masked, far)
    if same_document is not None:
        other = tf.logical_not(same_document)
        masked = other if masked is None else tf.logical_or(masked, other)
    if masked is None:
        return None
    return tf.cast(masked, dtype) * large_negative(dtype)
