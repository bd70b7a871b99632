"""Dynamic masking: fresh masked-LM predictions for every epoch, from the same TFRecords.

The pretraining records carry one fixed mask per instance (the writer's `dupe_factor` copies
are the original's only source of variety). Dynamic masking (as in RoBERTa) draws new
positions and replacements each time a record is read, with the writer's own rules (stated
once in `bert_tf.core.masking_rules`: the count rule, the candidates, the 80/10/10 split):

- the original tokens are recovered first: `input_ids` with every masked position restored
  from `masked_lm_ids`, so the stored [MASK]/random replacements do not leak;
- the count is computed in float64 so it agrees with the writer's `round()` bit for bit;
- positions come out sorted, zero-padded, with weight 0 for the padding.

Everything is TF ops on a batch, for a `tf.data` map. Randomness comes only from the stateless
ops seeded by the caller's `seed` tensor, so a (seed, batch index) pair always gives the same
masks: runs are reproducible and resumable, and a record read in another epoch (another batch
index) gets a fresh mask. Evaluation wants the opposite (`remask_records`): one mask per
record, drawn from the record's own place in the input, the same at every evaluation and
whatever the batch size or the number of input pipelines.

Whole-word masking (`do_whole_word_mask`, e.g. `from_vocab_file(..., do_whole_word_mask=True)`)
follows the writer's default ("fixed") whole-word rules: a piece starting with "##" joins the
word of the candidate just before it (after [CLS]/[SEP] it starts a word of its own); words
are visited in random order and a word is taken only if all its pieces still fit the count,
else skipped (so whole words fill the count greedily, as the original does); the 80/10/10
decision is drawn once per word, so a word is [MASK]ed, kept or replaced by random ids in all
its pieces. N-gram spans (the writer's max_ngram_size > 1) are not drawn here.
"""

from __future__ import annotations

from typing import Dict

import tensorflow as tf

from bert_tf.core import masking_rules, schema
from bert_tf.core.errors import UserError
from bert_tf.core.masking_rules import KEEP_FRACTION, MASK_FRACTION, MaskingConfig

__all__ = ["MaskingConfig", "mask_tokens", "num_to_predict", "remask_batch",
           "remask_records", "restore_original_ids", "word_ids"]


def check_supported(config: MaskingConfig) -> None:
    """Dynamic masking draws single tokens, or whole words in the "fixed" mode, no spans.

    Raises:
        UserError: config asks for n-gram spans or the "original" whole-word mode.
    """
    if config.max_ngram_size != 1:
        raise UserError(f"--max_ngram_size={config.max_ngram_size} is not supported by "
                        "dynamic masking (n-gram spans are drawn only by "
                        "create_pretraining_data)")
    if config.do_whole_word_mask and config.whole_word_mask_mode != masking_rules.MODE_FIXED:
        raise UserError(f"--whole_word_mask_mode={config.whole_word_mask_mode!r} is not "
                        f"supported by dynamic masking (only "
                        f"{masking_rules.MODE_FIXED!r})")


def restore_original_ids(
    input_ids: tf.Tensor,
    masked_lm_positions: tf.Tensor,
    masked_lm_ids: tf.Tensor,
    masked_lm_weights: tf.Tensor,
) -> tf.Tensor:
    """Undoes the stored mask: puts the original tokens back at the masked positions.

    Args:
        input_ids: [batch, seq_len] int32, with [MASK]/random/kept tokens at masked positions.
        masked_lm_positions: [batch, max_pred] int32, zero-padded.
        masked_lm_ids: [batch, max_pred] int32, the original token at each position.
        masked_lm_weights: [batch, max_pred] float32, 1.0 for real predictions, 0.0 for padding.

    Returns:
        [batch, seq_len] int32: the unmasked token ids.
    """
    # Padding slots touch nothing (their position 0 is [CLS], which must keep its value).
    real = tf.cast(masked_lm_weights > 0, input_ids.dtype)  # [batch, max_pred]
    return _put(input_ids, masked_lm_positions, real, masked_lm_ids)


def _put(ids: tf.Tensor, positions: tf.Tensor, valid: tf.Tensor, values: tf.Tensor
         ) -> tf.Tensor:
    """`ids` [batch, seq_len] with `values` [batch, n] written at `positions` [batch, n].

    Only slots whose `valid` [batch, n] (0/1, ids' dtype) is 1 write; positions are distinct.
    """
    # [batch, n, seq_len]: one row per slot, all zero for invalid slots.
    hits = tf.one_hot(positions, tf.shape(ids)[1], dtype=ids.dtype) * valid[:, :, None]
    is_hit = tf.reduce_sum(hits, axis=1) > 0  # [batch, seq_len]
    return tf.where(is_hit, tf.reduce_sum(hits * values[:, :, None], axis=1), ids)


def num_to_predict(
    num_tokens: tf.Tensor, num_candidates: tf.Tensor, config: MaskingConfig
) -> tf.Tensor:
    """`masking_rules.num_to_predict` of every row, capped by the number of maskable tokens.

    Args:
        num_tokens: [batch] int32, the count the rule scales by `masked_lm_prob`.
        num_candidates: [batch] int32, tokens that may be masked.
        config: the masking settings.

    Returns:
        [batch] int32, in [0, max_predictions_per_seq].
    """
    # float64 and half-to-even rounding, like Python 3's round(len(tokens) * prob).
    prob = tf.constant(config.masked_lm_prob, tf.float64)
    scaled = tf.round(tf.cast(num_tokens, tf.float64) * prob)
    n = tf.minimum(
        tf.cast(config.max_predictions_per_seq, tf.int32),
        tf.maximum(1, tf.cast(scaled, tf.int32)),
    )
    return tf.minimum(n, num_candidates)


def mask_tokens(
    original_ids: tf.Tensor, input_mask: tf.Tensor, seed: tf.Tensor, config: MaskingConfig
) -> Dict[str, tf.Tensor]:
    """Draws a new mask for a batch of unmasked sequences.

    Args:
        original_ids: [batch, seq_len] int32, unmasked token ids.
        input_mask: [batch, seq_len] int32, 1 for real tokens, 0 for padding.
        seed: [2] int32/int64, the stateless seed of this batch.
        config: the masking settings; `max_predictions_per_seq` must be <= seq_len.

    Returns:
        The four masked features (v1 names): input_ids [batch, seq_len] int32,
        masked_lm_positions [batch, max_pred] int32 (sorted, zero-padded), masked_lm_ids
        [batch, max_pred] int32 (0 for padding), masked_lm_weights [batch, max_pred] float32.
    """
    check_supported(config)
    dtype = original_ids.dtype
    shape = tf.shape(original_ids)
    batch, seq_len = shape[0], shape[1]
    max_pred = config.max_predictions_per_seq
    seeds = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), num=3)

    is_real = tf.cast(input_mask, tf.bool)
    is_special = (
        tf.equal(original_ids, config.cls_token_id)
        | tf.equal(original_ids, config.sep_token_id)
        | tf.equal(original_ids, config.pad_token_id)
    )
    candidates = is_real & ~is_special  # [batch, seq_len]
    num_candidates = tf.reduce_sum(tf.cast(candidates, tf.int32), axis=1)
    if config.count_special_tokens:
        num_tokens = tf.reduce_sum(tf.cast(is_real, tf.int32), axis=1)
    else:
        num_tokens = num_candidates
    count = num_to_predict(num_tokens, num_candidates, config)  # [batch]
    if config.do_whole_word_mask:
        return _mask_words(original_ids, candidates, count, seeds, config)

    # A uniformly random subset of `count` candidates: the top `count` of iid uniform scores,
    # with non-candidates scored below every candidate.
    scores = tf.random.stateless_uniform([batch, seq_len], seed=seeds[0])
    scores = tf.where(candidates, scores, -1.0)
    _, ranked = tf.math.top_k(scores, k=max_pred)  # [batch, max_pred], best first
    slot = tf.range(max_pred)[None, :]
    valid = slot < count[:, None]  # [batch, max_pred]
    # Sort the chosen positions; unchosen slots sort last (key seq_len), then become 0.
    positions = tf.sort(tf.where(valid, ranked, seq_len), axis=1)
    positions = tf.where(valid, positions, 0)
    valid_int = tf.cast(valid, dtype)
    positions = tf.cast(positions, dtype)
    masked_lm_ids = tf.gather(original_ids, positions, batch_dims=1) * valid_int

    # 80% [MASK], 10% unchanged, 10% random id from the whole vocabulary.
    choice = tf.random.stateless_uniform([batch, max_pred], seed=seeds[1])
    random_ids = tf.random.stateless_uniform(
        [batch, max_pred], seed=seeds[2], minval=0, maxval=config.vocab_size, dtype=tf.int32
    )
    replacement = tf.where(
        choice < MASK_FRACTION,
        tf.cast(config.mask_token_id, dtype),
        tf.where(choice < MASK_FRACTION + KEEP_FRACTION, masked_lm_ids, tf.cast(random_ids, dtype)),
    )
    input_ids = _put(original_ids, positions, valid_int, replacement)
    return {
        schema.INPUT_IDS: input_ids,
        schema.MASKED_LM_POSITIONS: positions,
        schema.MASKED_LM_IDS: masked_lm_ids,
        schema.MASKED_LM_WEIGHTS: tf.cast(valid, tf.float32),
    }


def word_ids(original_ids: tf.Tensor, candidates: tf.Tensor, config: MaskingConfig
             ) -> tf.Tensor:
    """[batch, seq_len] int32: each candidate's word, numbered from 0 per row; -1 elsewhere.

    A "##" piece joins the word of the position before it when that is a candidate (so a
    "##" piece right after [CLS] or [SEP] starts a word).
    """
    table = tf.scatter_nd(tf.constant(config.continuation_ids, tf.int32)[:, None],
                          tf.ones([len(config.continuation_ids)], tf.bool),
                          [config.vocab_size])
    is_continuation = tf.gather(table, tf.clip_by_value(original_ids, 0, config.vocab_size - 1))
    previous = tf.pad(candidates[:, :-1], [[0, 0], [1, 0]])
    starts = candidates & ~(is_continuation & previous)
    word = tf.cumsum(tf.cast(starts, tf.int32), axis=1) - 1
    return tf.where(candidates, word, -1)


def _mask_words(original_ids: tf.Tensor, candidates: tf.Tensor, count: tf.Tensor,
                seeds: tf.Tensor, config: MaskingConfig) -> Dict[str, tf.Tensor]:
    """mask_tokens with whole words: see the module docstring."""
    dtype = original_ids.dtype
    shape = tf.shape(original_ids)
    batch, seq_len = shape[0], shape[1]
    max_pred = config.max_predictions_per_seq
    word = word_ids(original_ids, candidates, config)  # [batch, seq_len]
    num_words = tf.reduce_max(word, axis=1) + 1  # [batch]
    # Pieces per word [batch, seq_len] (a row has at most seq_len words).
    rows = tf.range(batch)[:, None] * seq_len
    segment = tf.where(candidates, rows + word, batch * seq_len)  # non-candidates: a dump
    sizes = tf.math.unsorted_segment_sum(tf.ones_like(word), segment, batch * seq_len + 1)
    sizes = tf.reshape(sizes[:-1], [batch, seq_len])

    # Words in a uniformly random order (non-words last), then greedily: a word is taken if
    # its pieces still fit the count, else skipped.
    scores = tf.random.stateless_uniform([batch, seq_len], seed=seeds[0])
    scores = tf.where(tf.range(seq_len)[None, :] < num_words[:, None], scores, -1.0)
    order = tf.argsort(scores, axis=1, direction="DESCENDING", stable=True)
    ordered_sizes = tf.gather(sizes, order, batch_dims=1)

    def visit(total, size):  # total, size: [batch]
        return total + tf.where(total + size <= count, size, 0)

    totals = tf.scan(visit, tf.transpose(ordered_sizes), initializer=tf.zeros([batch], tf.int32))
    before = tf.concat([tf.zeros([1, batch], tf.int32), totals[:-1]], axis=0)
    taken_in_order = tf.transpose(totals > before)  # [batch, seq_len], by rank
    taken = tf.gather(taken_in_order, tf.argsort(order, axis=1), batch_dims=1)  # by word
    word_safe = tf.maximum(word, 0)
    chosen = candidates & tf.gather(taken, word_safe, batch_dims=1)  # [batch, seq_len]

    positions_all = tf.where(chosen, tf.range(seq_len)[None, :], seq_len)
    positions = -tf.math.top_k(-positions_all, k=max_pred).values  # the smallest, sorted
    valid = positions < seq_len
    positions = tf.cast(tf.where(valid, positions, 0), dtype)
    valid_int = tf.cast(valid, dtype)
    masked_lm_ids = tf.gather(original_ids, positions, batch_dims=1) * valid_int

    # One 80/10/10 decision per word; random replacements drawn per piece.
    choice = tf.gather(tf.random.stateless_uniform([batch, seq_len], seed=seeds[1]),
                       word_safe, batch_dims=1)
    random_ids = tf.random.stateless_uniform(
        [batch, seq_len], seed=seeds[2], minval=0, maxval=config.vocab_size, dtype=tf.int32)
    replaced = tf.where(
        choice < MASK_FRACTION,
        tf.cast(config.mask_token_id, dtype),
        tf.where(choice < MASK_FRACTION + KEEP_FRACTION, original_ids,
                 tf.cast(random_ids, dtype)))
    return {
        schema.INPUT_IDS: tf.where(chosen, replaced, original_ids),
        schema.MASKED_LM_POSITIONS: positions,
        schema.MASKED_LM_IDS: masked_lm_ids,
        schema.MASKED_LM_WEIGHTS: tf.cast(valid, tf.float32),
    }


def remask_batch(
    features: Dict[str, tf.Tensor], seed: tf.Tensor, config: MaskingConfig
) -> Dict[str, tf.Tensor]:
    """Replaces a batch's stored mask by a fresh one.

    Args:
        features: a parsed batch with v1 names and int32/float32 dtypes; input_ids,
            input_mask [batch, seq_len]; masked_lm_* [batch, max_pred].
        seed: [2] int, the stateless seed for this batch (e.g. the run seed folded with the
            batch index).
        config: the masking settings.

    Returns:
        A new dict: the same features, with input_ids and masked_lm_* replaced.
    """
    original = restore_original_ids(
        features[schema.INPUT_IDS],
        features[schema.MASKED_LM_POSITIONS],
        features[schema.MASKED_LM_IDS],
        features[schema.MASKED_LM_WEIGHTS],
    )
    out = dict(features)
    out.update(mask_tokens(original, features[schema.INPUT_MASK], seed, config))
    return out


def remask_records(
    features: Dict[str, tf.Tensor], seed: int, file_index: tf.Tensor, record_index: tf.Tensor,
    config: MaskingConfig
) -> Dict[str, tf.Tensor]:
    """`remask_batch` with one seed per record, for evaluation.

    Each record is masked as a batch of one, seeded by (seed, its file, its record number),
    so its mask does not depend on the batch it is in: every evaluation of a run, and of
    another run with another batch size or replica count, scores the same masks.

    Args:
        features: a parsed batch, as for `remask_batch`.
        seed: the eval masking seed.
        file_index: [batch] int, each record's file (its index in the input's file list).
        record_index: [batch] int, each record's number in its file.
        config: the masking settings.

    Returns:
        A new dict: the same features, with input_ids and masked_lm_* replaced.
    """
    base = tf.constant([seed, 0], tf.int64)

    def one(args):
        row, file, record = args
        row_seed = tf.random.experimental.stateless_fold_in(
            tf.random.experimental.stateless_fold_in(base, tf.cast(file, tf.int64)),
            tf.cast(record, tf.int64))
        out = remask_batch({k: v[None] for k, v in row.items()}, row_seed, config)
        return {k: v[0] for k, v in out.items()}

    signature = {k: tf.TensorSpec(v.shape[1:], v.dtype) for k, v in features.items()}
    return tf.map_fn(one, (dict(features), file_index, record_index),
                     fn_output_signature=signature)
