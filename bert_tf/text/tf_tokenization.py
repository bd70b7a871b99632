"""BERT's WordPiece tokenizer in TensorFlow ops, for serving inside a SavedModel.

`TFBertTokenizer` gives the same ids as `bert_tf.core.tokenization.FullTokenizer`, using only graph
ops (RE2 regexes, ICU lower-casing and normalization, tensorflow_text's FastWordpiece), so it
runs in `tf.function`, on tf.data and inside an exported SavedModel without Python.

Why not `tensorflow_text.BertTokenizer(lower_case=True)`: its NFKC case folding differs from
the reference's `str.lower()` + NFD (e.g. '″' becomes two '′'; 64 of 17,541 corpus lines
differ), and RE2's `\\s` and `\\p{P}` are not the reference's whitespace and punctuation
sets. Here every character class (deleted controls, whitespace, punctuation, nonspacing
marks) is generated from Python's `unicodedata` when the tokenizer is built, exactly the
predicates the Python tokenizer uses, and written into the graph.

The pipeline, in the reference's order:
  1. drop invalid UTF-8 bytes (like `bytes.decode("utf-8", "ignore")`);
  2. delete U+0000, U+FFFD and Cc/Cf characters except \\t \\n \\r;
  3. map whitespace (\\t \\n \\r, Zs, and U+2028/U+2029 which `str.split()` splits on) to ' ';
  4. uncased only: `tf.strings.lower` (ICU full case mapping, context-sensitive final sigma
     like `str.lower()`), NFD, delete Mn;
  5. split on spaces, keep each punctuation mark and CJK ideograph as a word;
  6. words over `max_input_chars_per_word` characters -> [UNK]; FastWordpiece on the rest.

Known limit: ICU (in TensorFlow) and Python's `unicodedata` may be built on different Unicode
versions; the two paths can differ on characters assigned after the older of the two (Python
3.11 has Unicode 14), e.g. U+2C2F GLAGOLITIC CAPITAL LETTER CAUDATE CHI is not lower-cased
by TensorFlow 2.21. Text in scripts encoded before 2021 is unaffected.
"""

from __future__ import annotations

import functools
import unicodedata
from typing import Callable, Dict, List, Optional, Sequence

import tensorflow as tf
import tensorflow_text as tf_text

from bert_tf.core import tokenization
from bert_tf.core.errors import UserError

_SURROGATES = range(0xD800, 0xE000)


@functools.lru_cache(maxsize=1)
def _categories() -> List[str]:
    """Unicode general category of every code point, as Python sees it."""
    return [unicodedata.category(chr(c)) for c in range(0x110000)]


def _char_class(predicate: Callable[[int, str], bool]) -> str:
    """An RE2 character class matching exactly the code points where `predicate` holds.

    Args:
        predicate: f(code point, general category) -> bool.

    Returns:
        E.g. "[\\x{0}-\\x{8}\\x{b}...]"; surrogates (never in valid UTF-8) are left out.
    """
    cats = _categories()
    ranges = []
    start = None
    for cp in range(0x110001):
        inside = (cp < 0x110000 and cp not in _SURROGATES and predicate(cp, cats[cp]))
        if inside and start is None:
            start = cp
        elif not inside and start is not None:
            ranges.append(f"\\x{{{start:x}}}" if cp - 1 == start
                          else f"\\x{{{start:x}}}-\\x{{{cp - 1:x}}}")
            start = None
    return "[" + "".join(ranges) + "]"


@functools.lru_cache(maxsize=1)
def _patterns() -> Dict[str, str]:
    """RE2 classes for each step of the pipeline (built once per process, ~1 s)."""
    delete = _char_class(lambda cp, cat: cp in (0, 0xFFFD)
                         or (cat in ("Cc", "Cf") and cp not in (9, 10, 13)))
    # U+2028/U+2029 (Zl/Zp) survive the reference's clean-up but str.split() splits on them.
    space = _char_class(lambda cp, cat: cp in (9, 10, 13, 0x2028, 0x2029) or cat == "Zs")
    punct = _char_class(lambda cp, cat: 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96
                        or 123 <= cp <= 126 or cat.startswith("P"))
    cjk = "[" + "".join(f"\\x{{{lo:x}}}-\\x{{{hi:x}}}"
                        for lo, hi in tokenization.CJK_RANGES) + "]"
    mn = _char_class(lambda cp, cat: cat == "Mn")
    return {"delete": delete, "space": space, "punct": punct, "cjk": cjk, "mn": mn}


class TFBertTokenizer(tf.Module):
    """Text -> WordPiece ids in graph ops, identical to `FullTokenizer.encode`.

    Example:
        tok = TFBertTokenizer("vocab.txt", do_lower_case=True)
        ids = tok.tokenize(tf.constant(["Hello, world!"]))  # RaggedTensor int32 [1, (4)]

    Attributes:
        vocab_size: number of tokens in the vocabulary.
        cls_id, sep_id, pad_id, unk_id, mask_id: ids of the special tokens.
    """

    def __init__(self, vocab_file: str, do_lower_case: bool = True,
                 max_input_chars_per_word: int = tokenization.MAX_INPUT_CHARS_PER_WORD,
                 name: Optional[str] = None):
        """Builds the tokenizer.

        Args:
            vocab_file: WordPiece vocabulary, one token per line (validated by `load_vocab`).
            do_lower_case: lower-case and strip accents (uncased models).
            max_input_chars_per_word: longer words become [UNK] (counted in characters).
            name: module name.

        Raises:
            UserError: a bad vocabulary file (see `tokenization.load_vocab`).
        """
        super().__init__(name=name)
        vocab = tokenization.load_vocab(vocab_file)
        tokens = tokenization.vocab_list(vocab)
        if "" in tokens:
            raise UserError(f"vocab file {vocab_file} has an empty line "
                            f"(line {tokens.index('') + 1})")
        self.do_lower_case = do_lower_case
        self.max_input_chars_per_word = max_input_chars_per_word
        self.vocab_size = len(tokens)
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (
            vocab[t] for t in tokenization.SPECIAL_TOKENS)
        self._patterns = dict(_patterns())
        self._vocab_tokens = tf.constant(tokens)
        # The whole vocab is compiled into one model buffer (a constant in the graph), so a
        # SavedModel needs no asset file. A word of `max_input_chars_per_word` characters
        # has at most 4 bytes per character.
        self._wordpiece = tf_text.FastWordpieceTokenizer(
            vocab=tokens, suffix_indicator=tokenization.CONTINUATION_PREFIX,
            max_bytes_per_word=4 * max_input_chars_per_word, token_out_type=tf.int32,
            unknown_token=tokenization.UNK, no_pretokenization=True)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """Tokenizes a batch of texts.

        Args:
            texts: tf.string [batch], UTF-8 (invalid bytes are dropped).

        Returns:
            tf.RaggedTensor int32 [batch, (tokens)] of WordPiece ids.
        """
        words = self.split_words(texts)
        long_word = tf.strings.length(words.flat_values, unit="UTF8_CHAR") > (
            self.max_input_chars_per_word)
        # Brackets are punctuation, so no real word is "[UNK]": the sentinel maps to exactly
        # one [UNK] id through the vocabulary itself.
        flat = tf.where(long_word, tokenization.UNK, words.flat_values)
        pieces = self._wordpiece.tokenize(flat)  # [num_words, (pieces)]
        return words.with_flat_values(pieces).merge_dims(1, 2)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def split_words(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """The basic tokenizer: clean-up, optional lower-casing, whitespace/punctuation split.

        Args:
            texts: tf.string [batch].

        Returns:
            tf.RaggedTensor tf.string [batch, (words)], as `BasicTokenizer.tokenize`.
        """
        p = self._patterns
        texts = tf.strings.unicode_transcode(texts, "UTF-8", "UTF-8", errors="ignore")
        texts = tf.strings.regex_replace(texts, p["delete"], "")
        texts = tf.strings.regex_replace(texts, p["space"], " ")
        if self.do_lower_case:
            texts = tf.strings.lower(texts, encoding="utf-8")
            texts = tf_text.normalize_utf8(texts, "NFD")
            texts = tf.strings.regex_replace(texts, p["mn"], "")
        keep = f"{p['punct']}|{p['cjk']}"
        return tf_text.regex_split(texts, f" +|{keep}", keep)

    @tf.function(input_signature=[tf.RaggedTensorSpec([None, None], tf.int32)], autograph=False)
    def ids_to_tokens(self, ids: tf.RaggedTensor) -> tf.RaggedTensor:
        """Maps ids back to token strings: [batch, (tokens)] int32 -> tf.string."""
        return tf.ragged.map_flat_values(tf.gather, self._vocab_tokens, ids)

    def pack(self, segments: Sequence[tf.RaggedTensor], max_seq_length: int
             ) -> Dict[str, tf.Tensor]:
        """`pack_inputs` with this vocabulary's [CLS], [SEP] and [PAD] ids."""
        return pack_inputs(segments, max_seq_length, self.cls_id, self.sep_id, self.pad_id)


def pack_inputs(segments: Sequence[tf.RaggedTensor], max_seq_length: int, cls_id: int,
                sep_id: int, pad_id: int = 0) -> Dict[str, tf.Tensor]:
    """Packs one or two token segments into BERT inputs: [CLS] A [SEP] (B [SEP]).

    Truncation is longest-first, removing tokens from the end, with ties cut from B first,
    as the original `_truncate_seq_pair`; tensorflow_text's round-robin budget allocation
    gives exactly those lengths.

    Args:
        segments: 1 or 2 RaggedTensors of ids, each [batch, (tokens)].
        max_seq_length: output length, at least len(segments) + 1 + 1.
        cls_id, sep_id, pad_id: special token ids.

    Returns:
        {"input_ids", "input_mask", "segment_ids"}: int32 [batch, max_seq_length].

    Raises:
        UserError: not 1 or 2 segments, or max_seq_length too small.
    """
    if len(segments) not in (1, 2):
        raise UserError(f"pack_inputs takes 1 or 2 segments, got {len(segments)}")
    budget = max_seq_length - 1 - len(segments)  # [CLS] and one [SEP] per segment.
    if budget < len(segments):
        raise UserError(f"max_seq_length={max_seq_length} is too small for "
                        f"{len(segments)} segment(s)")
    segments = [tf.cast(s, tf.int32) for s in segments]
    trimmed = tf_text.RoundRobinTrimmer(max_seq_length=budget).trim(segments)
    ids, segment_ids = tf_text.combine_segments(
        trimmed, start_of_sequence_id=cls_id, end_of_segment_id=sep_id)
    input_ids, input_mask = tf_text.pad_model_inputs(ids, max_seq_length, pad_value=pad_id)
    segment_ids, _ = tf_text.pad_model_inputs(segment_ids, max_seq_length, pad_value=0)
    return {
        "input_ids": tf.cast(input_ids, tf.int32),
        "input_mask": tf.cast(input_mask, tf.int32),
        "segment_ids": tf.cast(segment_ids, tf.int32),
    }
