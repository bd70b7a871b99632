"""Canonical weight names and shapes of a modern encoder (`modern_config.is_modern`).

The names follow `bert_tf.modeling.weight_map`'s where a weight means the same thing; a
weight only modern configs have gets a name of its own. H is hidden_size, E the tables'
width (`embedding_width`: H unless embedding_size says), F the intermediate_size, F' the
first feed-forward width (2F with "geglu", else F):

    embeddings/word_embeddings                [vocab_size, E]
    embeddings/position_embeddings            [max_position_embeddings, E] ("absolute" only)
    embeddings/token_type_embeddings          [type_vocab_size, E] (type_vocab_size > 0 only)
    embeddings/layer_norm/gamma (beta)        [E]
    embeddings_project/kernel [E, H] (bias [H])   E != H only (an ELECTRA generator)
    layer_{i}/attention/layer_norm/gamma (beta)   [H]: before attention with pre_layer_norm
                                              (absent in layer 0), after it otherwise
    layer_{i}/attention/qkv/kernel            [H, 3H]: columns query | key | value, each
                                              head-major (h * head_size + d); bias [3H]
    layer_{i}/attention/output/kernel         [H, H] (bias [H])
    layer_{i}/intermediate/kernel             [H, F'] (bias [F']): with "geglu" the input
                                              half first, then the gate half
    layer_{i}/output/kernel                   [F, H] (bias [H])
    layer_{i}/output/layer_norm/gamma (beta)  [H]: before the feed-forward with
                                              pre_layer_norm, after it otherwise
    final_layer_norm/gamma (beta)             [H] (pre_layer_norm only)
    mlm/transform/kernel [H, E] (bias [E]), mlm/transform/layer_norm/gamma (beta) [E]
    mlm/output_weights                        [vocab_size, E] (tie_word_embeddings false)
    mlm/output_bias                           [vocab_size]
    nsp/kernel [H, 2], nsp/bias [2]           (an NSP head reads the [CLS] hidden state)

Biases and LayerNorm betas exist only with use_bias true; the MLM output bias always.
This module does not import TensorFlow.
"""

from __future__ import annotations

from typing import Any, Dict, Tuple

from bert_tf.modeling.modern_config import inner_size


def _norm(shapes: Dict[str, Tuple[int, ...]], prefix: str, h: int, bias: bool) -> None:
    shapes[f"{prefix}/gamma"] = (h,)
    if bias:
        shapes[f"{prefix}/beta"] = (h,)


def _dense(shapes: Dict[str, Tuple[int, ...]], prefix: str, n_in: int, n_out: int,
           bias: bool) -> None:
    shapes[f"{prefix}/kernel"] = (n_in, n_out)
    if bias:
        shapes[f"{prefix}/bias"] = (n_out,)


def has_attention_norm(config: Any, index: int) -> bool:
    """False for layer 0 of a pre-LN encoder (its input is already a LayerNorm's output)."""
    return not (config.pre_layer_norm and index == 0)


def expected_shapes(config: Any, use_nsp: bool = True) -> Dict[str, Tuple[int, ...]]:
    """{canonical name: shape} of every weight of a modern pretraining model, in the order
    of `modern_weights.pretraining_weight_map` (a test checks it)."""
    h, ff, v, bias = config.hidden_size, config.intermediate_size, config.vocab_size, \
        config.use_bias
    e = config.embedding_width
    shapes: Dict[str, Tuple[int, ...]] = {"embeddings/word_embeddings": (v, e)}
    if config.position_embedding_type == "absolute":
        shapes["embeddings/position_embeddings"] = (config.max_position_embeddings, e)
    if config.type_vocab_size:
        shapes["embeddings/token_type_embeddings"] = (config.type_vocab_size, e)
    _norm(shapes, "embeddings/layer_norm", e, bias)
    if e != h:
        _dense(shapes, "embeddings_project", e, h, bias)
    for i in range(config.num_hidden_layers):
        p = f"layer_{i}"
        if has_attention_norm(config, i):
            _norm(shapes, f"{p}/attention/layer_norm", h, bias)
        _dense(shapes, f"{p}/attention/qkv", h, 3 * h, bias)
        _dense(shapes, f"{p}/attention/output", h, h, bias)
        _dense(shapes, f"{p}/intermediate", h, inner_size(config), bias)
        _dense(shapes, f"{p}/output", ff, h, bias)
        _norm(shapes, f"{p}/output/layer_norm", h, bias)
    if config.pre_layer_norm:
        _norm(shapes, "final_layer_norm", h, bias)
    _dense(shapes, "mlm/transform", h, e, bias)
    _norm(shapes, "mlm/transform/layer_norm", e, bias)
    if not config.tie_word_embeddings:
        shapes["mlm/output_weights"] = (v, e)
    shapes["mlm/output_bias"] = (v,)
    if use_nsp:
        shapes["nsp/kernel"] = (h, 2)
        shapes["nsp/bias"] = (2,)
    return shapes
