"""The build-vocab job: counts the words (locally, or on Apache Beam), learns the WordPiece
vocabulary from the counts and writes it atomically (`python -m data_tools.build_vocab`).
"""

from __future__ import annotations

import sys
import time
from typing import Optional

from bert_tf.core import fileio
from data_tools.vocab import vocab_learner, word_counting


def run(input_file: str, vocab_file: str, config: vocab_learner.VocabConfig,
        counting: Optional[word_counting.CountConfig] = None,
        beam_pipeline_options: Optional[str] = None) -> str:
    """Counts the words (locally, or on Beam with `beam_pipeline_options`), learns the
    vocabulary and writes it to `vocab_file`; prints the input's warnings to stderr.

    Args:
        input_file: comma-separated files or globs (local or gs://).
        vocab_file: the output, written atomically (opened before the counting, so that an
            unwritable destination fails first).
        config: what to learn.
        counting: how to count (default: in this process, everything read).
        beam_pipeline_options: count on Apache Beam with these options (the `[beam]` extra).

    Returns:
        The job's one summary line.

    Raises:
        UserError: bad input or settings.
    """
    start = time.time()
    counting = counting or word_counting.CountConfig(do_lower_case=config.do_lower_case)
    if counting.do_lower_case != config.do_lower_case:
        raise ValueError("the counting and the learning disagree on do_lower_case")
    vocab_learner.check_config(config)
    files = fileio.expand_patterns(input_file, "input_file")
    # Opened first so that an unwritable destination fails before the counting, not after.
    with fileio.atomic_output(vocab_file, "wb") as out:
        if beam_pipeline_options is not None:
            from data_tools.vocab import beam_vocab

            words, seen = beam_vocab.count_corpus(files, counting, beam_pipeline_options,
                                                  vocab_file)
        else:
            words, seen, _ = word_counting.count_corpus(files, counting)
        counted = time.time() - start
        stats = vocab_learner.LearnStats(lines=seen.lines, words=seen.num_words)
        tokens, learn = vocab_learner.learn_from_counts(words, seen.chars, stats, config)
        out.write(("\n".join(tokens) + "\n").encode("utf-8"))
    warnings = seen.warning_lines(files)
    for message in warnings:
        print(f"warning: {message}", file=sys.stderr)
    padding = f", padded with {learn.padding} [unusedN]" if learn.padding else ""
    sample = (f" (a sample of {seen.input_bytes / 1e6:.1f} MB)" if counting.sample_bytes
              else "")
    capped = (f", learned from the {len(words)} most frequent of {seen.distinct} distinct "
              "words" if seen.distinct > len(words) else "")
    return (f"wrote {vocab_file}: {len(tokens)} tokens "
            f"({len(tokens) - learn.learned - learn.padding}"
            f" special, {learn.learned} learned incl. a {learn.alphabet}-character alphabet"
            f"{padding}) from {learn.lines} lines ({learn.words} words) in {len(files)} "
            f"file(s){sample}{capped}, {len(warnings)} warning(s), "
            f"{time.time() - start:.1f} s (counting {counted:.1f} s)")
