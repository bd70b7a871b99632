"""Tests for data_tools.vocab.word_counting: splits read every line once, counts are exact and the
same for any worker count and split size, and the sample is a seeded draw of whole lines.
(The bound on memory and the words kept: tests/test_exact_totals.py.)"""

from __future__ import annotations

import collections
import gzip

import pytest

from bert_tf.core.errors import UserError
from data_tools.inputs import documents
from data_tools.vocab import vocab_learner, word_counting
from data_tools.vocab.word_counting import CountConfig, FilePart


def _all_lines(parts, counts):
    return [line for part in parts for line in word_counting.part_lines(part, counts)]


def _fresh():
    return word_counting.WordCounts(collections.Counter(), collections.Counter())


@pytest.mark.parametrize("split_bytes", [1, 2, 5, 17, 64, 1 << 20])
def test_byte_ranges_read_every_line_exactly_once(tmp_path, split_bytes):
    # A BOM, multi-byte characters, an invalid byte, blank lines, a line longer than a
    # split, "\r", and no newline at the end.
    data = ("\ufeffal\u00e9a\n\nb\u4e2d\u6587 c\r\n".encode() + b"caf\xe9 x\n\n\n"
            + b"long " * 40 + b"\nlast")
    path = tmp_path / "t.txt"
    path.write_bytes(data)
    stats = documents.CorpusStats(quiet=True)
    expected = list(documents.iter_lines(str(path), stats))
    parts = word_counting.plan_parts([str(path)], CountConfig(split_bytes=split_bytes))
    assert len(parts) == -(-len(data) // split_bytes)
    counts = _fresh()
    assert _all_lines(parts, counts) == expected
    assert counts.input_bytes == len(data)
    assert counts.warning_lines([str(path)]) == stats.warnings == [
        f"{path}: 1 invalid UTF-8 byte sequence(s) replaced"]


def test_compressed_files_are_one_part_each(tmp_path, corpus_lines):
    text = ("\n".join(corpus_lines[:300]) + "\n").encode()
    (tmp_path / "a.txt.gz").write_bytes(gzip.compress(text))
    (tmp_path / "b.txt").write_bytes(text)
    files = [str(tmp_path / "a.txt.gz"), str(tmp_path / "b.txt")]
    parts = word_counting.plan_parts(files, CountConfig(split_bytes=len(text) // 4 + 1))
    assert [(t.path, t.ranges[0][1]) for t in parts][0] == (files[0], -1)
    assert [t.path for t in parts] == files[:1] + files[1:] * 4
    counts = _fresh()
    assert _all_lines(parts, counts) == corpus_lines[:300] * 2


def test_counts_are_exact_and_the_same_for_any_worker_count(tmp_path, corpus_lines):
    lines = corpus_lines[:4000]
    paths = []
    for i, part in enumerate((lines[:1500], lines[1500:])):
        paths.append(str(tmp_path / f"p{i}.txt"))
        with open(paths[-1], "w", encoding="utf-8") as f:
            f.write("\n".join(part) + "\n")
    ref_stats = vocab_learner.LearnStats()
    reference = vocab_learner.count_words(lines, True, ref_stats)
    results = []
    for workers, split in ((1, 1 << 20), (2, 20_000), (3, 7_001)):
        words, stats, _ = word_counting.count_corpus(
            paths, CountConfig(num_workers=workers, split_bytes=split))
        assert words == reference
        assert (stats.lines, stats.num_words, stats.distinct) == (
            ref_stats.lines, ref_stats.words, len(reference))
        assert stats.chars == word_counting.char_counts(reference)
        results.append(words)
    assert results[0] == results[1] == results[2]


def test_char_counts_weigh_each_word_by_its_count():
    chars = word_counting.char_counts({"ab": 3, "b": 2, "\u4e2d": 1, "ba": 3})
    assert chars == {"a": 6, "b": 8, "\u4e2d": 1}


def test_sample_is_seeded_whole_lines_about_the_size_asked(tmp_path, corpus_lines):
    path = tmp_path / "c.txt"
    path.write_text("\n".join(corpus_lines) + "\n", encoding="utf-8")
    size = path.stat().st_size
    full = collections.Counter(corpus_lines)

    def sample(seed, workers=1):
        config = CountConfig(sample_bytes=300_000, seed=seed, split_bytes=100_000,
                             num_workers=workers)
        parts = word_counting.plan_parts([str(path)], config)
        counts = _fresh()
        return parts, collections.Counter(_all_lines(parts, counts)), counts

    parts, lines, counts = sample(7)
    blocks = sum(len(t.ranges) for t in parts)
    # split_bytes holds one block: one part per block drawn.
    assert blocks == -(-300_000 // word_counting.SAMPLE_BLOCK) == len(parts)
    assert all(t.ranges == tuple(sorted(t.ranges)) for t in parts)
    # Whole lines of the corpus, each at most as often as in it; about the bytes asked.
    assert all(full[line] >= n for line, n in lines.items())
    drawn = sum(end - start for t in parts for start, end in t.ranges)
    assert abs(counts.input_bytes - drawn) < 2 * max(map(len, corpus_lines)) * blocks
    assert sample(7)[1] == lines
    assert sample(8)[1] != lines
    a, _, _ = word_counting.count_corpus([str(path)], CountConfig(sample_bytes=300_000, seed=7,
                                                                  split_bytes=100_000))
    b, _, _ = word_counting.count_corpus([str(path)], CountConfig(
        sample_bytes=300_000, seed=7, split_bytes=100_000, num_workers=2))
    assert a == b == vocab_learner.count_words(lines.elements(), True,
                                               vocab_learner.LearnStats())
    # Asking for more than the corpus reads it all, once.
    everything = word_counting.plan_parts([str(path)], CountConfig(sample_bytes=10 * size))
    assert sum(len(t.ranges) for t in everything) == -(-size // word_counting.SAMPLE_BLOCK)


def test_bad_settings_and_inputs(tmp_path):
    (tmp_path / "a.gz").write_bytes(gzip.compress(b"a b\n"))
    with pytest.raises(UserError, match="--sample_mb reads blocks at random offsets, which a "
                                        "compressed file does not allow: decompress"):
        word_counting.plan_parts([str(tmp_path / "a.gz")], CountConfig(sample_bytes=10))
    with pytest.raises(UserError, match="cannot read input file"):
        word_counting.plan_parts([str(tmp_path / "missing.txt")], CountConfig())
    with pytest.raises(UserError, match="--max_words=0: must be >= 1"):
        CountConfig(max_words=0)
    with pytest.raises(UserError, match="--num_workers=0: must be >= 1"):
        CountConfig(num_workers=0)
    assert word_counting.count_part(FilePart(0, str(tmp_path / "a.gz"), ((0, -1),)), True).words \
        == {"a": 1, "b": 1}
