"""Export a pretrained model as a serving SavedModel.

    model = load_pretrained("out/pretrain")   # bert_tf.interop.native: checkpoint + config
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

import logging

from bert_tf.core.errors import UserError


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

    from bert_tf.export.serving import BertServingModule
    from bert_tf.interop.model_files import check_vocab_size
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
    return save_module(module, export_dir)


def save_module(module, export_dir: str) -> str:
    """Saves a serving tf.Module with its `signatures()` to export_dir, atomically.

    tf.saved_model.save silences absl's INFO logs for the rest of the process: it raises the
    verbosity while it walks the object graph, then "restores" absl's flag default (WARNING)
    rather than the logger's level. A notebook that exports, then trains on, would lose its
    progress lines; keep the level the caller had.
    """
    import tensorflow as tf

    from bert_tf.interop.model_files import atomic_directory

    absl_logger = logging.getLogger("absl")
    level = absl_logger.level
    try:
        with atomic_directory(export_dir) as tmp:
            tf.saved_model.save(module, tmp, signatures=module.signatures())
    finally:
        absl_logger.setLevel(level)
    return export_dir
