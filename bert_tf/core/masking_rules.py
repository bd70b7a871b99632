"""The masked-LM rules, stated once: the settings, the count rule and the 80/10/10 split.

Two implementations apply them: `data_tools.masking` (NumPy, the static masks the TFRecord
writer stores) and `bert_tf.data.dynamic_masking` (TF ops, fresh masks every epoch). Both
read their settings from the one `MaskingConfig` here and their constants from this module.

The rules (those of the original `create_pretraining_data.py`):

- Count: an instance of `num_tokens` tokens gets
  `min(max_predictions_per_seq, max(1, round(num_tokens * masked_lm_prob)))` predictions
  (`num_to_predict`), where `round` is Python 3's, half to even (30 * 0.15 = 4.5 -> 4,
  50 * 0.15 = 7.5 -> 8), on the float64 product. `num_tokens` counts every real token,
  [CLS] and [SEP] included (`count_special_tokens=False` counts only the maskable ones).
  Never more predictions are made than there are maskable tokens.
- Candidates: every real token but [CLS], [SEP] and [PAD].
- Replacement: each chosen token (each chosen span in the "fixed" whole-word mode) becomes
  [MASK] with probability `MASK_FRACTION` (0.8), stays unchanged with `KEEP_FRACTION` (0.1),
  and becomes a uniformly random id in [0, vocab_size) otherwise (0.1). On one uniform draw
  u: u < 0.8 masks, 0.8 <= u < 0.9 keeps, u >= 0.9 replaces.
- Whole words (`do_whole_word_mask`): a "##" piece (`continuation_ids`) joins the word
  before it. Mode `MODE_FIXED` draws the 80/10/10 decision once per word; `MODE_ORIGINAL`
  once per piece, as the original did.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Tuple

from bert_tf.core import tokenization
from bert_tf.core.errors import UserError

MODE_FIXED = "fixed"
MODE_ORIGINAL = "original"
MODES = (MODE_FIXED, MODE_ORIGINAL)
MAX_NGRAM_SIZE = 16

# The replacement split: [MASK], unchanged, and (the rest) a random id.
MASK_FRACTION = 0.8
KEEP_FRACTION = 0.1


@dataclasses.dataclass(frozen=True)
class MaskingConfig:
    """Masked-LM settings, checked when built (one-line `UserError`s named after the flags).

    Attributes:
        vocab_size: random replacements are drawn from ids [0, vocab_size).
        max_predictions_per_seq: at most this many predictions per instance (the length of
            the masked_lm_* features).
        masked_lm_prob: fraction of the tokens to predict, in (0, 1] (0.15 in BERT).
        mask_token_id, cls_token_id, sep_token_id, pad_token_id: the special ids (defaults:
            Google's uncased vocab, 103, 101, 102, 0; `from_vocab` reads them from any).
        count_special_tokens: True (the original's rule) counts every real token, [CLS] and
            [SEP] included, in `num_tokens` of the count rule; False counts only the tokens
            that can be masked.
        do_whole_word_mask: mask whole words; needs `continuation_ids`.
        continuation_ids: sorted ids of the vocabulary's "##" pieces (whole words only).
        whole_word_mask_mode: `MODE_FIXED` (one decision per span) or `MODE_ORIGINAL` (per
            piece).
        max_ngram_size: spans of up to this many units (1 = single units).
    """

    vocab_size: int
    max_predictions_per_seq: int
    masked_lm_prob: float = 0.15
    mask_token_id: int = 103
    cls_token_id: int = 101
    sep_token_id: int = 102
    pad_token_id: int = 0
    count_special_tokens: bool = True
    do_whole_word_mask: bool = False
    continuation_ids: Tuple[int, ...] = ()
    whole_word_mask_mode: str = MODE_FIXED
    max_ngram_size: int = 1

    def __post_init__(self) -> None:
        if self.vocab_size <= 0:
            raise UserError(f"vocab_size={self.vocab_size}: must be > 0 (the --vocab_file "
                            "is empty?)")
        if self.max_predictions_per_seq <= 0:
            raise UserError(f"--max_predictions_per_seq={self.max_predictions_per_seq}: must "
                            "be > 0")
        if not 0.0 < self.masked_lm_prob <= 1.0:
            raise UserError(f"--masked_lm_prob={self.masked_lm_prob}: must be in (0, 1]")
        for name in ("mask_token_id", "cls_token_id", "sep_token_id", "pad_token_id"):
            value = getattr(self, name)
            if not 0 <= value < self.vocab_size:
                raise UserError(f"{name}={value} is outside the vocabulary [0, "
                                f"{self.vocab_size})")
        if self.whole_word_mask_mode not in MODES:
            raise UserError(f"--whole_word_mask_mode={self.whole_word_mask_mode!r}: expected "
                            f"one of {', '.join(MODES)}")
        if not 1 <= self.max_ngram_size <= MAX_NGRAM_SIZE:
            raise UserError(f"--max_ngram_size={self.max_ngram_size}: must be in [1, "
                            f"{MAX_NGRAM_SIZE}]")
        if self.do_whole_word_mask and not self.continuation_ids:
            raise UserError("--do_whole_word_mask needs the vocabulary's '##' pieces "
                            "(continuation_ids is empty)")
        if self.continuation_ids and not self.do_whole_word_mask:
            raise UserError("continuation_ids are used only with --do_whole_word_mask")
        if self.continuation_ids and not (0 <= min(self.continuation_ids)
                                          and max(self.continuation_ids) < self.vocab_size):
            raise UserError(f"continuation_ids must be in [0, {self.vocab_size})")

    @classmethod
    def from_vocab(cls, vocab: Mapping[str, int], max_predictions_per_seq: int,
                   masked_lm_prob: float = 0.15, do_whole_word_mask: bool = False,
                   vocab_name: str = "the vocabulary", **kwargs) -> "MaskingConfig":
        """The settings for a WordPiece vocabulary (token -> id, ids 0..len-1).

        Its size is the range of random replacements (the original drew them from the
        vocab), the special ids are its own, and with `do_whole_word_mask` its "##" pieces
        are the continuation ids.

        Args:
            vocab: token -> id, with [PAD], [CLS], [SEP] and [MASK].
            max_predictions_per_seq, masked_lm_prob, do_whole_word_mask: as the fields.
            vocab_name: names the vocabulary in errors (e.g. its file).
            **kwargs: other fields (whole_word_mask_mode, max_ngram_size, ...).

        Raises:
            UserError: do_whole_word_mask with a vocabulary without "##" pieces, or a bad
                setting.
        """
        continuation: Tuple[int, ...] = ()
        if do_whole_word_mask:
            continuation = tuple(sorted(i for t, i in vocab.items()
                                        if t.startswith(tokenization.CONTINUATION_PREFIX)))
            if not continuation:
                raise UserError(f"whole-word masking needs the vocabulary's '##' pieces, but "
                                f"{vocab_name} has none")
        return cls(vocab_size=len(vocab), max_predictions_per_seq=max_predictions_per_seq,
                   masked_lm_prob=masked_lm_prob, mask_token_id=vocab[tokenization.MASK],
                   cls_token_id=vocab[tokenization.CLS], sep_token_id=vocab[tokenization.SEP],
                   pad_token_id=vocab[tokenization.PAD], do_whole_word_mask=do_whole_word_mask,
                   continuation_ids=continuation, **kwargs)

    @classmethod
    def from_vocab_file(cls, vocab_file: str, max_predictions_per_seq: int,
                        masked_lm_prob: float = 0.15, do_whole_word_mask: bool = False,
                        **kwargs) -> "MaskingConfig":
        """`from_vocab` of a vocabulary file (one token per line, the line number its id).

        Raises:
            UserError: the file is unreadable or lacks [PAD], [UNK], [CLS], [SEP] or [MASK],
                or as `from_vocab`.
        """
        return cls.from_vocab(tokenization.load_vocab(vocab_file), max_predictions_per_seq,
                              masked_lm_prob, do_whole_word_mask, vocab_name=vocab_file,
                              **kwargs)


def num_to_predict(num_tokens: int, config: MaskingConfig) -> int:
    """The count rule for one instance (the reference the NumPy and TF versions follow).

    Args:
        num_tokens: the tokens the rule scales (see `count_special_tokens`).
        config: the masking settings.

    Returns:
        min(max_predictions_per_seq, max(1, round(num_tokens * masked_lm_prob))), with
        Python's round (half to even). Callers also cap it by the maskable tokens.
    """
    return min(config.max_predictions_per_seq,
               max(1, round(num_tokens * config.masked_lm_prob)))
