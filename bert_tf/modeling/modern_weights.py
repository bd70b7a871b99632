"""Canonical name -> variable of a built `ModernEncoder` and its pretraining model.

The names and shapes are `bert_tf.modeling.modern_layout`'s; `weight_map.encoder_weight_map`
and `weight_map.pretraining_weight_map` come here for a modern config, so converters and
warm starts treat both encoders alike. Every variable is stored in its canonical shape except
the untied decoder, whose Dense kernel [hidden, vocab] is the transpose of the canonical
`mlm/output_weights` [vocab, hidden] (the layout of ModernBERT's `decoder.weight`).
"""

from __future__ import annotations

from typing import Dict

from bert_tf.modeling.mapped_weight import MappedWeight, TransposedWeight


def _plain(variable) -> MappedWeight:
    return MappedWeight(variable, tuple(variable.shape))


def _dense(weights: Dict[str, MappedWeight], prefix: str, layer) -> None:
    weights[f"{prefix}/kernel"] = _plain(layer.kernel)
    if layer.bias is not None:
        weights[f"{prefix}/bias"] = _plain(layer.bias)


def _norm(weights: Dict[str, MappedWeight], prefix: str, layer) -> None:
    weights[f"{prefix}/gamma"] = _plain(layer.gamma)
    if layer.beta is not None:
        weights[f"{prefix}/beta"] = _plain(layer.beta)


def encoder_weight_map(encoder) -> Dict[str, MappedWeight]:
    """Canonical name -> weight for every variable of a built `ModernEncoder`."""
    weights: Dict[str, MappedWeight] = {
        "embeddings/word_embeddings": _plain(encoder.token_embedding.embeddings)}
    if encoder.position_embedding is not None:
        weights["embeddings/position_embeddings"] = _plain(
            encoder.position_embedding.position_embeddings)
    if encoder.segment_embedding is not None:
        weights["embeddings/token_type_embeddings"] = _plain(
            encoder.segment_embedding.embeddings)
    _norm(weights, "embeddings/layer_norm", encoder.embeddings_layer_norm)
    if encoder.embeddings_project is not None:
        _dense(weights, "embeddings_project", encoder.embeddings_project)
    for i, block in enumerate(encoder.transformer_layers):
        p = f"layer_{i}"
        if block.attention_layer_norm is not None:
            _norm(weights, f"{p}/attention/layer_norm", block.attention_layer_norm)
        _dense(weights, f"{p}/attention/qkv", block.qkv_dense)
        _dense(weights, f"{p}/attention/output", block.attention_output_dense)
        _dense(weights, f"{p}/intermediate", block.intermediate_dense)
        _dense(weights, f"{p}/output", block.output_dense)
        _norm(weights, f"{p}/output/layer_norm", block.output_layer_norm)
    if encoder.final_layer_norm is not None:
        _norm(weights, "final_layer_norm", encoder.final_layer_norm)
    return weights


def transform_weight_map(dense, norm) -> Dict[str, MappedWeight]:
    """The MLM head transform's canonical names (mlm/transform/*) for a Dense + LayerNorm
    pair: the MLM head's own, or a task head that starts from it (`ModernClassifier`)."""
    weights: Dict[str, MappedWeight] = {}
    _dense(weights, "mlm/transform", dense)
    _norm(weights, "mlm/transform/layer_norm", norm)
    return weights


def pretraining_weight_map(model) -> Dict[str, MappedWeight]:
    """Canonical name -> weight for a `BertPretrainingModel` of a modern config."""
    weights = encoder_weight_map(model.encoder)
    head = model.mlm_head
    weights.update(transform_weight_map(head.transform, head.transform_layer_norm))
    if head.decoder is not None:
        kernel = head.decoder.kernel
        weights["mlm/output_weights"] = TransposedWeight(kernel, tuple(kernel.shape)[::-1])
    weights["mlm/output_bias"] = _plain(head.output_bias)
    if model.nsp_head is not None:
        _dense(weights, "nsp", model.nsp_head)
    return weights
