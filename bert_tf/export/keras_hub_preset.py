"""Export the encoder as a keras-hub preset directory (BertBackbone + BertTokenizer).

    export_keras_hub_preset(model.encoder, "vocab.txt", True, "presets/my_bert")
    import bert_tf.export.preset_tokenizer  # registers the preset's tokenizer class
    backbone = keras_hub.models.BertBackbone.from_preset("presets/my_bert")
    classifier = keras_hub.models.BertTextClassifier.from_preset("presets/my_bert",
                                                                 num_classes=2)

keras-hub's `BertBackbone` is built from the same keras-hub layers as `BertEncoder` and
names them the same way, so the weights are copied through the canonical weight map
(`bert_tf.modeling.weight_map`). Two differences are checked, not hidden:

* `BertBackbone` always uses the tanh approximation of GELU. An encoder trained with the
  exact (erf) GELU is exported anyway, with a one-line warning giving the maximum difference
  of the outputs on a probe batch.
* It has one dropout rate (`hidden_dropout_prob` is used); dropout is off at inference.

The tokenizer is `bert_tf.export.preset_tokenizer.OriginalBertTokenizer`, a `BertTokenizer`
that gives `FullTokenizer`'s ids (keras-hub's lower-casing is NFKC case folding, which
changes e.g. 'µ', 'm²' and 'ﬁ'); loading the preset therefore needs that module imported.
"""

from __future__ import annotations

import sys
from typing import Optional

import numpy as np

from bert_tf.errors import UserError

# Outputs of an exported tanh-GELU encoder must match ours to float32 round-off.
_SAME_OUTPUT_TOLERANCE = 1e-4


def backbone_from_encoder(encoder):
    """A `keras_hub.models.BertBackbone` with the dimensions and weights of `encoder`.

    Args:
        encoder: a `bert_tf.modeling.BertEncoder`.

    Returns:
        The backbone (float32).
    """
    import keras_hub

    from bert_tf.interop.keras_hub_checkpoint import backbone_weight_map
    from bert_tf.modeling.weight_map import encoder_weight_map, get_weights, set_weights

    config = encoder.config
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=config.vocab_size,
        num_layers=config.num_hidden_layers,
        num_heads=config.num_attention_heads,
        hidden_dim=config.hidden_size,
        intermediate_dim=config.intermediate_size,
        dropout=config.hidden_dropout_prob,
        max_sequence_length=config.max_position_embeddings,
        num_segments=config.type_vocab_size,
        dtype="float32",
    )
    set_weights(backbone_weight_map(backbone, config),
                get_weights(encoder_weight_map(encoder)), source="encoder")
    return backbone


def probe_difference(encoder, backbone, seed: int = 0, batch: int = 2, seq_len: int = 16) -> float:
    """Max |difference| of sequence and pooled outputs on a random probe batch."""
    config = encoder.config
    rng = np.random.default_rng(seed)
    seq_len = min(seq_len, config.max_position_embeddings)
    ids = rng.integers(0, config.vocab_size, (batch, seq_len)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[-1, seq_len // 2:] = 0  # Padding is handled the same way by both.
    segments = (np.arange(seq_len)[None] >= seq_len // 3).astype(np.int32).repeat(batch, 0)
    segments = np.minimum(segments, config.type_vocab_size - 1)
    ours = encoder({"input_ids": ids, "input_mask": mask, "segment_ids": segments})
    theirs = backbone({"token_ids": ids, "padding_mask": mask, "segment_ids": segments})
    real = mask.astype(bool)
    return max(
        float(np.max(np.abs(np.asarray(ours["sequence_output"])[real]
                            - np.asarray(theirs["sequence_output"])[real]))),
        float(np.max(np.abs(np.asarray(ours["pooled_output"])
                            - np.asarray(theirs["pooled_output"])))),
    )


def export_keras_hub_preset(
    encoder,
    vocab_file: str,
    do_lower_case: bool,
    export_dir: str,
    max_seq_length: Optional[int] = None,
) -> str:
    """Writes a keras-hub preset: backbone config and weights, tokenizer, preprocessor.

    The tokenizer is an `OriginalBertTokenizer` (the original release's normalization).

    Args:
        encoder: a `BertEncoder` with its weights loaded.
        vocab_file: the model's vocabulary.
        do_lower_case: as the model was trained (the tokenizer's `lowercase`).
        export_dir: a new directory; written under a temporary name, then renamed.
        max_seq_length: the `sequence_length` of the saved text-classifier preprocessor
            (keras-hub's default, 512, may exceed max_position_embeddings); None: 128, or
            max_position_embeddings if smaller.

    Returns:
        export_dir.

    Raises:
        UserError: an existing export_dir, or a vocabulary of another size.
        RuntimeError: the backbone computes something else than the encoder (a keras-hub
            change), for a tanh-GELU encoder.
    """
    import keras_hub

    from bert_tf.export.preset_tokenizer import OriginalBertTokenizer
    from bert_tf.interop.model_files import activation_meaning, atomic_directory, check_vocab_size
    from bert_tf.text.tokenization import load_vocab, vocab_list

    config = encoder.config
    check_vocab_size(vocab_file, config.vocab_size)
    if max_seq_length is None:
        max_seq_length = min(128, config.max_position_embeddings)
    config.check_seq_length(max_seq_length)
    backbone = backbone_from_encoder(encoder)
    diff = probe_difference(encoder, backbone)
    meaning = activation_meaning(config.hidden_act, "bert_tf")
    if meaning == "gelu_erf":
        print(f"warning: keras-hub BertBackbone uses the tanh GELU but this encoder was trained "
              f"with the exact (erf) GELU; outputs differ by up to {diff:.3g} on a probe batch",
              file=sys.stderr, flush=True)
    elif meaning != "gelu_tanh":
        raise UserError(f"hidden_act {config.hidden_act!r}: keras-hub BertBackbone supports "
                        "only GELU")
    elif diff > _SAME_OUTPUT_TOLERANCE:
        raise RuntimeError(f"keras-hub BertBackbone differs from the encoder by {diff:.3g}")
    # keras-hub's own BertTokenizer lower-cases another way (NFKC case folding); this
    # subclass gives the ids the model was pretrained with.
    tokenizer = OriginalBertTokenizer(vocabulary=vocab_list(load_vocab(vocab_file)),
                                      lowercase=do_lower_case)
    # Saving the preprocessor saves its tokenizer too (tokenizer.json + the vocabulary).
    preprocessor = keras_hub.models.BertTextClassifierPreprocessor(
        tokenizer, sequence_length=max_seq_length)
    with atomic_directory(export_dir) as tmp:
        backbone.save_to_preset(tmp)
        preprocessor.save_to_preset(tmp)
    return export_dir
