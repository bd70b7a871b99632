"""Google's original BERT checkpoints (google-research/bert): read and write.

A release directory holds `bert_model.ckpt.{index,data-*}` (a name-based TF1 checkpoint),
`bert_config.json` and `vocab.txt`. Variable names are

    bert/embeddings/{word,position,token_type}_embeddings, bert/embeddings/LayerNorm/{gamma,beta}
    bert/encoder/layer_N/attention/self/{query,key,value}/{kernel,bias}
    bert/encoder/layer_N/attention/output/dense/{kernel,bias}, .../attention/output/LayerNorm/*
    bert/encoder/layer_N/intermediate/dense/*, bert/encoder/layer_N/output/dense/*,
    bert/encoder/layer_N/output/LayerNorm/*, bert/pooler/dense/*
    cls/predictions/transform/dense/*, cls/predictions/transform/LayerNorm/*,
    cls/predictions/output_bias, cls/seq_relationship/output_weights [2, hidden] (transposed),
    cls/seq_relationship/output_bias

Kernels already have the canonical [in, out] layout; only the NSP weight is transposed.
Optimizer slots (`*/adam_m`, `*/adam_v`) and `global_step` are skipped on input.

Written checkpoints are plain name-based V2 checkpoints (tf.raw_ops.SaveV2), which
`tf.train.load_checkpoint`, a TF1 `tf.compat.v1.train.Saver` and `init_from_checkpoint` read.

Activation: Google's `gelu` was the tanh approximation; see
`bert_tf.interop.model_files.ACTIVATION_NAMES`.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Dict, List, Optional

import numpy as np

from bert_tf.core import fileio
from bert_tf.core.errors import UserError
from bert_tf.interop.model_files import (
    ModelFiles,
    activation_meaning,
    activation_name,
    atomic_directory,
    check_shapes,
    check_vocab,
    copy_file,
    find_beside,
    report_unused,
)
from bert_tf.modeling.config import BertConfig

CHECKPOINT_NAME = "bert_model.ckpt"
CONFIG_NAME = "bert_config.json"
VOCAB_NAME = "vocab.txt"

# Canonical name under layer_{i}/ -> Google name under bert/encoder/layer_{i}/.
_LAYER_NAMES = {
    "attention/query/kernel": "attention/self/query/kernel",
    "attention/query/bias": "attention/self/query/bias",
    "attention/key/kernel": "attention/self/key/kernel",
    "attention/key/bias": "attention/self/key/bias",
    "attention/value/kernel": "attention/self/value/kernel",
    "attention/value/bias": "attention/self/value/bias",
    "attention/output/kernel": "attention/output/dense/kernel",
    "attention/output/bias": "attention/output/dense/bias",
    "attention/layer_norm/gamma": "attention/output/LayerNorm/gamma",
    "attention/layer_norm/beta": "attention/output/LayerNorm/beta",
    "intermediate/kernel": "intermediate/dense/kernel",
    "intermediate/bias": "intermediate/dense/bias",
    "output/kernel": "output/dense/kernel",
    "output/bias": "output/dense/bias",
    "output/layer_norm/gamma": "output/LayerNorm/gamma",
    "output/layer_norm/beta": "output/LayerNorm/beta",
}
_OTHER_NAMES = {
    "embeddings/word_embeddings": "bert/embeddings/word_embeddings",
    "embeddings/position_embeddings": "bert/embeddings/position_embeddings",
    "embeddings/token_type_embeddings": "bert/embeddings/token_type_embeddings",
    "embeddings/layer_norm/gamma": "bert/embeddings/LayerNorm/gamma",
    "embeddings/layer_norm/beta": "bert/embeddings/LayerNorm/beta",
    "pooler/kernel": "bert/pooler/dense/kernel",
    "pooler/bias": "bert/pooler/dense/bias",
    "mlm/transform/kernel": "cls/predictions/transform/dense/kernel",
    "mlm/transform/bias": "cls/predictions/transform/dense/bias",
    "mlm/transform/layer_norm/gamma": "cls/predictions/transform/LayerNorm/gamma",
    "mlm/transform/layer_norm/beta": "cls/predictions/transform/LayerNorm/beta",
    "mlm/output_bias": "cls/predictions/output_bias",
    "nsp/kernel": "cls/seq_relationship/output_weights",
    "nsp/bias": "cls/seq_relationship/output_bias",
}
# Stored as the transpose of the canonical (Keras) kernel.
_TRANSPOSED = frozenset({"nsp/kernel"})
_SKIPPED_SUFFIXES = ("/adam_m", "/adam_v")
_SKIPPED_NAMES = frozenset({"global_step", "_CHECKPOINTABLE_OBJECT_GRAPH"})


def name_table(num_layers: int) -> Dict[str, str]:
    """{canonical name: Google variable name} for a model with `num_layers` layers."""
    table = {k: v for k, v in _OTHER_NAMES.items() if k.startswith("embeddings/")}
    for i in range(num_layers):
        for ours, theirs in _LAYER_NAMES.items():
            table[f"layer_{i}/{ours}"] = f"bert/encoder/layer_{i}/{theirs}"
    table.update({k: v for k, v in _OTHER_NAMES.items() if not k.startswith("embeddings/")})
    return table


def to_google_layout(name: str, value: np.ndarray) -> np.ndarray:
    """A canonical value in the layout Google stores it (the NSP weight transposed)."""
    return np.ascontiguousarray(np.transpose(value)) if name in _TRANSPOSED else value


def _shape_in_file(name: str, shape: tuple) -> tuple:
    return tuple(reversed(shape)) if name in _TRANSPOSED else shape


def resolve_prefix(path: str) -> str:
    """A checkpoint prefix from a release directory or a prefix.

    Raises:
        UserError: no checkpoint found.
    """
    import tensorflow as tf

    if fileio.isdir(path):
        candidate = os.path.join(path, CHECKPOINT_NAME)
        if fileio.exists(candidate + ".index"):
            return candidate
        latest = tf.train.latest_checkpoint(path)
        if latest:
            return latest
        indexes = tf.io.gfile.glob(os.path.join(path, "*.index"))
        if len(indexes) == 1:
            return indexes[0][: -len(".index")]
        raise UserError(f"{path}: no {CHECKPOINT_NAME}.index (or single *.index) in the directory")
    if not fileio.exists(path + ".index"):
        raise UserError(f"{path}: no checkpoint there (expected {path}.index)")
    return path


def read_config(path: str) -> BertConfig:
    """Reads a Google bert_config.json, mapping its `hidden_act` to bert_tf's spelling."""
    config = BertConfig.from_json_file(path)
    try:
        meaning = activation_meaning(config.hidden_act, "google")
    except UserError:  # A spelling only bert_tf writes (e.g. "gelu_approximate").
        meaning = activation_meaning(config.hidden_act, "bert_tf")
    return dataclasses.replace(config, hidden_act=activation_name(meaning, "bert_tf"))


def read(
    path: str, bert_config_file: Optional[str] = None, vocab_file: Optional[str] = None
) -> ModelFiles:
    """Reads a Google checkpoint.

    Args:
        path: the release directory or the checkpoint prefix (`.../bert_model.ckpt`).
        bert_config_file: default: bert_config.json beside the checkpoint.
        vocab_file: default: vocab.txt beside the checkpoint (optional).

    Returns:
        The model; heads that the checkpoint lacks are simply absent from `weights`.

    Raises:
        UserError: no checkpoint or config, an object-based (TF2) checkpoint, a variable whose
            shape disagrees with the config, or a vocabulary of another size.
    """
    import tensorflow as tf

    prefix = resolve_prefix(path)
    config_file = bert_config_file or find_beside(prefix, (CONFIG_NAME,))
    if config_file is None:
        raise UserError(f"{path}: no {CONFIG_NAME} beside the checkpoint; pass --bert_config_file")
    config = read_config(config_file)
    vocab_file = vocab_file or find_beside(prefix, (VOCAB_NAME,))

    reader = tf.train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    if any("/.ATTRIBUTES/" in n for n in shapes):
        raise UserError(
            f"{prefix} is an object-based TF2 checkpoint, not a Google TF1 one; use "
            "--from_format=bert_tf for bert_tf training checkpoints"
        )
    table = name_table(config.num_hidden_layers)
    by_google = {v: k for k, v in table.items()}
    weights: Dict[str, np.ndarray] = {}
    unused: List[str] = []
    for google in sorted(shapes):
        if google in _SKIPPED_NAMES or google.endswith(_SKIPPED_SUFFIXES):
            continue
        name = by_google.get(google)
        if name is None:
            unused.append(google)
            continue
        value = np.asarray(reader.get_tensor(google), dtype=np.float32)
        weights[name] = to_google_layout(name, value)  # a transpose: its own inverse
    if not weights:
        raise UserError(f"{prefix}: no BERT variables (bert/..., cls/...) in the checkpoint")
    check_shapes(weights, config, prefix, source_name=table.__getitem__,
                 source_shape=_shape_in_file)
    # A layer_N beyond num_hidden_layers lands in `unused`; say so in the config's terms.
    extra_layers = sorted({u.split("/")[2] for u in unused if u.startswith("bert/encoder/layer_")})
    if extra_layers:
        raise UserError(
            f"{prefix} has encoder layers {', '.join(extra_layers)} but {config_file} says "
            f"num_hidden_layers={config.num_hidden_layers}"
        )
    report_unused(unused, prefix)
    check_vocab(vocab_file, weights, prefix)
    return ModelFiles(config, weights, vocab_file, prefix)


def write(files: ModelFiles, output_dir: str) -> str:
    """Writes a Google release directory: bert_model.ckpt.*, bert_config.json, vocab.txt.

    Only the weights present in `files` are written (a model without heads gives a
    checkpoint without `cls/...`). The directory is written under a temporary name and
    renamed when complete.

    Returns:
        The checkpoint prefix, `output_dir/bert_model.ckpt`.

    Raises:
        UserError: `output_dir` exists and is not empty.
    """
    import tensorflow as tf

    meaning = activation_meaning(files.config.hidden_act, "bert_tf")
    if meaning == "gelu_erf":
        print(
            "warning: the model uses the exact (erf) GELU; Google's format has no name for it, "
            "so bert_config.json says \"gelu\", which the original code computes with the tanh "
            "approximation (outputs differ by < 1e-3)",
            file=sys.stderr, flush=True,
        )
    config = dataclasses.replace(files.config, hidden_act=activation_name(meaning, "google"))
    table = name_table(config.num_hidden_layers)
    names = [n for n in table if n in files.weights]
    with atomic_directory(output_dir) as tmp:
        prefix = os.path.join(tmp, CHECKPOINT_NAME)
        tf.raw_ops.SaveV2(
            prefix=prefix,
            tensor_names=[table[n] for n in names],
            shape_and_slices=[""] * len(names),
            tensors=[
                tf.constant(to_google_layout(n, np.asarray(files.weights[n], np.float32)))
                for n in names
            ],
        )
        # A checkpoint state file, so tools that take a directory find the checkpoint.
        with fileio.atomic_output(os.path.join(tmp, "checkpoint"), "wb") as f:
            f.write(
                f'model_checkpoint_path: "{CHECKPOINT_NAME}"\n'
                f'all_model_checkpoint_paths: "{CHECKPOINT_NAME}"\n'.encode()
            )
        config.to_json_file(os.path.join(tmp, CONFIG_NAME))
        if files.vocab_file:
            copy_file(files.vocab_file, os.path.join(tmp, VOCAB_NAME))
    return os.path.join(output_dir, CHECKPOINT_NAME)
