"""Reading and writing a model in any supported format, and converting between them.

Formats: "google" (TF1 `bert_model.ckpt`), "hf" (Hugging Face directory) and "bert_tf"
(`bert_tf.interop.native`). All go through the format-neutral `ModelFiles`.
"""

from __future__ import annotations

import sys
from typing import Optional

from bert_tf import fileio
from bert_tf.errors import UserError
from bert_tf.interop.model_files import ModelFiles, check_new_directory, report_missing
from bert_tf.interop.native import read_native, write_native

FORMATS = ("google", "hf", "bert_tf")


def read_model(
    fmt: str, path: str, bert_config_file: Optional[str] = None, vocab_file: Optional[str] = None
) -> ModelFiles:
    """Reads a model in format `fmt` ("google", "hf" or "bert_tf")."""
    if not fileio.exists(path) and not fileio.exists(path + ".index"):
        raise UserError(f"--input={path} does not exist")
    if fmt == "google":
        from bert_tf.interop import google_checkpoint

        return google_checkpoint.read(path, bert_config_file, vocab_file)
    if fmt == "hf":
        from bert_tf.interop import hf_checkpoint

        if bert_config_file:
            raise UserError("--bert_config_file does not apply to --from_format=hf "
                            "(the directory's config.json is used)")
        return hf_checkpoint.read(path, vocab_file)
    if fmt == "bert_tf":
        return read_native(path, bert_config_file, vocab_file)
    raise UserError(f"unknown format {fmt!r} (choose from {', '.join(FORMATS)})")


def write_model(fmt: str, files: ModelFiles, output: str, seed: int = 0) -> str:
    """Writes `files` in format `fmt`; returns the path to give to the next tool."""
    if fmt == "google":
        from bert_tf.interop import google_checkpoint

        return google_checkpoint.write(files, output)
    if fmt == "hf":
        from bert_tf.interop import hf_checkpoint

        return hf_checkpoint.write(files, output)
    if fmt == "bert_tf":
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
) -> str:
    """Reads, reports missing weights, writes. Returns the written path."""
    for flag, fmt in (("from_format", from_format), ("to_format", to_format)):
        if fmt not in FORMATS:
            raise UserError(f"--{flag}={fmt!r}: choose from {', '.join(FORMATS)}")
    check_new_directory(output)  # Before the (slow) read.
    # Every reader checks the vocabulary (given or found) against the word embeddings.
    files = read_model(from_format, input_path, bert_config_file, vocab_file)
    if files.vocab_file is None:
        print(f"note: no vocab.txt found for {input_path}; pass --vocab_file to include one",
              file=sys.stderr, flush=True)
    report_missing(files, "freshly initialised" if to_format == "bert_tf" else "not written")
    written = write_model(to_format, files, output, seed)
    print(f"wrote {to_format} model ({len(files.weights)} weights) to {written}", flush=True)
    return written
