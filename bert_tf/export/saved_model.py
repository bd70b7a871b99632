"""Load a pretrained model from a training run, and export it as a serving SavedModel.

    model = load_pretrained("out/pretrain")          # latest checkpoint + bert_config.json
    export_saved_model(model.model, "vocab.txt", True, "export/bert/1")

The SavedModel's signatures are described in `bert_tf.export.serving`. Loading it needs the
TF Text ops registered: `import tensorflow_text` before `tf.saved_model.load` (TensorFlow
Serving: a build that includes TF Text ops; the `serve_ids` signature uses none).

Example TensorFlow Serving REST request (model directory `export/bert/1`):

    POST /v1/models/bert:predict
    {"signature_name": "serving_default", "instances": [{"text_a": "hello world"}]}
    {"signature_name": "serve_text_pair",
     "instances": [{"text_a": "who wrote it?", "text_b": "it was written by her."}]}
    {"signature_name": "fill_mask", "instances": [{"text": "paris is the [MASK] of france."}]}
"""

from __future__ import annotations

import dataclasses
import os
from typing import Dict, Optional, Tuple

from bert_tf import fileio
from bert_tf.errors import UserError

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


def checkpoint_keys(obj, prefix: str, root_name: str = "model") -> Dict[int, str]:
    """{id(variable): checkpoint key} for the variables of `obj` that the checkpoint holds.

    A tf.train.Checkpoint stores each variable once, under its shortest path from the root,
    which in a training checkpoint is often through the optimizer
    (`optimizer/_trainable_variables/7/...`), not `model/...`. So keys cannot be derived
    from the model's own paths; instead this walks the saved object graph and the live
    object graph together from `root_name`, matching children by name, as a restore does.

    Args:
        obj: the live object saved as `root_name` (e.g. the Keras model).
        prefix: the checkpoint prefix.
        root_name: the child of the checkpoint's root that `obj` was saved as.
    """
    import tensorflow as tf
    from tensorflow.core.protobuf import trackable_object_graph_pb2

    reader = tf.train.load_checkpoint(prefix)
    graph = trackable_object_graph_pb2.TrackableObjectGraph.FromString(
        reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
    root = {c.local_name: c.node_id for c in graph.nodes[0].children}
    if root_name not in root:
        return {}
    keys: Dict[int, str] = {}
    seen = {id(obj)}
    queue = [(obj, root[root_name])]
    while queue:
        live, node_id = queue.pop(0)
        node = graph.nodes[node_id]
        values = [a.checkpoint_key for a in node.attributes if a.name == "VARIABLE_VALUE"]
        if values:
            keys[id(live)] = values[0]
            continue
        saved_children = {c.local_name: c.node_id for c in node.children}
        for name, child in tf.train.TrackableView.children(live).items():
            if name in saved_children and id(child) not in seen:
                seen.add(id(child))
                queue.append((child, saved_children[name]))
    return keys


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

    keys = checkpoint_keys(model, prefix)
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


def export_saved_model(
    model,
    vocab_file: str,
    do_lower_case: bool,
    export_dir: str,
    max_seq_length: int = 128,
    top_k: int = 5,
    with_fill_mask: bool = True,
) -> str:
    """Writes a serving SavedModel (see `bert_tf.export.serving` for the signatures).

    Args:
        model: a `BertPretrainingModel` (its encoder and MLM head are exported).
        vocab_file: the model's vocabulary; compiled into the graph.
        do_lower_case: as the model was trained.
        export_dir: a new directory (for TensorFlow Serving: `<model_base_path>/<version>`).
            Written under a temporary name and renamed when complete.
        max_seq_length: longest packed sequence for text inputs.
        top_k: candidates per mask in `fill_mask`.
        with_fill_mask: export the fill_mask signature (needs a trained MLM head).

    Returns:
        export_dir.

    Raises:
        UserError: bad sizes, a vocabulary of another size, an existing export_dir.
    """
    import tensorflow as tf

    from bert_tf.export.serving import BertServingModule
    from bert_tf.interop.model_files import atomic_directory, check_vocab_size
    from bert_tf.text.tf_tokenization import TFBertTokenizer

    config = model.config
    if max_seq_length < 3:
        raise UserError(f"--max_seq_length={max_seq_length}: need at least 3 ([CLS] x [SEP])")
    config.check_seq_length(max_seq_length)
    if top_k < 1:
        raise UserError(f"--top_k={top_k} must be at least 1")
    check_vocab_size(vocab_file, config.vocab_size)
    module = BertServingModule(
        model.encoder, TFBertTokenizer(vocab_file, do_lower_case), max_seq_length,
        mlm_head=model.mlm_head if with_fill_mask else None, top_k=top_k)
    with atomic_directory(export_dir) as tmp:
        tf.saved_model.save(module, tmp, signatures=module.signatures())
    return export_dir
