"""bert_tf ELECTRA checkpoints (an `--objective=electra` run's) in and out of a `ModelFiles`.

A run's checkpoint holds `ElectraPretrainingModel` under `model/` (the layout of
`bert_tf.modeling.electra`): `model/encoder` (the discriminator, with the shared
embeddings), `model/generator`, `model/generator_head`, `model/discriminator_head`. The
generator's width is read from the generator head's kernel ([G, E]), so no flag of the run
is needed to rebuild it.

`write` gives the same object graph without optimizer or step: the whole model when the
weights have the generator, else `model/encoder` and `model/discriminator_head` only (a
discriminator converted from another format). Either way `model/encoder` is what
`bert_tf.interop.native.load_pretrained`, export and fine-tuning read as the encoder.
"""

from __future__ import annotations

import os
from typing import Dict, Optional, Tuple

import numpy as np

from bert_tf.core import fileio
from bert_tf.core.errors import UserError
from bert_tf.interop import electra_layout
from bert_tf.interop.model_files import ModelFiles, atomic_directory, check_vocab, copy_file
from bert_tf.interop.native import CHECKPOINT_NAME, CONFIG_NAME, VOCAB_NAME, find_config

_ELECTRA_PATHS = ("model/generator/", "model/generator_head/", "model/discriminator_head/")


def _prefix(path: str) -> Optional[str]:
    import tensorflow as tf

    if fileio.isdir(path):
        return tf.train.latest_checkpoint(path)
    return path if fileio.exists(path + ".index") else None


def _saved_shapes(prefix: str) -> Dict[str, list]:
    from bert_tf.training.checkpoint_paths import SavedObjectGraph

    return SavedObjectGraph(prefix).variable_shapes("model")


def is_electra_checkpoint(path: str) -> bool:
    """Whether `path` (a run's output_dir or a ckpt-N prefix) holds an ELECTRA model."""
    prefix = _prefix(path)
    return prefix is not None and any(p.startswith(_ELECTRA_PATHS)
                                      for p in _saved_shapes(prefix))


def saved_generator_width(prefix: str) -> Optional[int]:
    """The generator's width G in an ELECTRA checkpoint, or None if it holds no generator."""
    for path, shape in _saved_shapes(prefix).items():
        if path.startswith("model/generator_head/") and path.endswith("kernel"):
            return int(shape[0])
    return None


def build_model(config, width: Optional[int], seed: int = 0):
    """An `ElectraPretrainingModel` for `config` whose generator is G = `width` wide
    (None: the default fraction; only the discriminator then matters)."""
    from bert_tf.modeling.electra import DEFAULT_GENERATOR_HIDDEN_FRACTION, ElectraPretrainingModel

    fraction = (DEFAULT_GENERATOR_HIDDEN_FRACTION if width is None
                else electra_layout.generator_fraction(config, width))
    return ElectraPretrainingModel(config, fraction, sampling_seed=seed)


def load_into(model, files: ModelFiles, discriminator_only: bool = False) -> Tuple[str, ...]:
    """Sets a live `ElectraPretrainingModel`'s weights from an ELECTRA `ModelFiles` of any
    format (`formats.read_model`): how a run continues ELECTRA pretraining from transformers'
    or google-research/electra's checkpoints.

    With `discriminator_only`, `files` may be any BERT-layout encoder of the model's config
    (a BERT masked LM, an ELECTRA discriminator): it sets the discriminator's encoder (the
    shared embeddings with it) and, if `files` has one, its head; the generator keeps its
    initial weights.

    Returns:
        The canonical names `files` lacks, left at their initial values (the poolers, for
        those formats; with `discriminator_only`, the generator's too).

    Raises:
        UserError: `files` has no generator, or one of another width than the model's; with
            `discriminator_only`, an encoder weight of the discriminator missing.
    """
    from bert_tf.modeling.electra import electra_weight_map
    from bert_tf.modeling.weight_map import encoder_weight_map, set_weights

    if discriminator_only:
        everything = electra_weight_map(model)
        generator = tuple(n for n in everything
                          if n.startswith(("generator/", "generator_predictions/")))
        weights = {n: w for n, w in everything.items() if n not in generator}
        lacking = [n for n in encoder_weight_map(model.encoder)
                   if n not in files.weights and not n.startswith("pooler/")]
        if lacking:
            raise UserError(f"{files.source}: not an encoder of this config for "
                            f"--init_discriminator_only: {len(lacking)} encoder weight(s) "
                            f"missing, first: {lacking[0]}")
        set_weights(weights, {n: v for n, v in files.weights.items() if n in weights},
                    strict=False, source=files.source)
        return tuple(n for n in everything if n not in files.weights or n in generator)

    width = electra_layout.generator_width(files.weights)
    if width is None:
        raise UserError(f"{files.source} holds no ELECTRA generator: continuing ELECTRA "
                        "pretraining needs both networks (for transformers, the directory of "
                        "discriminator/ and generator/)")
    if width != model.generator_config.hidden_size:
        raise UserError(f"{files.source}: its generator is {width} wide but "
                        f"--generator_hidden_fraction gives {model.generator_config.hidden_size}"
                        f" (use --generator_hidden_fraction="
                        f"{electra_layout.generator_fraction(files.config, width):g})")
    weights = electra_weight_map(model)
    set_weights(weights, files.weights, strict=False, source=files.source)
    return tuple(n for n in weights if n not in files.weights)


def read(path: str, bert_config_file: Optional[str] = None,
         vocab_file: Optional[str] = None) -> ModelFiles:
    """Reads the ELECTRA weights of a bert_tf checkpoint.

    Args:
        path: a run's output_dir (its latest checkpoint) or a `ckpt-N` prefix.
        bert_config_file: default: bert_config.json beside the checkpoint.
        vocab_file: default: vocab.txt beside the checkpoint (optional).

    Returns:
        ELECTRA canonical weights (`electra_layout`): both networks, or the discriminator
        and its head when the checkpoint has no generator.

    Raises:
        UserError: no checkpoint or config, or a variable whose shape disagrees with the
            config.
    """
    import tensorflow as tf

    from bert_tf.interop.model_files import find_beside
    from bert_tf.modeling.config import BertConfig
    from bert_tf.modeling.electra import electra_weight_map
    from bert_tf.training import checkpoint_paths, checkpointing

    prefix = checkpointing.resolve_checkpoint(path, what="input")
    config = BertConfig.from_json_file(find_config(path, bert_config_file))
    width = saved_generator_width(prefix)
    model = build_model(config, width)
    keys = checkpoint_paths.checkpoint_keys(model, prefix)
    reader = tf.train.load_checkpoint(prefix)
    weights = {}
    for name, weight in electra_weight_map(model).items():
        key = keys.get(id(weight.variable))
        if key is None:
            continue
        value = reader.get_tensor(key)
        if tuple(value.shape) != tuple(weight.variable.shape):
            raise UserError(
                f"{prefix}: variable {name} ({key.split('/.ATTRIBUTES')[0]}) has shape "
                f"{list(value.shape)} but the bert_config implies {list(weight.variable.shape)}")
        weights[name] = np.reshape(value, weight.shape).astype(np.float32)
    vocab_file = vocab_file or find_beside(prefix, (VOCAB_NAME,))
    check_vocab(vocab_file, weights, prefix)
    return ModelFiles(config, weights, vocab_file, prefix)


def write(files: ModelFiles, output_dir: str, seed: int = 0) -> str:
    """Writes an ELECTRA bert_tf checkpoint (see the module docstring).

    Weights `files` lacks (the poolers, which other formats do not have) get a fresh
    initialisation seeded by `seed` and are stored.

    Returns:
        The checkpoint prefix, `output_dir/ckpt-0`.
    """
    import keras
    import tensorflow as tf

    from bert_tf.modeling.electra import electra_weight_map
    from bert_tf.modeling.weight_map import set_weights

    keras.utils.set_random_seed(seed)
    width = electra_layout.generator_width(files.weights)
    model = build_model(files.config, width, seed)
    set_weights(electra_weight_map(model), files.weights, strict=False, source=files.source)
    if width is not None:
        root = model
    else:  # the discriminator alone: no generator to store
        root = tf.Module()
        root.encoder = model.encoder
        root.discriminator_head = model.discriminator_head
    with atomic_directory(output_dir) as tmp:
        manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=root), tmp,
                                             max_to_keep=1, checkpoint_name=CHECKPOINT_NAME)
        manager.save(checkpoint_number=0)
        files.config.to_json_file(os.path.join(tmp, CONFIG_NAME))
        if files.vocab_file:
            copy_file(files.vocab_file, os.path.join(tmp, VOCAB_NAME))
    return os.path.join(output_dir, f"{CHECKPOINT_NAME}-0")
