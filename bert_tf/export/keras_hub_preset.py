"""Export the encoder as a keras-hub preset directory (BertBackbone + BertTokenizer).

    export_keras_hub_preset(model.encoder, "vocab.txt", True, "presets/my_bert")
    # ... anywhere keras-hub is installed, without bert_tf:
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

The tokenizer is one of two (`preset_tokenizer`):

* "portable" (the default): keras-hub's own `BertTokenizer` (`lowercase` and
  `strip_accents` = `do_lower_case`), so the preset loads with keras-hub alone, as a
  preset shared on Kaggle or with a colleague must. It gives other ids than pretraining
  on some text (NFKC case folding of 'µ', 'm²', 'ﬁ', full-width letters; [UNK] for words
  over 100 bytes; see `bert_tf.export.tokenizer_check`): the export counts the lines that
  differ, on a text file the user names or else on the vocabulary's own tokens, and says
  so in one line.
* "exact": `bert_tf.export.preset_tokenizer.OriginalBertTokenizer`, a `BertTokenizer` that
  gives `FullTokenizer`'s ids on any text; loading the preset then needs
  `import bert_tf.export.preset_tokenizer` first (else Keras' "Could not locate class
  'OriginalBertTokenizer'").
"""

from __future__ import annotations

import sys
from typing import Optional

import numpy as np

from bert_tf.core.errors import UserError

# Outputs of an exported tanh-GELU encoder must match ours to float32 round-off.
_SAME_OUTPUT_TOLERANCE = 1e-4

PORTABLE = "portable"  # keras-hub's BertTokenizer: loads with keras-hub alone.
EXACT = "exact"  # OriginalBertTokenizer: the pretraining ids, needs bert_tf to load.
PRESET_TOKENIZERS = (PORTABLE, EXACT)


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


def preset_tokenizer_layer(vocab_file: str, do_lower_case: bool, preset_tokenizer: str,
                           tokenizer_check_file: Optional[str] = None):
    """The preset's tokenizer layer and the export's line about it.

    Args:
        vocab_file: the model's vocabulary.
        do_lower_case: the model's casing.
        preset_tokenizer: "portable" or "exact" (see `export_keras_hub_preset`).
        tokenizer_check_file: portable only: the text to check; None: the vocabulary.

    Returns:
        (a `keras_hub.models.BertTokenizer`, one line for stderr): for "portable", the
        mismatch count of `tokenizer_check` ("warning: ..." if any line differs, else
        "note: ..."); for "exact", a note naming the import loading needs.
    """
    from bert_tf.core.tokenization import load_vocab, vocab_list
    from bert_tf.export import tokenizer_check

    vocabulary = vocab_list(load_vocab(vocab_file))
    if preset_tokenizer == EXACT:
        from bert_tf.export.preset_tokenizer import OriginalBertTokenizer

        return (OriginalBertTokenizer(vocabulary=vocabulary, lowercase=do_lower_case),
                "note: the preset's tokenizer is bert_tf's OriginalBertTokenizer (the "
                "pretraining ids); load the preset after "
                "`import bert_tf.export.preset_tokenizer`")
    if tokenizer_check_file:
        text = tokenizer_check.read_check_lines(tokenizer_check_file)
        what = f"lines of {tokenizer_check_file}"
    else:
        text = tokenizer_check.vocabulary_check_lines(vocabulary)
        what = "distinct tokens of the vocabulary (no tokenizer check file given)"
    check = tokenizer_check.count_mismatches(text.lines, vocab_file, do_lower_case)
    level = "warning" if check.differing else "note"
    return (tokenizer_check.portable_tokenizer(vocabulary, do_lower_case),
            f"{level}: {tokenizer_check.report_line(check, text, what)}")


def export_keras_hub_preset(
    encoder,
    vocab_file: str,
    do_lower_case: bool,
    export_dir: str,
    max_seq_length: Optional[int] = None,
    preset_tokenizer: str = PORTABLE,
    tokenizer_check_file: Optional[str] = None,
) -> str:
    """Writes a keras-hub preset: backbone config and weights, tokenizer, preprocessor.

    For a portable preset it first measures, with `tokenizer_check.count_mismatches`, on
    how many lines keras-hub's tokenizer gives other ids than pretraining, and prints that
    line to stderr ("warning: ..." if any differ, else "note: ..."). For an exact one it
    prints a note naming the import that loading needs.

    Args:
        encoder: a `BertEncoder` with its weights loaded.
        vocab_file: the model's vocabulary.
        do_lower_case: as the model was trained (the tokenizer's `lowercase`).
        export_dir: a new directory; written under a temporary name, then renamed.
        max_seq_length: the `sequence_length` of the saved text-classifier preprocessor
            (keras-hub's default, 512, may exceed max_position_embeddings); None: 128, or
            max_position_embeddings if smaller.
        preset_tokenizer: "portable" (keras-hub's `BertTokenizer`: loads without bert_tf)
            or "exact" (`OriginalBertTokenizer`: the pretraining ids; loading needs
            `import bert_tf.export.preset_tokenizer`).
        tokenizer_check_file: portable only: text (e.g. from the target domain) whose
            first `tokenizer_check.MAX_CHECK_LINES` non-empty lines (at most
            `MAX_CHECK_BYTES`) are checked; None: the vocabulary's tokens are.

    Returns:
        export_dir.

    Raises:
        UserError: an existing export_dir, a vocabulary of another size, an unknown
            preset_tokenizer, a check file with an exact tokenizer, or an unreadable or
            empty check file.
        RuntimeError: the backbone computes something else than the encoder (a keras-hub
            change), for a tanh-GELU encoder.
    """
    import keras_hub

    from bert_tf.interop.model_files import (
        activation_meaning,
        atomic_directory,
        check_new_directory,
        check_vocab_size,
    )

    if preset_tokenizer not in PRESET_TOKENIZERS:
        raise UserError(f"preset tokenizer {preset_tokenizer!r}: choose one of "
                        f"{', '.join(PRESET_TOKENIZERS)}")
    if preset_tokenizer == EXACT and tokenizer_check_file:
        raise UserError(f"tokenizer check file {tokenizer_check_file}: the check measures "
                        "the portable tokenizer; the exact one gives the pretraining ids on "
                        "any text")
    config = encoder.config
    check_vocab_size(vocab_file, config.vocab_size)
    check_new_directory(export_dir)  # Before the check, which takes seconds.
    if max_seq_length is None:
        max_seq_length = min(128, config.max_position_embeddings)
    config.check_seq_length(max_seq_length)
    tokenizer, message = preset_tokenizer_layer(vocab_file, do_lower_case, preset_tokenizer,
                                                tokenizer_check_file)
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
    # Saving the preprocessor saves its tokenizer too (tokenizer.json + the vocabulary).
    preprocessor = keras_hub.models.BertTextClassifierPreprocessor(
        tokenizer, sequence_length=max_seq_length)
    with atomic_directory(export_dir) as tmp:
        backbone.save_to_preset(tmp)
        preprocessor.save_to_preset(tmp)
    print(message, file=sys.stderr, flush=True)
    return export_dir
