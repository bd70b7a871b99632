"""The check that a served `classify` signature rebuilds the fine-tuned classifier."""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np
import tensorflow as tf

from bert_tf.core import tokenization
from bert_tf.training.checkpoint_paths import read_strictly


def assert_served_equals_restored(export_dir, run_dir, model, vocab_file,
                                  texts: Sequence[str]) -> None:
    """The SavedModel's probabilities for `texts` equal softmax of `model`'s logits once the
    run's latest checkpoint is restored into it (within 1e-5).

    Args:
        export_dir: the serving SavedModel.
        run_dir: the fine-tuning output directory.
        model: a fresh task model of the run's head (`heads.model_of_kind`).
        vocab_file: the run's vocabulary (lower-cased text).
        texts: single sentences.
    """
    served = tf.saved_model.load(os.fspath(export_dir)).signatures["classify"](
        text_a=tf.constant(list(texts)))["probabilities"].numpy()
    read_strictly(tf.train.latest_checkpoint(os.fspath(run_dir)), {"model": model}, what="test")
    tokenizer = tokenization.FullTokenizer(os.fspath(vocab_file), True)
    rows = [tokenizer.convert_tokens_to_ids(["[CLS]"] + tokenizer.tokenize(t) + ["[SEP]"])
            for t in texts]
    length = max(map(len, rows))
    ids = np.array([r + [0] * (length - len(r)) for r in rows], "int32")
    logits = model({"input_ids": ids, "input_mask": (ids > 0).astype("int32"),
                    "segment_ids": np.zeros_like(ids)})["logits"].numpy()
    np.testing.assert_allclose(served, tf.nn.softmax(logits).numpy(), atol=1e-5)
