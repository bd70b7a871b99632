"""Canonical, framework-neutral names for every weight of the model.

Checkpoint converters (Google TF1 checkpoints, Hugging Face, keras-hub presets) go through
this one module instead of Keras variable paths, which depend on keras-hub internals. Each
canonical weight has the layout of the original BERT checkpoint, so converters only rename:

    embeddings/word_embeddings                [vocab_size, hidden]
    embeddings/position_embeddings            [max_position_embeddings, hidden]
    embeddings/token_type_embeddings          [type_vocab_size, hidden]
    embeddings/layer_norm/{gamma,beta}        [hidden]
    layer_{i}/attention/{query,key,value}/kernel   [hidden, hidden]   (input, output)
    layer_{i}/attention/{query,key,value}/bias     [hidden]
    layer_{i}/attention/output/kernel         [hidden, hidden]
    layer_{i}/attention/output/bias           [hidden]
    layer_{i}/attention/layer_norm/{gamma,beta}    [hidden]
    layer_{i}/intermediate/kernel             [hidden, intermediate]
    layer_{i}/intermediate/bias               [intermediate]
    layer_{i}/output/kernel                   [intermediate, hidden]
    layer_{i}/output/bias                     [hidden]
    layer_{i}/output/layer_norm/{gamma,beta}  [hidden]
    pooler/kernel [hidden, hidden], pooler/bias [hidden]

With a config's `embedding_size` E set apart from hidden (ELECTRA), the three tables and
the embedding LayerNorm are E wide, and the projection after them has two more names:

    embeddings_project/kernel [E, hidden], embeddings_project/bias [hidden]

and for the pretraining heads:

    mlm/transform/kernel [hidden, hidden], mlm/transform/bias [hidden]
    mlm/transform/layer_norm/{gamma,beta}     [hidden]
    mlm/output_bias                           [vocab_size]
    nsp/kernel [hidden, 2], nsp/bias [2]      (Google stores the transpose, [2, hidden])

Keras' MultiHeadAttention keeps the query/key/value kernels as [hidden, heads, head_size]
(biases [heads, head_size]) and the output kernel as [heads, head_size, hidden]; the accessors
reshape them in C order, so column `h * head_size + d` of the canonical kernel is head `h`,
unit `d` — the layout of the original implementation, which split [.., hidden] into
[.., heads, head_size]. The MLM output weight is the word embedding (tied), so it has no
name of its own.
"""

from __future__ import annotations

from typing import Dict, Mapping, Tuple

import keras
import numpy as np

from bert_tf.core.errors import UserError
from bert_tf.modeling import modern_config, modern_weights
from bert_tf.modeling.mapped_weight import MappedWeight


def _plain(variable: keras.Variable) -> MappedWeight:
    return MappedWeight(variable, tuple(variable.shape))


def _flat(variable: keras.Variable, shape: Tuple[int, ...]) -> MappedWeight:
    if int(np.prod(shape)) != int(np.prod(variable.shape)):
        raise ValueError(f"cannot view {variable.path} {variable.shape} as {shape}")
    return MappedWeight(variable, tuple(shape))


def _dense(prefix: str, layer) -> Dict[str, MappedWeight]:
    return {f"{prefix}/kernel": _plain(layer.kernel), f"{prefix}/bias": _plain(layer.bias)}


def _layer_norm(prefix: str, layer) -> Dict[str, MappedWeight]:
    return {f"{prefix}/gamma": _plain(layer.gamma), f"{prefix}/beta": _plain(layer.beta)}


def encoder_weight_map(encoder) -> Dict[str, MappedWeight]:
    """Canonical name -> weight for every variable of a built `BertEncoder`.

    Args:
        encoder: a `bert_tf.modeling.BertEncoder` (built; it is built at construction).

    Returns:
        An insertion-ordered dict (embeddings, layers in order, pooler); see the module
        docstring for names and shapes. A `ModernEncoder` has the names of
        `modern_layout` (`modern_weights`).
    """
    if modern_config.is_modern(encoder.config):
        return modern_weights.encoder_weight_map(encoder)
    hidden = encoder.config.hidden_size
    weights: Dict[str, MappedWeight] = {
        "embeddings/word_embeddings": _plain(encoder.token_embedding.embeddings),
        "embeddings/position_embeddings": _plain(
            encoder.position_embedding.position_embeddings
        ),
        "embeddings/token_type_embeddings": _plain(encoder.segment_embedding.embeddings),
    }
    weights.update(_layer_norm("embeddings/layer_norm", encoder.embeddings_layer_norm))
    # getattr: converters pass views of other frameworks' encoders (keras-hub's BertBackbone)
    # with only BERT's layers.
    project = getattr(encoder, "embeddings_project", None)
    if project is not None:
        weights.update(_dense("embeddings_project", project))
    for i, block in enumerate(encoder.transformer_layers):
        # keras-hub TransformerEncoder internals; tests/test_encoder.py checks that this
        # map covers every variable of the encoder exactly once.
        attention = block._self_attention_layer
        for name, dense in (
            ("query", attention.query_dense),
            ("key", attention.key_dense),
            ("value", attention.value_dense),
        ):
            weights[f"layer_{i}/attention/{name}/kernel"] = _flat(dense.kernel, (hidden, hidden))
            weights[f"layer_{i}/attention/{name}/bias"] = _flat(dense.bias, (hidden,))
        output = attention.output_dense
        weights[f"layer_{i}/attention/output/kernel"] = _flat(output.kernel, (hidden, hidden))
        weights[f"layer_{i}/attention/output/bias"] = _plain(output.bias)
        weights.update(
            _layer_norm(f"layer_{i}/attention/layer_norm", block._self_attention_layer_norm)
        )
        weights.update(_dense(f"layer_{i}/intermediate", block._feedforward_intermediate_dense))
        weights.update(_dense(f"layer_{i}/output", block._feedforward_output_dense))
        weights.update(_layer_norm(f"layer_{i}/output/layer_norm", block._feedforward_layer_norm))
    weights.update(_dense("pooler", encoder.pooler))
    return weights


def pretraining_weight_map(model) -> Dict[str, MappedWeight]:
    """Canonical name -> weight for a `BertPretrainingModel` (encoder + heads).

    The NSP names are present only when the model has an NSP head.
    """
    if modern_config.is_modern(model.config):
        return modern_weights.pretraining_weight_map(model)
    weights = encoder_weight_map(model.encoder)
    head = model.mlm_head
    weights.update(_dense("mlm/transform", head._intermediate_dense))
    weights.update(_layer_norm("mlm/transform/layer_norm", head._intermediate_layer_norm))
    weights["mlm/output_bias"] = _plain(head._bias)
    if model.nsp_head is not None:
        weights.update(_dense("nsp", model.nsp_head))
    return weights


def get_weights(weight_map: Mapping[str, MappedWeight]) -> Dict[str, np.ndarray]:
    """Canonical name -> numpy value (canonical shape) for every weight of the map."""
    return {name: w.numpy() for name, w in weight_map.items()}


def set_weights(
    weight_map: Mapping[str, MappedWeight],
    values: Mapping[str, np.ndarray],
    strict: bool = True,
    source: str = "checkpoint",
) -> None:
    """Assigns canonical values to the model's variables (the inverse of `get_weights`).

    Args:
        weight_map: from `encoder_weight_map` or `pretraining_weight_map`.
        values: canonical name -> array in the canonical shape.
        strict: if True, every weight of the map must be given and nothing else.
        source: where the values came from, for error messages.

    Raises:
        UserError: a missing or unexpected name (when strict) or a shape mismatch; nothing
            is assigned in that case.
    """
    if strict:
        missing = [n for n in weight_map if n not in values]
        unexpected = [n for n in values if n not in weight_map]
        if missing:
            raise UserError(
                f"{source}: {len(missing)} weight(s) missing, first: {missing[0]}"
            )
        if unexpected:
            raise UserError(
                f"{source}: {len(unexpected)} unexpected weight(s), first: {unexpected[0]}"
            )
    # Check every shape before assigning anything, so a bad file leaves the model intact.
    for name, value in values.items():
        if name in weight_map and tuple(np.shape(value)) != weight_map[name].shape:
            raise UserError(
                f"{source}: weight {name} has shape {tuple(np.shape(value))}, the model "
                f"expects {weight_map[name].shape}"
            )
    for name, value in values.items():
        if name in weight_map:
            weight_map[name].assign(value, name)
