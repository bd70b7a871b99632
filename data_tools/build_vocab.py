"""Learns a WordPiece vocabulary from text files, in the layout of Google's BERT vocabularies.

    python -m data_tools.build_vocab --input_file=data/corpus/*.txt --vocab_file=vocab.txt \\
        --vocab_size=30522 --do_lower_case=true [--min_frequency=2] [--num_unused=99] \\
        [--limit_alphabet=1000] [--num_workers=N] [--max_words=1000000] \\
        [--sample_mb=0 --random_seed=12345] [--beam_pipeline_options="--runner=..."]

Input: UTF-8 text, one sentence (or paragraph) per line, blank lines between documents (the
format of `create_pretraining_data`); local paths or gs:// globs, comma-separated, plain or
gzip/bzip2-compressed. Invalid UTF-8 bytes are replaced (and then deleted, like every
U+FFFD, by the tokenizer's clean-up) and counted in a warning.

Words are counted by --num_workers processes, or by a Beam pipeline, each reading its own
byte ranges of the files (`data_tools.vocab.word_counting`, run by
`data_tools.vocab.vocab_job`); memory is bounded by --max_words, and
--sample_mb reads a seeded random sample instead of everything. The vocabulary is the same
for any --num_workers, locally and on Beam.

Output: exactly --vocab_size lines, [PAD]=0, [unused0..]=1.., [UNK] [CLS] [SEP] [MASK], then
the learned pieces (see data_tools.vocab.vocab_learner), written atomically. One summary line.
"""

from __future__ import annotations

import sys
from typing import List

from absl import flags

from bert_tf.core import errors
from bert_tf.core.errors import UserError, cli_main
from data_tools.runtime import job_entry, process_pool
from data_tools.vocab import vocab_job, vocab_learner, word_counting

FLAGS = flags.FLAGS
flags.DEFINE_string("input_file", None, "Input text: file, glob, or comma-separated list.")
flags.DEFINE_string("vocab_file", None, "Output vocabulary, one token per line.")
flags.DEFINE_integer("vocab_size", None, "Exact number of tokens in the vocabulary.")
flags.DEFINE_bool("do_lower_case", True, "Lower-case and strip accents (uncased model).")
flags.DEFINE_integer("min_frequency", 2, "Pairs seen fewer times are never merged.")
flags.DEFINE_integer("num_unused", 99, "[unusedN] placeholders; 99 puts [UNK] at id 100.")
flags.DEFINE_integer("limit_alphabet", 1000,
                     "Keep the most frequent N characters (others become [UNK]); 0 = all.")
flags.DEFINE_integer("num_workers", None, "Worker processes counting words (default: all "
                     "cores). The vocabulary does not depend on it.")
flags.DEFINE_float("split_mb", 4, "Bytes of a plain input file per counting part, in MB "
                   "(the vocabulary does not depend on it). Smaller parts share the work "
                   "more evenly; larger ones leave the parent fewer counts to add up.")
flags.DEFINE_integer("max_words", 1_000_000,
                     "The trainer learns from the N most frequent words (exact counts; ties "
                     "by code point); also the distinct words held in memory before the "
                     "counts are spilled to sorted files under --temp_dir. The trainer "
                     "needs about 1 KB per word.")
flags.DEFINE_float("sample_mb", 0,
                   "If > 0, count only a uniform random sample of about this many MB of "
                   "the (uncompressed) input, in 64 KB blocks drawn with --random_seed.")
flags.DEFINE_integer("random_seed", 12345, "Seeds --sample_mb.")
flags.DEFINE_string("temp_dir", None, "Directory for the counts spilled beyond --max_words "
                    "(default: the machine's temporary directory).")
flags.DEFINE_string("beam_pipeline_options", None,
                    "Count the words with an Apache Beam pipeline with these options (e.g. "
                    "\"--runner=DataflowRunner --project=P --region=R\"); the same "
                    "vocabulary as locally. Needs the [beam] extra.")


def main(argv: List[str]) -> None:
    if len(argv) > 1:
        raise UserError(f"unexpected arguments: {' '.join(argv[1:])}")
    # A scheduler's SIGTERM cleans up like Ctrl-C: spilled counts and the temporary vocab.
    job_entry.stop_on_sigterm()
    for name in ("input_file", "vocab_file", "vocab_size"):
        if FLAGS[name].value in (None, ""):
            raise UserError(f"--{name} is required")
    config = vocab_learner.VocabConfig(
        vocab_size=FLAGS.vocab_size, do_lower_case=FLAGS.do_lower_case,
        min_frequency=FLAGS.min_frequency, num_unused=FLAGS.num_unused,
        limit_alphabet=FLAGS.limit_alphabet or None)
    num_workers = FLAGS.num_workers
    if not FLAGS.split_mb > 0:
        raise UserError(f"--split_mb={FLAGS.split_mb}: must be > 0")
    if num_workers is None:
        num_workers = process_pool.default_num_workers()
    counting = word_counting.CountConfig(
        do_lower_case=FLAGS.do_lower_case, num_workers=num_workers,
        split_bytes=max(1, int(FLAGS.split_mb * 1e6)), max_words=FLAGS.max_words,
        sample_bytes=int(FLAGS.sample_mb * 1e6),
        seed=FLAGS.random_seed, temp_dir=FLAGS.temp_dir or "")
    if FLAGS.beam_pipeline_options is not None and FLAGS["num_workers"].present:
        print("warning: --num_workers is ignored with --beam_pipeline_options (the runner's "
              "own options set the workers)", file=sys.stderr)
    print(vocab_job.run(FLAGS.input_file, FLAGS.vocab_file, config, counting,
                        FLAGS.beam_pipeline_options), flush=True)


def console_main() -> None:
    """The `bert-tf-build-vocab` console script."""
    errors.run_app(cli_main(main))


if __name__ == "__main__":
    console_main()
