"""Convert BERT checkpoints between Google's TF1 format, Hugging Face and bert_tf.

    python -m bert_tf.convert_checkpoint --from_format=google|hf|bert_tf \\
        --to_format=google|hf|bert_tf --input=... --output=DIR \\
        [--bert_config_file=...] [--vocab_file=...]

--input is a Google release directory or `bert_model.ckpt` prefix; an HF model directory; or a
bert_tf run's output_dir (its latest checkpoint) or a `ckpt-N` prefix. --output is a new
directory, written under a temporary name and renamed when complete:

    google    bert_model.ckpt.{index,data-*}, checkpoint, bert_config.json, vocab.txt
    hf        config.json, model.safetensors, vocab.txt
    bert_tf   ckpt-0.{index,data-*}, checkpoint, bert_config.json, vocab.txt; pass the
              directory to `python -m bert_tf.run_pretraining --init_checkpoint=DIR`.

Weights the source lacks (a sentence-transformers model has no MLM/NSP head) are listed on
one line. In a bert_tf output, a missing head is left out of the checkpoint, so the
pretraining run initialises it freshly and its log names it; other missing weights are
freshly initialised (seeded by --seed) and stored.

This module also holds the bert_tf-format reader/writer (`read_native`, `write_native`).
"""

from __future__ import annotations

import os
import sys
from typing import Optional

from bert_tf import errors, fileio
from bert_tf.errors import UserError, cli_main
from bert_tf.interop.model_files import (
    MLM_PREFIX,
    NSP_PREFIX,
    ModelFiles,
    atomic_directory,
    check_new_directory,
    check_vocab,
    copy_file,
    find_beside,
    report_missing,
)

FORMATS = ("google", "hf", "bert_tf")
CONFIG_NAME = "bert_config.json"
VOCAB_NAME = "vocab.txt"
CHECKPOINT_NAME = "ckpt"


def read_native(
    path: str, bert_config_file: Optional[str] = None, vocab_file: Optional[str] = None
) -> ModelFiles:
    """Reads the model weights of a bert_tf training checkpoint.

    Args:
        path: a run's output_dir (its latest checkpoint) or a `ckpt-N` prefix.
        bert_config_file: default: bert_config.json beside the checkpoint.
        vocab_file: default: vocab.txt beside the checkpoint (optional).

    Raises:
        UserError: no checkpoint or config, or variables whose shapes disagree with the config.
    """
    from bert_tf.export.saved_model import load_pretrained
    from bert_tf.modeling.weight_map import get_weights, pretraining_weight_map

    loaded = load_pretrained(path, bert_config_file, what="input")
    prefix, model = loaded.checkpoint, loaded.model
    vocab_file = vocab_file or find_beside(prefix, (VOCAB_NAME,))
    weights = {name: value for name, value in get_weights(pretraining_weight_map(model)).items()
               if name not in loaded.missing}
    check_vocab(vocab_file, weights, prefix)
    return ModelFiles(model.config, weights, vocab_file, prefix)


def write_native(files: ModelFiles, output_dir: str, seed: int = 0) -> str:
    """Writes a bert_tf checkpoint that `run_pretraining --init_checkpoint` accepts.

    The object graph is that of a training checkpoint (`model/encoder/...`,
    `model/mlm_head/...`, `model/nsp_head/...`), without optimizer or step. A head the
    source lacks entirely is left out, so warm-starting reports it as freshly initialised;
    other missing weights get a fresh (seeded) initialisation and are stored.

    Args:
        files: the model.
        output_dir: a new directory.
        seed: seeds the initialisation of weights the source lacks (through
            `keras.utils.set_random_seed`, which also seeds the process's global RNGs).

    Returns:
        The checkpoint prefix, `output_dir/ckpt-0`.
    """
    import keras
    import tensorflow as tf

    from bert_tf.modeling.pretraining_model import BertPretrainingModel
    from bert_tf.modeling.weight_map import pretraining_weight_map, set_weights

    has_mlm = any(n.startswith(MLM_PREFIX) for n in files.weights)
    has_nsp = any(n.startswith(NSP_PREFIX) for n in files.weights)
    keras.utils.set_random_seed(seed)
    model = BertPretrainingModel(files.config, use_nsp=has_nsp)
    set_weights(pretraining_weight_map(model), files.weights, strict=False, source=files.source)
    if has_mlm:
        root = model
    else:
        # The same child names as the Keras model, minus the head: warm_start then finds
        # no model/mlm_head/... and leaves (and logs) it at its initial values.
        root = tf.Module()
        root.encoder = model.encoder
        if has_nsp:
            root.nsp_head = model.nsp_head
    with atomic_directory(output_dir) as tmp:
        manager = tf.train.CheckpointManager(
            tf.train.Checkpoint(model=root), tmp, max_to_keep=1, checkpoint_name=CHECKPOINT_NAME
        )
        manager.save(checkpoint_number=0)
        files.config.to_json_file(os.path.join(tmp, CONFIG_NAME))
        if files.vocab_file:
            copy_file(files.vocab_file, os.path.join(tmp, VOCAB_NAME))
    return os.path.join(output_dir, f"{CHECKPOINT_NAME}-0")


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


def _define_flags() -> None:
    from absl import flags

    flags.DEFINE_enum("from_format", None, list(FORMATS), "Format of --input.")
    flags.DEFINE_enum("to_format", None, list(FORMATS), "Format of --output.")
    flags.DEFINE_string("input", None, "Checkpoint prefix or directory to read.")
    flags.DEFINE_string("output", None, "New directory to write.")
    flags.DEFINE_string("bert_config_file", None,
                        "bert_config.json of a google or bert_tf input (default: beside it).")
    flags.DEFINE_string("vocab_file", None, "Vocabulary to copy (default: vocab.txt beside "
                        "the input); its size must equal the word embeddings' rows.")
    flags.DEFINE_integer("seed", 0, "Seeds the initialisation of weights the input lacks.")
    for name in ("from_format", "to_format", "input", "output"):
        flags.mark_flag_as_required(name)


@cli_main
def main(argv) -> None:
    from absl import flags

    if len(argv) > 1:
        raise UserError(f"unexpected arguments: {' '.join(argv[1:])}")
    f = flags.FLAGS
    convert(f.from_format, f.to_format, f.input, f.output, f.bert_config_file, f.vocab_file,
            f.seed)


def console_main() -> None:
    """The `bert-tf-convert` console script (and `python -m bert_tf.convert_checkpoint`)."""
    _define_flags()
    errors.run_app(main)


if __name__ == "__main__":
    console_main()
