"""Continuing ELECTRA pretraining from transformers' or google-research/electra's checkpoints.

`run_pretraining --objective=electra --init_checkpoint=...` restores a bert_tf ELECTRA
checkpoint by its object graph (the trainer's own warm start). Any other format (the
directory of transformers' discriminator/ and generator/, a google-research/electra TF1
checkpoint) is read through `formats.read_model` into the canonical ELECTRA weights and set
on the live model by name (`native_electra.load_into`): both networks, both heads, the shared
embeddings; the poolers, which those formats lack and ELECTRA never reads, stay at their
initial values.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Dict


def warm_start(init_checkpoint: str, fmt: str, model) -> None:
    """Sets `model` (an `ElectraPretrainingModel`) from `init_checkpoint` in format `fmt`.

    Raises:
        UserError: no ELECTRA generator there, or one of another width (`load_into`).
    """
    from absl import logging

    from bert_tf.interop import formats, native_electra

    files = formats.read_model(fmt, init_checkpoint)
    missing = native_electra.load_into(model, files)
    logging.info("init_checkpoint %s (%s): set %d ELECTRA weights", files.source, fmt,
                 len(files.weights))
    if missing:
        logging.info("init_checkpoint: %d weight(s) left at their initial values: %s",
                     len(missing), ", ".join(missing))


def trainer_args(init_checkpoint: str) -> Dict[str, Callable[[Any], None]]:
    """{"warm_start_fn": ...} for an --init_checkpoint in another format than bert_tf's, else
    {} (the trainer restores a bert_tf checkpoint itself)."""
    if not init_checkpoint:
        return {}
    from bert_tf.interop import formats

    fmt = formats.detect_format(init_checkpoint)
    if fmt == "bert_tf":
        return {}
    return {"warm_start_fn": functools.partial(warm_start, init_checkpoint, fmt)}
