"""The BERT model: config, Keras 3 encoder, pretraining heads and canonical weight names.

    from bert_tf.modeling import BertConfig, BertEncoder, BertPretrainingModel

Modules: `config` (BertConfig, no TensorFlow), `activations`, `encoder` (BertEncoder),
`embeddings` (its embedding step), `heads` (MLM and NSP heads), `pretraining_model`
(BertPretrainingModel), `electra` (ElectraPretrainingModel: generator and discriminator),
`weight_map` (canonical weight names for checkpoint converters). The modern encoder
(ModernBERT's and Cramming's options): `modern_config` (its bert_config keys), `rotary`,
`modern_encoder` (ModernEncoder, `build_encoder`), `modern_head`, `modern_layout` and
`modern_weights` (its canonical weight names).

The Keras names are imported lazily, so `from bert_tf.modeling import BertConfig` (or
`bert_tf.modeling.config`) does not pay for importing TensorFlow.
"""

from __future__ import annotations

import importlib
from typing import Any

from bert_tf.modeling.config import BertConfig

_LAZY = {
    "BertEncoder": "bert_tf.modeling.encoder",
    "BertTransformerBlock": "bert_tf.modeling.encoder",
    "ModernEncoder": "bert_tf.modeling.modern_encoder",
    "build_encoder": "bert_tf.modeling.modern_encoder",
    "BertPretrainingModel": "bert_tf.modeling.pretraining_model",
    "ElectraPretrainingModel": "bert_tf.modeling.electra",
    "MappedWeight": "bert_tf.modeling.weight_map",
    "encoder_weight_map": "bert_tf.modeling.weight_map",
    "pretraining_weight_map": "bert_tf.modeling.weight_map",
    "get_weights": "bert_tf.modeling.weight_map",
    "set_weights": "bert_tf.modeling.weight_map",
}

__all__ = ["BertConfig", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
