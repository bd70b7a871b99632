"""Checkpoint converters and the format-neutral model they exchange.

Every converter reads into, or writes from, a `ModelFiles`: a `BertConfig`, the weights as
{canonical name: numpy array} in the layout of `bert_tf.modeling.weight_map` (the layout of
the original checkpoints), and the vocabulary file. Converting A -> B is `read_A` then
`write_B`, so each format only knows its own names.

    google_checkpoint   Google's TF1 `bert_model.ckpt` + bert_config.json + vocab.txt
    hf_checkpoint       Hugging Face config.json + model.safetensors (or pytorch_model.bin)
    safetensors_io      the safetensors file format, with NumPy only

bert_tf's own tf.train.Checkpoint (what `run_pretraining --init_checkpoint` accepts) is read
and written by `bert_tf.convert_checkpoint`, the command line, which needs TensorFlow and a
Keras model anyway.

This module holds what they share: the expected shapes of every canonical weight for a
config, the checks (shapes, vocabulary size), the report of weights a source lacks, and the
one table of activation spellings. It does not import TensorFlow.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import sys
from typing import Callable, Dict, Iterator, List, Mapping, Optional, Tuple

import numpy as np

from bert_tf.core import fileio
from bert_tf.core.errors import UserError
from bert_tf.modeling import modern_config, modern_layout
from bert_tf.modeling.config import BertConfig

# ------------------------------------------------------------------ activation spellings

# THE table of activation names. Keys are meanings; columns are the spelling each format
# writes. bert_tf follows the original release ("gelu" is the tanh approximation, which is
# what google-research/bert computed; "gelu_exact" is the erf form), while Hugging Face's
# "gelu" is the erf form. If BertConfig's naming ever changes, only the "bert_tf" column
# changes; tests/test_hf_checkpoint.py checks that column numerically against
# bert_tf.modeling.activations.
#
# Google's original code had no erf GELU, so an erf-GELU model is written to Google format as
# "gelu" with a warning.
ACTIVATION_NAMES: Dict[str, Dict[str, str]] = {
    #  meaning       bert_tf config             Hugging Face           Google original
    "gelu_erf": {"bert_tf": "gelu_exact", "hf": "gelu", "google": "gelu"},
    "gelu_tanh": {"bert_tf": "gelu", "hf": "gelu_new", "google": "gelu"},
    "relu": {"bert_tf": "relu", "hf": "relu", "google": "relu"},
    "tanh": {"bert_tf": "tanh", "hf": "tanh", "google": "tanh"},
}

# Spellings accepted on input that are not the column's main spelling.
_READ_ALIASES: Dict[str, Dict[str, str]] = {
    "hf": {
        "gelu_pytorch_tanh": "gelu_tanh",
        "gelu_fast": "gelu_tanh",  # same formula as gelu_new, factored differently
    },
    "google": {"gelu": "gelu_tanh"},  # what the original `gelu` function computed
}


def activation_meaning(name: str, fmt: str) -> str:
    """The meaning ("gelu_erf", "gelu_tanh", "relu", "tanh") of `name` in format `fmt`.

    Args:
        name: an activation spelling.
        fmt: "bert_tf", "hf" or "google".

    Raises:
        UserError: a spelling the format does not have, or that bert_tf cannot compute.
    """
    if name in _READ_ALIASES.get(fmt, {}):
        return _READ_ALIASES[fmt][name]
    if fmt == "bert_tf":
        # Any alias BertConfig accepts: compare BertConfig's canonical names.
        from bert_tf.modeling.config import ACTIVATIONS

        for meaning, columns in ACTIVATION_NAMES.items():
            if name in ACTIVATIONS and ACTIVATIONS[name] == ACTIVATIONS[columns["bert_tf"]]:
                return meaning
    else:
        for meaning, columns in ACTIVATION_NAMES.items():
            if columns[fmt] == name:
                return meaning
    raise UserError(f"hidden_act {name!r} ({fmt} format) is not supported by bert_tf")


def activation_name(meaning: str, fmt: str) -> str:
    """The spelling of activation `meaning` in format `fmt` (the inverse of the above)."""
    return ACTIVATION_NAMES[meaning][fmt]


# ------------------------------------------------------------------ the exchanged model


@dataclasses.dataclass(frozen=True)
class ModelFiles:
    """A model in format-neutral form.

    Attributes:
        config: the hyper-parameters (bert_tf spelling of hidden_act).
        weights: {canonical name: float32 array in the canonical shape}; may lack the heads
            or other weights the source did not have (see `missing_weights`).
        vocab_file: the vocabulary (one token per line), or None if the source had none.
        source: where it was read from, for messages.
    """

    config: BertConfig
    weights: Mapping[str, np.ndarray]
    vocab_file: Optional[str]
    source: str


MLM_PREFIX = "mlm/"
NSP_PREFIX = "nsp/"


def expected_shapes(config: BertConfig, use_nsp: bool = True) -> Dict[str, Tuple[int, ...]]:
    """{canonical name: shape} of every weight of a pretraining model with this config.

    The same names and order as `weight_map.pretraining_weight_map` (a test checks it), but
    computed from the config alone, so converters need not build a Keras model. A modern
    config (ModernBERT's options) has the names of `bert_tf.modeling.modern_layout`.
    """
    if modern_config.is_modern(config):
        return modern_layout.expected_shapes(config, use_nsp)
    h, ff, v = config.hidden_size, config.intermediate_size, config.vocab_size
    e = config.embedding_width  # the tables' width: hidden unless embedding_size says
    shapes: Dict[str, Tuple[int, ...]] = {
        "embeddings/word_embeddings": (v, e),
        "embeddings/position_embeddings": (config.max_position_embeddings, e),
        "embeddings/token_type_embeddings": (config.type_vocab_size, e),
        "embeddings/layer_norm/gamma": (e,),
        "embeddings/layer_norm/beta": (e,),
    }
    if e != h:  # the projection E -> hidden after the embeddings (ELECTRA)
        shapes["embeddings_project/kernel"] = (e, h)
        shapes["embeddings_project/bias"] = (h,)
    for i in range(config.num_hidden_layers):
        p = f"layer_{i}"
        for name in ("query", "key", "value", "output"):
            shapes[f"{p}/attention/{name}/kernel"] = (h, h)
            shapes[f"{p}/attention/{name}/bias"] = (h,)
        shapes[f"{p}/attention/layer_norm/gamma"] = (h,)
        shapes[f"{p}/attention/layer_norm/beta"] = (h,)
        shapes[f"{p}/intermediate/kernel"] = (h, ff)
        shapes[f"{p}/intermediate/bias"] = (ff,)
        shapes[f"{p}/output/kernel"] = (ff, h)
        shapes[f"{p}/output/bias"] = (h,)
        shapes[f"{p}/output/layer_norm/gamma"] = (h,)
        shapes[f"{p}/output/layer_norm/beta"] = (h,)
    shapes["pooler/kernel"] = (h, h)
    shapes["pooler/bias"] = (h,)
    shapes["mlm/transform/kernel"] = (h, e)  # to the tied table's width
    shapes["mlm/transform/bias"] = (e,)
    shapes["mlm/transform/layer_norm/gamma"] = (e,)
    shapes["mlm/transform/layer_norm/beta"] = (e,)
    shapes["mlm/output_bias"] = (v,)
    if use_nsp:
        shapes["nsp/kernel"] = (h, 2)
        shapes["nsp/bias"] = (2,)
    return shapes


def check_shapes(
    weights: Mapping[str, np.ndarray],
    config: BertConfig,
    source: str,
    source_name: Callable[[str], str] = lambda n: n,
    source_shape: Callable[[str, Tuple[int, ...]], Tuple[int, ...]] = lambda n, s: s,
    config_label: str = "the bert_config",
) -> None:
    """Raises if any weight's shape disagrees with the config.

    Args:
        weights: canonical name -> array.
        config: the config the weights must fit.
        source: the file or directory, for the message.
        source_name: canonical name -> the name in the source format (for the message).
        source_shape: (canonical name, canonical shape) -> the shape in the source format
            (transposed kernels), so the message shows what the user's file holds.
        config_label: how the message names the config.

    Raises:
        UserError: naming the variable, its shape and the shape the config implies.
    """
    shapes = expected_shapes(config)
    for name, value in weights.items():
        want = shapes.get(name)
        if want is not None and tuple(np.shape(value)) != want:
            raise UserError(
                f"{source}: variable {source_name(name)} has shape "
                f"{list(source_shape(name, tuple(np.shape(value))))} but {config_label} "
                f"implies {list(source_shape(name, want))}"
            )


def missing_weights(weights: Mapping[str, np.ndarray], config: BertConfig) -> List[str]:
    """Canonical names of a full pretraining model (with NSP) that `weights` lacks."""
    return [n for n in expected_shapes(config) if n not in weights]


def report_missing(files: ModelFiles, what: str = "freshly initialised") -> List[str]:
    """Prints one summary line listing the weights the source lacks (never silently).

    Returns:
        The missing canonical names.
    """
    missing = missing_weights(files.weights, files.config)
    if missing:
        heads = [g for g, p in (("MLM head", MLM_PREFIX), ("NSP head", NSP_PREFIX))
                 if any(n.startswith(p) for n in missing)]
        print(
            f"note: {files.source} lacks {len(missing)} weight(s)"
            f"{' (' + ', '.join(heads) + ')' if heads else ''}, {what}: {', '.join(missing)}",
            file=sys.stderr, flush=True,
        )
    return missing


def report_unused(names: List[str], source: str) -> None:
    """Prints one line naming source variables that have no place in a BERT model."""
    if names:
        shown = ", ".join(names[:10]) + (f" ... ({len(names)} in all)" if len(names) > 10 else "")
        print(f"note: {source}: ignored {len(names)} variable(s) bert_tf has no place for: "
              f"{shown}", file=sys.stderr, flush=True)


def vocab_size_of(vocab_file: str) -> int:
    """Number of tokens (lines) in a vocabulary file."""
    from bert_tf.core.tokenization import load_vocab

    return len(load_vocab(vocab_file, required_tokens=()))


def check_vocab_size(vocab_file: str, vocab_size: int) -> None:
    """Raises if the vocabulary does not have the model's vocab_size tokens (for exports)."""
    n = vocab_size_of(vocab_file)
    if n != vocab_size:
        raise UserError(f"vocab file {vocab_file} has {n} tokens but the model's vocab_size is "
                        f"{vocab_size}")


def check_vocab(vocab_file: Optional[str], weights: Mapping[str, np.ndarray], source: str) -> None:
    """Raises if the vocabulary's size differs from the rows of the word embeddings.

    Raises:
        UserError: naming both sizes.
    """
    table = weights.get("embeddings/word_embeddings")
    if vocab_file is None or table is None:
        return
    n = vocab_size_of(vocab_file)
    if n != np.shape(table)[0]:
        raise UserError(
            f"vocab file {vocab_file} has {n} tokens but the word embeddings of {source} have "
            f"{np.shape(table)[0]} rows"
        )


def find_beside(path: str, names: Tuple[str, ...]) -> Optional[str]:
    """The first of `names` that exists in `path` (a directory) or beside it (a prefix)."""
    directory = path if fileio.isdir(path) else os.path.dirname(path)
    for name in names:
        candidate = os.path.join(directory, name)
        if fileio.exists(candidate):
            return candidate
    return None


def copy_file(src: str, dst: str) -> None:
    """Copies a (local or remote) file, atomically at the destination."""
    with fileio.open_file(src, "rb") as f:
        data = f.read()
    with fileio.atomic_output(dst, "wb") as f:
        f.write(data)


def check_new_directory(path: str) -> None:
    """Raises UserError if `path` exists and is not an empty directory."""
    if fileio.exists(path) and (not fileio.isdir(path) or fileio.listdir(path)):
        raise UserError(f"output {path} already exists; choose a new directory or delete it")


@contextlib.contextmanager
def atomic_directory(path: str) -> Iterator[str]:
    """Yields a temporary directory beside `path`, renamed to `path` when the block completes.

    Missing parent directories are created.

    On failure the temporary directory is deleted. Remote filesystems (gs://) cannot rename
    a directory atomically, so there the files are written in place (each one atomically by
    its writer).

    Raises:
        UserError: `path` exists and is not an empty directory.
    """
    check_new_directory(path)
    if fileio.is_remote(path):
        fileio.makedirs(path)
        yield path
        return
    parent = os.path.dirname(os.path.abspath(path))
    tmp = fileio.temp_name(os.path.abspath(path))
    try:
        os.makedirs(parent, exist_ok=True)  # e.g. <model_base_path>/ of a version directory
        os.makedirs(tmp)
    except OSError as e:
        raise UserError(f"cannot write {path}: {e.strerror or e}") from None
    try:
        yield tmp
        if os.path.isdir(path):
            os.rmdir(path)  # Empty (checked above); os.replace cannot replace it otherwise.
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
