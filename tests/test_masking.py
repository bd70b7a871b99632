"""Tests of data_tools.pretraining_data.masking on hand-made batches with seeded generators."""

import numpy as np
import pytest

from data_tools.pretraining_data import masking
from data_tools.pretraining_data.masking import (
    MaskingConfig,
    mask_batch,
    num_to_predict,
    unit_starts,
)

PAD, CLS, SEP, MASK = 0, 2, 3, 4
VOCAB = 100
IS_CONT = np.zeros(VOCAB, dtype=bool)
IS_CONT[60:] = True  # ids 60..99 are "##" pieces; 10..59 start words


def _config(**kw):
    base = dict(masked_lm_prob=0.15, max_predictions_per_seq=20, vocab_size=VOCAB,
                mask_token_id=MASK, cls_token_id=CLS, sep_token_id=SEP)
    base.update(kw)
    if base.get("do_whole_word_mask"):
        base.setdefault("continuation_ids", tuple(np.flatnonzero(IS_CONT).tolist()))
    return MaskingConfig(**base)


def _batch(n, seq_len, seed, cont_prob=0.0, lengths=None):
    """[CLS] A [SEP] B [SEP] rows of random words (a piece is ## with prob cont_prob)."""
    rng = np.random.default_rng(seed)
    if lengths is None:
        lengths = rng.integers(8, seq_len + 1, n)
    ids = np.zeros((n, seq_len), dtype=np.int32)
    for i, length in enumerate(lengths):
        body = np.where(rng.random(length) < cont_prob, rng.integers(60, 100, length),
                        rng.integers(10, 60, length))
        ids[i, :length] = body
        ids[i, 0] = CLS
        split = int(rng.integers(2, length - 2))
        ids[i, split] = SEP
        ids[i, length - 1] = SEP
    return ids, np.asarray(lengths)


def _check_invariants(ids, lengths, out, config):
    n, seq_len = ids.shape
    k = num_to_predict(lengths, config)
    for i in range(n):
        num = int(out.num_predictions[i])
        pos = out.positions[i, :num]
        assert (np.diff(pos) > 0).all()  # sorted, unique
        assert ((pos > 0) & (pos < lengths[i])).all()
        assert not np.isin(ids[i, pos], [CLS, SEP]).any()
        assert (out.positions[i, num:] == 0).all() and (out.label_ids[i, num:] == 0).all()
        assert out.weights[i].tolist() == [1.0] * num + [0.0] * (config.max_predictions_per_seq
                                                                  - num)
        assert (out.label_ids[i, :num] == ids[i, pos]).all()  # labels are the original ids
        assert num <= k[i]
        untouched = np.ones(seq_len, bool)
        untouched[pos] = False
        assert (out.input_ids[i, untouched] == ids[i, untouched]).all()
        dec = out.decisions[i, pos]
        assert (out.input_ids[i, pos][dec == masking.DECISION_MASK] == MASK).all()
        assert (out.input_ids[i, pos][dec == masking.DECISION_KEEP] == ids[i, pos][
            dec == masking.DECISION_KEEP]).all()
        assert (out.decisions[i, untouched] == -1).all()


def test_num_to_predict_rounds_like_python():
    lengths = np.arange(1, 300)
    for prob in (0.15, 0.5, 0.1, 1.0):
        config = _config(masked_lm_prob=prob, max_predictions_per_seq=40)
        expected = [min(40, max(1, int(round(n * prob)))) for n in lengths]
        assert num_to_predict(lengths, config).tolist() == expected
    # Hand-worked: round half to even (2.5 -> 2, 3.5 -> 4), floor of 1, cap of 20.
    config = _config(masked_lm_prob=0.5)
    assert num_to_predict(np.array([1, 5, 7, 100]), config).tolist() == [1, 2, 4, 20]


def test_piece_masking_invariants_count_and_80_10_10():
    ids, lengths = _batch(3000, 64, seed=0)
    config = _config()
    out = mask_batch(ids, lengths, config, np.random.default_rng(0), IS_CONT)
    _check_invariants(ids[:300], lengths[:300], _slice(out, 300), config)
    # Every row has enough candidates, so exactly num_to_predict predictions.
    assert (out.num_predictions == num_to_predict(lengths, config)).all()
    real = np.arange(ids.shape[1])[None, :] < lengths[:, None]
    np.testing.assert_array_equal(out.num_candidates,
                                  (real & (ids != CLS) & (ids != SEP)).sum(axis=1))
    dec = out.decisions[out.decisions >= 0]
    shares = np.bincount(dec, minlength=3) / dec.size
    # ~25,000 predictions: standard errors 0.0025 (80%) and 0.0019 (10%); allow 4 of them.
    np.testing.assert_allclose(shares, [0.8, 0.1, 0.1], atol=0.01)
    replaced = out.input_ids[out.decisions == masking.DECISION_RANDOM]
    assert replaced.min() >= 0 and replaced.max() < VOCAB and len(set(replaced.tolist())) > 90


def _slice(out, n):
    return masking.MaskedBatch(*(getattr(out, f)[:n] for f in (
        "input_ids", "positions", "label_ids", "weights", "num_predictions", "decisions",
        "num_candidates")))


def test_every_candidate_position_is_equally_likely():
    n, length = 20000, 12
    ids = np.random.default_rng(1).integers(10, 60, (n, length))
    ids[:, 0], ids[:, 5], ids[:, 11] = CLS, SEP, SEP  # candidates: 1-4 and 6-10; k = 2
    lengths = np.full(n, length)
    out = mask_batch(ids, lengths, _config(), np.random.default_rng(1), IS_CONT)
    freq = np.bincount(out.positions[:, :2].ravel(), minlength=length) / n
    expected = np.zeros(length)
    expected[[1, 2, 3, 4, 6, 7, 8, 9, 10]] = 2 / 9
    # Each frequency has a standard error of about 0.003 over 20,000 rows.
    np.testing.assert_allclose(freq, expected, atol=0.012)


def test_same_seed_same_result_other_seed_differs():
    ids, lengths = _batch(50, 40, seed=2, cont_prob=0.3)
    for kw in (dict(), dict(do_whole_word_mask=True), dict(max_ngram_size=3)):
        config = _config(**kw)
        a = mask_batch(ids, lengths, config, np.random.default_rng(5), IS_CONT)
        b = mask_batch(ids, lengths, config, np.random.default_rng(5), IS_CONT)
        c = mask_batch(ids, lengths, config, np.random.default_rng(6), IS_CONT)
        assert (a.input_ids == b.input_ids).all() and (a.positions == b.positions).all()
        assert (a.positions != c.positions).any()


def _words(ids_row, length):
    """Word groups of a row: lists of positions (## pieces join the previous position)."""
    words = []
    for p in range(1, length):
        if ids_row[p] in (CLS, SEP):
            continue
        if IS_CONT[ids_row[p]] and words and words[-1][-1] == p - 1:
            words[-1].append(p)
        else:
            words.append([p])
    return words


@pytest.mark.parametrize("mode", [masking.MODE_FIXED, masking.MODE_ORIGINAL])
def test_whole_word_masking_modes(mode):
    ids, lengths = _batch(3000, 48, seed=3, cont_prob=0.4)
    config = _config(do_whole_word_mask=True, whole_word_mask_mode=mode)
    out = mask_batch(ids, lengths, config, np.random.default_rng(3), IS_CONT)
    _check_invariants(ids[:300], lengths[:300], _slice(out, 300), config)
    mixed = multi = 0
    for i in range(len(lengths)):
        chosen = set(out.positions[i, :out.num_predictions[i]].tolist())
        for word in _words(ids[i], lengths[i]):
            picked = [p in chosen for p in word]
            if mode == masking.MODE_FIXED or ids[i, word[0] - 1] != SEP:
                assert all(picked) or not any(picked)  # whole words only
            if all(picked) and len(word) >= 2:
                multi += 1
                mixed += len(set(out.decisions[i, word].tolist())) > 1
    assert multi > 1000
    if mode == masking.MODE_FIXED:
        assert mixed == 0  # one decision per word
    else:
        # Per-piece decisions: a 2-piece word is mixed with probability
        # 1 - (0.8^2 + 0.1^2 + 0.1^2) = 0.34 (3 pieces: 0.486); most words here have 2 pieces.
        assert 0.28 < mixed / multi < 0.45


def test_whole_word_units_and_the_original_sep_quirk():
    ids = np.array([[CLS, 10, 61, SEP, 62, 11, 63, SEP]])
    cand = masking.candidates(ids, np.array([8]), _config())
    fixed = unit_starts(ids, cand, IS_CONT, _config(do_whole_word_mask=True))
    original = unit_starts(ids, cand, IS_CONT, _config(do_whole_word_mask=True,
                                                       whole_word_mask_mode="original"))
    assert np.flatnonzero(fixed[0]).tolist() == [1, 4, 5]  # a ## after [SEP] starts a unit
    assert np.flatnonzero(original[0]).tolist() == [1, 5]  # the original joins it to "10 ##61"


def test_whole_word_that_does_not_fit_is_skipped():
    # Two 3-piece words and one single piece, k = 2: only the single piece can be taken.
    ids = np.array([[CLS, 10, 60, 61, 11, 62, 63, 12, SEP]] * 200)
    lengths = np.full(200, 9)
    config = _config(do_whole_word_mask=True, masked_lm_prob=0.25)  # round(2.25) = 2
    out = mask_batch(ids, lengths, config, np.random.default_rng(0), IS_CONT)
    assert (out.num_predictions == 1).all() and (out.positions[:, 0] == 7).all()


def _spans(out_span_of_pos, row):
    spans = {}
    for p, s in enumerate(out_span_of_pos[row]):
        if s >= 0:
            spans.setdefault(int(s), []).append(p)
    return list(spans.values())


def test_ngram_spans_are_contiguous_short_favoured_and_share_a_decision():
    ids, lengths = _batch(2000, 64, seed=4)
    config = _config(max_ngram_size=3)
    out = mask_batch(ids, lengths, config, np.random.default_rng(4), IS_CONT)
    _check_invariants(ids[:300], lengths[:300], _slice(out, 300), config)
    # Recompute the span choice with the same draws to inspect spans.
    rng = np.random.default_rng(4)
    cand = masking.candidates(ids, lengths, config)
    unit = np.where(cand, np.cumsum(cand, axis=1) - 1, -1)
    chosen, span_of_pos = masking.choose_spans(unit, cand.sum(1), num_to_predict(lengths, config),
                                               config, rng)
    assert (chosen == (out.decisions >= 0)).all()
    sizes = []
    for i in range(len(lengths)):
        for span in _spans(span_of_pos, i):
            units = unit[i, span]
            assert (np.diff(units) == 1).all() and len(span) <= 3  # consecutive units
            assert len(set(out.decisions[i, span].tolist())) == 1  # one decision per span
            sizes.append(len(span))
    share = np.bincount(sizes, minlength=4)[1:] / len(sizes)
    # Drawn with p = (6, 3, 2) / 11 = (0.545, 0.273, 0.182); spans cut at the budget or at
    # the end of the row shift a little mass to shorter spans.
    assert 0.54 < share[0] < 0.66 and 0.2 < share[1] < 0.3 and 0.1 < share[2] < 0.19
    # The budget is still met exactly (every row has room).
    assert (out.num_predictions == num_to_predict(lengths, config)).all()


def test_ngram_over_whole_words():
    ids, lengths = _batch(500, 48, seed=5, cont_prob=0.4)
    config = _config(max_ngram_size=2, do_whole_word_mask=True)
    out = mask_batch(ids, lengths, config, np.random.default_rng(5), IS_CONT)
    _check_invariants(ids, lengths, out, config)
    for i in range(len(lengths)):
        chosen = set(out.positions[i, :out.num_predictions[i]].tolist())
        for word in _words(ids[i], lengths[i]):
            if ids[i, word[0] - 1] != SEP:
                picked = [p in chosen for p in word]
                assert all(picked) or not any(picked)


def test_ngram_probabilities():
    np.testing.assert_allclose(masking.ngram_probabilities(3), np.array([6, 3, 2]) / 11)
    assert masking.ngram_probabilities(1).tolist() == [1.0]


def test_continuation_pieces_default_to_the_config_s():
    ids, lengths = _batch(64, 40, seed=11, cont_prob=0.4)
    config = _config(do_whole_word_mask=True)
    a = mask_batch(ids, lengths, config, np.random.default_rng(2), IS_CONT)
    b = mask_batch(ids, lengths, config, np.random.default_rng(2))
    np.testing.assert_array_equal(a.input_ids, b.input_ids)
    np.testing.assert_array_equal(a.positions, b.positions)


def test_count_special_tokens_false_counts_only_maskable_tokens():
    # 20 real tokens, 3 of them [CLS]/[SEP]: round(0.25 * 20) = 5, round(0.25 * 17) = 4.
    ids, lengths = _batch(8, 24, seed=12, lengths=np.full(8, 20))
    counted = mask_batch(ids, lengths, _config(masked_lm_prob=0.25),
                         np.random.default_rng(0))
    maskable = mask_batch(ids, lengths, _config(masked_lm_prob=0.25, count_special_tokens=False),
                          np.random.default_rng(0))
    assert counted.num_predictions.tolist() == [5] * 8
    assert maskable.num_predictions.tolist() == [4] * 8
