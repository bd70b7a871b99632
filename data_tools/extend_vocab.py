"""Adds the WordPieces a domain corpus needs to a base vocabulary; base ids never change.

    python -m data_tools.extend_vocab --vocab_file=uncased/vocab.txt \\
        --input_file=pubmed/*.txt --output_vocab_file=pubmed-vocab.txt \\
        [--mode=unused|append] [--num_new_tokens=994] [--min_frequency=N] \\
        [--do_lower_case=true] [--num_workers=N] [--candidate_vocab_size=0]

Input: a base vocabulary (one token per line, with [PAD] [UNK] [CLS] [SEP] [MASK]) and a
domain corpus in any form the data jobs read (UTF-8 text, one sentence per line; local or
gs://, plain or gzip/bzip2). --do_lower_case defaults to the base vocabulary's casing (one
without upper-case pieces is uncased) and must agree with it.

What is added: pieces that a vocabulary learned on the corpus (with build_vocab's trainer)
holds and the base lacks, whole words and ## pieces, chosen greedily by the tokens they save
on the corpus when the base tokenizer uses them (`data_tools.vocab.extend`), until
--num_new_tokens or until the next one saves fewer than --min_frequency tokens.
--mode=unused writes them into the [unusedN] slots (same size: a checkpoint keeps its
shapes); --mode=append adds them after the last id. The result is the same for any
--num_workers.

Output: the vocabulary, written atomically, and a JSON report beside it
(<output_vocab_file>.report.json). Printed: one summary line, then tokens per word and the
[UNK] rate on the corpus before and after, and the 20 words that gain most.
"""

from __future__ import annotations

from typing import List

from absl import flags

from bert_tf.core import errors
from bert_tf.core.errors import UserError, cli_main
from data_tools.runtime import job_entry, process_pool
from data_tools.vocab import extend_job, word_counting

FLAGS = flags.FLAGS
flags.DEFINE_string("vocab_file", None, "The base vocabulary, one token per line.")
flags.DEFINE_string("input_file", None, "The domain corpus: file, glob, or comma-separated "
                    "list.")
flags.DEFINE_string("output_vocab_file", None, "The extended vocabulary (the report goes "
                    "beside it, as <output_vocab_file>.report.json).")
flags.DEFINE_enum("mode", "unused", list(extend_job.MODES),
                  "unused: new pieces take the [unusedN] slots (the size stays); append: "
                  "they get ids after the base vocabulary.")
flags.DEFINE_integer("num_new_tokens", None, "Add at most this many pieces (default: as "
                     "many as are worth it; with --mode=unused at most the free slots).")
flags.DEFINE_integer("min_frequency", None, "Stop when the next piece would save fewer than "
                     "this many tokens on the corpus (default: 1).")
flags.DEFINE_bool("do_lower_case", None, "Lower-case and strip accents, as the base "
                  "vocabulary's tokenizer (default: uncased unless the base vocabulary has "
                  "upper-case pieces).")
flags.DEFINE_integer("candidate_vocab_size", 0, "Size of the vocabulary learned on the corpus "
                     "to propose candidates (default 0: the base vocabulary's size).")
flags.DEFINE_integer("limit_alphabet", 1000, "Characters that vocabulary keeps (the most "
                     "frequent); 0 = all.")
flags.DEFINE_integer("num_workers", None, "Worker processes counting words (default: all "
                     "cores). The vocabulary does not depend on it.")
flags.DEFINE_float("split_mb", 4, "Bytes of a plain input file per counting part, in MB.")
flags.DEFINE_integer("max_words", 1_000_000, "Pieces are ranked on the N most frequent words "
                     "(exact counts); also the distinct words held in memory before counts "
                     "are spilled to --temp_dir.")
flags.DEFINE_string("temp_dir", None, "Directory for spilled counts (default: the machine's "
                    "temporary directory).")


def main(argv: List[str]) -> None:
    if len(argv) > 1:
        raise UserError(f"unexpected arguments: {' '.join(argv[1:])}")
    # A scheduler's SIGTERM cleans up like Ctrl-C: spilled counts and the temporary outputs.
    job_entry.stop_on_sigterm()
    for name in ("vocab_file", "input_file", "output_vocab_file"):
        if FLAGS[name].value in (None, ""):
            raise UserError(f"--{name} is required")
    config = extend_job.ExtendConfig(
        mode=FLAGS.mode, num_new_tokens=FLAGS.num_new_tokens,
        min_frequency=FLAGS.min_frequency, do_lower_case=FLAGS.do_lower_case,
        candidate_vocab_size=FLAGS.candidate_vocab_size,
        limit_alphabet=FLAGS.limit_alphabet or None)
    if not FLAGS.split_mb > 0:
        raise UserError(f"--split_mb={FLAGS.split_mb}: must be > 0")
    num_workers = FLAGS.num_workers
    if num_workers is None:
        num_workers = process_pool.default_num_workers()
    counting = word_counting.CountConfig(
        num_workers=num_workers,
        split_bytes=max(1, int(FLAGS.split_mb * 1e6)), max_words=FLAGS.max_words,
        temp_dir=FLAGS.temp_dir or "")
    lines = extend_job.run(FLAGS.input_file, FLAGS.vocab_file, FLAGS.output_vocab_file,
                           config, counting)
    print("\n".join(lines), flush=True)


def console_main() -> None:
    """The `bert-tf-extend-vocab` console script."""
    errors.run_app(cli_main(main))


if __name__ == "__main__":
    console_main()
