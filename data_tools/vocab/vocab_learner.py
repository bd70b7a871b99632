"""Learns a WordPiece vocabulary with Hugging Face `tokenizers`, laid out like Google's files.

Why this learner (`benchmarks/data/bench_tokenization.py --learners`; the figures are in
docs/results/data-jobs.md): tensorflow_text's `bert_vocab_from_dataset` is a pure-Python
learner many times slower, and its size is only a bound (found by a threshold search), so it
returns fewer tokens than asked; at equal size the two give about as many pieces per word.
That does not pay for the slower learner with an inexact size, so `tokenizers`'
WordPieceTrainer (Rust, already a dependency of keras-hub; via `learn_vocab`) learns.

Words are produced by `bert_tf.core.tokenization.CachedBasicTokenizer`, i.e. exactly the clean-up,
lower-casing, accent stripping and punctuation/CJK split that `FullTokenizer` applies before
WordPiece, and handed to the trainer separated by single spaces (a word never contains a
Unicode White_Space character after that split), so the learned pieces are the ones the
tokenizer will look up.

Layout of the result (as Google's released vocabularies):
    [PAD]                           id 0
    [unused0] .. [unused{K-1}]      ids 1..K        (K = num_unused, 99 by default)
    [UNK] [CLS] [SEP] [MASK]        ids K+1..K+4    (100..103 by default)
    the alphabet: every character c, and "##c" unless c is punctuation or a CJK ideograph
        (those are always words on their own), so no kept character ever becomes [UNK]
    the learned pieces, in the trainer's order (words with a character outside the alphabet
        are not learned from: the tokenizer maps them to [UNK] anyway)
    [unused{K}] ...                 only if the corpus supports fewer pieces than asked
"""

from __future__ import annotations

import collections
import dataclasses
from collections import Counter
from typing import Iterable, Iterator, List, Optional, Tuple

from bert_tf.core import tokenization
from bert_tf.core.errors import UserError
from data_tools.vocab import word_counting


@dataclasses.dataclass(frozen=True)
class VocabConfig:
    """How to learn the vocabulary.

    Attributes:
        vocab_size: exact number of tokens (lines) in the result.
        do_lower_case: learn on lower-cased, accent-stripped text (uncased models).
        min_frequency: a pair of pieces seen fewer times is never merged.
        num_unused: number of [unusedN] placeholders before [UNK].
        limit_alphabet: keep at most this many characters (the most frequent); None = all.
    """

    vocab_size: int
    do_lower_case: bool = True
    min_frequency: int = 2
    num_unused: int = 99
    limit_alphabet: Optional[int] = 1000


@dataclasses.dataclass
class LearnStats:
    """What the learner saw and produced."""

    lines: int = 0          # Non-blank input lines.
    words: int = 0          # Words after basic tokenization.
    alphabet: int = 0       # Characters kept in the alphabet.
    learned: int = 0        # Tokens after the special ones (alphabet included).
    padding: int = 0        # Extra [unusedN] appended because the corpus ran out of pieces.


def special_tokens(num_unused: int) -> List[str]:
    """[PAD], [unused0..num_unused-1], [UNK], [CLS], [SEP], [MASK]."""
    return ([tokenization.PAD] + [f"[unused{i}]" for i in range(num_unused)]
            + [tokenization.UNK, tokenization.CLS, tokenization.SEP, tokenization.MASK])


def check_config(config: VocabConfig) -> None:
    """Raises UserError for settings that cannot give a vocabulary."""
    fixed = len(special_tokens(max(config.num_unused, 0)))
    if config.num_unused < 0:
        raise UserError(f"--num_unused={config.num_unused} must be >= 0")
    if config.min_frequency < 1:
        raise UserError(f"--min_frequency={config.min_frequency} must be >= 1")
    if config.limit_alphabet is not None and config.limit_alphabet < 1:
        raise UserError(f"--limit_alphabet={config.limit_alphabet} must be >= 1 (0 = no limit)")
    if config.vocab_size <= fixed:
        raise UserError(f"--vocab_size={config.vocab_size} is too small: the {fixed} special "
                        f"and unused tokens leave no room for learned pieces")


def _needs_continuation(char: str) -> bool:
    """False for characters that the basic tokenizer always splits off as a word."""
    return not (tokenization.is_punctuation(char) or tokenization.is_cjk(ord(char)))


def count_words(lines: Iterable[str], do_lower_case: bool, stats: LearnStats) -> Counter:
    """Streams `lines` through the tokenizer's basic split and counts the words."""
    splitter = tokenization.CachedBasicTokenizer(do_lower_case)
    counts: Counter = collections.Counter()
    for line in lines:
        words = splitter.tokenize(line)
        if words:
            stats.lines += 1
            stats.words += len(words)
            counts.update(words)
    return counts


def choose_alphabet(chars: Counter, limit: Optional[int]) -> List[str]:
    """The `limit` most frequent characters (ties by code point), sorted by code point.

    Args:
        chars: character -> occurrences within words (`word_counting.char_counts`).
        limit: how many to keep; None keeps all.
    """
    ranked = sorted(chars.items(), key=lambda kv: (-kv[1], kv[0]))
    if limit is not None:
        ranked = ranked[:limit]
    return sorted(c for c, _ in ranked)


def _repeated(counts: Counter, alphabet: set, per_line: int = 1024) -> Iterator[str]:
    """Feeds the trainer each word as often as it was seen, in lines of <= per_line words.

    Words with a character outside the alphabet are left out: the tokenizer maps them to
    [UNK] whatever the vocabulary, so their pieces would be wasted entries. A frequent
    word's full line is built once and yielded again (the same text, without a join per
    line: the trainer reads as many lines as the corpus has words / per_line).
    """
    for word in sorted(counts):
        if not alphabet.issuperset(word):
            continue
        full, rest = divmod(counts[word], per_line)
        if full:
            line = " ".join([word] * per_line)
            for _ in range(full):
                yield line
        if rest:
            yield " ".join([word] * rest)


def learn_vocab(lines: Iterable[str], config: VocabConfig) -> Tuple[List[str], LearnStats]:
    """Learns a vocabulary from text lines, counted in this process (see `learn_from_counts`).

    Args:
        lines: the corpus as text lines (consumed once; blank lines are skipped).
        config: see `VocabConfig`.

    Returns:
        (tokens, stats): exactly `config.vocab_size` tokens in id order, and `LearnStats`.

    Raises:
        UserError: bad config, no text, or vocab_size too small for the alphabet.
    """
    check_config(config)
    stats = LearnStats()
    counts = count_words(lines, config.do_lower_case, stats)
    return learn_from_counts(counts, word_counting.char_counts(counts), stats, config)


def learn_from_counts(counts: Counter, chars: Counter, stats: LearnStats,
                      config: VocabConfig) -> Tuple[List[str], LearnStats]:
    """Learns a vocabulary from word counts.

    The result is deterministic: the alphabet is chosen here (ties broken by code point),
    and every alphabet piece enters the trainer with a fixed id, because `tokenizers`
    numbers the "##c" pieces it creates in hash-map order, which changes its tie-breaking
    (and the learned pieces) from run to run.

    Args:
        counts: word -> occurrences (the words the trainer learns from).
        chars: character -> occurrences within all the words counted (the alphabet's
            source; it may include words left out of `counts`).
        stats: `lines` and `words` of the corpus, filled in further here.
        config: see `VocabConfig`.

    Returns:
        (tokens, stats): exactly `config.vocab_size` tokens in id order, and `LearnStats`.

    Raises:
        UserError: bad config, no text, or vocab_size too small for the alphabet.
    """
    from tokenizers import Tokenizer, pre_tokenizers, trainers
    from tokenizers.models import WordPiece

    check_config(config)
    fixed = special_tokens(config.num_unused)
    budget = config.vocab_size - len(fixed)
    if stats.words == 0:
        raise UserError("the input has no text (every line is blank or only control "
                        "characters)")
    alphabet = choose_alphabet(chars, config.limit_alphabet)
    prefix = tokenization.CONTINUATION_PREFIX
    required = alphabet + [prefix + c for c in alphabet if _needs_continuation(c)]
    if len(required) > budget:
        raise UserError(
            f"--vocab_size={config.vocab_size} is too small: {len(fixed)} special tokens and "
            f"{len(required)} alphabet pieces ({len(alphabet)} characters, with and without "
            f"##) need {len(fixed) + len(required)}; raise --vocab_size or lower "
            f"--limit_alphabet")

    tokenizer = Tokenizer(WordPiece(unk_token=tokenization.UNK))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.WordPieceTrainer(
        vocab_size=budget, min_frequency=config.min_frequency, show_progress=False,
        special_tokens=required, continuing_subword_prefix=prefix)
    tokenizer.train_from_iterator(_repeated(counts, set(alphabet)), trainer)
    del counts

    learned = [t for t, _ in sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])]
    if learned[:len(required)] != required:
        raise AssertionError("tokenizers did not keep the alphabet pieces first")
    pieces = learned[:budget]
    stats.alphabet = len(alphabet)
    stats.learned = len(pieces)
    stats.padding = budget - len(pieces)
    pieces += [f"[unused{config.num_unused + i}]" for i in range(stats.padding)]
    tokens = fixed + pieces
    if len(tokens) != config.vocab_size or len(set(tokens)) != len(tokens):
        raise AssertionError("vocabulary layout is inconsistent")
    return tokens, stats
