"""Learns a WordPiece vocabulary from text files, in the layout of Google's BERT vocabularies.

    python -m data_tools.build_vocab --input_file=data/corpus/*.txt --vocab_file=vocab.txt \\
        --vocab_size=30522 --do_lower_case=true [--min_frequency=2] [--num_unused=99] \\
        [--limit_alphabet=1000]

Input: UTF-8 text, one sentence (or paragraph) per line, blank lines between documents (the
format of `create_pretraining_data`); local paths or gs:// globs, comma-separated. Lines are
streamed; only word counts are held in memory. Invalid UTF-8 bytes are replaced (and then
deleted, like every U+FFFD, by the tokenizer's clean-up) and counted in a warning.

Output: exactly --vocab_size lines, [PAD]=0, [unused0..]=1.., [UNK] [CLS] [SEP] [MASK], then
the learned pieces (see data_tools.vocab_learner), written atomically. One summary line.
"""

from __future__ import annotations

import sys
import time
from typing import Iterator, List

from absl import flags

from bert_tf import errors, fileio
from bert_tf.errors import UserError, cli_main
from data_tools import corpus, vocab_learner

FLAGS = flags.FLAGS
flags.DEFINE_string("input_file", None, "Input text: file, glob, or comma-separated list.")
flags.DEFINE_string("vocab_file", None, "Output vocabulary, one token per line.")
flags.DEFINE_integer("vocab_size", None, "Exact number of tokens in the vocabulary.")
flags.DEFINE_bool("do_lower_case", True, "Lower-case and strip accents (uncased model).")
flags.DEFINE_integer("min_frequency", 2, "Pairs seen fewer times are never merged.")
flags.DEFINE_integer("num_unused", 99, "[unusedN] placeholders; 99 puts [UNK] at id 100.")
flags.DEFINE_integer("limit_alphabet", 1000,
                     "Keep the most frequent N characters (others become [UNK]); 0 = all.")


def read_lines(files: List[str], stats: corpus.CorpusStats) -> Iterator[str]:
    """Streams the lines of `files` as text, by the data jobs' shared rules (compressed or not,
    invalid UTF-8 replaced and counted in `stats.warnings`, see `data_tools.text_files`).

    Raises:
        UserError: a file cannot be read.
    """
    for path in files:
        stats.files += 1
        yield from corpus.iter_lines(path, stats)


def run(input_file: str, vocab_file: str, config: vocab_learner.VocabConfig) -> str:
    """Learns the vocabulary and writes it; returns the summary line."""
    start = time.time()
    vocab_learner.check_config(config)
    files = fileio.expand_patterns(input_file, "input_file")
    stats = corpus.CorpusStats(quiet=True)
    # Opened first so that an unwritable destination fails before the learning, not after.
    with fileio.atomic_output(vocab_file, "wb") as out:
        tokens, learn = vocab_learner.learn_vocab(read_lines(files, stats), config)
        out.write(("\n".join(tokens) + "\n").encode("utf-8"))
    for message in stats.warnings:
        print(f"warning: {message}", file=sys.stderr)
    padding = f", padded with {learn.padding} [unusedN]" if learn.padding else ""
    return (f"wrote {vocab_file}: {len(tokens)} tokens "
            f"({len(tokens) - learn.learned - learn.padding}"
            f" special, {learn.learned} learned incl. a {learn.alphabet}-character alphabet"
            f"{padding}) from {learn.lines} lines ({learn.words} words) in {stats.files} "
            f"file(s), {len(stats.warnings)} warning(s), {time.time() - start:.1f} s")


def main(argv: List[str]) -> None:
    if len(argv) > 1:
        raise UserError(f"unexpected arguments: {' '.join(argv[1:])}")
    for name in ("input_file", "vocab_file", "vocab_size"):
        if FLAGS[name].value in (None, ""):
            raise UserError(f"--{name} is required")
    config = vocab_learner.VocabConfig(
        vocab_size=FLAGS.vocab_size, do_lower_case=FLAGS.do_lower_case,
        min_frequency=FLAGS.min_frequency, num_unused=FLAGS.num_unused,
        limit_alphabet=FLAGS.limit_alphabet or None)
    print(run(FLAGS.input_file, FLAGS.vocab_file, config), flush=True)


def console_main() -> None:
    """The `bert-tf-build-vocab` console script."""
    errors.run_app(cli_main(main))


if __name__ == "__main__":
    console_main()
