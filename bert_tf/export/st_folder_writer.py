"""Writing a model as a sentence-transformers folder (`--to_format=sentence_transformers`).

The folder is sentence-transformers' v5 layout, as `SentenceTransformer.save` writes it for
all-MiniLM-L6-v2, so that sentence-transformers and keras-hub's
`BertTextEmbedder.from_preset` load it:

    config.json, model.safetensors, vocab.txt, tokenizer.json, tokenizer_config.json,
    special_tokens_map.json        the Transformer module: a Hugging Face folder at the root
                                   (`bert_tf.interop.hf_checkpoint.write`)
    modules.json                   Transformer (path ""), Pooling ("1_Pooling"), and
                                   Normalize ("2_Normalize") when the vectors are normalised
    1_Pooling/config.json          word_embedding_dimension, every `pooling_mode_*` boolean
                                   and the `pooling_mode` string
    2_Normalize/                   empty: the module has no parameters
    sentence_bert_config.json      {"max_seq_length": N, "do_lower_case": false}: the
                                   tokenizer files already lower-case an uncased model
    config_sentence_transformers.json   the similarity function (cosine)

The embedding settings (pooling, normalisation, maximum length, casing) come from the input
when it says them (a sentence-transformers folder, a `run_retrieval` output directory's
finetune_task.json), else from the arguments, else mean pooling, normalised, at most 256
tokens. `python -m bert_tf.export --output_dir=<the folder>` serves the same vectors as an
`embed` signature.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Optional

from bert_tf.core import fileio
from bert_tf.core.errors import UserError
from bert_tf.finetune.retrieval import pooling as pooling_lib
from bert_tf.finetune.retrieval import st_folder

FORMAT = "sentence_transformers"
DEFAULT_MAX_SEQ_LENGTH = 256  # sentence-transformers' all-MiniLM-L6-v2's
TASK_FILE = "finetune_task.json"  # a run_retrieval output directory's settings
_MODULE = "sentence_transformers.models."


@dataclasses.dataclass(frozen=True)
class EmbeddingSettings:
    """How the folder embeds.

    Attributes:
        pooling: "mean", "cls" or "max".
        normalize: a Normalize module follows the pooling.
        max_seq_length: tokens per text, [CLS] and [SEP] included.
        do_lower_case: the tokenizer's casing; None infers it from the vocabulary.
    """

    pooling: str = "mean"
    normalize: bool = True
    max_seq_length: int = DEFAULT_MAX_SEQ_LENGTH
    do_lower_case: Optional[bool] = None


def _json(path: str) -> Any:
    with fileio.open_file(path, "rb") as f:
        return json.loads(f.read().decode("utf-8"))


def input_settings(path: str) -> dict:
    """The embedding settings the input at `path` records (keys of `EmbeddingSettings`; none
    for a checkpoint that records none)."""
    if st_folder.is_folder(path):
        folder = st_folder.read_folder(path)
        found = {"pooling": folder.pooling, "normalize": folder.normalize,
                 "max_seq_length": folder.max_seq_length, "do_lower_case": folder.do_lower_case}
    else:
        task = os.path.join(path, TASK_FILE) if fileio.isdir(path) else ""
        info = _json(task) if task and fileio.exists(task) else {}
        if info and info.get("kind") != "bi_encoder":
            raise UserError(f"{task}: a {info.get('kind')} model, not a bi-encoder: it has no "
                            "sentence embedding to write")
        found = {"pooling": info.get("pooling"), "normalize": info.get("normalize"),
                 "max_seq_length": info.get("max_passage_length"),
                 "do_lower_case": info.get("do_lower_case")}
    return {k: v for k, v in found.items() if v is not None}


def settle(path: str, pooling: Optional[str], max_seq_length: Optional[int],
           do_lower_case: Optional[bool], max_position_embeddings: int) -> EmbeddingSettings:
    """The folder's settings: the arguments, else what the input records, else the defaults.

    Raises:
        UserError: a pooling mode bert_tf does not compute, a pooling other than the one the
            input was trained with, or a length the model cannot hold.
    """
    recorded = input_settings(path)
    if pooling is not None and pooling not in pooling_lib.POOLING_MODES:
        raise UserError(f"--pooling={pooling}: choose from {', '.join(pooling_lib.POOLING_MODES)}")
    if pooling is not None and recorded.get("pooling", pooling) != pooling:
        raise UserError(f"--pooling={pooling}: {path} embeds with {recorded['pooling']} "
                        "pooling (leave --pooling out to keep it)")
    chosen = dict(recorded)
    for name, value in (("pooling", pooling), ("max_seq_length", max_seq_length),
                        ("do_lower_case", do_lower_case)):
        if value is not None:
            chosen[name] = value
    settings = EmbeddingSettings(**chosen)
    if max_seq_length is None and "max_seq_length" not in recorded:
        settings = dataclasses.replace(
            settings, max_seq_length=min(DEFAULT_MAX_SEQ_LENGTH, max_position_embeddings))
    if not 3 <= settings.max_seq_length <= max_position_embeddings:
        raise UserError(f"--max_seq_length={settings.max_seq_length}: must be 3 to the model's "
                        f"max_position_embeddings={max_position_embeddings}")
    return settings


def pooling_config(hidden_size: int, mode: str) -> dict:
    """1_Pooling/config.json: sentence-transformers' booleans (one on) and its mode string."""
    names = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean",
             "pooling_mode_max_tokens": "max"}
    config = {"word_embedding_dimension": int(hidden_size)}
    config.update({key: names.get(key) == mode for key in pooling_lib.ST_MODE_KEYS})
    config["include_prompt"] = True
    config["pooling_mode"] = mode
    return config


def modules(normalize: bool) -> list:
    """modules.json: the Transformer at the root, the Pooling, and optionally Normalize."""
    parts = [("", "Transformer"), ("1_Pooling", "Pooling")]
    if normalize:
        parts.append(("2_Normalize", "Normalize"))
    return [{"idx": i, "name": str(i), "path": path, "type": _MODULE + kind}
            for i, (path, kind) in enumerate(parts)]


def _write_json(path: str, value: Any) -> None:
    with fileio.atomic_output(path, "wb") as f:
        f.write((json.dumps(value, indent=2) + "\n").encode("utf-8"))


def write_folder(files, output_dir: str, settings: EmbeddingSettings) -> str:
    """Writes `files` (a `bert_tf.interop.model_files.ModelFiles`) as a sentence-transformers
    folder (module docstring), atomically.

    Returns:
        `output_dir`.

    Raises:
        UserError: no vocabulary (sentence-transformers needs the tokenizer files), an
            existing `output_dir`, a config the Hugging Face BERT layout cannot hold.
    """
    from bert_tf.interop import hf_checkpoint
    from bert_tf.interop.model_files import MLM_PREFIX, NSP_PREFIX, atomic_directory

    if not files.vocab_file:
        raise UserError(f"{files.source}: no vocab.txt: pass --vocab_file (a "
                        "sentence-transformers folder needs its tokenizer)")
    if files.config.embedding_size not in (None, files.config.hidden_size):
        raise UserError(f"{files.source}: embedding_size != hidden_size, which BERT's Hugging "
                        "Face layout cannot hold")
    weights = {k: v for k, v in files.weights.items()
               if not k.startswith((MLM_PREFIX, NSP_PREFIX))}  # sentence-transformers has none
    files = dataclasses.replace(files, weights=weights)
    with atomic_directory(output_dir) as tmp:
        hf_checkpoint.write(files, tmp, settings.do_lower_case)
        _write_json(os.path.join(tmp, st_folder.MODULES_FILE), modules(settings.normalize))
        os.makedirs(os.path.join(tmp, "1_Pooling"))
        _write_json(os.path.join(tmp, "1_Pooling", "config.json"),
                    pooling_config(files.config.hidden_size, settings.pooling))
        if settings.normalize:
            os.makedirs(os.path.join(tmp, "2_Normalize"))
        _write_json(os.path.join(tmp, "sentence_bert_config.json"),
                    {"max_seq_length": settings.max_seq_length, "do_lower_case": False})
        _write_json(os.path.join(tmp, "config_sentence_transformers.json"),
                    {"model_type": "SentenceTransformer", "prompts": {},
                     "default_prompt_name": None,
                     "similarity_fn_name": "cosine"})
    return output_dir


def convert(from_format: str, input_path: str, output_dir: str,
            bert_config_file: Optional[str] = None, vocab_file: Optional[str] = None,
            base_vocab_file: Optional[str] = None, do_lower_case: Optional[bool] = None,
            pooling: Optional[str] = None, max_seq_length: Optional[int] = None) -> str:
    """`convert_checkpoint --to_format=sentence_transformers`: reads the model as
    `bert_tf.interop.formats.read_model` does (a sentence-transformers folder is read as its
    Transformer's Hugging Face folder) and writes the folder with `settle`'s settings.

    Returns:
        `output_dir`.
    """
    from bert_tf.interop import formats
    from bert_tf.interop.model_files import check_new_directory

    check_new_directory(output_dir)  # Before the (slow) read.
    model_path = input_path
    if st_folder.is_folder(input_path):
        model_path = st_folder.read_folder(input_path).transformer_dir
    files = formats.read_model(from_format, model_path, bert_config_file, vocab_file,
                               base_vocab_file)
    settings = settle(input_path, pooling, max_seq_length, do_lower_case,
                      files.config.max_position_embeddings)
    write_folder(files, output_dir, settings)
    print(f"wrote {FORMAT} folder ({settings.pooling} pooling"
          f"{', normalised' if settings.normalize else ''}, {settings.max_seq_length} tokens) "
          f"to {output_dir}", flush=True)
    return output_dir
