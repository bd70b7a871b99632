"""keras-hub BERT models read into the canonical weights: `BertBackbone`, `BertMaskedLM`, presets.

    files = read("presets/my_bert")                    # a keras-hub preset directory
    files = model_files(masked_lm, "vocab.txt")        # a model in memory
    write_native(files, "my_bert_tf")                  # then --init_checkpoint=my_bert_tf

keras-hub's `BertBackbone` is built from the same keras-hub layers as bert_tf's `BertEncoder`
and keeps them under the same attribute names (only the pooler is `pooled_dense`), so one
view of it (`backbone_weight_map`) gives the canonical map of `bert_tf.modeling.weight_map`;
`bert_tf.export.keras_hub_preset` writes presets through the same view. `BertMaskedLM`'s head
is keras-hub's `MaskedLMHead`, bert_tf's own MLM head, so its weights map one to one too.

What does not carry over exactly, by keras-hub's design:

* the backbone computes the tanh GELU, which is bert_tf's "gelu" (the config says so);
* `BertMaskedLM`'s head transform uses the exact (erf) GELU and LayerNorm epsilon 1e-5,
  where a bert_tf model uses `hidden_act` and 1e-12: its MLM logits differ slightly once
  loaded into bert_tf (the encoder's outputs do not);
* the backbone has one dropout rate, used for both of bert_tf's.

A preset is a directory with keras-hub's `config.json` (class `BertBackbone`) and
`model.weights.h5`; with `task.json` naming `BertMaskedLM`, the MLM head is read as well. Its
vocabulary is `assets/tokenizer/vocabulary.txt`.
"""

from __future__ import annotations

import json
import os
import types
from typing import Dict, Optional

from bert_tf.core import fileio
from bert_tf.core.errors import UserError
from bert_tf.interop.model_files import ModelFiles, check_vocab
from bert_tf.modeling.config import BertConfig

BACKBONE_CLASS = "BertBackbone"
MASKED_LM_CLASS = "BertMaskedLM"
CONFIG_NAME = "config.json"
TASK_NAME = "task.json"
WEIGHTS_NAME = "model.weights.h5"
VOCAB_PATH = os.path.join("assets", "tokenizer", "vocabulary.txt")
# The backbone's feed-forward activation is keras-hub's `gelu_approximate`: bert_tf's "gelu".
BACKBONE_HIDDEN_ACT = "gelu"
# bert_kernel_initializer's stddev in keras-hub (not stored in the preset's config).
INITIALIZER_RANGE = 0.02


def config_from_backbone(backbone) -> BertConfig:
    """The `BertConfig` of a keras-hub `BertBackbone` (its one dropout rate used for both)."""
    c = backbone.get_config()
    return BertConfig(
        vocab_size=int(c["vocabulary_size"]),
        hidden_size=int(c["hidden_dim"]),
        num_hidden_layers=int(c["num_layers"]),
        num_attention_heads=int(c["num_heads"]),
        intermediate_size=int(c["intermediate_dim"]),
        hidden_act=BACKBONE_HIDDEN_ACT,
        hidden_dropout_prob=float(c["dropout"]),
        attention_probs_dropout_prob=float(c["dropout"]),
        max_position_embeddings=int(c["max_sequence_length"]),
        type_vocab_size=int(c["num_segments"]),
        initializer_range=INITIALIZER_RANGE,
    )


def backbone_weight_map(backbone, config: Optional[BertConfig] = None) -> Dict[str, object]:
    """Canonical name -> `MappedWeight` for every weight of a keras-hub `BertBackbone`.

    Args:
        backbone: a built `keras_hub.models.BertBackbone`.
        config: its config (default: `config_from_backbone`).

    Raises:
        RuntimeError: the backbone has weights the map does not cover (a keras-hub change).
    """
    from bert_tf.modeling.weight_map import encoder_weight_map

    # The attributes encoder_weight_map reads, under BertEncoder's names.
    view = types.SimpleNamespace(
        config=config or config_from_backbone(backbone),
        token_embedding=backbone.token_embedding,
        position_embedding=backbone.position_embedding,
        segment_embedding=backbone.segment_embedding,
        embeddings_layer_norm=backbone.embeddings_layer_norm,
        transformer_layers=backbone.transformer_layers,
        pooler=backbone.pooled_dense,
    )
    weights = encoder_weight_map(view)
    if len({id(w.variable) for w in weights.values()}) != len(backbone.weights):
        raise RuntimeError("keras-hub BertBackbone has weights the canonical map does not cover")
    return weights


def masked_lm_weight_map(masked_lm) -> Dict[str, object]:
    """Canonical name -> `MappedWeight` for a keras-hub `BertMaskedLM`: backbone and MLM head."""
    from bert_tf.modeling.weight_map import MappedWeight

    weights = backbone_weight_map(masked_lm.backbone)
    head = masked_lm.masked_lm_head  # keras-hub MaskedLMHead, as bert_tf's (modeling/heads)
    for name, variable in (("mlm/transform/kernel", head._intermediate_dense.kernel),
                           ("mlm/transform/bias", head._intermediate_dense.bias),
                           ("mlm/transform/layer_norm/gamma", head._intermediate_layer_norm.gamma),
                           ("mlm/transform/layer_norm/beta", head._intermediate_layer_norm.beta),
                           ("mlm/output_bias", head._bias)):
        weights[name] = MappedWeight(variable, tuple(variable.shape))
    return weights


def model_files(model, vocab_file: Optional[str] = None,
                source: str = "keras-hub model") -> ModelFiles:
    """The canonical weights of a keras-hub `BertBackbone` or `BertMaskedLM` in memory.

    Args:
        model: the backbone, or a masked LM (its MLM head is included).
        vocab_file: its vocabulary (checked against the word embeddings), or None.
        source: names the model in messages.

    Raises:
        UserError: a model of another kind, or a vocabulary of another size.
    """
    from bert_tf.modeling.weight_map import get_weights

    if type(model).__name__ == MASKED_LM_CLASS:
        weights, backbone = masked_lm_weight_map(model), model.backbone
    elif type(model).__name__ == BACKBONE_CLASS:
        weights, backbone = backbone_weight_map(model), model
    else:
        raise UserError(f"{source}: a {type(model).__name__}, not a keras-hub "
                        f"{BACKBONE_CLASS} or {MASKED_LM_CLASS}")
    values = get_weights(weights)
    check_vocab(vocab_file, values, source)
    return ModelFiles(config_from_backbone(backbone), values, vocab_file, source)


def _class_name(path: str) -> str:
    try:
        with fileio.open_file(path, "r") as f:
            return str(json.load(f).get("class_name", ""))
    except (OSError, ValueError, AttributeError):
        return ""


def is_preset(path: str) -> bool:
    """True if `path` is a keras-hub preset directory of a BERT backbone."""
    return (fileio.isdir(path) and fileio.exists(os.path.join(path, WEIGHTS_NAME))
            and _class_name(os.path.join(path, CONFIG_NAME)) == BACKBONE_CLASS)


def read(path: str, vocab_file: Optional[str] = None) -> ModelFiles:
    """Reads a keras-hub BERT preset directory (backbone, and the MLM head if saved).

    Args:
        path: the directory `save_to_preset` wrote (local; keras-hub loads it).
        vocab_file: default: the preset's own `assets/tokenizer/vocabulary.txt`, if any.

    Raises:
        UserError: not a keras-hub BERT preset, or a vocabulary of another size.
    """
    if not is_preset(path):
        raise UserError(f"{path} is not a keras-hub BERT preset (expected {CONFIG_NAME} of a "
                        f"{BACKBONE_CLASS} and {WEIGHTS_NAME})")
    import keras_hub

    task = os.path.join(path, TASK_NAME)
    if fileio.exists(task) and _class_name(task) == MASKED_LM_CLASS:
        # preprocessor=None: the weights are all we need, whatever tokenizer class it saved.
        model = keras_hub.models.BertMaskedLM.from_preset(path, preprocessor=None)
    else:
        model = keras_hub.models.BertBackbone.from_preset(path)
    if vocab_file is None and fileio.exists(os.path.join(path, VOCAB_PATH)):
        vocab_file = os.path.join(path, VOCAB_PATH)
    return model_files(model, vocab_file, source=path)
