"""Reading a sentence-transformers folder as a bi-encoder's starting point.

A sentence-transformers model folder (the v5 layout, all-MiniLM-L6-v2's):

    modules.json                 [{"idx": 0, "path": "", "type": "...models.Transformer"},
                                  {"idx": 1, "path": "1_Pooling", "type": "...models.Pooling"},
                                  {"idx": 2, "path": "2_Normalize", "type": "...Normalize"}]
    config.json, model.safetensors, vocab.txt, tokenizer_config.json   (the Transformer's
                                  Hugging Face folder: the root, or modules.json's path)
    1_Pooling/config.json        the pooling mode (`pooling.mode_from_sentence_transformers`)
    sentence_bert_config.json    {"max_seq_length": 256, "do_lower_case": false}

`read_folder` gives what bert_tf needs to embed as the folder does: the Transformer's folder
(whose weights `warm_start` reads as any Hugging Face folder), the pooling mode, whether a
Normalize module follows, the maximum length and the case rule. Modules bert_tf does not
compute (Dense, LayerNorm, a second Transformer, ...) and pooling modes other than mean, cls
and max are refused with one line: embedding without them would give other vectors.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Optional

from bert_tf.core import fileio
from bert_tf.core.errors import UserError, reason
from bert_tf.finetune.retrieval import pooling

MODULES_FILE = "modules.json"
_KINDS = {"Transformer": "transformer", "Pooling": "pooling", "Normalize": "normalize"}


@dataclasses.dataclass(frozen=True)
class SentenceTransformerFolder:
    """What a sentence-transformers folder says about embedding.

    Attributes:
        transformer_dir: the Hugging Face folder of its Transformer module.
        pooling: "mean", "cls" or "max".
        normalize: a Normalize module follows the pooling.
        max_seq_length: sentence_bert_config.json's, or None.
        do_lower_case: True when sentence_bert_config.json or the tokenizer's
            tokenizer_config.json lower-cases; None when neither says.
    """

    transformer_dir: str
    pooling: str
    normalize: bool
    max_seq_length: Optional[int]
    do_lower_case: Optional[bool]


def is_folder(path: str) -> bool:
    """Whether `path` is a directory holding a modules.json."""
    return bool(path) and fileio.isdir(path) and fileio.exists(os.path.join(path, MODULES_FILE))


def _json(path: str) -> Any:
    try:
        with fileio.open_file(path, "rb") as f:
            return json.loads(f.read().decode("utf-8"))
    except (OSError, ValueError) as e:
        raise UserError(f"{path}: cannot read it as JSON ({reason(e)})") from None


def _optional_json(path: str) -> Any:
    return _json(path) if fileio.exists(path) else None


def read_folder(path: str) -> SentenceTransformerFolder:
    """Reads the sentence-transformers folder `path` (module docstring).

    Raises:
        UserError: naming the file, for a malformed modules.json, a module bert_tf does not
            compute, no Transformer or Pooling module, or a pooling config it cannot honour.
    """
    where = os.path.join(path, MODULES_FILE)
    modules = _json(where)
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise UserError(f"{where}: expected a list of modules")
    found = {}
    for module in sorted(modules, key=lambda m: int(m.get("idx", 0))):
        kind = _KINDS.get(str(module.get("type", "")).rsplit(".", 1)[-1])
        if kind is None or kind in found:
            what = "a second" if kind in found else "module"
            raise UserError(f"{where}: {what} {module.get('type')!r} is not supported (bert_tf "
                            "embeds with one Transformer, a Pooling and an optional Normalize)")
        found[kind] = os.path.join(path, str(module.get("path", "")))
    missing = [k for k in ("transformer", "pooling") if k not in found]
    if missing:
        raise UserError(f"{where}: no {missing[0]} module")
    pooling_config = os.path.join(found["pooling"], "config.json")
    config = _optional_json(pooling_config) or {}
    mode = pooling.mode_from_sentence_transformers(config, pooling_config)
    st_config = _optional_json(os.path.join(path, "sentence_bert_config.json")) or {}
    length = st_config.get("max_seq_length")
    tokenizer = _optional_json(os.path.join(found["transformer"], "tokenizer_config.json")) or {}
    cases = [c.get("do_lower_case") for c in (st_config, tokenizer)]
    lower = True if any(c is True for c in cases) else (
        False if any(c is False for c in cases) else None)
    return SentenceTransformerFolder(
        transformer_dir=found["transformer"].rstrip("/") or path, pooling=mode,
        normalize="normalize" in found,
        max_seq_length=int(length) if isinstance(length, int) and length > 0 else None,
        do_lower_case=lower)
