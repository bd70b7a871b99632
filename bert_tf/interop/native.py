"""The bert_tf checkpoint format: a training checkpoint's model weights in and out.

`load_pretrained` rebuilds the pretraining model of a run (latest checkpoint and its
bert_config.json), for export and conversion alike.

`read_native` takes a run's output_dir (its latest checkpoint) or a `ckpt-N` prefix;
`write_native` writes a directory that `run_pretraining --init_checkpoint` accepts:
ckpt-0.{index,data-*}, checkpoint, bert_config.json and vocab.txt.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Optional, Tuple

from bert_tf.core import fileio
from bert_tf.core.errors import UserError
from bert_tf.interop.model_files import (
    MLM_PREFIX,
    NSP_PREFIX,
    ModelFiles,
    atomic_directory,
    check_vocab,
    copy_file,
    find_beside,
)

VOCAB_NAME = "vocab.txt"
CHECKPOINT_NAME = "ckpt"


CONFIG_NAME = "bert_config.json"


@dataclasses.dataclass(frozen=True)
class LoadedModel:
    """A pretraining model restored from a checkpoint.

    Attributes:
        model: the `BertPretrainingModel`.
        checkpoint: the checkpoint prefix read.
        config_file: the bert_config.json used.
        missing: canonical names (`bert_tf.modeling.weight_map`) of weights the checkpoint
            lacked, left at their fresh initial values, e.g. the MLM head of a converted
            encoder-only model.
    """

    model: object
    checkpoint: str
    config_file: str
    missing: Tuple[str, ...]

    @property
    def has_mlm_head(self) -> bool:
        from bert_tf.interop.model_files import MLM_PREFIX

        return not any(n.startswith(MLM_PREFIX) for n in self.missing)


def find_config(checkpoint: str, bert_config_file: Optional[str]) -> str:
    """The given config file, or bert_config.json beside the checkpoint / in the directory."""
    from bert_tf.interop.model_files import find_beside

    if bert_config_file:
        return bert_config_file
    found = find_beside(checkpoint, (CONFIG_NAME,))
    if found is None:
        directory = checkpoint if fileio.isdir(checkpoint) else os.path.dirname(checkpoint)
        raise UserError(f"no {CONFIG_NAME} in {directory or '.'}; pass --bert_config_file")
    return found


def restore_weights(model, prefix: str) -> Tuple[str, ...]:
    """Loads a `BertPretrainingModel`'s weights from a bert_tf checkpoint, by object graph.

    Every shape is checked before anything is assigned.

    Returns:
        Canonical names of the weights the checkpoint lacks (kept at their initial values).

    Raises:
        UserError: no model weights in the checkpoint, or a weight of another shape (named,
            with both shapes).
    """
    import numpy as np
    import tensorflow as tf

    from bert_tf.modeling.weight_map import pretraining_weight_map
    from bert_tf.training import checkpoint_paths

    keys = checkpoint_paths.checkpoint_keys(model, prefix)
    weights = pretraining_weight_map(model)
    reader = tf.train.load_checkpoint(prefix)
    values = {}
    for name, weight in weights.items():
        key = keys.get(id(weight.variable))
        if key is None:
            continue
        value = reader.get_tensor(key)
        if tuple(value.shape) != tuple(weight.variable.shape):
            raise UserError(
                f"{prefix}: variable {name} ({key.split('/.ATTRIBUTES')[0]}) has shape "
                f"{list(value.shape)} but the bert_config implies {list(weight.variable.shape)}")
        values[name] = np.reshape(value, weight.shape)
    if not values:
        raise UserError(f"{prefix}: no bert_tf model weights in the checkpoint (is it a "
                        "bert_tf training checkpoint? Convert other formats with "
                        "python -m bert_tf.convert_checkpoint)")
    for name, value in values.items():
        weights[name].assign(value, name)
    return tuple(n for n in weights if n not in values)


def load_pretrained(
    path: str, bert_config_file: Optional[str] = None, what: str = "output_dir"
) -> LoadedModel:
    """Builds a `BertPretrainingModel` and restores its weights from a bert_tf checkpoint.

    Args:
        path: a run's output_dir (its latest checkpoint) or a `ckpt-N` prefix.
        bert_config_file: default: bert_config.json beside the checkpoint.
        what: the flag name of `path`, for messages.

    Raises:
        UserError: no checkpoint (e.g. a run that has not saved one yet), no config, or
            variables whose shapes differ from the config.
    """
    from absl import logging

    from bert_tf.modeling.config import BertConfig
    from bert_tf.modeling.pretraining_model import BertPretrainingModel
    from bert_tf.training import checkpointing

    prefix = checkpointing.resolve_checkpoint(path, what=what)
    config_file = find_config(path, bert_config_file)
    config = BertConfig.from_json_file(config_file)
    model = BertPretrainingModel(config, use_nsp=True)
    missing = restore_weights(model, prefix)
    logging.info("restored %s: %d weights", prefix, len(model.weights) - len(missing))
    if missing:
        logging.warning("%s lacks %d weight(s), left at their initial values: %s", prefix,
                        len(missing), ", ".join(missing))
    return LoadedModel(model, prefix, config_file, missing)


def read_native(
    path: str, bert_config_file: Optional[str] = None, vocab_file: Optional[str] = None
) -> ModelFiles:
    """Reads the model weights of a bert_tf training checkpoint.

    Args:
        path: a run's output_dir (its latest checkpoint) or a `ckpt-N` prefix.
        bert_config_file: default: bert_config.json beside the checkpoint.
        vocab_file: default: vocab.txt beside the checkpoint (optional).

    Raises:
        UserError: no checkpoint or config, or variables whose shapes disagree with the config.
    """
    from bert_tf.modeling.weight_map import get_weights, pretraining_weight_map

    loaded = load_pretrained(path, bert_config_file, what="input")
    prefix, model = loaded.checkpoint, loaded.model
    vocab_file = vocab_file or find_beside(prefix, (VOCAB_NAME,))
    weights = {name: value for name, value in get_weights(pretraining_weight_map(model)).items()
               if name not in loaded.missing}
    check_vocab(vocab_file, weights, prefix)
    return ModelFiles(model.config, weights, vocab_file, prefix)


def write_native(files: ModelFiles, output_dir: str, seed: int = 0) -> str:
    """Writes a bert_tf checkpoint that `run_pretraining --init_checkpoint` accepts.

    The object graph is that of a training checkpoint (`model/encoder/...`,
    `model/mlm_head/...`, `model/nsp_head/...`), without optimizer or step. A head the
    source lacks entirely is left out, so warm-starting reports it as freshly initialised;
    other missing weights get a fresh (seeded) initialisation and are stored.

    Args:
        files: the model.
        output_dir: a new directory.
        seed: seeds the initialisation of weights the source lacks (through
            `keras.utils.set_random_seed`, which also seeds the process's global RNGs).

    Returns:
        The checkpoint prefix, `output_dir/ckpt-0`.
    """
    import keras
    import tensorflow as tf

    from bert_tf.modeling.pretraining_model import BertPretrainingModel
    from bert_tf.modeling.weight_map import pretraining_weight_map, set_weights

    has_mlm = any(n.startswith(MLM_PREFIX) for n in files.weights)
    has_nsp = any(n.startswith(NSP_PREFIX) for n in files.weights)
    keras.utils.set_random_seed(seed)
    model = BertPretrainingModel(files.config, use_nsp=has_nsp)
    set_weights(pretraining_weight_map(model), files.weights, strict=False, source=files.source)
    if has_mlm:
        root = model
    else:
        # The same child names as the Keras model, minus the head: warm_start then finds
        # no model/mlm_head/... and leaves (and logs) it at its initial values.
        root = tf.Module()
        root.encoder = model.encoder
        if has_nsp:
            root.nsp_head = model.nsp_head
    with atomic_directory(output_dir) as tmp:
        manager = tf.train.CheckpointManager(
            tf.train.Checkpoint(model=root), tmp, max_to_keep=1, checkpoint_name=CHECKPOINT_NAME
        )
        manager.save(checkpoint_number=0)
        files.config.to_json_file(os.path.join(tmp, CONFIG_NAME))
        if files.vocab_file:
            copy_file(files.vocab_file, os.path.join(tmp, VOCAB_NAME))
    return os.path.join(output_dir, f"{CHECKPOINT_NAME}-0")
