"""Tests of bert_tf.core.masking_rules: the checks, from_vocab_file, and the count rule,
which the NumPy writer and the TF dynamic masking must both follow."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.core import masking_rules
from bert_tf.core.errors import UserError
from bert_tf.core.masking_rules import MaskingConfig
from bert_tf.data import dynamic_masking
from data_tools.pretraining_data import masking


def config(**kwargs) -> MaskingConfig:
    return MaskingConfig(**{"vocab_size": 1000, "max_predictions_per_seq": 20, **kwargs})


@pytest.mark.parametrize("kwargs, message", [
    (dict(vocab_size=0), r"^vocab_size=0: must be > 0"),
    (dict(max_predictions_per_seq=0), r"^--max_predictions_per_seq=0: must be > 0$"),
    (dict(masked_lm_prob=0.0), r"^--masked_lm_prob=0.0: must be in \(0, 1\]$"),
    (dict(masked_lm_prob=1.5), r"^--masked_lm_prob=1.5: must be in \(0, 1\]$"),
    (dict(vocab_size=100), r"^mask_token_id=103 is outside the vocabulary \[0, 100\)$"),
    (dict(pad_token_id=-1), r"^pad_token_id=-1 is outside the vocabulary \[0, 1000\)$"),
    (dict(whole_word_mask_mode="both"),
     r"^--whole_word_mask_mode='both': expected one of fixed, original$"),
    (dict(max_ngram_size=0), r"^--max_ngram_size=0: must be in \[1, 16\]$"),
    (dict(max_ngram_size=17), r"^--max_ngram_size=17: must be in \[1, 16\]$"),
    (dict(do_whole_word_mask=True), r"^--do_whole_word_mask needs the vocabulary's '##' "),
    (dict(continuation_ids=(5,)), r"^continuation_ids are used only with --do_whole_word_mask$"),
    (dict(do_whole_word_mask=True, continuation_ids=(5, 1000)),
     r"^continuation_ids must be in \[0, 1000\)$"),
])
def test_bad_settings_are_one_line_errors_named_after_the_flag(kwargs, message):
    with pytest.raises(UserError, match=message) as info:
        config(**kwargs)
    assert "\n" not in str(info.value)


def test_good_settings_and_the_defaults():
    c = config(masked_lm_prob=1.0, do_whole_word_mask=True, continuation_ids=(0, 999),
               whole_word_mask_mode=masking_rules.MODE_ORIGINAL, max_ngram_size=16)
    assert c.masked_lm_prob == 1.0 and c.continuation_ids == (0, 999)
    d = config()
    assert (d.mask_token_id, d.cls_token_id, d.sep_token_id, d.pad_token_id) == (103, 101, 102, 0)
    assert (d.masked_lm_prob, d.count_special_tokens, d.do_whole_word_mask,
            d.whole_word_mask_mode, d.max_ngram_size) == (0.15, True, False, "fixed", 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.masked_lm_prob = 0.2


def write_vocab(tmp_path, tokens):
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    return str(path)


def test_from_vocab_file_reads_the_special_ids_and_the_pieces(tmp_path):
    vocab = write_vocab(tmp_path, ["a", "[MASK]", "##b", "[SEP]", "[PAD]", "c", "[CLS]", "##d",
                                   "[UNK]", "##"])
    c = MaskingConfig.from_vocab_file(vocab, 5, 0.2, do_whole_word_mask=True,
                                      whole_word_mask_mode="original", max_ngram_size=2)
    assert (c.vocab_size, c.mask_token_id, c.sep_token_id, c.pad_token_id, c.cls_token_id) == (
        10, 1, 3, 4, 6)
    assert c.continuation_ids == (2, 7, 9)
    assert (c.max_predictions_per_seq, c.masked_lm_prob, c.do_whole_word_mask,
            c.whole_word_mask_mode, c.max_ngram_size) == (5, 0.2, True, "original", 2)
    plain = MaskingConfig.from_vocab_file(vocab, 5)
    assert plain.continuation_ids == () and not plain.do_whole_word_mask


def test_from_vocab_file_errors(tmp_path):
    flat = write_vocab(tmp_path, ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a"])
    with pytest.raises(UserError, match=r"whole-word masking needs the vocabulary's '##' "
                                        r"pieces, but .*vocab.txt has none"):
        MaskingConfig.from_vocab_file(flat, 4, do_whole_word_mask=True)
    with pytest.raises(UserError, match=r"--max_predictions_per_seq=0"):
        MaskingConfig.from_vocab_file(flat, 0)
    with pytest.raises(UserError, match=r"vocab file not found"):
        MaskingConfig.from_vocab_file(str(tmp_path / "missing.txt"), 4)


# (num_tokens, masked_lm_prob, max_predictions_per_seq) -> count, by hand.
COUNTS = [
    ((0, 0.15, 20), 1),     # never fewer than 1
    ((3, 0.15, 20), 1),     # 0.45 -> 0 -> 1
    ((10, 0.15, 20), 2),    # 1.5 -> 2 (half to even)
    ((30, 0.15, 20), 4),    # 4.5 -> 4 (half to even, not up)
    ((50, 0.15, 20), 8),    # 7.5 -> 8
    ((70, 0.15, 20), 10),   # 10.5 -> 10
    ((128, 0.15, 20), 19),  # 19.2 -> 19
    ((200, 0.15, 20), 20),  # 30 -> capped at 20
    ((5, 0.5, 20), 2),      # 2.5 -> 2
    ((7, 0.5, 20), 4),      # 3.5 -> 4
    ((9, 0.5, 3), 3),       # 4.5 -> 4 -> capped at 3
    ((7, 1.0, 20), 7),
]


@pytest.mark.parametrize("args, want", COUNTS)
def test_count_rule_by_hand(args, want):
    num_tokens, prob, max_pred = args
    c = config(masked_lm_prob=prob, max_predictions_per_seq=max_pred)
    assert masking_rules.num_to_predict(num_tokens, c) == want


def test_numpy_and_tf_counts_follow_the_rule():
    tokens = np.arange(0, 600)
    for prob in (0.15, 0.1, 0.5):
        c = config(masked_lm_prob=prob, max_predictions_per_seq=80)
        want = [masking_rules.num_to_predict(int(n), c) for n in tokens]
        assert masking.num_to_predict(tokens, c).tolist() == want
        # The TF version is also capped by the maskable tokens (here: plenty).
        got = dynamic_masking.num_to_predict(tf.constant(tokens, tf.int32),
                                             tf.constant(np.full(600, 1000), tf.int32), c)
        assert got.numpy().tolist() == want


def test_both_implementations_share_the_one_config_and_fractions():
    assert masking.MaskingConfig is MaskingConfig is dynamic_masking.MaskingConfig
    assert masking.MODES == masking_rules.MODES == ("fixed", "original")
    assert (masking_rules.MASK_FRACTION, masking_rules.KEEP_FRACTION) == (0.8, 0.1)
    assert masking.P_KEEP_END == 0.9
