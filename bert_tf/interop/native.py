"""The bert_tf checkpoint format: a training checkpoint's model weights in and out.

`read_native` takes a run's output_dir (its latest checkpoint) or a `ckpt-N` prefix;
`write_native` writes a directory that `run_pretraining --init_checkpoint` accepts:
ckpt-0.{index,data-*}, checkpoint, bert_config.json and vocab.txt.
"""

from __future__ import annotations

import os
from typing import Optional

from bert_tf.interop.model_files import (
    MLM_PREFIX,
    NSP_PREFIX,
    ModelFiles,
    atomic_directory,
    check_vocab,
    copy_file,
    find_beside,
)

CONFIG_NAME = "bert_config.json"
VOCAB_NAME = "vocab.txt"
CHECKPOINT_NAME = "ckpt"


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
    from bert_tf.export.saved_model import load_pretrained
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
