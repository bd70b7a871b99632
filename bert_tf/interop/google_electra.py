"""google-research/electra's TF1 checkpoints: read and write.

One name-based checkpoint holds both networks (`run_pretraining.py` of google-research/electra,
with its defaults: a separate generator, `untied_generator_embeddings` off, so the generator
reads the discriminator's tables). Its variable names and the canonical ones
(`bert_tf.interop.electra_layout`):

    electra/embeddings/{word,position,token_type}_embeddings   embeddings/* (shared, E wide)
    electra/embeddings/LayerNorm/{gamma,beta}                  embeddings/layer_norm/*
    electra/embeddings_project/{kernel,bias}                   embeddings_project/* (E != H)
    electra/encoder/layer_N/... (BERT's names)                 layer_N/...
    generator/embeddings_project/{kernel,bias}                 generator/embeddings_project/*
    generator/encoder/layer_N/...                              generator/layer_N/...
    generator_predictions/dense/{kernel,bias}                  generator_predictions/dense/*
    generator_predictions/LayerNorm/{gamma,beta}               generator_predictions/layer_norm/*
    generator_predictions/output_bias                          generator_predictions/output_bias
    discriminator_predictions/dense/{kernel,bias}              discriminator_predictions/dense/*
    discriminator_predictions/dense_1/{kernel,bias}            .../dense_prediction/*

Kernels are [in, out], as the canonical ones. There is no pooler (ELECTRA's pooled output is
the [CLS] state). Optimizer slots and `global_step` are skipped on input. A checkpoint without
the generator (`generator/...`, `generator_predictions/...`) reads as the discriminator alone.

ELECTRA's releases ship no bert_config.json (the hyper-parameters come from its
`--model_size`): without one beside the checkpoint (or `--bert_config_file`), the config is
read from the shapes (vocabulary, E, H, depth, feed-forward, positions, token types) with
ELECTRA's heads = H / 64 and `hidden_act` "gelu" (the tanh form, which the original code
computes), and one note line says so. Written checkpoints are `model.ckpt` with a checkpoint
state file, bert_config.json and vocab.txt.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Dict, List, Optional

import numpy as np

from bert_tf.core import fileio
from bert_tf.core.errors import UserError
from bert_tf.interop import electra_layout
from bert_tf.interop.google_checkpoint import name_table, resolve_prefix
from bert_tf.interop.google_checkpoint import read_config as google_read_config
from bert_tf.interop.model_files import (
    ModelFiles,
    activation_meaning,
    activation_name,
    atomic_directory,
    check_vocab,
    copy_file,
    find_beside,
    report_unused,
)
from bert_tf.modeling.config import BertConfig

CHECKPOINT_NAME = "model.ckpt"
CONFIG_NAME = "bert_config.json"
VOCAB_NAME = "vocab.txt"
WORD_EMBEDDINGS = "electra/embeddings/word_embeddings"
_SKIPPED_SUFFIXES = ("/adam_m", "/adam_v")
_SKIPPED_NAMES = frozenset({"global_step", "_CHECKPOINTABLE_OBJECT_GRAPH"})
_HEADS = {
    "generator_predictions/dense/kernel": "generator_predictions/dense/kernel",
    "generator_predictions/dense/bias": "generator_predictions/dense/bias",
    "generator_predictions/layer_norm/gamma": "generator_predictions/LayerNorm/gamma",
    "generator_predictions/layer_norm/beta": "generator_predictions/LayerNorm/beta",
    "generator_predictions/output_bias": "generator_predictions/output_bias",
    "discriminator_predictions/dense/kernel": "discriminator_predictions/dense/kernel",
    "discriminator_predictions/dense/bias": "discriminator_predictions/dense/bias",
    "discriminator_predictions/dense_prediction/kernel": "discriminator_predictions/dense_1/kernel",
    "discriminator_predictions/dense_prediction/bias": "discriminator_predictions/dense_1/bias",
}


def electra_name_table(num_layers: int) -> Dict[str, str]:
    """{canonical name: google-research/electra variable name} of both networks and heads
    (`num_layers` each; no poolers)."""
    table: Dict[str, str] = {}
    bert = name_table(num_layers)  # google-research/bert's names: bert/embeddings, bert/encoder
    for name, google in bert.items():
        if name.startswith("embeddings/"):
            table[name] = google.replace("bert/", "electra/", 1)
    for scope, prefix in (("electra", ""), ("generator", electra_layout.GENERATOR_PREFIX)):
        table[f"{prefix}embeddings_project/kernel"] = f"{scope}/embeddings_project/kernel"
        table[f"{prefix}embeddings_project/bias"] = f"{scope}/embeddings_project/bias"
        for name, google in bert.items():
            if name.startswith("layer_"):
                table[prefix + name] = google.replace("bert/", f"{scope}/", 1)
    table.update(_HEADS)
    return table


def is_electra_checkpoint(path: str) -> bool:
    """Whether `path` (a directory or prefix) is a name-based checkpoint of ELECTRA's."""
    import tensorflow as tf

    try:
        prefix = resolve_prefix(path)
    except UserError:
        return False
    return tf.train.load_checkpoint(prefix).has_tensor(WORD_EMBEDDINGS)


def config_from_shapes(shapes: Dict[str, list]) -> BertConfig:
    """The discriminator's config from an ELECTRA checkpoint's variable shapes (see the
    module docstring: heads = hidden / 64, hidden_act "gelu")."""
    vocab, embedding = shapes[WORD_EMBEDDINGS]
    hidden = shapes["electra/encoder/layer_0/attention/self/query/bias"][0]
    layers = sum(1 for n in shapes if n.startswith("electra/encoder/layer_")
                 and n.endswith("/attention/self/query/bias"))
    return BertConfig(
        vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers,
        num_attention_heads=max(1, hidden // electra_layout.HEAD_WIDTH),
        intermediate_size=shapes["electra/encoder/layer_0/intermediate/dense/bias"][0],
        max_position_embeddings=shapes["electra/embeddings/position_embeddings"][0],
        type_vocab_size=shapes["electra/embeddings/token_type_embeddings"][0],
        embedding_size=None if embedding == hidden else embedding)


def read_config(path: str, bert_config_file: Optional[str] = None) -> BertConfig:
    """The discriminator's config: `bert_config_file`, else bert_config.json beside the
    checkpoint, else from the shapes (with one note line; see the module docstring)."""
    import tensorflow as tf

    prefix = resolve_prefix(path)
    config_file = bert_config_file or find_beside(prefix, (CONFIG_NAME,))
    if config_file:
        return google_read_config(config_file)
    config = config_from_shapes(tf.train.load_checkpoint(prefix).get_variable_to_shape_map())
    print(f"note: no {CONFIG_NAME} beside {prefix}: read the config from its shapes "
          f"(hidden {config.hidden_size}, {config.num_hidden_layers} layers, "
          f"{config.num_attention_heads} heads = hidden / 64, hidden_act gelu)",
          file=sys.stderr, flush=True)
    return config


def read(path: str, bert_config_file: Optional[str] = None,
         vocab_file: Optional[str] = None) -> ModelFiles:
    """Reads an ELECTRA TF1 checkpoint (both networks, or the discriminator alone).

    Args:
        path: the directory or the checkpoint prefix.
        bert_config_file: the discriminator's config; default: bert_config.json beside the
            checkpoint, else read from the shapes (module docstring).
        vocab_file: default: vocab.txt beside the checkpoint (optional).

    Raises:
        UserError: no checkpoint, a variable whose shape disagrees with the config, layers
            beyond its depth, or a vocabulary of another size.
    """
    import tensorflow as tf

    prefix = resolve_prefix(path)
    reader = tf.train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    config = read_config(prefix, bert_config_file)
    vocab_file = vocab_file or find_beside(prefix, (VOCAB_NAME,))
    table = electra_name_table(config.num_hidden_layers)
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
        weights[name] = np.asarray(reader.get_tensor(google), dtype=np.float32)
    extra = sorted({"/".join(u.split("/")[:3]) for u in unused if "/encoder/layer_" in u})
    if extra:
        raise UserError(f"{prefix} has encoder layers {', '.join(extra)} but the config says "
                        f"num_hidden_layers={config.num_hidden_layers}")
    electra_layout.check_shapes(weights, config, prefix, source_name=table.__getitem__)
    report_unused(unused, prefix)
    check_vocab(vocab_file, weights, prefix)
    return ModelFiles(config, weights, vocab_file, prefix)


def write(files: ModelFiles, output_dir: str) -> str:
    """Writes an ELECTRA TF1 checkpoint directory: model.ckpt.*, checkpoint,
    bert_config.json (the discriminator's), vocab.txt. The poolers are not written.

    Returns:
        The checkpoint prefix, `output_dir/model.ckpt`.
    """
    import tensorflow as tf

    meaning = activation_meaning(files.config.hidden_act, "bert_tf")
    if meaning == "gelu_erf":
        print("warning: the model uses the exact (erf) GELU; Google's format has no name for "
              "it, so bert_config.json says \"gelu\", which the original code computes with "
              "the tanh approximation (outputs differ by < 1e-3)", file=sys.stderr, flush=True)
    config = dataclasses.replace(files.config, hidden_act=activation_name(meaning, "google"))
    table = electra_name_table(config.num_hidden_layers)
    names = [n for n in table if n in files.weights]
    with atomic_directory(output_dir) as tmp:
        prefix = os.path.join(tmp, CHECKPOINT_NAME)
        tf.raw_ops.SaveV2(
            prefix=prefix, tensor_names=[table[n] for n in names],
            shape_and_slices=[""] * len(names),
            tensors=[tf.constant(np.asarray(files.weights[n], np.float32)) for n in names])
        with fileio.atomic_output(os.path.join(tmp, "checkpoint"), "wb") as f:
            f.write(f'model_checkpoint_path: "{CHECKPOINT_NAME}"\n'
                    f'all_model_checkpoint_paths: "{CHECKPOINT_NAME}"\n'.encode())
        config.to_json_file(os.path.join(tmp, CONFIG_NAME))
        if files.vocab_file:
            copy_file(files.vocab_file, os.path.join(tmp, VOCAB_NAME))
    return os.path.join(output_dir, CHECKPOINT_NAME)
