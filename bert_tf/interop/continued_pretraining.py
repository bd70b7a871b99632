"""Where continued pretraining starts: `run_pretraining --init_checkpoint` and --vocab_file.

A bert_tf checkpoint of the same vocabulary is restored by object graph
(`checkpointing.warm_start`), as it always was. Any other start goes through the
format-neutral `ModelFiles`: a Google TF1 or Hugging Face checkpoint, a keras-hub preset
directory, or a checkpoint whose vocabulary --vocab_file extends (new WordPieces in its
[unusedN] slots or appended). Then the word embeddings and the MLM output bias follow
--vocab_file (`vocab_resize`), and so does vocab_size of --bert_config_file (which may give
the base model's size or the new one).

`plan` decides all this before training starts, from the vocabularies alone (cheap, so that
a refused vocabulary answers at once); `PretrainingStart.warm_start` reads the weights when
the trainer has no checkpoint of its own to resume from.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any, Dict, Optional, Tuple

from absl import logging

from bert_tf.core import fileio
from bert_tf.core.errors import UserError
from bert_tf.interop import formats, vocab_resize
from bert_tf.interop.hf_tokenizer_kind import check_wordpiece
from bert_tf.interop.model_files import copy_file, find_beside, vocab_size_of
from bert_tf.modeling.config import BertConfig
from bert_tf.training.new_rows_only import NewRowsOnly

VOCAB_NAME = "vocab.txt"


@dataclasses.dataclass(frozen=True)
class PretrainingStart:
    """What --init_checkpoint and --vocab_file decide.

    Attributes:
        init_checkpoint: the checkpoint (any format).
        fmt: its format (`formats.detect_format`).
        bert_config_file: --bert_config_file (read with a checkpoint that has no config).
        vocab_file: the vocabulary the model follows (--vocab_file, else the checkpoint's own,
            else None).
        change: how `vocab_file` extends the checkpoint's vocabulary (None: it does not).
        new_rows: --train_only_new_embeddings_steps with the new rows (None: off).
    """

    init_checkpoint: str
    fmt: str
    bert_config_file: str
    vocab_file: Optional[str]
    change: Optional[vocab_resize.VocabChange]
    new_rows: Optional[NewRowsOnly]

    @property
    def by_object_graph(self) -> bool:
        """True when the trainer restores the checkpoint itself (bert_tf, same vocabulary)."""
        return self.fmt == "bert_tf" and self.change is None

    def warm_start(self, model, strict: bool = False) -> None:
        """Loads the checkpoint's weights into a `BertPretrainingModel`, resized to the
        vocabulary; weights the checkpoint lacks (e.g. the heads of an encoder-only model)
        keep their fresh values, and the log names them.

        Args:
            model: the `BertPretrainingModel`.
            strict: refuse a checkpoint that lacks any of the model's weights (evaluation:
                freshly initialised heads would be scored as if trained).

        Raises:
            UserError: the checkpoint does not fit the model (naming the weight), or, with
                `strict`, lacks some of its weights.
        """
        from bert_tf.modeling import weight_map

        config_file = None
        if self.fmt != "hf" and not find_beside(self.init_checkpoint, ("bert_config.json",)):
            config_file = self.bert_config_file
        files = formats.read_model(self.fmt, self.init_checkpoint, config_file)
        if self.change is not None:
            files = vocab_resize.resize_to_vocab(files, self.vocab_file)
        mapping = weight_map.pretraining_weight_map(model)
        weight_map.set_weights(mapping, files.weights, strict=False, source=files.source)
        restored = [n for n in mapping if n in files.weights]
        missing = [n for n in mapping if n not in files.weights]
        if strict and missing:
            raise UserError(f"--init_checkpoint={self.init_checkpoint} lacks {len(missing)} "
                            f"weights of the model to evaluate ({', '.join(missing[:3])}"
                            f"{', ...' if len(missing) > 3 else ''}): they would be scored "
                            "at their random initial values (an encoder without its "
                            "pretraining heads cannot be evaluated on masked LM; pass "
                            "--no_nsp if only the NSP head is missing)")
        unused = [n for n in files.weights if n not in mapping]
        logging.info("init_checkpoint %s (%s): restored %d weights", files.source, self.fmt,
                     len(restored))
        if missing:
            logging.warning("init_checkpoint: %d model weights NOT in the checkpoint (left at "
                            "their initial values): %s", len(missing), ", ".join(missing))
        if unused:
            logging.warning("init_checkpoint: %d checkpoint weights UNUSED by this model: %s",
                            len(unused), ", ".join(unused))

    def trainer_args(self, eval_only: bool = False) -> Dict[str, Any]:
        """`Trainer` arguments: the warm start (unless the trainer restores the checkpoint
        itself; strict when the run only evaluates) and --train_only_new_embeddings_steps."""
        args: Dict[str, Any] = {"new_rows": self.new_rows}
        if not self.by_object_graph:
            args["warm_start_fn"] = (functools.partial(self.warm_start, strict=True)
                                     if eval_only else self.warm_start)
        return args

    def write_vocab(self, output_dir: str) -> None:
        """Copies the vocabulary the model follows to output_dir/vocab.txt, so that the run's
        checkpoints carry it (a later --init_checkpoint, export or fine-tuning reads it)."""
        target = os.path.join(output_dir, VOCAB_NAME)
        if self.vocab_file and os.path.abspath(self.vocab_file) != os.path.abspath(target):
            copy_file(self.vocab_file, target)


def plan(init_checkpoint: Optional[str], vocab_file: Optional[str], bert_config: BertConfig,
         bert_config_file: str, train_only_new_embeddings_steps: int = 0
         ) -> Tuple[BertConfig, Optional[PretrainingStart]]:
    """Settles the start of a continued pretraining run (see the module docstring).

    Args:
        init_checkpoint: --init_checkpoint ("" for none).
        vocab_file: --vocab_file ("" for none).
        bert_config: read from --bert_config_file.
        bert_config_file: its path.
        train_only_new_embeddings_steps: the flag of that name.

    Returns:
        (the model's config: `bert_config`, its vocab_size following an extended vocabulary;
        the start, None without --init_checkpoint).

    Raises:
        UserError: no checkpoint there; an extended vocabulary without the checkpoint's own
            beside it; a base token moved; a vocab_size in --bert_config_file that is neither
            the checkpoint's nor the vocabulary's; --train_only_new_embeddings_steps without
            new rows.
    """
    if not init_checkpoint:
        if train_only_new_embeddings_steps:
            raise UserError("--train_only_new_embeddings_steps needs --init_checkpoint and an "
                            "extended --vocab_file")
        return bert_config, None
    fmt = formats.detect_format(init_checkpoint)
    if fmt == "hf":  # its records' ids must be WordPiece ids of the model's vocabulary
        check_wordpiece(init_checkpoint)
    base_vocab = find_beside(init_checkpoint, (VOCAB_NAME,))  # the checkpoint's own
    if fmt == "keras_hub":  # a preset keeps it among its assets
        from bert_tf.interop.keras_hub_checkpoint import VOCAB_PATH

        inside = os.path.join(init_checkpoint, VOCAB_PATH)
        base_vocab = inside if fileio.exists(inside) else None
    change = None
    if vocab_file and base_vocab:
        change = vocab_resize.vocab_change(base_vocab, vocab_file)
    elif vocab_file and vocab_size_of(vocab_file) != bert_config.vocab_size:
        raise UserError(f"--vocab_file={vocab_file} has {vocab_size_of(vocab_file)} tokens, not "
                        f"vocab_size={bert_config.vocab_size}, and there is no {VOCAB_NAME} "
                        f"beside --init_checkpoint={init_checkpoint} to tell which rows are "
                        "new: put the checkpoint's own vocabulary there")
    if change is not None and bert_config.vocab_size != change.size:
        if bert_config.vocab_size != change.base_size:
            raise UserError(f"vocab_size={bert_config.vocab_size} in --bert_config_file is "
                            f"neither the checkpoint's {change.base_size} nor the "
                            f"{change.size} tokens of --vocab_file={vocab_file}")
        bert_config = dataclasses.replace(bert_config, vocab_size=change.size)
    new_rows = None
    if train_only_new_embeddings_steps:
        new_rows = NewRowsOnly(train_only_new_embeddings_steps,
                               change.new_ids if change else ())
    return bert_config, PretrainingStart(init_checkpoint, fmt, bert_config_file,
                                         vocab_file or base_vocab, change, new_rows)

