"""Export an ELECTRA discriminator as a keras-hub preset (ElectraBackbone + ElectraTokenizer).

    export_electra_preset(model.encoder, "vocab.txt", True, "presets/my_electra")
    # ... anywhere keras-hub is installed, without bert_tf:
    backbone = keras_hub.models.ElectraBackbone.from_preset("presets/my_electra")
    tokenizer = keras_hub.models.ElectraTokenizer.from_preset("presets/my_electra")

keras-hub's `ElectraBackbone` is built from the same keras-hub layers as `BertEncoder`
(ReversibleEmbedding, PositionEmbedding, TransformerEncoder with the tanh GELU and LayerNorm
epsilon 1e-12, the projection E -> hidden as `embeddings_projection` when they differ), so
the weights are copied through the canonical map (`bert_tf.modeling.weight_map`), and a
probe batch checks that the sequence outputs agree.

Its `pooled_output` is `pooled_dense` (a tanh Dense) on the [CLS] state. ELECTRA has no such
layer: the discriminator is trained through its per-token head only, so the pooler of
bert_tf's encoder, copied there, is at its random initial values, as it is in keras-hub's
own ELECTRA presets. A user must not read `pooled_output` without fine-tuning it (or read
`sequence_output[:, 0]`, the [CLS] state, which is what ELECTRA's classification head
starts from).

keras-hub has no ELECTRA preprocessor; the preset holds the backbone and keras-hub's
`ElectraTokenizer`, the same WordPiece settings as its `BertTokenizer` (`lowercase` and
`strip_accents` = `do_lower_case`), so the export counts the lines on which it gives other
ids than pretraining, as for BERT (`bert_tf.export.keras_hub_preset`).
"""

from __future__ import annotations

import sys
import types
from typing import Optional

from bert_tf.core.errors import UserError

# Outputs of an exported tanh-GELU encoder must match ours to float32 round-off.
SAME_OUTPUT_TOLERANCE = 1e-4


def electra_backbone_weight_map(backbone, config):
    """Canonical name -> `MappedWeight` for every weight of a keras-hub `ElectraBackbone`.

    Raises:
        RuntimeError: the backbone has weights the map does not cover (a keras-hub change).
    """
    from bert_tf.modeling.weight_map import encoder_weight_map

    view = types.SimpleNamespace(  # the attributes encoder_weight_map reads
        config=config,
        token_embedding=backbone.token_embedding,
        position_embedding=backbone.position_embedding,
        segment_embedding=backbone.segment_embedding,
        embeddings_layer_norm=backbone.embeddings_layer_norm,
        embeddings_project=getattr(backbone, "embeddings_projection", None),
        transformer_layers=backbone.transformer_layers,
        pooler=backbone.pooled_dense,
    )
    weights = encoder_weight_map(view)
    if len({id(w.variable) for w in weights.values()}) != len(backbone.weights):
        raise RuntimeError("keras-hub ElectraBackbone has weights the canonical map does not "
                           "cover")
    return weights


def electra_backbone_from_encoder(encoder):
    """A float32 `keras_hub.models.ElectraBackbone` with the dimensions and weights of
    `encoder` (a `BertEncoder`, e.g. an ELECTRA run's discriminator)."""
    import keras_hub

    from bert_tf.modeling.weight_map import encoder_weight_map, get_weights, set_weights

    config = encoder.config
    backbone = keras_hub.models.ElectraBackbone(
        vocab_size=config.vocab_size,
        num_layers=config.num_hidden_layers,
        num_heads=config.num_attention_heads,
        hidden_dim=config.hidden_size,
        embedding_dim=config.embedding_width,
        intermediate_dim=config.intermediate_size,
        dropout=config.hidden_dropout_prob,
        max_sequence_length=config.max_position_embeddings,
        num_segments=config.type_vocab_size,
        dtype="float32",
    )
    set_weights(electra_backbone_weight_map(backbone, config),
                get_weights(encoder_weight_map(encoder)), source="encoder")
    return backbone


def export_electra_preset(encoder, vocab_file: str, do_lower_case: bool, export_dir: str,
                          tokenizer_check_file: Optional[str] = None) -> str:
    """Writes a keras-hub ELECTRA preset: the backbone's config and weights, the tokenizer.

    Args:
        encoder: the discriminator `BertEncoder`, weights loaded.
        vocab_file: the model's vocabulary.
        do_lower_case: as the model was trained.
        export_dir: a new directory; written under a temporary name, then renamed.
        tokenizer_check_file: text whose lines the tokenizer check counts; None: the
            vocabulary's tokens (see `keras_hub_preset.preset_tokenizer_layer`).

    Returns:
        export_dir.

    Raises:
        UserError: an existing export_dir, a vocabulary of another size, an activation
            keras-hub's backbone does not compute.
        RuntimeError: the backbone computes something else than the encoder (a keras-hub
            change), for a tanh-GELU encoder.
    """
    import keras_hub

    from bert_tf.core.tokenization import load_vocab, vocab_list
    from bert_tf.export.keras_hub_preset import (
        PORTABLE,
        preset_tokenizer_layer,
        probe_difference,
    )
    from bert_tf.interop.model_files import (
        activation_meaning,
        atomic_directory,
        check_new_directory,
        check_vocab_size,
    )

    config = encoder.config
    check_vocab_size(vocab_file, config.vocab_size)
    check_new_directory(export_dir)  # before the tokenizer check, which takes seconds
    _, message = preset_tokenizer_layer(vocab_file, do_lower_case, PORTABLE,
                                        tokenizer_check_file)
    tokenizer = keras_hub.models.ElectraTokenizer(
        vocabulary=vocab_list(load_vocab(vocab_file)), lowercase=do_lower_case,
        strip_accents=do_lower_case)
    backbone = electra_backbone_from_encoder(encoder)
    diff = probe_difference(encoder, backbone)
    meaning = activation_meaning(config.hidden_act, "bert_tf")
    if meaning == "gelu_erf":
        print(f"warning: keras-hub ElectraBackbone uses the tanh GELU but this encoder was "
              f"trained with the exact (erf) GELU; outputs differ by up to {diff:.3g} on a "
              "probe batch", file=sys.stderr, flush=True)
    elif meaning != "gelu_tanh":
        raise UserError(f"hidden_act {config.hidden_act!r}: keras-hub ElectraBackbone "
                        "supports only GELU")
    elif diff > SAME_OUTPUT_TOLERANCE:
        raise RuntimeError(f"keras-hub ElectraBackbone differs from the encoder by {diff:.3g}")
    with atomic_directory(export_dir) as tmp:
        backbone.save_to_preset(tmp)
        tokenizer.save_to_preset(tmp)
    print(message, file=sys.stderr, flush=True)
    print("note: the preset's pooled_output (ElectraBackbone's pooled_dense) is an untrained, "
          "random layer: ELECTRA has none; fine-tune it or read sequence_output[:, 0]",
          file=sys.stderr, flush=True)
    return export_dir
