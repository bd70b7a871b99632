"""Chooses the WordPieces a domain corpus needs and a base vocabulary lacks
(`python -m data_tools.extend_vocab`).

Candidates. A WordPiece vocabulary is learned on the domain's word counts with the trainer of
`build_vocab` (`vocab_learner.learn_from_counts`); its pieces that the base vocabulary lacks,
whole words and `##` pieces alike, are the candidates. The trainer proposes pieces that are
frequent in the domain, but it learns them for a vocabulary of its own: whether a piece helps
the base vocabulary depends on how the base tokenizer would use it, so candidates are ranked
by what they do there.

Ranking. A word's cost is the number of pieces that `tokenization.WordpieceTokenizer` (greedy
longest-match-first, as `FullTokenizer`) splits it into with the current vocabulary; a word
that becomes [UNK] costs one more than its characters (worse than the worst real split, one
piece per character), so that a piece that removes an [UNK] counts as a saving and one that
causes an [UNK] (greedy matching does not backtrack) as a loss. A candidate's saving is the
drop in the corpus's total cost (each word weighted by its count) if it alone were added.
The greedy loop adds the candidate with the largest saving (ties: the smaller string), then
the next one given those already added, and so on: exactly, not with stale estimates,
because savings are not submodular under greedy matching (a new stem can make a `##` suffix
worth more than before). That is affordable because a piece can only change the split of a
word in which it occurs (a whole-word piece as a prefix, a `##` piece after the first
character), so each word keeps its own saving for each candidate it contains, and adding a
piece recomputes those of the words that contain it and nothing else. Words of one piece
never gain (they are looked up whole first), so they are left out.

Everything is a function of the word counts and the base vocabulary, with every order fixed
(words and candidates sorted, ties broken by string), so the choice does not depend on the
number of counting workers.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections import Counter
from typing import Dict, List, Mapping, Optional, Sequence

from bert_tf.core import tokenization
from data_tools.vocab import vocab_learner

PREFIX = tokenization.CONTINUATION_PREFIX


def is_placeholder(token: str) -> bool:
    """True for `[unusedN]` slots."""
    return (token.startswith("[unused") and token.endswith("]")
            and token[len("[unused"):-1].isdigit())


def word_cost(pieces: Sequence[str], word: str) -> int:
    """The ranking's cost of a word split into `pieces`: their number, or len(word) + 1 when
    the split is [UNK] (see the module docstring)."""
    if len(pieces) == 1 and pieces[0] == tokenization.UNK and word != tokenization.UNK:
        return len(word) + 1
    return len(pieces)


def candidate_pieces(counts: Counter, chars: Counter, stats: vocab_learner.LearnStats,
                     base: Mapping[str, int], config: vocab_learner.VocabConfig) -> List[str]:
    """The pieces a vocabulary learned on the domain holds and `base` lacks, in learned order.

    Args:
        counts: word -> occurrences in the domain corpus.
        chars: character -> occurrences within the words (`word_counting.char_counts`).
        stats: the corpus's `lines` and `words` (the learner fills in the rest).
        base: the base vocabulary, token -> id.
        config: the learner's settings (`num_unused` is ignored: placeholders are no pieces).

    Raises:
        UserError: no text, or settings the learner refuses.
    """
    config = dataclasses.replace(config, num_unused=0)
    tokens, _ = vocab_learner.learn_from_counts(counts, chars, stats, config)
    specials = set(vocab_learner.special_tokens(0))
    return [t for t in tokens if t not in base and t not in specials and not is_placeholder(t)]


@dataclasses.dataclass(frozen=True)
class Choice:
    """One chosen piece.

    Attributes:
        piece: the new token (`##` pieces with their prefix).
        saving: by how much it lowered the corpus's total cost when it was added, given the
            pieces chosen before it (see the module docstring).
    """

    piece: str
    saving: int


class GreedyRanking:
    """Exact greedy choice of new pieces by corpus cost saved (see the module docstring).

    Args:
        base: the base vocabulary, token -> id (not modified).
        counts: word -> occurrences.
        candidates: pieces not in `base` (their order does not matter).
    """

    def __init__(self, base: Mapping[str, int], counts: Mapping[str, int],
                 candidates: Sequence[str]):
        # WordpieceTokenizer looks pieces up with `in`: a dict of our own, to which a
        # candidate is added for a trial and removed again, is the tokenizer's vocabulary.
        self.vocab: Dict[str, int] = dict(base)
        self.tokenizer = tokenization.WordpieceTokenizer(self.vocab)
        self.candidates = sorted(set(candidates))
        if any(c in self.vocab for c in self.candidates):
            raise ValueError("a candidate is in the base vocabulary already")
        index = {c: i for i, c in enumerate(self.candidates)}
        longest = max((len(c) - (len(PREFIX) if c.startswith(PREFIX) else 0)
                       for c in self.candidates), default=0)
        self.words: List[str] = []
        self.counts: List[int] = []
        self.cost: List[int] = []
        self.contains: List[List[int]] = []   # per word: the candidates it contains
        self.deltas: List[List[int]] = []     # per word: its saving for each of those
        self.holders: List[List[int]] = [[] for _ in self.candidates]  # per candidate
        self.gain = [0] * len(self.candidates)
        self.chosen = [False] * len(self.candidates)
        limit = self.tokenizer.max_input_chars_per_word
        for word in sorted(counts):
            if len(word) > limit:
                continue  # [UNK] whatever the vocabulary
            cost = self.cost_of(word)
            if cost == 1:
                continue
            found = _contained(word, index, longest)
            if not found:
                continue
            w = len(self.words)
            self.words.append(word)
            self.counts.append(int(counts[word]))
            self.cost.append(cost)
            self.contains.append(found)
            self.deltas.append([0] * len(found))
            for c in found:
                self.holders[c].append(w)
            self._evaluate(w)

    def cost_of(self, word: str) -> int:
        """The word's cost with the current vocabulary."""
        return word_cost(self.tokenizer.tokenize(word), word)

    def _trial_cost(self, word: str, piece: str) -> int:
        self.vocab[piece] = -1
        try:
            return self.cost_of(word)
        finally:
            del self.vocab[piece]

    def _evaluate(self, w: int, changed: Optional[set] = None) -> None:
        """(Re)computes word w's saving for each candidate it contains, updating the gains;
        adds the candidates whose gain changed to `changed`."""
        word, count, cost = self.words[w], self.counts[w], self.cost[w]
        deltas = self.deltas[w]
        for k, c in enumerate(self.contains[w]):
            if self.chosen[c]:
                new = 0
            else:
                new = cost - self._trial_cost(word, self.candidates[c])
            if new != deltas[k]:
                self.gain[c] += count * (new - deltas[k])
                deltas[k] = new
                if changed is not None:
                    changed.add(c)

    def choose(self, max_new: Optional[int], min_saving: int) -> List[Choice]:
        """Adds pieces one at a time, the one that saves most first.

        Args:
            max_new: stop after this many (None: no limit).
            min_saving: stop when the best remaining piece saves fewer tokens than this.

        Returns:
            The chosen pieces in the order they were added.
        """
        heap = [(-g, self.candidates[c], c) for c, g in enumerate(self.gain)]
        heapq.heapify(heap)
        chosen: List[Choice] = []
        while heap and (max_new is None or len(chosen) < max_new):
            neg, piece, c = heapq.heappop(heap)
            if self.chosen[c] or -neg != self.gain[c]:
                continue  # an outdated entry: the current one is in the heap too
            if -neg < min_saving:
                break
            chosen.append(Choice(piece, -neg))
            self.chosen[c] = True
            self.vocab[piece] = -1
            changed: set = set()
            for w in self.holders[c]:
                self.cost[w] = self.cost_of(self.words[w])
                self._evaluate(w, changed)
            for other in sorted(changed):
                if not self.chosen[other]:
                    heapq.heappush(heap, (-self.gain[other], self.candidates[other], other))
        return chosen


def _contained(word: str, index: Mapping[str, int], longest: int) -> List[int]:
    """Indices of the candidates that occur in `word` where the tokenizer could use them:
    a whole-word piece as a prefix, a `##` piece starting after the first character. Each
    once, ascending (a `##` piece may occur twice: its saving is the word's, counted once)."""
    found = set()
    n = len(word)
    for end in range(1, min(n, longest) + 1):
        i = index.get(word[:end])
        if i is not None:
            found.add(i)
    for start in range(1, n):
        for end in range(start + 1, min(n, start + longest) + 1):
            i = index.get(PREFIX + word[start:end])
            if i is not None:
                found.add(i)
    return sorted(found)


def choose_pieces(base: Mapping[str, int], counts: Mapping[str, int],
                  candidates: Sequence[str], max_new: Optional[int],
                  min_saving: int) -> List[Choice]:
    """The new pieces, best first: see `GreedyRanking`."""
    return GreedyRanking(base, counts, candidates).choose(max_new, min_saving)
