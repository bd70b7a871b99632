"""BERT's WordPiece tokenizer in pure Python, exact to the original release.

Two paths give identical ids:

* The reference path (`BasicTokenizer` then `WordpieceTokenizer`, wrapped by
  `FullTokenizer.tokenize`) follows the original algorithm step by step: clean-up, spaces
  around CJK ideographs, whitespace split, lower-casing and accent stripping (uncased only),
  punctuation split, greedy longest-match-first WordPiece.
* The fast path (`FullTokenizer.encode` / `encode_batch`) relies on the whole pipeline being
  independent per chunk of text between *reference* whitespace characters (space, \\t, \\n,
  \\r and category Zs): it splits on exactly that set and memoizes chunk -> ids. Python's
  `str.split()` set is deliberately not used: it also splits on \\x1c-\\x1f and \\x85, which the
  reference deletes (so "a\\x1cb" is one word), and U+2028/U+2029 are left inside chunks for
  the reference code to handle.

This module does not import TensorFlow, so the data tools start fast.
"""

from __future__ import annotations

import collections
import re
import unicodedata
from typing import Callable, Dict, Iterable, List, Sequence, Union

import numpy as np

from bert_tf.core import fileio
from bert_tf.core.errors import UserError

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)
CONTINUATION_PREFIX = "##"
MAX_INPUT_CHARS_PER_WORD = 200

# Ranges of the "CJK Unified Ideographs" blocks (and compatibility blocks) that the reference
# surrounds with spaces, so that each ideograph becomes a word. Hangul, kana and CJK
# punctuation are deliberately not in the list.
CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)

# Reference whitespace: these become a space in the clean-up, i.e. word boundaries. All Zs
# characters are in the BMP; computed from `unicodedata` so it matches `_is_whitespace`.
_WHITESPACE_CHARS = "".join(
    sorted({" ", "\t", "\n", "\r"} | {chr(c) for c in range(0x10000)
                                       if unicodedata.category(chr(c)) == "Zs"})
)
_WHITESPACE_SPLIT = re.compile("[" + re.escape(_WHITESPACE_CHARS) + "]+")
# ASCII punctuation as the reference defines it (all of 33-47, 58-64, 91-96, 123-126, which
# includes symbols like $ + < = > ^ ` | ~), and the split of an ASCII word on it.
_ASCII_PUNCT_SPLIT = re.compile(r"[!-/:-@\[-`{-~]|[^!-/:-@\[-`{-~]+")
# ASCII control characters (Cc) that the clean-up deletes; \t \n \r never reach it because
# they are chunk separators.
_ASCII_CONTROL_DELETE = {c: None for c in list(range(32)) + [127]}

Text = Union[str, bytes]  # bytes are decoded as UTF-8, invalid bytes dropped.


def convert_to_unicode(text: Text) -> str:
    """Returns `text` as str; bytes are decoded as UTF-8, dropping invalid bytes."""
    if isinstance(text, str):
        return text
    if isinstance(text, (bytes, bytearray)):
        return bytes(text).decode("utf-8", "ignore")
    raise TypeError(f"expected str or bytes, got {type(text).__name__}")


def load_vocab(
    vocab_file: str, required_tokens: Iterable[str] = SPECIAL_TOKENS
) -> "collections.OrderedDict[str, int]":
    """Loads a WordPiece vocabulary: one token per line, the line number (from 0) is its id.

    Args:
        vocab_file: local path or remote (gs://) path of a UTF-8 text file.
        required_tokens: tokens that must be present (default: the five BERT specials).

    Returns:
        token -> id, in file order.

    Raises:
        UserError: the file is missing, not UTF-8, empty, has a duplicate token, or lacks one
            of `required_tokens`.
    """
    try:
        with fileio.open_file(vocab_file, "rb") as f:
            data = f.read()
    except Exception as e:  # OSError locally, tf.errors.NotFoundError for gs:// paths.
        if isinstance(e, FileNotFoundError) or "NotFound" in type(e).__name__:
            raise UserError(f"vocab file not found: {vocab_file}") from None
        raise UserError(f"cannot read vocab file {vocab_file}: {e}") from None
    try:
        text = data.decode("utf-8-sig")  # A leading BOM is not part of the first token.
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise UserError(f"vocab file {vocab_file} is not UTF-8 (line {line})") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # The newline that ends the last line does not start a new token.
    if not lines:
        raise UserError(f"vocab file {vocab_file} is empty")
    vocab: "collections.OrderedDict[str, int]" = collections.OrderedDict()
    for index, line in enumerate(lines):
        token = line.rstrip()
        if token in vocab:
            raise UserError(
                f"vocab file {vocab_file}: duplicate token {token!r} "
                f"at lines {vocab[token] + 1} and {index + 1}"
            )
        vocab[token] = index
    missing = [t for t in required_tokens if t not in vocab]
    if missing:
        raise UserError(f"vocab file {vocab_file} lacks special token(s) {' '.join(missing)}")
    return vocab


def continuation_mask(vocab: Dict[str, int]) -> np.ndarray:
    """A bool array [vocab_size]: True where the token is a `##` continuation piece.

    Whole-word masking on ids: a token id `i` starts a new word unless `mask[i]`; this is the
    reference's `token.startswith("##")` test, so special tokens start words.
    """
    mask = np.zeros(max(vocab.values()) + 1, dtype=bool)
    for token, index in vocab.items():
        if token.startswith(CONTINUATION_PREFIX):
            mask[index] = True
    return mask


def _is_whitespace(char: str) -> bool:
    if char in (" ", "\t", "\n", "\r"):
        return True
    return unicodedata.category(char) == "Zs"


def _is_control(char: str) -> bool:
    if char in ("\t", "\n", "\r"):
        return False  # Counted as whitespace.
    return unicodedata.category(char) in ("Cc", "Cf")


def is_punctuation(char: str) -> bool:
    """True for the characters the basic tokenizer splits off as punctuation: Unicode's P*
    categories, and every non-alphanumeric printable ASCII character (as the original, so
    that "$" or "^" split too)."""
    cp = ord(char)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def is_cjk(cp: int) -> bool:
    """True for a code point of the CJK ideograph blocks (`CJK_RANGES`), which the basic
    tokenizer surrounds with spaces."""
    return any(lo <= cp <= hi for lo, hi in CJK_RANGES)


class BasicTokenizer:
    """Clean-up, CJK spacing, whitespace and punctuation split, optional lower-casing."""

    def __init__(self, do_lower_case: bool = True):
        self.do_lower_case = do_lower_case

    def tokenize(self, text: Text) -> List[str]:
        """Splits `text` into words and punctuation marks (not yet WordPieces)."""
        text = self._tokenize_chinese_chars(self._clean_text(convert_to_unicode(text)))
        split_tokens: List[str] = []
        for token in text.split():
            if self.do_lower_case:
                token = self._strip_accents(token.lower())
            split_tokens.extend(self._split_on_punc(token))
        # Lower-casing and accent stripping never create whitespace, but the reference splits
        # once more; keep it for exactness.
        return " ".join(split_tokens).split()

    @staticmethod
    def _strip_accents(text: str) -> str:
        return "".join(c for c in unicodedata.normalize("NFD", text)
                       if unicodedata.category(c) != "Mn")

    @staticmethod
    def _split_on_punc(text: str) -> List[str]:
        output: List[List[str]] = []
        start_new_word = True
        for char in text:
            if is_punctuation(char):
                output.append([char])
                start_new_word = True
            else:
                if start_new_word:
                    output.append([])
                start_new_word = False
                output[-1].append(char)
        return ["".join(x) for x in output]

    @staticmethod
    def _tokenize_chinese_chars(text: str) -> str:
        output = []
        for char in text:
            if is_cjk(ord(char)):
                output.extend((" ", char, " "))
            else:
                output.append(char)
        return "".join(output)

    @staticmethod
    def _clean_text(text: str) -> str:
        output = []
        for char in text:
            cp = ord(char)
            if cp == 0 or cp == 0xFFFD or _is_control(char):
                continue
            output.append(" " if _is_whitespace(char) else char)
        return "".join(output)


class WordpieceTokenizer:
    """Greedy longest-match-first split of words into vocabulary pieces."""

    def __init__(self, vocab: Dict[str, int], unk_token: str = UNK,
                 max_input_chars_per_word: int = MAX_INPUT_CHARS_PER_WORD):
        self.vocab = vocab
        self.unk_token = unk_token
        self.max_input_chars_per_word = max_input_chars_per_word

    def tokenize(self, text: Text) -> List[str]:
        """Splits whitespace-separated words of `text` into pieces.

        A word longer than `max_input_chars_per_word` characters, or one that cannot be
        covered by vocabulary pieces, becomes a single `unk_token`.

        Example: "unaffable" -> ["un", "##aff", "##able"].
        """
        output: List[str] = []
        for token in convert_to_unicode(text).split():
            output.extend(self._word(token))
        return output

    def _word(self, word: str) -> List[str]:
        if len(word) > self.max_input_chars_per_word:
            return [self.unk_token]
        pieces = []
        start, n = 0, len(word)
        while start < n:
            end = n
            piece = None
            while start < end:
                candidate = word[start:end]
                if start > 0:
                    candidate = CONTINUATION_PREFIX + candidate
                if candidate in self.vocab:
                    piece = candidate
                    break
                end -= 1
            if piece is None:
                return [self.unk_token]
            pieces.append(piece)
            start = end
        return pieces


class FullTokenizer:
    """Basic tokenization followed by WordPiece, plus a fast memoized path to ids.

    Attributes:
        vocab: token -> id.
        inv_vocab: id -> token.
        is_continuation: bool array [vocab_size], True for `##` pieces (see
            `continuation_mask`); lets callers do whole-word masking on ids.
        unk_id: id of [UNK].
    """

    def __init__(self, vocab_file: str, do_lower_case: bool = True,
                 required_tokens: Iterable[str] = SPECIAL_TOKENS,
                 max_cache_entries: int = 500_000):
        """Loads `vocab_file` (see `load_vocab`).

        Args:
            vocab_file: the vocabulary, one token per line.
            do_lower_case: lower-case and strip accents (uncased models).
            required_tokens: tokens the vocabulary must contain; [UNK] is always required.
            max_cache_entries: the fast path's memo is cleared when it grows past this size.
        """
        required = list(required_tokens)
        if UNK not in required:
            required.append(UNK)
        self.vocab = load_vocab(vocab_file, required)
        self.inv_vocab = {v: k for k, v in self.vocab.items()}
        self.do_lower_case = do_lower_case
        self.basic_tokenizer = BasicTokenizer(do_lower_case=do_lower_case)
        self._chunk_splitter = CachedBasicTokenizer(do_lower_case)
        self.wordpiece_tokenizer = WordpieceTokenizer(vocab=self.vocab)
        self.is_continuation = continuation_mask(self.vocab)
        self.unk_id = self.vocab[UNK]
        self.max_cache_entries = max_cache_entries
        self._chunk_cache: Dict[str, List[int]] = {}
        self._word_cache: Dict[str, List[int]] = {}

    def __getstate__(self) -> dict:
        # Workers receive the tokenizer by pickling: send it without the memo.
        state = dict(self.__dict__)
        state["_chunk_cache"], state["_word_cache"] = {}, {}
        return state

    def tokenize(self, text: Text) -> List[str]:
        """The reference path: text -> WordPiece tokens."""
        split_tokens: List[str] = []
        for token in self.basic_tokenizer.tokenize(text):
            split_tokens.extend(self.wordpiece_tokenizer.tokenize(token))
        return split_tokens

    def convert_tokens_to_ids(self, tokens: Sequence[str]) -> List[int]:
        """Raises KeyError for a token not in the vocabulary, as the reference does."""
        return [self.vocab[t] for t in tokens]

    def convert_ids_to_tokens(self, ids: Sequence[int]) -> List[str]:
        return [self.inv_vocab[int(i)] for i in ids]

    def encode(self, text: Text) -> List[int]:
        """Same ids as `convert_tokens_to_ids(tokenize(text))`, much faster on real text."""
        if len(self._chunk_cache) > self.max_cache_entries:
            self._word_cache.clear()  # _map_chunks clears the chunk cache itself
        return _map_chunks(text, self._chunk_cache, self.max_cache_entries, self._encode_chunk)

    def encode_batch(self, texts: Iterable[Text]) -> List[List[int]]:
        """`encode` for each text. Returns one id list per text."""
        return [self.encode(t) for t in texts]

    def _encode_chunk(self, chunk: str) -> List[int]:
        """Ids of one chunk of text that holds no reference whitespace."""
        ids: List[int] = []
        word_cache = self._word_cache
        for word in self._chunk_splitter.chunk_words(chunk):
            hit = word_cache.get(word)
            if hit is None:
                hit = word_cache[word] = [
                    self.vocab[p] for p in self.wordpiece_tokenizer._word(word)]
            ids.extend(hit)
        return ids


def _map_chunks(text: Text, cache: Dict[str, list], max_entries: int,
                compute: Callable[[str], list]) -> list:
    """Concatenates `compute(chunk)` over the reference-whitespace chunks of `text`, memoized.

    The tokenizer's output is independent per chunk (see the module docstring), so a chunk's
    result is cached; the cache is emptied when it grows past `max_entries`.
    """
    if len(cache) > max_entries:
        cache.clear()
    out: list = []
    for chunk in _WHITESPACE_SPLIT.split(convert_to_unicode(text)):
        hit = cache.get(chunk)
        if hit is None:
            hit = cache[chunk] = compute(chunk)
        out.extend(hit)
    return out


class CachedBasicTokenizer:
    """`BasicTokenizer.tokenize` with the same output, memoized per whitespace-free chunk.

    For the data tools that split gigabytes of text into words (e.g. to learn a vocabulary).
    """

    def __init__(self, do_lower_case: bool = True, max_cache_entries: int = 500_000):
        self.do_lower_case = do_lower_case
        self.max_cache_entries = max_cache_entries
        self._basic = BasicTokenizer(do_lower_case)
        self._cache: Dict[str, List[str]] = {}

    def __getstate__(self) -> dict:
        return dict(self.__dict__, _cache={})

    def tokenize(self, text: Text) -> List[str]:
        """Words and punctuation marks of `text`, exactly as `BasicTokenizer.tokenize`."""
        return _map_chunks(text, self._cache, self.max_cache_entries, self.chunk_words)

    def chunk_words(self, chunk: str) -> List[str]:
        """Words of a chunk that holds no reference whitespace (not memoized)."""
        if chunk.isascii():
            # ASCII: the clean-up only deletes controls, NFD and Mn stripping are no-ops, and
            # punctuation is exactly the reference's ASCII ranges.
            chunk = chunk.translate(_ASCII_CONTROL_DELETE)
            if self.do_lower_case:
                chunk = chunk.lower()
            return _ASCII_PUNCT_SPLIT.findall(chunk)
        return self._basic.tokenize(chunk)

def is_word_start(ids: Sequence[int], is_continuation: np.ndarray) -> np.ndarray:
    """Bool array [len(ids)]: True where the token begins a whole word (not a `##` piece).

    Args:
        ids: token ids of one sequence.
        is_continuation: `FullTokenizer.is_continuation`.
    """
    return ~is_continuation[np.asarray(ids, dtype=np.int64)]


def vocab_list(vocab: Dict[str, int]) -> List[str]:
    """The tokens in id order (ids of `load_vocab` are line numbers, so they are dense)."""
    tokens = [""] * len(vocab)
    for token, index in vocab.items():
        tokens[index] = token
    return tokens
