"""Tests for data_tools.vocab.exact_totals: with many rare words, memory stays under --max_words
(plus one part) while the totals stay exact, and the words kept are exactly the promised
ones, so the vocabulary is the one learned from an unbounded count's top words."""

from __future__ import annotations

import collections

import numpy as np

from data_tools.vocab import exact_totals, vocab_learner, word_counting
from data_tools.vocab.word_counting import CountConfig


def test_top_words_is_a_total_order():
    pairs = [("b", 2), ("a", 2), ("c", 5), ("d", 1), ("e", 2)]
    assert list(exact_totals.top_words(pairs, 3).items()) == [("c", 5), ("a", 2), ("b", 2)]
    assert exact_totals.top_words(reversed(pairs), 3) == exact_totals.top_words(pairs, 3)


def test_memory_stays_under_max_words_with_the_promised_vocabulary(tmp_path, corpus_lines):
    """Many rare words: 12,000 distinct ones, seen once each, among 1,500 corpus lines. The
    totals hold at most max_words plus one part's words, the rest goes to sorted runs, and
    the kept words are exactly the max_words most frequent of an unbounded count (ties by
    code point), so the vocabulary is the one learned from that reference."""
    rng = np.random.default_rng(3)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    rare = ["".join(rng.choice(letters, 9)) for _ in range(12_000)]
    lines = list(corpus_lines[:1500])
    for k in range(0, len(rare), 20):
        lines.insert(k // 20 * 2, " ".join(rare[k:k + 20]))
    path = tmp_path / "rare.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    stats = vocab_learner.LearnStats()
    unbounded = vocab_learner.count_words(lines, True, stats)
    max_words = 3000
    assert len(unbounded) > 4 * max_words
    split = 20_000
    per_part = max(len(vocab_learner.count_words(
        word_counting.part_lines(t, word_counting.WordCounts(
            collections.Counter(), collections.Counter())), True, vocab_learner.LearnStats()))
        for t in word_counting.plan_parts([str(path)], CountConfig(split_bytes=split)))

    words, seen, totals = word_counting.count_corpus(
        [str(path)], CountConfig(num_workers=2, split_bytes=split, max_words=max_words,
                                 temp_dir=str(tmp_path)))
    assert totals.distinct == len(unbounded)
    assert len(totals.runs) >= 3
    assert totals.peak_words <= max_words + per_part
    assert words == exact_totals.top_words(unbounded.items(), max_words)
    assert len(words) == max_words and seen.distinct == len(unbounded)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rare.txt"]  # runs removed
    # The common words all survive with their exact counts: the cap cut only count-1 words.
    assert min(words.values()) == 1 and all(words[w] == n for w, n in unbounded.items()
                                            if n > 1)

    config = vocab_learner.VocabConfig(vocab_size=3000, num_unused=5)
    learned, _ = vocab_learner.learn_from_counts(
        words, seen.chars, vocab_learner.LearnStats(seen.lines, seen.num_words), config)
    reference, _ = vocab_learner.learn_from_counts(
        exact_totals.top_words(unbounded.items(), max_words), word_counting.char_counts(unbounded),
        vocab_learner.LearnStats(stats.lines, stats.words), config)
    assert learned == reference
    # Without the cap (max_words above the distinct words), no run and the unbounded count.
    words, _, totals = word_counting.count_corpus(
        [str(path)], CountConfig(split_bytes=split, max_words=len(unbounded)))
    assert words == unbounded and not totals.runs


def test_spilled_runs_merge_to_exact_totals(tmp_path):
    totals = exact_totals.Totals(max_words=2, temp_dir=str(tmp_path))
    for part in ({"b": 1, "a": 2}, {"c": 5, "a": 1}, {"d": 1, "b": 1}, {"e": 2}):
        totals.add(collections.Counter(part))
    assert len(totals.runs) == 2 and totals.peak_words == 3
    assert list(totals.finish().items()) == [("c", 5), ("a", 3)]
    assert totals.distinct == 5 and list(tmp_path.iterdir()) == []
