"""Continuing ELECTRA pretraining from transformers' or google-research/electra's checkpoints.

`run_pretraining --objective=electra --init_checkpoint=...` restores a bert_tf ELECTRA
checkpoint by its object graph (the trainer's own warm start). Any other format (the
directory of transformers' discriminator/ and generator/, a google-research/electra TF1
checkpoint) is read through `formats.read_model` into the canonical ELECTRA weights and set
on the live model by name (`native_electra.load_into`): both networks, both heads, the shared
embeddings; the poolers, which those formats lack and ELECTRA never reads, stay at their
initial values.

`--init_discriminator_only` reads any BERT-layout encoder in any format (a bert_tf masked-LM
run included) into the discriminator alone, the generator starting from scratch: an encoder
that already reads the context continued with ELECTRA, whose discriminator on its own is slow
to learn to read it (docs/results/pretraining.md).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Dict


def warm_start(init_checkpoint: str, fmt: str, model, discriminator_only: bool = False
               ) -> None:
    """Sets `model` (an `ElectraPretrainingModel`) from `init_checkpoint` in format `fmt`
    (with `discriminator_only`, its discriminator only).

    Raises:
        UserError: no ELECTRA generator there, or one of another width; with
            `discriminator_only`, no complete encoder of the config (`load_into`).
    """
    from absl import logging

    from bert_tf.interop import formats, native_electra

    files = formats.read_model(fmt, init_checkpoint)
    missing = native_electra.load_into(model, files, discriminator_only)
    if discriminator_only:
        logging.info("init_checkpoint %s (%s): the discriminator from its encoder, the "
                     "generator from scratch", files.source, fmt)
        return
    logging.info("init_checkpoint %s (%s): set %d ELECTRA weights", files.source, fmt,
                 len(files.weights))
    if missing:
        logging.info("init_checkpoint: %d weight(s) left at their initial values: %s",
                     len(missing), ", ".join(missing))


def trainer_args(init_checkpoint: str, discriminator_only: bool = False
                 ) -> Dict[str, Callable[[Any], None]]:
    """{"warm_start_fn": ...} for an --init_checkpoint in another format than bert_tf's or
    with `discriminator_only`, else {} (the trainer restores a bert_tf ELECTRA checkpoint
    itself, by its object graph)."""
    if not init_checkpoint:
        return {}
    from bert_tf.interop import formats

    fmt = formats.detect_format(init_checkpoint)
    if fmt == "bert_tf" and not discriminator_only:
        return {}
    return {"warm_start_fn": functools.partial(warm_start, init_checkpoint, fmt,
                                               discriminator_only=discriminator_only)}
