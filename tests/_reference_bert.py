"""An independent NumPy implementation of BERT's forward pass, used as a test oracle.

Test support, not product code. It follows the definitions of the BERT paper and the original
release, in float64, with no Keras: embeddings sum + LayerNorm, multi-head self-attention with
an additive -10000 mask on padded keys, post-LN Transformer blocks, a tanh pooler on [CLS],
the MLM head with the output layer tied to the word embeddings, and the NSP classifier.

Weights are a dict in the canonical layout of `bert_tf.modeling.weight_map` (the layout of
the original checkpoints): kernels [in, out], attention projections [hidden, hidden] whose
output columns are grouped by head (column h * head_size + d is head h, unit d).
"""

from __future__ import annotations

import math
from typing import Dict, Mapping, Tuple

import numpy as np

Weights = Mapping[str, np.ndarray]

_ERF = np.vectorize(math.erf, otypes=[np.float64])


def gelu_exact(x: np.ndarray) -> np.ndarray:
    """x * Phi(x), Phi the standard normal CDF."""
    return 0.5 * x * (1.0 + _ERF(x / math.sqrt(2.0)))


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """The tanh approximation of GELU used by the original TensorFlow release."""
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


ACTIVATIONS = {
    # Keys are bert_config.json spellings: "gelu" is the original release's tanh form.
    "gelu": gelu_tanh,
    "gelu_approximate": gelu_tanh,
    "gelu_exact": gelu_exact,
    "relu": lambda x: np.maximum(x, 0.0),
    "tanh": np.tanh,
}


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float = 1e-12):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _w(weights: Weights, name: str) -> np.ndarray:
    return np.asarray(weights[name], dtype=np.float64)


def _dense(weights: Weights, prefix: str, x: np.ndarray) -> np.ndarray:
    return x @ _w(weights, f"{prefix}/kernel") + _w(weights, f"{prefix}/bias")


def self_attention(
    weights: Weights, prefix: str, x: np.ndarray, input_mask: np.ndarray, num_heads: int
) -> np.ndarray:
    """Multi-head self-attention, before the output projection's residual and LayerNorm.

    Args:
        x: [batch, seq, hidden]; input_mask: [batch, seq] with 1 for real tokens.

    Returns:
        [batch, seq, hidden], the output projection of the attended values.
    """
    batch, seq, hidden = x.shape
    size = hidden // num_heads

    def heads(t: np.ndarray) -> np.ndarray:  # [b, s, H] -> [b, heads, s, size]
        return t.reshape(batch, seq, num_heads, size).transpose(0, 2, 1, 3)

    q = heads(_dense(weights, f"{prefix}/query", x))
    k = heads(_dense(weights, f"{prefix}/key", x))
    v = heads(_dense(weights, f"{prefix}/value", x))
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(size)  # [b, heads, s_q, s_k]
    # The original: adder = (1 - mask) * -10000 on the key axis, for every query.
    scores = scores + (1.0 - input_mask[:, None, None, :].astype(np.float64)) * -10000.0
    context = softmax(scores) @ v  # [b, heads, s, size]
    context = context.transpose(0, 2, 1, 3).reshape(batch, seq, hidden)
    return _dense(weights, f"{prefix}/output", context)


def encoder_forward(
    weights: Weights,
    input_ids: np.ndarray,
    input_mask: np.ndarray,
    segment_ids: np.ndarray,
    num_layers: int,
    num_heads: int,
    hidden_act: str = "gelu",
) -> Tuple[np.ndarray, np.ndarray]:
    """BERT encoder.

    Returns:
        (sequence_output [batch, seq, hidden], pooled_output [batch, hidden]), float64.
    """
    act = ACTIVATIONS[hidden_act]
    seq = input_ids.shape[1]
    x = (
        _w(weights, "embeddings/word_embeddings")[input_ids]
        + _w(weights, "embeddings/position_embeddings")[np.arange(seq)][None]
        + _w(weights, "embeddings/token_type_embeddings")[segment_ids]
    )
    x = layer_norm(
        x, _w(weights, "embeddings/layer_norm/gamma"), _w(weights, "embeddings/layer_norm/beta")
    )
    for i in range(num_layers):
        p = f"layer_{i}"
        attended = self_attention(weights, f"{p}/attention", x, input_mask, num_heads)
        x = layer_norm(
            x + attended,
            _w(weights, f"{p}/attention/layer_norm/gamma"),
            _w(weights, f"{p}/attention/layer_norm/beta"),
        )
        h = act(_dense(weights, f"{p}/intermediate", x))
        x = layer_norm(
            x + _dense(weights, f"{p}/output", h),
            _w(weights, f"{p}/output/layer_norm/gamma"),
            _w(weights, f"{p}/output/layer_norm/beta"),
        )
    pooled = np.tanh(_dense(weights, "pooler", x[:, 0]))
    return x, pooled


def mlm_logits(
    weights: Weights, sequence_output: np.ndarray, positions: np.ndarray, hidden_act: str
) -> np.ndarray:
    """MLM logits [batch, num_predictions, vocab] at `positions` [batch, num_predictions]."""
    gathered = np.take_along_axis(sequence_output, positions[..., None], axis=1)
    h = ACTIVATIONS[hidden_act](_dense(weights, "mlm/transform", gathered))
    h = layer_norm(
        h,
        _w(weights, "mlm/transform/layer_norm/gamma"),
        _w(weights, "mlm/transform/layer_norm/beta"),
    )
    # Tied output layer: the word-embedding table, transposed.
    return h @ _w(weights, "embeddings/word_embeddings").T + _w(weights, "mlm/output_bias")


def nsp_logits(weights: Weights, pooled_output: np.ndarray) -> np.ndarray:
    """NSP logits [batch, 2]."""
    return _dense(weights, "nsp", pooled_output)


def random_weights(
    rng: np.random.Generator,
    vocab_size: int,
    hidden: int,
    num_layers: int,
    intermediate: int,
    max_positions: int,
    type_vocab_size: int,
    with_heads: bool = True,
    scale: float = 0.2,
) -> Dict[str, np.ndarray]:
    """Random canonical weights, larger than BERT's init so every term matters numerically.

    LayerNorm gammas are 1 + noise and all biases non-zero, so a weight routed to the wrong
    place, or a transposed kernel, changes the output.
    """

    def normal(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    def gamma() -> np.ndarray:
        return (1.0 + rng.standard_normal(hidden) * 0.1).astype(np.float32)

    w: Dict[str, np.ndarray] = {
        "embeddings/word_embeddings": normal(vocab_size, hidden),
        "embeddings/position_embeddings": normal(max_positions, hidden),
        "embeddings/token_type_embeddings": normal(type_vocab_size, hidden),
        "embeddings/layer_norm/gamma": gamma(),
        "embeddings/layer_norm/beta": normal(hidden),
    }
    for i in range(num_layers):
        p = f"layer_{i}"
        for name in ("query", "key", "value", "output"):
            w[f"{p}/attention/{name}/kernel"] = normal(hidden, hidden)
            w[f"{p}/attention/{name}/bias"] = normal(hidden)
        w[f"{p}/attention/layer_norm/gamma"] = gamma()
        w[f"{p}/attention/layer_norm/beta"] = normal(hidden)
        w[f"{p}/intermediate/kernel"] = normal(hidden, intermediate)
        w[f"{p}/intermediate/bias"] = normal(intermediate)
        w[f"{p}/output/kernel"] = normal(intermediate, hidden)
        w[f"{p}/output/bias"] = normal(hidden)
        w[f"{p}/output/layer_norm/gamma"] = gamma()
        w[f"{p}/output/layer_norm/beta"] = normal(hidden)
    w["pooler/kernel"] = normal(hidden, hidden)
    w["pooler/bias"] = normal(hidden)
    if with_heads:
        w["mlm/transform/kernel"] = normal(hidden, hidden)
        w["mlm/transform/bias"] = normal(hidden)
        w["mlm/transform/layer_norm/gamma"] = gamma()
        w["mlm/transform/layer_norm/beta"] = normal(hidden)
        w["mlm/output_bias"] = normal(vocab_size)
        w["nsp/kernel"] = normal(hidden, 2)
        w["nsp/bias"] = normal(2)
    return w
