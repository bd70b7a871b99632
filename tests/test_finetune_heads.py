"""Tests of bert_tf.finetune.heads: how task heads start."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from bert_tf.finetune import heads
from bert_tf.modeling.config import BertConfig


@pytest.mark.parametrize("kind", ["classifier", "tagger", "span"])
def test_heads_start_from_the_originals_truncated_normal_and_zero_bias(kind):
    config = BertConfig(vocab_size=50, hidden_size=256, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=32, initializer_range=0.02)
    keras.utils.set_random_seed(3)
    model = {"classifier": lambda: heads.BertClassifier(config, 40),
             "tagger": lambda: heads.BertTagger(config, 40),
             "span": lambda: heads.BertSpanExtractor(config)}[kind]()
    kernel = model.head.kernel.numpy()
    assert not model.head.bias.numpy().any()
    # The original release's truncated_normal_initializer(0.02): nothing beyond 2 sigma, std
    # 0.02 * 0.880 = 0.0176 (a normal(0, 0.02), transformers' choice, puts ~4.6% beyond).
    # On WNUT-17 a normal head collapsed to all-O too (README, fine-tuning parity), so the
    # original's stays.
    assert np.abs(kernel).max() <= 0.04
    assert abs(kernel.std() / 0.0176 - 1) < (0.06 if kind != "span" else 0.15)
