"""Which tokenizer a Hugging Face directory ships, and the refusal of one bert_tf cannot use.

bert_tf tokenizes with a WordPiece `vocab.txt` everywhere: the data jobs, the input pipeline,
the in-graph tokenizer of the serving SavedModel (tf_text's WordPiece op). A directory whose
`tokenizer.json` is another model (ModernBERT's byte-level BPE, a SentencePiece Unigram)
and which has no vocab.txt cannot be tokenized here, and ids written with a WordPiece
vocabulary do not index its embeddings. Commands that tokenize or train on token ids refuse
such a checkpoint in one line (`check_wordpiece`); `convert_checkpoint` converts its weights
and leaves the vocabulary out.
"""

from __future__ import annotations

import json
import os
from typing import Optional

from bert_tf.core import fileio
from bert_tf.core.errors import UserError

TOKENIZER_NAME = "tokenizer.json"
VOCAB_NAME = "vocab.txt"


def tokenizer_kind(directory: str) -> Optional[str]:
    """The `model.type` of the directory's tokenizer.json ("WordPiece", "BPE", "Unigram",
    ...), or None without a readable tokenizer.json."""
    path = os.path.join(directory, TOKENIZER_NAME)
    if not fileio.isdir(directory) or not fileio.exists(path):
        return None
    try:
        with fileio.open_file(path, "r") as f:
            model = json.load(f).get("model") or {}
    except (OSError, ValueError):
        return None
    kind = model.get("type") if isinstance(model, dict) else None
    return str(kind) if kind else None


def non_wordpiece(directory: str) -> Optional[str]:
    """The tokenizer kind when the directory has no vocab.txt and a tokenizer.json that is
    not WordPiece; else None."""
    if not fileio.isdir(directory) or fileio.exists(os.path.join(directory, VOCAB_NAME)):
        return None
    kind = tokenizer_kind(directory)
    return kind if kind and kind != "WordPiece" else None


def check_wordpiece(init_checkpoint: str) -> None:
    """Raises UserError when --init_checkpoint is an HF directory with a tokenizer bert_tf
    does not support (`non_wordpiece`)."""
    kind = non_wordpiece(init_checkpoint)
    if kind:
        raise UserError(
            f"--init_checkpoint={init_checkpoint} has a {kind} tokenizer ({TOKENIZER_NAME}, no "
            f"{VOCAB_NAME}); bert_tf supports WordPiece vocabularies (vocab.txt) only")
