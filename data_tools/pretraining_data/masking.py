"""Masked-LM predictions for a batch of instances, vectorised over the batch.

Per instance (the original `create_masked_lm_predictions`), with the rules and settings of
`bert_tf.core.masking_rules`: every position but [CLS]/[SEP] (and padding) is a candidate;
`num_to_predict` of them are chosen in random order; each chosen position becomes [MASK]
80% of the time, stays unchanged 10%, becomes a random vocabulary id 10%; predictions are
sorted by position.

Units and spans:
* Without whole-word masking a unit is one WordPiece; with it, a word (a piece starting
  with ## joins the previous unit). Units are visited in random order and a unit is skipped
  when it would exceed `num_to_predict` (as the original does for whole words).
* `max_ngram_size` > 1 masks spans of 1..n consecutive units, the length drawn with
  probability proportional to 1/n (short spans favoured, as ALBERT's n-gram masking); a span
  that does not fit the remaining budget is shortened, one that overlaps an earlier span is
  skipped.
* Mode "fixed" (default) draws the 80/10/10 decision once per span (so once per word with
  whole-word masking: all pieces of a word are [MASK]ed, or all kept, or all replaced).
  Mode "original" draws it per piece, reproducing the original's behaviour (including its
  quirk of joining a ## piece that follows [SEP] to the last word before it).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from bert_tf.core import masking_rules
from bert_tf.core.masking_rules import MODE_FIXED, MODE_ORIGINAL, MODES, MaskingConfig

__all__ = ["MODE_FIXED", "MODE_ORIGINAL", "MODES", "MaskingConfig", "MaskedBatch",
           "mask_batch", "num_to_predict"]

# Decision thresholds on one uniform draw: [0, 0.8) mask, [0.8, 0.9) keep, [0.9, 1) random.
P_MASK = masking_rules.MASK_FRACTION
P_KEEP_END = masking_rules.MASK_FRACTION + masking_rules.KEEP_FRACTION  # == 0.9 exactly
DECISION_MASK, DECISION_KEEP, DECISION_RANDOM = 0, 1, 2


@dataclasses.dataclass
class MaskedBatch:
    """The result of `mask_batch` for n instances.

    Attributes:
        input_ids: int32 [n, seq_len], with the replacements applied.
        positions: int32 [n, max_predictions_per_seq], sorted, zero-padded.
        label_ids: int32 [n, max_predictions_per_seq], original ids, zero-padded.
        weights: float32 [n, max_predictions_per_seq], 1.0 for real predictions.
        num_predictions: int64 [n].
        decisions: int8 [n, seq_len]: -1 where not predicted, else DECISION_*.
        num_candidates: int64 [n], the tokens that could be masked (real, not [CLS]/[SEP]).
    """

    input_ids: np.ndarray
    positions: np.ndarray
    label_ids: np.ndarray
    weights: np.ndarray
    num_predictions: np.ndarray
    decisions: np.ndarray
    num_candidates: np.ndarray


def num_to_predict(num_tokens: np.ndarray, config: MaskingConfig) -> np.ndarray:
    """`masking_rules.num_to_predict` of every row: int64 [n] from num_tokens int [n].

    np.rint on the float64 product rounds half to even, as Python's round.
    """
    k = np.rint(np.asarray(num_tokens, dtype=np.int64) * config.masked_lm_prob).astype(np.int64)
    return np.minimum(config.max_predictions_per_seq, np.maximum(1, k))


def candidates(input_ids: np.ndarray, lengths: np.ndarray, config: MaskingConfig) -> np.ndarray:
    """bool [n, seq_len]: real tokens other than [CLS] and [SEP]."""
    pos = np.arange(input_ids.shape[1])[None, :]
    return (pos < lengths[:, None]) & (input_ids != config.cls_token_id) & (
        input_ids != config.sep_token_id)


def unit_starts(input_ids: np.ndarray, cand: np.ndarray, is_continuation: Optional[np.ndarray],
                config: MaskingConfig) -> np.ndarray:
    """bool [n, seq_len]: candidate positions that begin a new masking unit."""
    if not config.do_whole_word_mask:
        return cand
    if is_continuation is None:
        is_continuation = np.zeros(config.vocab_size, dtype=bool)
        is_continuation[list(config.continuation_ids)] = True
    cont = is_continuation[input_ids]
    if config.whole_word_mask_mode == MODE_ORIGINAL:
        # The original appends a ## piece to the previous candidate group, wherever it is.
        earlier = np.cumsum(cand, axis=1) - cand > 0
        return cand & ~(cont & earlier)
    prev_cand = np.zeros_like(cand)
    prev_cand[:, 1:] = cand[:, :-1]
    return cand & ~(cont & prev_cand)


def ngram_probabilities(max_ngram_size: int) -> np.ndarray:
    """P(span of n units) proportional to 1/n, n = 1..max_ngram_size."""
    p = 1.0 / np.arange(1, max_ngram_size + 1)
    return p / p.sum()


def mask_batch(input_ids: np.ndarray, lengths: np.ndarray, config: MaskingConfig,
               rng: np.random.Generator,
               is_continuation: Optional[np.ndarray] = None) -> MaskedBatch:
    """Chooses and applies the masked-LM predictions of every instance.

    Args:
        input_ids: int [n, seq_len], zero-padded, with [CLS]/[SEP] in place.
        lengths: int [n], real tokens per row.
        config: the masking settings.
        rng: the generator (all draws are vectorised over the batch).
        is_continuation: bool [vocab_size], True for ## pieces (default: from
            `config.continuation_ids`; used only with whole words).

    Returns:
        A `MaskedBatch`.
    """
    input_ids = np.asarray(input_ids)
    lengths = np.asarray(lengths, dtype=np.int64)
    n, seq_len = input_ids.shape
    cand = candidates(input_ids, lengths, config)
    k = num_to_predict(lengths if config.count_special_tokens else cand.sum(axis=1), config)
    starts = unit_starts(input_ids, cand, is_continuation, config)
    # unit[i, p]: index of the unit that position p belongs to within row i (-1 if none).
    unit = np.where(cand, np.cumsum(starts, axis=1) - 1, -1)
    num_units = starts.sum(axis=1)
    simple = starts is cand and config.max_ngram_size == 1
    if simple:
        chosen, span_of_pos = _choose_pieces(cand, k, rng)
    else:
        chosen, span_of_pos = choose_spans(unit, num_units, k, config, rng)
    # One uniform per decision unit: per span in "fixed" mode, per piece in "original".
    if config.whole_word_mask_mode == MODE_ORIGINAL or simple:
        u = rng.random((n, seq_len))
    else:
        u_span = rng.random((n, max(int(num_units.max(initial=0)), 1)))
        u = np.take_along_axis(u_span, np.maximum(span_of_pos, 0), axis=1)
    decisions = np.where(u < P_MASK, DECISION_MASK,
                         np.where(u < P_KEEP_END, DECISION_KEEP, DECISION_RANDOM))
    decisions = np.where(chosen, decisions, -1).astype(np.int8)
    out = np.array(input_ids, dtype=np.int32, copy=True)
    out[decisions == DECISION_MASK] = config.mask_token_id
    random_pos = decisions == DECISION_RANDOM
    out[random_pos] = rng.integers(0, config.vocab_size, size=int(random_pos.sum()))
    return _gather_predictions(input_ids, out, chosen, decisions, config,
                               cand.sum(axis=1).astype(np.int64))


def _choose_pieces(cand: np.ndarray, k: np.ndarray,
                   rng: np.random.Generator) -> "tuple[np.ndarray, np.ndarray]":
    """The first k candidates of a random order = the k smallest of uniform random keys."""
    keys = rng.random(cand.shape)
    keys[~cand] = 2.0  # non-candidates sort last
    # Sorting values is cheaper than argsort; keys are continuous, so ties have probability 0.
    kth = np.sort(keys, axis=1)[np.arange(cand.shape[0]), np.maximum(k, 1) - 1]
    chosen = cand & (keys <= kth[:, None])
    return chosen, np.where(chosen, 0, -1)


def choose_spans(unit: np.ndarray, num_units: np.ndarray, k: np.ndarray,
                 config: MaskingConfig,
                 rng: np.random.Generator) -> "tuple[np.ndarray, np.ndarray]":
    """Greedy choice of spans of units, visiting unit starts in random order (all rows at once).

    Returns:
        chosen bool [n, seq_len], and for each position the rank of the span that chose it
        (-1 if none); ranks index the per-span decision draws.
    """
    n, seq_len = unit.shape
    max_units = max(int(num_units.max(initial=0)), 1)
    rows = np.arange(n)
    # Pieces per unit, and their running sums: pieces(start, m) = cum[start + m] - cum[start].
    flat_unit = (rows[:, None] * (max_units + 1) + unit)[unit >= 0]
    size = np.bincount(flat_unit, minlength=n * (max_units + 1)).reshape(n, max_units + 1)
    cum = np.zeros((n, max_units + 1), dtype=np.int64)
    np.cumsum(size[:, :-1], axis=1, out=cum[:, 1:])
    keys = rng.random((n, max_units))
    keys[np.arange(max_units)[None, :] >= num_units[:, None]] = 2.0
    order = np.argsort(keys, axis=1, kind="stable")
    max_n = config.max_ngram_size
    if max_n > 1:
        span_len = rng.choice(np.arange(1, max_n + 1), size=(n, max_units),
                              p=ngram_probabilities(max_n))
    else:
        span_len = np.ones((n, max_units), dtype=np.int64)
    covered = np.zeros((n, max_units + 1), dtype=bool)
    span_of_unit = np.full((n, max_units + 1), -1, dtype=np.int64)
    count = np.zeros(n, dtype=np.int64)
    for r in range(max_units):
        active = (r < num_units) & (count < k)
        if not active.any():
            break
        start = order[:, r]
        avail = np.minimum(span_len[:, r], num_units - start)
        base = cum[rows, start]
        # Longest m <= avail whose pieces still fit (pieces grow with m, so fits is a prefix).
        m_sel = np.zeros(n, dtype=np.int64)
        for m in range(1, max_n + 1):
            end = np.minimum(start + m, max_units)
            m_sel += (m <= avail) & (count + cum[rows, end] - base <= k)
        overlap = np.zeros(n, dtype=bool)
        for m in range(max_n):
            overlap |= (m < m_sel) & covered[rows, np.minimum(start + m, max_units)]
        take = active & (m_sel > 0) & ~overlap
        for m in range(max_n):
            sel = take & (m < m_sel)
            covered[rows[sel], start[sel] + m] = True
            span_of_unit[rows[sel], start[sel] + m] = r
        count += np.where(take, cum[rows, np.minimum(start + m_sel, max_units)] - base, 0)
    span_of_pos = np.where(unit >= 0, np.take_along_axis(span_of_unit, np.maximum(unit, 0),
                                                         axis=1), -1)
    return span_of_pos >= 0, span_of_pos


def _gather_predictions(original: np.ndarray, masked: np.ndarray, chosen: np.ndarray,
                        decisions: np.ndarray, config: MaskingConfig,
                        num_candidates: np.ndarray) -> MaskedBatch:
    n, seq_len = original.shape
    p = config.max_predictions_per_seq
    num = chosen.sum(axis=1)
    slot = np.cumsum(chosen, axis=1) - 1  # rank of each chosen position within its row
    r, c = np.nonzero(chosen)  # row-major: positions come out sorted within each row
    positions = np.zeros((n, p), dtype=np.int32)
    label_ids = np.zeros((n, p), dtype=np.int32)
    weights = np.zeros((n, p), dtype=np.float32)
    s = slot[r, c]
    positions[r, s] = c
    label_ids[r, s] = original[r, c]
    weights[r, s] = 1.0
    return MaskedBatch(masked, positions, label_ids, weights, num.astype(np.int64), decisions,
                       num_candidates)
