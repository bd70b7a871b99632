"""Reading and writing a model in any supported format, and converting between them.

Formats: "google" (TF1 `bert_model.ckpt`), "hf" (Hugging Face directory) and "bert_tf"
(`bert_tf.interop.native`). All go through the format-neutral `ModelFiles`. An ELECTRA
model (weights named by `electra_layout`) goes to `hf_electra`, `google_electra` and
`native_electra` instead, as does a source in ELECTRA's layout (model_type "electra", a
directory of discriminator/ and generator/, `electra/...` variables, an `--objective=electra`
run).
"""

from __future__ import annotations

import os
import sys
from typing import Optional

from bert_tf.core import fileio
from bert_tf.core.errors import UserError
from bert_tf.interop import hf_tokenizer_kind, vocab_resize
from bert_tf.interop.model_files import ModelFiles, check_new_directory, report_missing
from bert_tf.interop.native import find_config, read_native, write_native
from bert_tf.modeling import modern_config
from bert_tf.modeling.config import BertConfig

FORMATS = ("google", "hf", "bert_tf")
_HF_WEIGHTS = ("model.safetensors", "pytorch_model.bin")


def detect_format(path: str) -> str:
    """"hf", "keras_hub", "google" or "bert_tf" for a checkpoint path or directory.

    Raises:
        UserError: nothing readable at `path`.
    """
    import tensorflow as tf

    if fileio.isdir(path) and fileio.exists(os.path.join(path, "config.json")) and any(
            fileio.exists(os.path.join(path, name)) for name in _HF_WEIGHTS):
        return "hf"
    from bert_tf.interop import hf_electra

    if hf_electra.is_pair_directory(path):  # discriminator/ + generator/
        return "hf"
    if path.endswith((".safetensors", ".bin")) and fileio.exists(path):
        return "hf"
    from bert_tf.interop import keras_hub_checkpoint

    if keras_hub_checkpoint.is_preset(path):
        return "keras_hub"
    prefix = None
    if fileio.isdir(path):
        prefix = tf.train.latest_checkpoint(path)
        if prefix is None and fileio.exists(os.path.join(path, "bert_model.ckpt.index")):
            prefix = os.path.join(path, "bert_model.ckpt")
    elif fileio.exists(path + ".index"):
        prefix = path
    if prefix is None:
        raise UserError(f"--init_checkpoint={path}: no checkpoint there (expected a bert_tf "
                        "output directory or ckpt-N prefix, a Google bert_model.ckpt, or a "
                        "Hugging Face directory)")
    names = tf.train.load_checkpoint(prefix).get_variable_to_shape_map()
    return "bert_tf" if any("/.ATTRIBUTES/" in n for n in names) else "google"


def read_model(
    fmt: str, path: str, bert_config_file: Optional[str] = None,
    vocab_file: Optional[str] = None, base_vocab_file: Optional[str] = None,
) -> ModelFiles:
    """Reads a model in format `fmt` ("google", "hf" or "bert_tf").

    Args:
        fmt, path, bert_config_file: what to read.
        vocab_file: the vocabulary the model must have (default: the checkpoint's own). An
            extension of the checkpoint's vocabulary resizes the word embeddings and the MLM
            bias to it (`vocab_resize.resize_to_vocab`).
        base_vocab_file: the checkpoint's own vocabulary (default: vocab.txt beside it).
    """
    if not fileio.exists(path) and not fileio.exists(path + ".index"):
        raise UserError(f"--input={path} does not exist")
    files = _read(fmt, path, bert_config_file, base_vocab_file)
    return vocab_resize.resize_to_vocab(files, vocab_file) if vocab_file else files


def _read(fmt: str, path: str, bert_config_file: Optional[str], vocab_file: Optional[str]
          ) -> ModelFiles:
    if fmt == "google":
        from bert_tf.interop import google_checkpoint, google_electra

        if google_electra.is_electra_checkpoint(path):  # electra/, generator/, ...
            return google_electra.read(path, bert_config_file, vocab_file)
        return google_checkpoint.read(path, bert_config_file, vocab_file)
    if fmt == "hf":
        from bert_tf.interop import hf_checkpoint, hf_electra

        if bert_config_file:
            raise UserError("--bert_config_file does not apply to --from_format=hf "
                            "(the directory's config.json is used)")
        if hf_electra.is_electra_path(path):  # model_type "electra", or the pair's directory
            return hf_electra.read(path, vocab_file)
        return hf_checkpoint.read(path, vocab_file)
    if fmt == "bert_tf":
        from bert_tf.interop import native_electra

        if native_electra.is_electra_checkpoint(path):  # an --objective=electra run's
            return native_electra.read(path, bert_config_file, vocab_file)
        return read_native(path, bert_config_file, vocab_file)
    if fmt == "keras_hub":  # read only: presets are written by bert_tf.export
        from bert_tf.interop import keras_hub_checkpoint

        return keras_hub_checkpoint.read(path, vocab_file)
    raise UserError(f"unknown format {fmt!r} (choose from {', '.join(FORMATS)})")


def read_config(fmt: str, path: str) -> BertConfig:
    """The architecture of the checkpoint at `path` in format `fmt`, from its own config:
    config.json (Hugging Face), bert_config.json beside it (bert_tf, Google) or the preset's
    (keras-hub, which loads the preset whole).

    Raises:
        UserError: the checkpoint has no config beside it.
    """
    if fmt == "hf":
        from bert_tf.interop import hf_checkpoint, hf_electra

        if hf_electra.is_electra_path(path):  # the discriminator's architecture
            return hf_electra.read_config(path)
        return hf_checkpoint.read_config(path)
    if fmt == "keras_hub":
        from bert_tf.interop import keras_hub_checkpoint

        return keras_hub_checkpoint.read(path).config
    if fmt == "google":
        from bert_tf.interop import google_electra

        if google_electra.is_electra_checkpoint(path):  # its config may be in its shapes
            return google_electra.read_config(path)
    config_file = find_config(path, None)
    if fmt == "google":
        from bert_tf.interop import google_checkpoint

        return google_checkpoint.read_config(config_file)
    return BertConfig.from_json_file(config_file)


def write_model(fmt: str, files: ModelFiles, output: str, seed: int = 0,
                do_lower_case: Optional[bool] = None) -> str:
    """Writes `files` in format `fmt`; returns the path to give to the next tool.
    `do_lower_case` goes into a Hugging Face directory's tokenizer files (None: inferred from
    the vocabulary); the other formats do not record the casing."""
    from bert_tf.interop import electra_layout

    electra = electra_layout.is_electra(files.weights)  # both networks, or the discriminator
    if not electra and fmt in ("google", "hf") and "embeddings_project/kernel" in files.weights:
        c = files.config
        raise UserError(f"{files.source}: embedding_size {c.embedding_width} != hidden_size "
                        f"{c.hidden_size}, which BERT's {fmt} layout cannot hold (it has no "
                        "embeddings projection); convert it to bert_tf")
    if electra and fmt in ("google", "hf") and modern_config.is_modern(files.config):
        raise UserError(f"{files.source}: an ELECTRA model with the modern encoder's options "
                        f"({', '.join(modern_config.modern_keys(files.config))}) has no {fmt} "
                        "ELECTRA layout; convert it to bert_tf, or export its discriminator "
                        "with bert_tf.export")
    if fmt == "google":
        from bert_tf.interop import google_checkpoint, google_electra

        if electra:
            return google_electra.write(files, output)
        return google_checkpoint.write(files, output)
    if fmt == "hf":
        from bert_tf.interop import hf_checkpoint, hf_electra

        if electra:
            return hf_electra.write(files, output, do_lower_case)
        return hf_checkpoint.write(files, output, do_lower_case)
    if fmt == "bert_tf":
        if electra:
            from bert_tf.interop import native_electra

            return native_electra.write(files, output, seed)
        return write_native(files, output, seed)
    raise UserError(f"unknown format {fmt!r} (choose from {', '.join(FORMATS)})")


def convert(
    from_format: str,
    to_format: str,
    input_path: str,
    output: str,
    bert_config_file: Optional[str] = None,
    vocab_file: Optional[str] = None,
    seed: int = 0,
    base_vocab_file: Optional[str] = None,
    do_lower_case: Optional[bool] = None,
) -> str:
    """Reads (resizing to `vocab_file`, see `read_model`), reports missing weights, writes
    (`do_lower_case`: see `write_model`).

    Returns:
        The written path.
    """
    for flag, fmt in (("from_format", from_format), ("to_format", to_format)):
        if fmt not in FORMATS:
            raise UserError(f"--{flag}={fmt!r}: choose from {', '.join(FORMATS)}")
    check_new_directory(output)  # Before the (slow) read.
    # Every reader checks the vocabulary (given or found) against the word embeddings.
    files = read_model(from_format, input_path, bert_config_file, vocab_file, base_vocab_file)
    kind = hf_tokenizer_kind.non_wordpiece(input_path) if from_format == "hf" else None
    if files.vocab_file is None and kind:
        print(f"note: {input_path} has a {kind} tokenizer (tokenizer.json), which bert_tf "
              "does not use (WordPiece vocab.txt only): the output has no vocabulary",
              file=sys.stderr, flush=True)
    elif files.vocab_file is None:
        print(f"note: no vocab.txt found for {input_path}; pass --vocab_file to include one",
              file=sys.stderr, flush=True)
    from bert_tf.interop import electra_layout

    what = "freshly initialised" if to_format == "bert_tf" else "not written"
    if electra_layout.is_electra(files.weights):
        electra_layout.report_missing(files, what)
    else:
        report_missing(files, what)
    written = write_model(to_format, files, output, seed, do_lower_case)
    print(f"wrote {to_format} model ({len(files.weights)} weights) to {written}", flush=True)
    return written
