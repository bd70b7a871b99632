"""Tests of bert_tf.data.dynamic_masking: hand-made cases, the count rule, and statistics."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.core.errors import UserError
from bert_tf.data import dynamic_masking as dm

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


_GRAPHS = {}


def masked(ids, mask, seed=(1, 2), **kwargs):
    """`dm.mask_tokens` as the input pipeline runs it: in a graph (traced once per config and
    shape; eager, a test drawing hundreds of masks spent most of a minute dispatching ops)."""
    config = dm.MaskingConfig(vocab_size=VOCAB, max_predictions_per_seq=kwargs.pop("max_pred", 20),
                              **kwargs)
    graph = _GRAPHS.setdefault(config, tf.function(
        lambda i, m, s: dm.mask_tokens(i, m, s, config)))
    out = graph(tf.constant(ids), tf.constant(mask), tf.constant(seed))
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
    with pytest.raises(UserError, match=r"--masked_lm_prob=1.5: must be in \(0, 1\]"):
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


# ----------------------------------------------------------------------- whole-word masking

# Ids 900..999 are "##" pieces in these tests.
CONTINUATION = tuple(range(900, VOCAB))


def ww_masked(ids, mask, seed=(1, 2), max_pred=20, **kwargs):
    return masked(ids, mask, seed=seed, max_pred=max_pred, continuation_ids=CONTINUATION,
                  do_whole_word_mask=True, **kwargs)


def test_word_ids_join_pieces_to_the_candidate_before_them():
    w, x, y, e = 900, 901, 902, 903
    ids = np.array([[CLS, 5, w, x, 6, SEP, e, 7, y, SEP, PAD, PAD]], np.int32)
    cand = (ids != CLS) & (ids != SEP) & (ids != PAD)
    config = dm.MaskingConfig(vocab_size=VOCAB, max_predictions_per_seq=4,
                              do_whole_word_mask=True, continuation_ids=CONTINUATION)
    got = dm.word_ids(tf.constant(ids), tf.constant(cand), config).numpy()
    # "5 ##w ##x" is word 0; "##e" after [SEP] starts word 2 on its own; "7 ##y" is word 3.
    np.testing.assert_array_equal(got, [[-1, 0, 0, 0, 1, -1, 2, 3, 3, -1, -1, -1]])


def test_whole_words_fill_the_count_greedily_hand_checked():
    # Words: "10 ##w ##x" (3 pieces), "11", "12"; 7 real tokens.
    ids = np.array([[CLS, 10, 900, 901, 11, 12, SEP, PAD]], np.int32)
    mask = (ids != PAD).astype(np.int32)
    # Count round(7 * 0.3) = 2: the 3-piece word never fits, both single words always do.
    for seed in range(30):
        out = ww_masked(ids, mask, seed=(seed, 0), max_pred=3, masked_lm_prob=0.3)
        np.testing.assert_array_equal(out["masked_lm_positions"], [[4, 5, 0]])
        np.testing.assert_array_equal(out["masked_lm_weights"], [[1, 1, 0]])
        np.testing.assert_array_equal(out["masked_lm_ids"], [[11, 12, 0]])
    # Count round(7 * 0.45) = 3: the long word if it is visited first (1 in 3), else the two
    # single words (after one of them the long word no longer fits).
    outcomes = []
    for seed in range(600):
        out = ww_masked(ids, mask, seed=(seed, 1), max_pred=3, masked_lm_prob=0.45)
        outcomes.append(tuple(out["masked_lm_positions"][0][out["masked_lm_weights"][0] > 0]))
    assert set(outcomes) == {(1, 2, 3), (4, 5)}
    assert abs(outcomes.count((1, 2, 3)) / 600 - 1 / 3) < 0.06


def words_batch(rng, batch, seq_len):
    """random_batch with about a third of the tokens "##" pieces."""
    ids, mask = random_batch(rng, batch, seq_len)
    pieces = (rng.random(ids.shape) < 0.35) & (ids >= 200)
    ids = np.where(pieces, rng.integers(900, VOCAB, ids.shape), ids).astype(np.int32)
    return ids, mask


def test_every_masked_word_is_masked_in_all_its_pieces_with_one_decision():
    rng = np.random.default_rng(3)
    ids, mask = words_batch(rng, 400, 48)
    out = ww_masked(ids, mask, max_pred=12)
    config = dm.MaskingConfig(vocab_size=VOCAB, max_predictions_per_seq=12,
                              do_whole_word_mask=True, continuation_ids=CONTINUATION)
    cand = (mask > 0) & (ids != CLS) & (ids != SEP)
    words = dm.word_ids(tf.constant(ids), tf.constant(cand), config).numpy()
    counts = dm.num_to_predict(tf.constant(mask.sum(1), tf.int32),
                              tf.constant(cand.sum(1), tf.int32), config).numpy()
    decisions = {"mask": 0, "other": 0}
    for b in range(len(ids)):
        chosen = out["masked_lm_positions"][b][out["masked_lm_weights"][b] > 0]
        assert len(chosen) <= counts[b]
        assert list(chosen) == sorted(chosen) and np.all(cand[b, chosen])
        np.testing.assert_array_equal(out["masked_lm_ids"][b][:len(chosen)], ids[b, chosen])
        untouched = np.setdiff1d(np.arange(ids.shape[1]), chosen)
        np.testing.assert_array_equal(out["input_ids"][b, untouched], ids[b, untouched])
        for w in np.unique(words[b, chosen]):
            pieces = np.flatnonzero(words[b] == w)
            assert set(pieces) <= set(chosen), (b, w)  # the whole word
            is_mask = out["input_ids"][b, pieces] == MASK
            assert is_mask.all() or not is_mask.any(), (b, w)  # one decision per word
            decisions["mask" if is_mask.all() else "other"] += 1
        # Greedy: a word left out would not have fitted when it was visited, and the count
        # only grows, so no unchosen word fits in what is left at the end.
        unchosen = np.setdiff1d(words[b][cand[b]], words[b, chosen])
        sizes = [np.sum(words[b] == w) for w in unchosen]
        assert not sizes or len(chosen) + min(sizes) > counts[b], b
    total = decisions["mask"] + decisions["other"]
    assert total > 1000
    assert abs(decisions["mask"] / total - 0.8) < 0.03


def test_whole_word_statistics_15_percent_and_80_10_10():
    rng = np.random.default_rng(4)
    ids, mask = words_batch(rng, 2000, 64)
    out = ww_masked(ids, mask, seed=(5, 6), max_pred=20)
    weights = out["masked_lm_weights"] > 0
    real = mask.sum()
    # The count rule asks round(0.15 * tokens); whole words may leave it a little short.
    fraction = weights.sum() / real
    assert 0.13 < fraction <= 0.151, fraction
    pos, labels = out["masked_lm_positions"], out["masked_lm_ids"]
    now = np.take_along_axis(out["input_ids"], pos, axis=1)
    is_mask = (now == MASK) & weights
    kept = (now == labels) & weights
    n = weights.sum()
    assert abs(is_mask.sum() / n - 0.8) < 0.02
    assert abs(kept.sum() / n - 0.1) < 0.015  # (+ 1/VOCAB random ids equal to the original)
    assert abs((n - is_mask.sum() - kept.sum()) / n - 0.1) < 0.015
    # Random replacements lie in the vocabulary.
    assert out["input_ids"].min() >= 0 and out["input_ids"].max() < VOCAB


def test_from_vocab_file_finds_the_continuation_pieces(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "##b", "c",
                                "##d"]) + "\n")
    config = dm.MaskingConfig.from_vocab_file(str(vocab), 4, do_whole_word_mask=True)
    assert config.continuation_ids == (6, 8) and config.do_whole_word_mask
    flat = dm.MaskingConfig.from_vocab_file(str(vocab), 4)
    assert not flat.do_whole_word_mask and flat.continuation_ids == ()
    no_pieces = tmp_path / "flat.txt"
    no_pieces.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\n")
    with pytest.raises(UserError, match=r"whole-word masking needs the vocabulary's '##' "
                                        r"pieces, but .*flat.txt has none"):
        dm.MaskingConfig.from_vocab_file(str(no_pieces), 4, do_whole_word_mask=True)


@pytest.mark.parametrize("kwargs, message", [
    (dict(max_ngram_size=3), r"--max_ngram_size=3 is not supported by dynamic masking"),
    (dict(do_whole_word_mask=True, continuation_ids=CONTINUATION,
          whole_word_mask_mode="original"),
     r"--whole_word_mask_mode='original' is not supported by dynamic masking"),
])
def test_settings_only_the_writer_draws_are_one_line_errors(kwargs, message):
    ids, mask = random_batch(np.random.default_rng(0), 2, 16)
    with pytest.raises(UserError, match=message):
        masked(ids, mask, **kwargs)
