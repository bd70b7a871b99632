"""What an extended vocabulary does to a corpus: tokens per word and [UNK] rate before and
after, and the words that gain most (`python -m data_tools.extend_vocab`'s report).

Measured on the corpus's word counts: a word is a word of the tokenizer's basic split
(punctuation marks are words of their own), split into pieces by
`tokenization.WordpieceTokenizer`, so the figures are those `FullTokenizer` gives on the text.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Dict, List, Mapping, Sequence, Tuple

from bert_tf.core import tokenization

TOP_WORDS = 20


@dataclasses.dataclass(frozen=True)
class CorpusCost:
    """Tokens that one vocabulary gives a corpus.

    Attributes:
        words: words counted (occurrences, not distinct words).
        tokens: WordPiece tokens in all.
        unk_words: words that became [UNK] (one token each).
    """

    words: int
    tokens: int
    unk_words: int

    @property
    def tokens_per_word(self) -> float:
        return self.tokens / max(self.words, 1)

    @property
    def unk_rate(self) -> float:
        """The share of words that became [UNK]."""
        return self.unk_words / max(self.words, 1)


@dataclasses.dataclass(frozen=True)
class WordGain:
    """A word whose split got shorter: its count and its pieces before and after."""

    word: str
    count: int
    before: Tuple[str, ...]
    after: Tuple[str, ...]

    @property
    def tokens_saved(self) -> int:
        return self.count * (len(self.before) - len(self.after))


@dataclasses.dataclass(frozen=True)
class Comparison:
    """The corpus under the base and the extended vocabulary."""

    before: CorpusCost
    after: CorpusCost
    top_words: Tuple[WordGain, ...]

    @property
    def reduction(self) -> float:
        """Relative drop in tokens per word (0.1 = 10 % fewer tokens)."""
        return 1 - self.after.tokens / max(self.before.tokens, 1)


def compare(counts: Mapping[str, int], base: Mapping[str, int],
            extended: Mapping[str, int], top: int = TOP_WORDS) -> Comparison:
    """Tokenizes every counted word with both vocabularies.

    Args:
        counts: word -> occurrences.
        base: the base vocabulary, token -> id.
        extended: the extended vocabulary, token -> id.
        top: how many of the words that save most tokens to keep (ties by word).
    """
    old = tokenization.WordpieceTokenizer(base)
    new = tokenization.WordpieceTokenizer(extended)
    words, tokens, unk = [0, 0], [0, 0], [0, 0]
    gains: List[WordGain] = []
    for word in sorted(counts):
        n = int(counts[word])
        splits = (old.tokenize(word), new.tokenize(word))
        for i, pieces in enumerate(splits):
            words[i] += n
            tokens[i] += n * len(pieces)
            if pieces == [tokenization.UNK]:
                unk[i] += n
        if len(splits[1]) < len(splits[0]):
            gains.append(WordGain(word, n, tuple(splits[0]), tuple(splits[1])))
    gains.sort(key=lambda g: (-g.tokens_saved, g.word))
    return Comparison(CorpusCost(words[0], tokens[0], unk[0]),
                      CorpusCost(words[1], tokens[1], unk[1]), tuple(gains[:top]))


def summary_lines(comparison: Comparison, report_file: str) -> List[str]:
    """The report as console lines (after the job's summary line)."""
    b, a = comparison.before, comparison.after
    lines = [f"tokens per word {b.tokens_per_word:.4f} -> {a.tokens_per_word:.4f} "
             f"({-100 * comparison.reduction:+.1f} %), [UNK] rate {100 * b.unk_rate:.4f} % "
             f"-> {100 * a.unk_rate:.4f} % (of {b.words} words)"]
    if comparison.top_words:
        lines.append(f"the {len(comparison.top_words)} words that gain most "
                     "(tokens saved = count x pieces saved):")
    for g in comparison.top_words:
        lines.append(f"  {g.word}: {g.count} x, {' '.join(g.before)} -> {' '.join(g.after)}"
                     f" ({g.tokens_saved} saved)")
    lines.append(f"report: {report_file}")
    return lines


def report_json(comparison: Comparison, new_tokens: Sequence[Tuple[str, int, int]],
                facts: Dict[str, object]) -> str:
    """The report as JSON text (sorted keys, no timings: the same bytes for the same input).

    Args:
        comparison: see `compare`.
        new_tokens: (token, id, tokens saved when it was added) in the order chosen.
        facts: further top-level entries (paths, mode, sizes).
    """
    def cost(c: CorpusCost) -> Dict[str, object]:
        return {"words": c.words, "tokens": c.tokens, "unk_words": c.unk_words,
                "tokens_per_word": c.tokens_per_word, "unk_rate": c.unk_rate}

    data = dict(facts)
    data.update({
        "before": cost(comparison.before), "after": cost(comparison.after),
        "tokens_per_word_reduction": comparison.reduction,
        "new_tokens": [{"token": t, "id": i, "tokens_saved": s} for t, i, s in new_tokens],
        "top_words": [{"word": g.word, "count": g.count, "before": list(g.before),
                       "after": list(g.after), "tokens_saved": g.tokens_saved}
                      for g in comparison.top_words],
    })
    return json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
