"""The extend-vocab job: adds the WordPieces a domain corpus needs to a base vocabulary
without moving any base token (`python -m data_tools.extend_vocab`).

It counts the corpus's words as `build_vocab` does (`word_counting`, in parallel), proposes
candidates with `build_vocab`'s trainer and ranks them by tokens saved (`extend`), lays the
chosen pieces out in the base vocabulary and writes it, with a JSON report beside it
(`extend_report`), atomically.

Layout. `mode="unused"` writes the new pieces into the base's `[unusedN]` slots in id order
(best piece first), so the vocabulary's size, and a checkpoint's shapes, stay; `"append"`
appends them after the last base id. Every other base token keeps its id in both modes
(asserted before writing), which is what `bert_tf.interop.vocab_resize` needs to carry a
checkpoint over.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from typing import Dict, List, Optional, Sequence, Tuple

from bert_tf.core import fileio, tokenization
from bert_tf.core.errors import UserError
from data_tools.vocab import extend, extend_report, vocab_learner, word_counting

MODES = ("unused", "append")
# The trainer that proposes candidates keeps build_vocab's default: a pair seen once is never
# merged. What is kept is decided by the tokens a piece saves (`min_frequency`), not here.
CANDIDATE_MIN_PAIR_COUNT = 2


@dataclasses.dataclass(frozen=True)
class ExtendConfig:
    """What to add.

    Attributes:
        mode: "unused" fills the base's [unusedN] slots; "append" adds ids after the base.
        num_new_tokens: add at most this many; None = as many as are worth it (mode
            "unused": at most the free slots; mode "append" then needs `min_frequency`).
        min_frequency: stop when the best remaining piece saves fewer tokens than this on
            the corpus; None = 1 (stop only when no piece saves anything).
        do_lower_case: as the base vocabulary's tokenizer; None = read from the base (a
            vocabulary without upper-case pieces is uncased).
        candidate_vocab_size: size of the vocabulary learned on the corpus to propose
            candidates; 0 = the base vocabulary's size.
        limit_alphabet: that vocabulary's alphabet (see `vocab_learner.VocabConfig`).
    """

    mode: str = "unused"
    num_new_tokens: Optional[int] = None
    min_frequency: Optional[int] = None
    do_lower_case: Optional[bool] = None
    candidate_vocab_size: int = 0
    limit_alphabet: Optional[int] = 1000

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise UserError(f"--mode={self.mode}: must be one of {', '.join(MODES)}")
        if self.num_new_tokens is not None and self.num_new_tokens < 1:
            raise UserError(f"--num_new_tokens={self.num_new_tokens}: must be >= 1")
        if self.min_frequency is not None and self.min_frequency < 1:
            raise UserError(f"--min_frequency={self.min_frequency}: must be >= 1")
        if self.candidate_vocab_size < 0:
            raise UserError(f"--candidate_vocab_size={self.candidate_vocab_size}: must be >= 0")
        if self.mode == "append" and self.num_new_tokens is None and self.min_frequency is None:
            raise UserError("--mode=append needs --num_new_tokens or --min_frequency (when to "
                            "stop adding)")


def is_bracketed(token: str) -> bool:
    """[PAD], [unused7] and the like: no piece the tokenizer produces from text."""
    return len(token) > 2 and token.startswith("[") and token.endswith("]")


def resolve_lower_case(tokens: Sequence[str], given: Optional[bool], vocab_file: str) -> bool:
    """The casing of the base vocabulary, checked against `given`.

    An uncased vocabulary was learned on lower-cased text, so lower-casing changes none of its
    pieces (a letter such as U+211D, upper-case but without a lower-case form, does not count);
    a cased one has many pieces it changes. One without any cased letter (e.g. only CJK) fits
    both settings.

    Raises:
        UserError: `given` contradicts the vocabulary.
    """
    upper = [t for t in tokens if not is_bracketed(t) and t.lower() != t]
    lower = any(not is_bracketed(t) and t.upper() != t for t in tokens)
    if upper and given:
        raise UserError(f"--do_lower_case=true contradicts the base vocabulary {vocab_file}: "
                        f"it is cased ({len(upper)} pieces with upper-case letters, e.g. "
                        f"{upper[0]!r}); use --do_lower_case=false")
    if given is False and lower and not upper:
        raise UserError(f"--do_lower_case=false contradicts the base vocabulary {vocab_file}: "
                        "it is uncased (no piece has an upper-case letter); use "
                        "--do_lower_case=true")
    if given is not None:
        return given
    return not upper


def free_slots(tokens: Sequence[str]) -> List[int]:
    """Ids of the [unusedN] placeholders, ascending."""
    return [i for i, t in enumerate(tokens) if extend.is_placeholder(t)]


def lay_out(base: Sequence[str], new: Sequence[str], mode: str) -> Tuple[List[str], List[int]]:
    """The extended vocabulary in id order, and the ids the new pieces got.

    Raises:
        AssertionError: a base token would move (a bug, never the input's fault).
    """
    tokens = list(base)
    if mode == "unused":
        ids = free_slots(base)[:len(new)]
        if len(ids) < len(new):
            raise AssertionError("more new pieces than [unusedN] slots")
        for i, piece in zip(ids, new):
            tokens[i] = piece
    else:
        ids = list(range(len(base), len(base) + len(new)))
        tokens += new
    kept = set(ids)
    if (any(tokens[i] != t for i, t in enumerate(base) if i not in kept)
            or not all(extend.is_placeholder(base[i]) for i in ids if i < len(base))
            or len(set(tokens)) != len(tokens)):
        raise AssertionError("the extended vocabulary moved a base token or repeats one")
    return tokens, ids


def _check_paths(files: Sequence[str], vocab_file: str, output: str) -> None:
    same = {os.path.abspath(p) for p in list(files) + [vocab_file]}
    for path in (output, extend_report_path(output)):
        if os.path.abspath(path) in same:
            raise UserError(f"--output_vocab_file would overwrite an input: {path}")


def extend_report_path(output_vocab_file: str) -> str:
    """Where the JSON report goes: beside the vocabulary."""
    return output_vocab_file + ".report.json"


def run(input_file: str, vocab_file: str, output_vocab_file: str, config: ExtendConfig,
        counting: word_counting.CountConfig) -> List[str]:
    """Counts the corpus, chooses the new pieces, writes the vocabulary and the report.

    Args:
        input_file: the domain corpus: comma-separated files or globs (local or gs://), in
            any form the data jobs read.
        vocab_file: the base vocabulary.
        output_vocab_file: the extended vocabulary, written atomically; the JSON report goes
            to `extend_report_path(output_vocab_file)`.
        config: what to add.
        counting: how to count (its `do_lower_case` is replaced by the resolved casing).

    Returns:
        The summary line, then the report's lines.

    Raises:
        UserError: bad input or settings.
    """
    start = time.time()
    base = tokenization.load_vocab(vocab_file)
    base_tokens = tokenization.vocab_list(base)
    lower = resolve_lower_case(base_tokens, config.do_lower_case, vocab_file)
    max_new = config.num_new_tokens
    slots = free_slots(base_tokens)
    if config.mode == "unused":
        if not slots:
            raise UserError(f"the base vocabulary {vocab_file} has no [unusedN] slot: use "
                            "--mode=append")
        if max_new is not None and max_new > len(slots):
            raise UserError(f"--num_new_tokens={max_new} is more than the {len(slots)} free "
                            f"[unusedN] slots of {vocab_file}: use --mode=append, or ask "
                            f"for at most {len(slots)}")
        max_new = len(slots) if max_new is None else max_new
    files = fileio.expand_patterns(input_file, "input_file")
    _check_paths(files, vocab_file, output_vocab_file)
    counting = dataclasses.replace(counting, do_lower_case=lower)
    report_file = extend_report_path(output_vocab_file)
    # Opened first so that an unwritable destination fails before the counting, not after.
    with fileio.atomic_output(output_vocab_file, "wb") as out, \
            fileio.atomic_output(report_file, "wb") as report_out:
        counts, seen, _ = word_counting.count_corpus(files, counting)
        counted = time.time() - start
        learner = vocab_learner.VocabConfig(
            vocab_size=config.candidate_vocab_size or len(base_tokens), do_lower_case=lower,
            min_frequency=CANDIDATE_MIN_PAIR_COUNT, num_unused=0,
            limit_alphabet=config.limit_alphabet)
        candidates = extend.candidate_pieces(
            counts, seen.chars, vocab_learner.LearnStats(lines=seen.lines,
                                                         words=seen.num_words),
            base, learner)
        chosen = extend.choose_pieces(base, counts, candidates, max_new,
                                      config.min_frequency or 1)
        tokens, ids = lay_out(base_tokens, [c.piece for c in chosen], config.mode)
        extended: Dict[str, int] = {t: i for i, t in enumerate(tokens)}
        comparison = extend_report.compare(counts, base, extended)
        facts = {"vocab_file": output_vocab_file, "base_vocab_file": vocab_file,
                 "mode": config.mode, "do_lower_case": lower,
                 "base_size": len(base_tokens), "size": len(tokens),
                 "candidates": len(candidates), "distinct_words": seen.distinct,
                 "words_ranked_on": len(counts)}
        out.write(("\n".join(tokens) + "\n").encode("utf-8"))
        report_out.write(extend_report.report_json(
            comparison, [(c.piece, i, c.saving) for c, i in zip(chosen, ids)],
            facts).encode("utf-8"))
    warnings = seen.warning_lines(files)
    for message in warnings:
        print(f"warning: {message}", file=sys.stderr)
    summary = _summary(output_vocab_file, config, lower, tokens, ids, max_new,
                       len(candidates), seen, len(counts), len(files), len(warnings),
                       time.time() - start, counted)
    return [summary] + extend_report.summary_lines(comparison, report_file)


def id_ranges(ids: Sequence[int]) -> str:
    """Ascending ids as runs: [1, 2, 3, 7] -> "1..3, 7"."""
    runs: List[List[int]] = []
    for i in ids:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(f"{a}..{b}" if b > a else f"{a}" for a, b in runs)


def _summary(output: str, config: ExtendConfig, lower: bool, tokens: Sequence[str],
             ids: Sequence[int], max_new: Optional[int], candidates: int,
             seen: word_counting.WordCounts, kept: int, files: int, warnings: int,
             seconds: float, counted: float) -> str:
    where = (f"in [unusedN] slots (ids {id_ranges(ids)})" if config.mode == "unused"
             else f"appended (ids {id_ranges(ids)})") if ids else "added"
    short = ""
    if max_new is not None and len(ids) < max_new:
        short = (f"; {max_new} asked, but no further piece saves "
                 f"{config.min_frequency or 1} token(s) or more")
    capped = (f", ranked on the {kept} most frequent of {seen.distinct} distinct words"
              if seen.distinct > kept else "")
    return (f"wrote {output}: {len(tokens)} tokens ({'un' if lower else ''}cased), "
            f"{len(ids)} new {where}, base ids "
            f"unchanged{short} ({candidates} candidates) from {seen.lines} lines "
            f"({seen.num_words} words) in {files} file(s){capped}, {warnings} warning(s), "
            f"{seconds:.1f} s (counting {counted:.1f} s)")
