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
from typing import Optional, Tuple

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
        missing: checkpoint keys of model variables the checkpoint lacked (kept at their
            fresh initial values), e.g. the MLM head of a converted encoder-only model.
    """

    model: object
    checkpoint: str
    config_file: str
    missing: Tuple[str, ...]

    @property
    def has_mlm_head(self) -> bool:
        return not any(k.startswith("model/mlm_head/") for k in self.missing)


def find_config(checkpoint: str, bert_config_file: Optional[str]) -> str:
    """The given config file, or bert_config.json beside the checkpoint / in the directory."""
    if bert_config_file:
        return bert_config_file
    directory = checkpoint if fileio.isdir(checkpoint) else os.path.dirname(checkpoint)
    candidate = os.path.join(directory, CONFIG_NAME)
    if not fileio.exists(candidate):
        raise UserError(f"no {CONFIG_NAME} in {directory or '.'}; pass --bert_config_file")
    return candidate


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
    import tensorflow as tf

    from bert_tf import checkpointing
    from bert_tf.modeling.config import BertConfig
    from bert_tf.modeling.pretraining_model import BertPretrainingModel

    prefix = checkpointing.resolve_checkpoint(path, what=what)
    config_file = find_config(path, bert_config_file)
    config = BertConfig.from_json_file(config_file)
    use_nsp = any(k.startswith("model/nsp_head/") for k, _ in tf.train.list_variables(prefix))
    model = BertPretrainingModel(config, use_nsp=use_nsp)
    report = checkpointing.warm_start(model, prefix)
    return LoadedModel(model, prefix, config_file, tuple(report.missing))


def check_vocab_size(vocab_file: str, vocab_size: int) -> None:
    """Raises if the vocabulary does not have the model's vocab_size tokens."""
    from bert_tf.convert import vocab_size_of

    n = vocab_size_of(vocab_file)
    if n != vocab_size:
        raise UserError(f"vocab file {vocab_file} has {n} tokens but the model's vocab_size is "
                        f"{vocab_size}")


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

    from bert_tf.convert import atomic_directory
    from bert_tf.export.serving import BertServingModule
    from bert_tf.tf_tokenization import TFBertTokenizer

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
