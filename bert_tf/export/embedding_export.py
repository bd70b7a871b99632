"""Export a bi-encoder as a serving SavedModel with the `embed` signature.

    export_st_folder("all-MiniLM-L6-v2/", "export/minilm/1")   # or: python -m bert_tf.export \\
                                                              #   --output_dir=<folder> ...

A sentence-transformers folder (`bert_tf.finetune.retrieval.st_folder`: one Transformer, a
mean, cls or max Pooling, an optional Normalize) holds what is needed: the Transformer's
Hugging Face weights and vocabulary, the pooling, the normalisation, max_seq_length and the
casing. The SavedModel has `bert_tf.export.serving`'s signatures plus `embed` (text: string
[batch] -> embedding float32 [batch, hidden]), the vectors sentence-transformers' `encode`
gives for the folder, and no fill_mask (such a folder has no masked-LM head).

A `run_retrieval` output directory (finetune_task.json of kind "bi_encoder", bert_config.json,
vocab.txt, its checkpoints) exports the same way with `export_bi_encoder`: its latest
checkpoint, with the pooling, normalisation, casing and passage length it was trained with.
"""

from __future__ import annotations

import json
import os
from typing import Optional

from bert_tf.core.errors import UserError

DEFAULT_MAX_SEQ_LENGTH = 256  # when the folder names none (sentence-transformers' MiniLM's)


def export_embedder(encoder, vocab_file: str, do_lower_case: bool, export_dir: str,
                    max_seq_length: int, pooling: str, normalize: bool = True) -> str:
    """Writes a serving SavedModel of `encoder` with the embed signature, atomically.

    Args:
        encoder: a `bert_tf.modeling.BertEncoder` with its weights loaded.
        vocab_file, do_lower_case: the tokenizer, compiled into the graph.
        export_dir: a new directory.
        max_seq_length: tokens per text, [CLS] and [SEP] included (longer texts are cut).
        pooling, normalize: as `bert_tf.finetune.retrieval.pooling.pool`.

    Returns:
        export_dir.
    """
    from bert_tf.export.saved_model import save_module
    from bert_tf.export.serving import BertServingModule
    from bert_tf.interop.model_files import check_vocab_size
    from bert_tf.text.tf_tokenization import TFBertTokenizer

    if max_seq_length < 3:
        raise UserError(f"--max_seq_length={max_seq_length}: need at least 3 ([CLS] x [SEP])")
    encoder.config.check_seq_length(max_seq_length)
    check_vocab_size(vocab_file, encoder.config.vocab_size)
    module = BertServingModule(encoder, TFBertTokenizer(vocab_file, do_lower_case),
                               max_seq_length, pooling=pooling, normalize=normalize)
    return save_module(module, export_dir)


def export_st_folder(path: str, export_dir: str, max_seq_length: Optional[int] = None) -> str:
    """Exports the sentence-transformers folder `path` (module docstring).

    Args:
        max_seq_length: None: the folder's sentence_bert_config.json's, else 256 (or
            max_position_embeddings when smaller).

    Returns:
        export_dir.

    Raises:
        UserError: a folder bert_tf cannot embed as it does (`st_folder.read_folder`), or
            weights that do not fit its config.
    """
    import tensorflow as tf

    from bert_tf.core import tokenization
    from bert_tf.finetune import warm_start
    from bert_tf.finetune.retrieval import st_folder
    from bert_tf.finetune.retrieval.embedder import BertEmbedder
    from bert_tf.interop.model_files import check_new_directory
    from bert_tf.interop.vocab_resize import infer_do_lower_case
    from bert_tf.modeling.encoder import INPUT_NAMES

    check_new_directory(export_dir)  # Before the (slow) read.
    folder = st_folder.read_folder(path)
    model = warm_start.resolve(folder.transformer_dir, "", "")
    embedder = BertEmbedder(model.config, folder.pooling, folder.normalize)
    embedder({name: tf.ones([1, 4], tf.int32) if name == "input_mask"
              else tf.zeros([1, 4], tf.int32) for name in INPUT_NAMES})
    warm_start.load_encoder_weights(embedder, model.files)
    lower = folder.do_lower_case
    if lower is None:
        lower = infer_do_lower_case(tokenization.load_vocab(model.vocab_file))
    length = max_seq_length or folder.max_seq_length or min(
        DEFAULT_MAX_SEQ_LENGTH, model.config.max_position_embeddings)
    return export_embedder(embedder.encoder, model.vocab_file, lower, export_dir, length,
                           folder.pooling, folder.normalize)


def export_bi_encoder(run_dir: str, export_dir: str, max_seq_length: Optional[int] = None
                      ) -> str:
    """Exports the latest checkpoint of the run_retrieval output directory `run_dir`.

    Args:
        max_seq_length: None: the run's max_passage_length.

    Returns:
        export_dir.

    Raises:
        UserError: a file of the directory missing or of another kind of task, no checkpoint.
    """
    import tensorflow as tf

    from bert_tf.core import fileio
    from bert_tf.finetune.retrieval.embedder import BertEmbedder
    from bert_tf.interop.model_files import check_new_directory
    from bert_tf.modeling.config import BertConfig
    from bert_tf.modeling.encoder import INPUT_NAMES
    from bert_tf.training.checkpoint_paths import read_strictly

    task = os.path.join(run_dir, "finetune_task.json")
    with fileio.open_file(task, "rb") as f:
        info = json.loads(f.read().decode("utf-8"))
    if info.get("kind") != "bi_encoder":
        raise UserError(f"{task}: a {info.get('kind')} model, not a bi-encoder")
    missing = [k for k in ("pooling", "normalize", "max_passage_length", "do_lower_case")
               if info.get(k) is None]
    if missing:
        raise UserError(f"{task}: no {missing[0]!r}")
    check_new_directory(export_dir)  # Before the (slow) restore.
    latest = tf.train.latest_checkpoint(run_dir)
    if not latest:
        raise UserError(f"{run_dir}: no trained checkpoint to export")
    config = BertConfig.from_json_file(os.path.join(run_dir, "bert_config.json"))
    embedder = BertEmbedder(config, info["pooling"], bool(info["normalize"]))
    embedder({name: tf.ones([1, 4], tf.int32) if name == "input_mask"
              else tf.zeros([1, 4], tf.int32) for name in INPUT_NAMES})
    read_strictly(latest, {"model": embedder}, what="export")
    return export_embedder(embedder.encoder, os.path.join(run_dir, "vocab.txt"),
                           bool(info["do_lower_case"]), export_dir,
                           int(max_seq_length or info["max_passage_length"]),
                           info["pooling"], bool(info["normalize"]))
