"""Where a fine-tuning run starts from: --init_checkpoint in any format, detected.

* a bert_tf pretraining (or fine-tuning) checkpoint, or the output directory holding them;
* a Google TF1 checkpoint (`bert_model.ckpt` prefix or its release directory);
* a Hugging Face BERT directory (config.json + model.safetensors or pytorch_model.bin);
* a keras-hub BERT preset directory (`save_to_preset` of a BertBackbone or BertMaskedLM).

The encoder's weights are read into the format-neutral `ModelFiles` (bert_tf.interop) and
assigned by canonical name; task heads start fresh. `bert_config.json`/`config.json` and
`vocab.txt` beside the checkpoint are the defaults for --bert_config_file and --vocab_file.
A --vocab_file that extends the checkpoint's vocabulary (new tokens in its [unusedN] slots or
after it) resizes the word embeddings to it (`bert_tf.interop.vocab_resize`); vocab_size
follows.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from absl import logging

from bert_tf.core import fileio
from bert_tf.core.errors import UserError
from bert_tf.interop import formats, vocab_resize
from bert_tf.interop.formats import detect_format
from bert_tf.interop.hf_tokenizer_kind import check_wordpiece
from bert_tf.interop.model_files import ModelFiles, find_beside, vocab_size_of
from bert_tf.modeling import modern_config
from bert_tf.modeling.config import BertConfig

# The fields that fix the shapes of the encoder's weights (dropout and the activation may
# differ between pretraining and fine-tuning without breaking a weight).
_ARCHITECTURE = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                 "intermediate_size", "max_position_embeddings", "type_vocab_size")


@dataclasses.dataclass(frozen=True)
class InitModel:
    """The model to fine-tune: its config, vocabulary and (optionally) pretrained weights.

    Attributes:
        config: the architecture (from --bert_config_file, else the checkpoint's own).
        vocab_file: --vocab_file, else the checkpoint's.
        files: the pretrained weights, or None to start from random weights.
        fmt: the detected format of --init_checkpoint ("" without one).
        kind: "modernbert" for a modern config (with or without a checkpoint: its
            classifier is ModernBERT's), "electra" when --init_checkpoint is an ELECTRA model
            (its discriminator's head or generator is among the weights:
            `electra_layout.is_electra`), "bert" for another checkpoint, "" without one.
    """

    config: BertConfig
    vocab_file: str
    files: Optional[ModelFiles]
    fmt: str = ""
    kind: str = ""


def resolve(init_checkpoint: str, bert_config_file: str, vocab_file: str) -> InitModel:
    """Reads --init_checkpoint (if any) and settles the config and vocabulary.

    Raises:
        UserError: no config or vocabulary to be found, a checkpoint whose weights do not
            fit --bert_config_file (naming the first field that differs), or a vocabulary
            larger than the model's vocab_size.
    """
    files = None
    fmt = ""
    base_size = 0
    if init_checkpoint:
        fmt = detect_format(init_checkpoint)
        if fmt == "hf":  # fine-tuning tokenizes with a WordPiece vocab.txt
            check_wordpiece(init_checkpoint)
        config_arg = None if fmt in ("hf", "keras_hub") else (bert_config_file or None)
        own = find_beside(init_checkpoint, ("bert_config.json",)) if config_arg else None
        if own and vocab_file and _same_but_vocab_size(own, config_arg):
            config_arg = own  # --bert_config_file is the extended model's: read the base
        try:
            files = formats.read_model(fmt, init_checkpoint, config_arg)
        except UserError as e:
            # A reader given another architecture fails on the first variable's shape; the
            # checkpoint's own bert_config.json, when beside it, tells which field differs.
            beside = find_beside(init_checkpoint, ("bert_config.json",)) if config_arg else None
            if beside:
                _check_architecture(BertConfig.from_json_file(beside),
                                    BertConfig.from_json_file(config_arg), config_arg,
                                    init_checkpoint)
            raise UserError(f"--init_checkpoint={init_checkpoint}: {e}") from None
        logging.info("--init_checkpoint is a %s checkpoint: %s", fmt, files.source)
        base_size = files.config.vocab_size
        # An extension of the checkpoint's vocabulary resizes its word embeddings.
        files = vocab_resize.resize_to_vocab(files, vocab_file) if vocab_file else files
    if bert_config_file:
        config = BertConfig.from_json_file(bert_config_file)
        if files is not None and config.vocab_size == base_size:  # the base model's config
            config = dataclasses.replace(config, vocab_size=files.config.vocab_size)
    elif files is not None:
        config = files.config
    else:
        raise UserError("--bert_config_file is required without --init_checkpoint")
    if files is not None:
        _check_architecture(files.config, config, bert_config_file, init_checkpoint)
    vocab = vocab_file or (files.vocab_file if files is not None else None)
    if not vocab and init_checkpoint:
        vocab = find_beside(init_checkpoint, ("vocab.txt",))
    if not vocab:
        raise UserError("--vocab_file is required (no vocab.txt beside --init_checkpoint)")
    if not fileio.exists(vocab):
        raise UserError(f"--vocab_file={vocab} does not exist")
    # Checked here, before any model is built: otherwise the first batch holding such an id
    # fails deep inside the embedding lookup with TensorFlow's message.
    size = vocab_size_of(vocab)
    if size > config.vocab_size:
        where = bert_config_file or f"--init_checkpoint={init_checkpoint}'s config"
        raise UserError(f"--vocab_file={vocab} has {size} tokens, more than vocab_size="
                        f"{config.vocab_size} in {where}: the ids from {config.vocab_size} "
                        f"on have no word embedding")
    kind = ""
    if files is not None:
        from bert_tf.interop import electra_layout

        kind = "electra" if electra_layout.is_electra(files.weights) else "bert"
    if modern_config.is_modern(config):
        kind = "modernbert"
    return InitModel(config, vocab, files, fmt, kind)


def _check_architecture(checkpoint_config: BertConfig, config: BertConfig,
                        bert_config_file: str, init_checkpoint: str) -> None:
    """Raises UserError naming the first weight-shaping field --bert_config_file changes."""
    if not bert_config_file:
        return
    for field in _ARCHITECTURE:
        ours, theirs = getattr(config, field), getattr(checkpoint_config, field)
        if ours != theirs:
            raise UserError(f"--init_checkpoint={init_checkpoint} does not match "
                            f"--bert_config_file: {field} is {theirs} in the checkpoint, "
                            f"{ours} in {bert_config_file}")


def _same_but_vocab_size(config_file: str, other_file: str) -> bool:
    a, b = BertConfig.from_json_file(config_file), BertConfig.from_json_file(other_file)
    return dataclasses.replace(a, vocab_size=b.vocab_size) == b


def load_encoder_weights(model, files: ModelFiles) -> None:
    """Assigns the pretrained encoder weights to `model.encoder`; task heads stay fresh but
    for a `pretrained_head_map` (ModernClassifier's dense and norm, from the MLM head).

    Raises:
        UserError: an encoder weight is missing (the pooler alone may be: sentence-embedding
            models drop it; it then starts fresh, with a warning).
    """
    from bert_tf.modeling import weight_map

    mapping = weight_map.encoder_weight_map(model.encoder)
    values = {name: files.weights[name] for name in mapping if name in files.weights}
    missing = [name for name in mapping if name not in values]
    if [m for m in missing if not m.startswith("pooler/")]:
        raise UserError(f"{files.source}: {len(missing)} encoder weight(s) missing, first: "
                        f"{missing[0]}")
    if missing:
        logging.warning("%s has no pooler weights: the pooler starts from random weights",
                        files.source)
    weight_map.set_weights(mapping, values, strict=False, source=files.source)
    logging.info("initialised %d encoder weights from %s", len(values), files.source)
    # A head that starts from the checkpoint's MLM head (ModernBERT's classifier, as in
    # transformers, where both are `head.*`); without that head it starts fresh.
    head_map = getattr(model, "pretrained_head_map", None)
    if head_map is None:
        return
    head = head_map()
    if all(name in files.weights for name in head):
        weight_map.set_weights(head, {n: files.weights[n] for n in head}, strict=False,
                               source=files.source)
        logging.info("initialised the classifier's dense and norm from %s's MLM head",
                     files.source)
    else:
        logging.warning("%s has no MLM head: the classifier's dense and norm start from "
                        "random weights", files.source)
