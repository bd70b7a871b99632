"""Tests of bert_tf.data.dynamic_masking: hand-made cases, the count rule, and statistics."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.data import dynamic_masking as dm
from bert_tf.errors import UserError

PAD, CLS, SEP, MASK = 0, 101, 102, 103
VOCAB = 1000


def random_batch(rng: np.random.Generator, batch: int, seq_len: int):
    """[CLS] A [SEP] B [SEP] + padding, tokens in [200, VOCAB), random lengths."""
    ids = np.zeros((batch, seq_len), np.int32)
    mask = np.zeros((batch, seq_len), np.int32)
    for b in range(batch):
        n = int(rng.integers(5, seq_len + 1))
        tokens = rng.integers(200, VOCAB, n)
        split = int(rng.integers(2, n - 2))
        tokens[0], tokens[split], tokens[n - 1] = CLS, SEP, SEP
        ids[b, :n] = tokens
        mask[b, :n] = 1
    return ids, mask


def masked(ids, mask, seed=(1, 2), **kwargs):
    config = dm.MaskingConfig(vocab_size=VOCAB, max_predictions_per_seq=kwargs.pop("max_pred", 20),
                              **kwargs)
    out = dm.mask_tokens(tf.constant(ids), tf.constant(mask), tf.constant(seed), config)
    return {k: v.numpy() for k, v in out.items()}


def test_restore_original_ids_hand_made():
    input_ids = tf.constant([[CLS, 7, MASK, 9, SEP, 42, SEP, PAD]])
    positions = tf.constant([[2, 5, 0]])
    ids = tf.constant([[8, 11, 0]])
    weights = tf.constant([[1.0, 1.0, 0.0]])
    restored = dm.restore_original_ids(input_ids, positions, ids, weights).numpy()
    # Position 5 held a "random" 42 and goes back to 11; the padding slot leaves [CLS] alone.
    np.testing.assert_array_equal(restored, [[CLS, 7, 8, 9, SEP, 11, SEP, PAD]])


def test_count_rule_matches_python_round_half_to_even():
    config = dm.MaskingConfig(vocab_size=VOCAB, max_predictions_per_seq=80)
    lengths = np.arange(0, 600, dtype=np.int32)
    got = dm.num_to_predict(tf.constant(lengths), tf.constant(lengths), config).numpy()
    want = [min(80, max(1, round(n * 0.15)), n) for n in lengths]
    np.testing.assert_array_equal(got, want)
    # The half-way cases that float32 would get wrong: 30 * 0.15 = 4.5 -> 4, 50 -> 7.5 -> 8.
    assert got[30] == 4 and got[50] == 8 and got[10] == 2


@pytest.mark.parametrize("count_special_tokens", [True, False])
def test_masks_are_valid_and_counted_by_the_rule(count_special_tokens):
    rng = np.random.default_rng(0)
    ids, mask = random_batch(rng, 300, 40)
    out = masked(ids, mask, max_pred=6, count_special_tokens=count_special_tokens)
    for b in range(len(ids)):
        n_real = int(mask[b].sum())
        special = {i for i in range(n_real) if ids[b, i] in (CLS, SEP)}
        basis = n_real if count_special_tokens else n_real - len(special)
        count = min(6, max(1, round(basis * 0.15)))
        w = out["masked_lm_weights"][b]
        np.testing.assert_array_equal(w, [1.0] * count + [0.0] * (6 - count))
        pos = out["masked_lm_positions"][b]
        assert list(pos[count:]) == [0] * (6 - count)
        assert all(np.diff(pos[:count]) > 0), pos  # sorted, distinct
        assert all(p < n_real and p not in special for p in pos[:count])
        np.testing.assert_array_equal(out["masked_lm_ids"][b, :count], ids[b, pos[:count]])
        assert list(out["masked_lm_ids"][b, count:]) == [0] * (6 - count)
        # Outside the chosen positions nothing changes.
        untouched = np.ones(40, bool)
        untouched[pos[:count]] = False
        np.testing.assert_array_equal(out["input_ids"][b, untouched], ids[b, untouched])


def test_restored_tokens_equal_the_originals():
    rng = np.random.default_rng(1)
    ids, mask = random_batch(rng, 64, 32)
    out = masked(ids, mask, max_pred=5)
    restored = dm.restore_original_ids(*(tf.constant(out[k]) for k in (
        "input_ids", "masked_lm_positions", "masked_lm_ids", "masked_lm_weights"))).numpy()
    np.testing.assert_array_equal(restored, ids)
    assert not np.array_equal(out["input_ids"], ids)


def test_statistics_80_10_10_and_masked_fraction():
    rng = np.random.default_rng(2)
    ids, mask = random_batch(rng, 4000, 64)
    out = masked(ids, mask, max_pred=20)
    w = out["masked_lm_weights"] > 0
    rows = np.nonzero(w)[0]
    pos = out["masked_lm_positions"][w]
    new, orig = out["input_ids"][rows, pos], out["masked_lm_ids"][w]
    n = len(new)
    assert n > 20000
    # Fraction of real tokens predicted: ~15% (rounding per sequence shifts it a little).
    assert abs(n / mask.sum() - 0.15) < 0.005
    frac_mask = np.mean(new == MASK)
    frac_same = np.mean(new == orig)
    frac_other = np.mean((new != MASK) & (new != orig))
    # Random ids can hit [MASK] or the original with probability ~1/VOCAB each: negligible.
    assert abs(frac_mask - 0.8) < 0.015
    assert abs(frac_same - 0.1) < 0.01
    assert abs(frac_other - 0.1) < 0.01
    replaced = new[(new != MASK) & (new != orig)]
    assert replaced.min() >= 0 and replaced.max() < VOCAB
    # Random ids span the whole vocabulary, not only the ids seen in the data (>= 200).
    assert np.mean(replaced < 200) == pytest.approx(0.2, abs=0.05)


def test_positions_are_uniform_over_candidates():
    # 20 sequences types: [CLS] 20 tokens [SEP] -> 22 tokens, round(3.3) = 3 predictions.
    ids = np.array([[CLS] + list(range(300, 320)) + [SEP]] * 3000, np.int32)
    out = masked(ids, np.ones_like(ids), max_pred=5)
    assert np.all(out["masked_lm_weights"].sum(axis=1) == 3)
    counts = np.bincount(out["masked_lm_positions"][:, :3].ravel(), minlength=22)
    assert counts[0] == 0 and counts[21] == 0
    expected = 3000 * 3 / 20  # 450 per candidate position
    assert np.all(np.abs(counts[1:21] - expected) < 5 * np.sqrt(expected))


def test_seeds_reproduce_and_differ():
    rng = np.random.default_rng(3)
    ids, mask = random_batch(rng, 16, 32)
    a, b, c = masked(ids, mask, (5, 0)), masked(ids, mask, (5, 0)), masked(ids, mask, (5, 1))
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    assert not np.array_equal(a["masked_lm_positions"], c["masked_lm_positions"])


def test_no_candidates_gives_no_predictions():
    ids = np.array([[CLS, SEP, PAD, PAD], [CLS, 300, SEP, PAD]], np.int32)
    mask = (ids != PAD).astype(np.int32)
    out = masked(ids, mask, max_pred=2)
    np.testing.assert_array_equal(out["masked_lm_weights"], [[0, 0], [1, 0]])
    np.testing.assert_array_equal(out["masked_lm_positions"], [[0, 0], [1, 0]])
    np.testing.assert_array_equal(out["input_ids"][0], ids[0])


def test_remask_batch_keeps_the_other_features():
    rng = np.random.default_rng(4)
    ids, mask = random_batch(rng, 4, 16)
    features = {
        "input_ids": tf.constant(ids), "input_mask": tf.constant(mask),
        "segment_ids": tf.constant(np.ones_like(ids)),
        "masked_lm_positions": tf.zeros([4, 3], tf.int32),
        "masked_lm_ids": tf.zeros([4, 3], tf.int32),
        "masked_lm_weights": tf.zeros([4, 3], tf.float32),
        "next_sentence_labels": tf.constant([[0], [1], [0], [1]]),
    }
    config = dm.MaskingConfig(vocab_size=VOCAB, max_predictions_per_seq=3)
    out = dm.remask_batch(features, tf.constant([9, 9]), config)
    assert set(out) == set(features)
    assert out["masked_lm_weights"].numpy().sum() >= 4
    for k in ("input_mask", "segment_ids", "next_sentence_labels"):
        assert out[k] is features[k]


def test_config_rejects_bad_values():
    with pytest.raises(UserError, match="masked_lm_prob must be in"):
        dm.MaskingConfig(vocab_size=10, max_predictions_per_seq=2, masked_lm_prob=1.5)
    with pytest.raises(UserError, match=r"mask_token_id=103 is outside the vocabulary \[0, 100\)"):
        dm.MaskingConfig(vocab_size=100, max_predictions_per_seq=2)


def test_from_vocab_file_uses_that_vocabulary_s_special_ids(tmp_path):
    # A learned vocabulary (data_tools.build_vocab) puts the specials first, not at Google's
    # 0/101/102/103: masks must use its [MASK] and never pick its [CLS]/[SEP].
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(995)]
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(words) + "\n")
    config = dm.MaskingConfig.from_vocab_file(str(vocab), max_predictions_per_seq=8,
                                              masked_lm_prob=0.3)
    assert (config.pad_token_id, config.cls_token_id, config.sep_token_id,
            config.mask_token_id, config.vocab_size) == (0, 2, 3, 4, 1000)
    ids, mask = random_batch(np.random.default_rng(5), 64, 24)
    ids = np.where(ids == CLS, 2, np.where(ids == SEP, 3, ids)).astype(np.int32)
    out = {k: v.numpy() for k, v in dm.mask_tokens(
        tf.constant(ids), tf.constant(mask), tf.constant([3, 4]), config).items()}
    real = out["masked_lm_weights"] > 0
    chosen = np.take_along_axis(ids, out["masked_lm_positions"], axis=1)[real]
    assert not np.isin(chosen, [0, 2, 3]).any()
    replaced = np.take_along_axis(out["input_ids"], out["masked_lm_positions"], axis=1)[real]
    assert 0.7 < np.mean(replaced == 4) < 0.9  # 80% [MASK], as the learned vocab's id
    assert np.mean(replaced == MASK) < 0.05  # Google's [MASK] id is an ordinary word here


def test_from_vocab_file_names_a_missing_special_token(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n")
    with pytest.raises(UserError, match=r"\[MASK\]"):
        dm.MaskingConfig.from_vocab_file(str(vocab), max_predictions_per_seq=4)
