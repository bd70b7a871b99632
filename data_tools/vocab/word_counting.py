"""Counts the words of a corpus for `build_vocab`: in parallel, in bounded memory, optionally
on a seeded sample, with the same result for any number of workers, locally or on Beam.

Splits. The input is cut into parts by files and byte ranges, the same for every worker
count: a plain file into ranges of `split_bytes`; a compressed one (`data_tools.inputs.text_files`)
is one part, as it cannot be entered at an offset. A range owns the lines whose first byte
lies in it: it begins at the first line that starts at or after its offset and ends with
the line that runs past its end (as Hadoop splits text). So every line is read by exactly
one part, and a worker reads only its own ranges. The bytes
of a line are decoded as `documents.iter_lines` decodes them (whole lines, invalid UTF-8
replaced and counted, a byte-order mark dropped at the start of a file).

Sample (`sample_bytes` > 0, like sentencepiece's --input_sentence_size, but in bytes so that
its cost is known in advance). The plain files are cut into blocks of `SAMPLE_BLOCK` bytes,
and a seeded uniform draw without replacement picks enough blocks for about `sample_bytes`;
only those are read (a line belongs to the block where it starts), so the time depends on
the sample, not on the corpus. Every line has the same chance of being drawn.

Memory. A part's `Counter` holds one range's distinct words; the parent adds them up
exactly in bounded memory (`data_tools.vocab.exact_totals`) and keeps the `max_words` most frequent
words, a rule that depends on the exact counts alone, so on neither the worker count nor
the order of merging (a Beam combine's). The alphabet's character counts are exact and
include every word.
"""

from __future__ import annotations

import collections
import dataclasses
from collections import Counter
from typing import Dict, Iterable, Iterator, List, Sequence, Tuple

import numpy as np

from bert_tf.core import fileio, tokenization
from bert_tf.core.errors import UserError, reason
from data_tools.inputs import documents, splits, text_files
from data_tools.runtime import process_pool
from data_tools.vocab import exact_totals

SAMPLE_BLOCK = 64 << 10
_MEMO = 100_000  # whitespace-free chunks memoized by a part's basic split
_BATCH_WORDS = 1 << 16  # words handed to Counter.update at a time (its loop is in C)


@dataclasses.dataclass(frozen=True)
class CountConfig:
    """How to count the words.

    Attributes:
        do_lower_case: lower-case and strip accents (as the uncased tokenizer).
        num_workers: worker processes (1 counts in this process).
        split_bytes: bytes of a plain file per part; the result does not depend on it.
        max_words: distinct words kept for the trainer (the most frequent), and held in
            memory before a sorted run is written to disk.
        sample_bytes: 0 reads everything; else about this many bytes are drawn at random.
        seed: seeds the sample.
        temp_dir: where sorted runs go ("" = the machine's temporary directory).
    """

    do_lower_case: bool = True
    num_workers: int = 1
    split_bytes: int = 4_000_000
    max_words: int = 1_000_000
    sample_bytes: int = 0
    seed: int = 12345
    temp_dir: str = ""

    def __post_init__(self) -> None:
        if self.num_workers < 1:
            raise UserError(f"--num_workers={self.num_workers}: must be >= 1")
        if self.max_words < 1:
            raise UserError(f"--max_words={self.max_words}: must be >= 1")
        if self.sample_bytes < 0:
            raise UserError(f"--sample_mb={self.sample_bytes / 1e6:g}: must be >= 0")
        if self.split_bytes < 1:
            raise ValueError("split_bytes must be > 0")


@dataclasses.dataclass(frozen=True)
class FilePart:
    """One part of the input, the unit of parallel counting: byte ranges [start, end) of one
    file, or the whole of it (end = -1: a compressed file, read from its start through its
    decompressor)."""

    index: int
    path: str
    ranges: Tuple[Tuple[int, int], ...]


@dataclasses.dataclass
class WordCounts:
    """What one part (or a sum of parts) saw.

    Attributes:
        words: word -> occurrences.
        chars: character -> occurrences within words.
        lines: lines with at least one word.
        num_words: words in total.
        input_bytes: bytes read, as stored (compressed ones for a compressed file).
        bad_utf8: path -> invalid UTF-8 sequences replaced (plain files).
        warnings: the warnings of compressed files (read whole by `documents.iter_lines`).
        distinct: distinct words in all (set once the totals are complete).
    """

    words: Counter
    chars: Counter
    lines: int = 0
    num_words: int = 0
    input_bytes: int = 0
    bad_utf8: Dict[str, int] = dataclasses.field(default_factory=dict)
    warnings: Dict[str, List[str]] = dataclasses.field(default_factory=dict)
    distinct: int = 0

    def add_stats(self, other: "WordCounts") -> None:
        """Adds everything but the words (merged separately, in bounded memory)."""
        self.chars.update(other.chars)
        self.lines += other.lines
        self.num_words += other.num_words
        self.input_bytes += other.input_bytes
        for path, n in other.bad_utf8.items():
            self.bad_utf8[path] = self.bad_utf8.get(path, 0) + n
        for path, messages in other.warnings.items():
            self.warnings.setdefault(path, []).extend(messages)

    def warning_lines(self, files: Sequence[str]) -> List[str]:
        """The warnings in file order, worded as `documents.iter_lines` words them."""
        out: List[str] = []
        for path in files:
            out += self.warnings.get(path, [])
            if self.bad_utf8.get(path):
                out.append(f"{path}: {self.bad_utf8[path]} invalid UTF-8 byte sequence(s) "
                           "replaced")
        return out


def plan_parts(files: Sequence[str], config: CountConfig) -> List[FilePart]:
    """The parts for `files`: a function of the files, `split_bytes`, `sample_bytes` and
    `seed` only (never of the worker count).

    Raises:
        UserError: a file cannot be read, or a sample asked of a compressed file.
    """
    sizes, compressed = [], []
    for path in files:
        try:
            sizes.append(fileio.size(path))
            compressed.append(splits.is_compressed(path))
        except Exception as e:  # OSError locally, tf.errors remotely
            raise UserError(f"cannot read input file {path}: {reason(e)}") from None
    parts: List[FilePart] = []
    if config.sample_bytes:
        packed = [p for p, c in zip(files, compressed) if c]
        if packed:
            raise UserError(f"--sample_mb reads blocks at random offsets, which a compressed "
                            f"file does not allow: decompress {packed[0]} first")
        return _sample_parts(files, sizes, config)
    for path, size, packed in zip(files, sizes, compressed):
        if packed:
            parts.append(FilePart(len(parts), path, ((0, -1),)))
            continue
        for start in range(0, size, config.split_bytes):
            parts.append(FilePart(len(parts), path, ((start, min(start + config.split_bytes,
                                                              size)),)))
    return parts


def _sample_parts(files: Sequence[str], sizes: Sequence[int], config: CountConfig
                  ) -> List[FilePart]:
    """Blocks drawn uniformly without replacement, grouped per file into parts of up to
    `split_bytes`; sorted, so that each file is read forwards."""
    blocks = [-(-size // SAMPLE_BLOCK) for size in sizes]
    first = np.concatenate([[0], np.cumsum(blocks)]).astype(np.int64)
    total = int(first[-1])
    want = min(total, -(-config.sample_bytes // SAMPLE_BLOCK))
    chosen = np.sort(np.random.default_rng(config.seed).choice(total, want, replace=False))
    per_part = max(1, config.split_bytes // SAMPLE_BLOCK)
    parts: List[FilePart] = []
    for i, path in enumerate(files):
        mine = chosen[(chosen >= first[i]) & (chosen < first[i + 1])] - first[i]
        ranges = [(int(b) * SAMPLE_BLOCK, min((int(b) + 1) * SAMPLE_BLOCK, sizes[i]))
                  for b in mine]
        for k in range(0, len(ranges), per_part):
            parts.append(FilePart(len(parts), path, tuple(ranges[k:k + per_part])))
    return parts


def part_lines(part: FilePart, counts: WordCounts) -> Iterator[str]:
    """The lines `part` owns, decoded; adds the bytes read, invalid UTF-8 sequences and the
    warnings of a compressed file to `counts`.

    Raises:
        UserError: the file cannot be read.
    """
    if part.ranges == ((0, -1),):
        stats = documents.CorpusStats(quiet=True)
        yield from documents.iter_lines(part.path, stats)
        counts.input_bytes += stats.bytes_read
        if stats.warnings:
            counts.warnings[part.path] = list(stats.warnings)
        return
    try:
        f = fileio.open_file(part.path, "rb")
    except Exception as e:  # OSError locally, tf.errors remotely
        raise UserError(f"cannot read input file {part.path}: {reason(e)}") from None
    with f:
        for start, end in part.ranges:
            blocks = splits.range_blocks(f, start, end)
            first = start == 0
            while True:
                try:
                    data = next(blocks, None)
                except Exception as e:  # noqa: BLE001 - a remote read failure: one line
                    text_files.reraise(part.path, e)
                if data is None:
                    break
                counts.input_bytes += len(data)
                lines, bad = splits.block_lines(data, first)
                first = False
                if bad:
                    counts.bad_utf8[part.path] = counts.bad_utf8.get(part.path, 0) + bad
                yield from lines


_SPLITTERS: Dict[bool, tokenization.CachedBasicTokenizer] = {}


def _splitter(do_lower_case: bool) -> tokenization.CachedBasicTokenizer:
    """The process's basic split, kept from part to part so its memo stays warm. Its memo is
    smaller than the tokenizer's default, so that memory depends less on how varied the text
    is (a WikiText part has fewer distinct chunks: no change there)."""
    if do_lower_case not in _SPLITTERS:
        _SPLITTERS[do_lower_case] = tokenization.CachedBasicTokenizer(
            do_lower_case, max_cache_entries=_MEMO)
    return _SPLITTERS[do_lower_case]


def count_part(part: FilePart, do_lower_case: bool) -> WordCounts:
    """Counts the words (after the tokenizer's basic split) and their characters in `part`."""
    splitter = _splitter(do_lower_case)
    result = WordCounts(collections.Counter(), collections.Counter())
    batch: List[str] = []
    for line in part_lines(part, result):
        words = splitter.tokenize(line)
        if words:
            result.lines += 1
            batch += words
            if len(batch) >= _BATCH_WORDS:
                result.words.update(batch)
                result.num_words += len(batch)
                batch = []
    result.words.update(batch)
    result.num_words += len(batch)
    result.chars = char_counts(result.words)
    return result


def char_counts(words: Dict[str, int]) -> Counter:
    """Character -> occurrences over `words` weighted by their counts.

    Words are grouped by count, so that each group's characters are counted by one C-level
    `Counter` over their concatenation, faster than a Python loop over every character
    (docs/results/data-jobs.md).
    """
    by_count: Dict[int, List[str]] = collections.defaultdict(list)
    for word, n in words.items():
        by_count[n].append(word)
    chars: Counter = collections.Counter()
    for n, group in by_count.items():
        for char, k in collections.Counter("".join(group)).items():
            chars[char] += k * n
    return chars


# ---- the local runner --------------------------------------------------------------------

_WORKER: Dict[str, object] = {}


def _init_worker(do_lower_case: bool) -> None:
    _WORKER["do_lower_case"] = do_lower_case


def _worker_count(part: FilePart) -> WordCounts:
    return count_part(part, bool(_WORKER["do_lower_case"]))


def count_corpus(files: Sequence[str], config: CountConfig
                 ) -> Tuple[Counter, WordCounts, exact_totals.Totals]:
    """Counts the words of `files` with `config.num_workers` processes.

    Returns:
        (words, stats, totals): the kept words with their exact counts
        (`exact_totals.Totals.finish`), the characters and line/word/byte counts of
        everything read, and the `Totals` used (its `peak_words`, `runs`).

    Raises:
        UserError: unreadable input, bad flags, or a worker that died.
    """
    parts = plan_parts(files, config)
    totals = exact_totals.Totals(config.max_words, config.temp_dir)
    if config.num_workers <= 1 or len(parts) <= 1:
        results: Iterable[WordCounts] = (count_part(t, config.do_lower_case) for t in parts)
    else:
        results = process_pool.map_ordered(_worker_count, ((t,) for t in parts),
                                           min(config.num_workers, len(parts)), _init_worker,
                                           (config.do_lower_case,))
    stats = WordCounts(collections.Counter(), collections.Counter())
    try:
        for counts in results:
            totals.add(counts.words)
            counts.words = collections.Counter()
            stats.add_stats(counts)
        words = totals.finish()
    finally:
        totals.close()  # the runs, also on an error or Ctrl-C
    stats.distinct = totals.distinct
    return words, stats, totals
