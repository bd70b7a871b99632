"""Texts -> vectors by an exported SavedModel's `embed` signature (bert_tf.export).

`python -m bert_tf.export` of a run_retrieval output directory or a sentence-transformers
folder writes a SavedModel whose `embed` signature takes raw text (string [batch]) and
returns {"embedding": float32 [batch, dim]}, tokenised, pooled and normalised in the graph
(docs/export.md). Both runners of embed_corpus call it here, on the same batches: a shard's
passages ordered longest first (by characters, ties in file order) and cut into --batch_size
batches, since the signature pads each batch to its longest text. The same batches through
the same graph give the same bytes in any process, locally or on a Beam worker.

TensorFlow (and tensorflow-text, whose ops the tokenizer uses) are imported when a model is
loaded, not with this module.
"""

from __future__ import annotations

import hashlib
import os
from typing import List, Sequence

import numpy as np

from bert_tf.core import fileio
from bert_tf.core.errors import UserError, reason

SIGNATURE = "embed"
TEXT_INPUT, OUTPUT = "text", "embedding"


class SignatureEmbedder:
    """A loaded SavedModel's embedding signature as a function of a list of texts.

    Args:
        model_dir: the SavedModel directory (local or remote).
        signature: the signature's name.

    Raises:
        UserError: TensorFlow or tensorflow-text missing, no SavedModel there, no such
            signature, or one that does not take `text` (string [batch]) to `embedding`.
    """

    def __init__(self, model_dir: str, signature: str = SIGNATURE) -> None:
        try:
            import tensorflow as tf
            import tensorflow_text  # noqa: F401  (registers the tokenizer's ops)
        except ImportError:  # the light bert-tf-data install has neither
            raise UserError("embed_corpus runs the SavedModel with TensorFlow and "
                            "tensorflow-text: pip install bert_tf (or both beside "
                            "bert-tf-data)") from None

        if not fileio.exists(os.path.join(model_dir, "saved_model.pb")):
            raise UserError(f"--saved_model_dir={model_dir}: no saved_model.pb (export a "
                            "bi-encoder with python -m bert_tf.export)")
        try:
            self.loaded = tf.saved_model.load(model_dir)  # keeps the variables alive
        except Exception as e:  # a damaged or foreign SavedModel
            raise UserError(f"--saved_model_dir={model_dir}: cannot load: {reason(e)}") from None
        names = sorted(self.loaded.signatures)
        if signature not in names:
            raise UserError(f"--saved_model_dir={model_dir} has no {signature!r} signature "
                            f"(it has {', '.join(names) or 'none'}): export a bi-encoder (a "
                            "run_retrieval output_dir or a sentence-transformers folder)")
        self.function = self.loaded.signatures[signature]
        inputs = self.function.structured_input_signature[1]
        outputs = self.function.structured_outputs
        if (set(inputs) != {TEXT_INPUT} or inputs[TEXT_INPUT].dtype != tf.string
                or OUTPUT not in outputs):
            raise UserError(f"--saved_model_dir={model_dir}: signature {signature!r} takes "
                            f"{sorted(inputs)} to {sorted(outputs)}, not text to embedding")
        self._tf = tf

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        """float32 [texts, dim]: one batch's vectors, in the batch's order."""
        out = self.function(**{TEXT_INPUT: self._tf.constant(list(texts), self._tf.string)})
        return np.asarray(out[OUTPUT].numpy(), np.float32)

    @property
    def dim(self) -> int:
        """The vectors' width (from one call: the signature's shape may leave it open)."""
        return int(self([""]).shape[1])


def batch_rows(texts: Sequence[str], batch_size: int) -> List[np.ndarray]:
    """The rows of each batch (int64), longest texts first, ties in file order."""
    lengths = np.array([len(t) for t in texts], np.int64)
    order = np.argsort(-lengths, kind="stable")
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


def embed_shard(embed, texts: Sequence[str], batch_size: int, dim: int,
                on_batch=None) -> np.ndarray:
    """float32 [texts, dim]: the vectors of `texts` in their order, batch by `batch_rows`.

    Args:
        embed: a `SignatureEmbedder` (or any function of a list of texts).
        on_batch: called with each batch's rows once it is embedded (progress).
    """
    out = np.zeros((len(texts), dim), np.float32)
    for rows in batch_rows(texts, batch_size):
        out[rows] = embed([texts[i] for i in rows])
        if on_batch is not None:
            on_batch(rows)
    return out


def model_digest(model_dir: str) -> str:
    """SHA-256 over the SavedModel's files (relative names and bytes, sorted by name)."""
    digest = hashlib.sha256()
    todo = [""]
    files = []
    while todo:
        rel = todo.pop()
        for name in fileio.listdir(os.path.join(model_dir, rel) if rel else model_dir):
            name = name.rstrip("/")
            path = os.path.join(rel, name) if rel else name
            (todo if fileio.isdir(os.path.join(model_dir, path)) else files).append(path)
    for rel in sorted(files):
        digest.update(len(rel.encode()).to_bytes(8, "little") + rel.encode())
        with fileio.open_file(os.path.join(model_dir, rel), "rb") as f:
            while True:
                block = f.read(1 << 20)
                if not block:
                    break
                digest.update(block)
    return digest.hexdigest()
