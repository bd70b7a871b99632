r"""Turns raw documents into BERT's input format: one sentence per line, a blank line
between documents (the input of `data_tools.build_vocab` and `create_pretraining_data`).

    python -m data_tools.prepare_corpus --input_file='dump/*.jsonl.gz' --input_format=jsonl \
      --output_file='corpus/part-{shard}-of-{num_shards}.txt' --num_output_shards=8 --dedup

Inputs: plain text or JSON Lines (one object per document, its text in --text_field, as
WikiExtractor's --json output), gzip-compressed or not, local or gs://. In plain text a
document is a file, a line or a block between blank lines (--document_per). A document's
line breaks are paragraph breaks: no sentence crosses one. Sentences are split by sentencex
(--language picks its rules); whitespace is normalised; empty, short (--min_sentences,
--min_chars) and, with --dedup, duplicate documents are dropped and counted. With
--heldout_file and --heldout_every=N, every N-th kept document goes to the held-out file (for
evaluation) instead of the shards. The output is the same for any --num_workers.
"""

from __future__ import annotations

from typing import Sequence

from absl import flags

from bert_tf.core import errors
from bert_tf.core.errors import UserError, cli_main
from data_tools.prepare import prepare_job, raw_documents, sentences
from data_tools.prepare.prepare_config import PrepareConfig
from data_tools.runtime import job_entry, process_pool

FLAGS = flags.FLAGS

flags.DEFINE_string("input_file", None, "Input file(s): comma-separated files or globs "
                    "(local or gs://; .gz or gzip data is decompressed).")
flags.DEFINE_string("output_file", None,
                    "Output text file(s): a comma-separated list (one per shard), or one name "
                    "containing {shard} (and optionally {num_shards}) with "
                    "--num_output_shards.")
flags.DEFINE_integer("num_output_shards", None,
                     "Number of output files when --output_file contains {shard}; documents "
                     "are dealt to them in turn.")
flags.DEFINE_enum("input_format", raw_documents.FORMAT_TEXT, list(raw_documents.FORMATS),
                  "'text', or 'jsonl': one JSON object per line and per document.")
flags.DEFINE_string("text_field", "text", "With --input_format=jsonl: the field holding "
                    "the document's text.")
flags.DEFINE_enum("document_per", raw_documents.PER_BLANK_LINE, list(raw_documents.DOCUMENT_PER),
                  "With --input_format=text: one document per file, per line, or per block "
                  "of lines between blank lines.")
flags.DEFINE_string("language", sentences.DEFAULT_LANGUAGE,
                    "Language code for the sentence splitter's rules (en, de, fr, es, ru, "
                    "zh, ja, ...; unknown codes fall back to related languages, then English).")
flags.DEFINE_integer("min_sentences", 1, "Drop documents with fewer sentences.")
flags.DEFINE_integer("min_chars", 0, "Drop documents with fewer characters.")
flags.DEFINE_bool("dedup", False,
                  "Drop documents identical (after whitespace normalisation) to an earlier "
                  "one; keeps 8 bytes per document in memory.")
flags.DEFINE_string("heldout_file", None, "With --heldout_every: a text file that gets "
                    "every N-th kept document (in input order) instead of the shards, e.g. "
                    "to measure the masked LM on text it never trained on.")
flags.DEFINE_integer("heldout_every", 0, "Hold out every N-th kept document (documents N-1, "
                     "2N-1, ... from 0) to --heldout_file; the others are dealt to the "
                     "shards in turn. 0: none.")
flags.DEFINE_integer("num_workers", None, "Worker processes (default: all cores).")
flags.DEFINE_float("chunk_mb", 1.0, "Text per chunk, the unit of parallel work, in MB (the "
                   "output does not depend on it).")
flags.DEFINE_float("progress_seconds", 5.0, "Seconds between progress lines (0: none).")
flags.DEFINE_string("beam_pipeline_options", None,
                    "Run the job as an Apache Beam pipeline with these options (e.g. "
                    "\"--runner=DataflowRunner --project=P --region=R --temp_location=gs://..."
                    "\"); same output bytes as the local run. Needs the [beam] extra.")


def config_from_flags() -> PrepareConfig:
    """Validates the flags and turns them into a frozen `PrepareConfig`."""
    for name in ("input_file", "output_file"):
        if not FLAGS[name].value:
            raise UserError(f"--{name} is required")
    num_workers = FLAGS.num_workers
    if num_workers is None:
        num_workers = process_pool.default_num_workers()
    if not FLAGS.chunk_mb > 0:
        raise UserError(f"--chunk_mb={FLAGS.chunk_mb}: must be > 0")
    settings = dict(
        input_format=FLAGS.input_format,
        text_field=FLAGS.text_field,
        document_per=FLAGS.document_per,
        language=FLAGS.language,
        min_sentences=FLAGS.min_sentences,
        min_chars=FLAGS.min_chars,
        dedup=FLAGS.dedup,
        num_workers=num_workers,
        chunk_bytes=max(1, int(FLAGS.chunk_mb * 1e6)),
        progress_seconds=FLAGS.progress_seconds,
        heldout_every=FLAGS.heldout_every,
    )
    # Flag values are checked by PrepareConfig itself; the files only after that.
    heldout = FLAGS.heldout_file or ""
    PrepareConfig(input_files=(), output_files=(), heldout_file=heldout, **settings)
    inputs, outputs = job_entry.job_files(FLAGS.input_file, FLAGS.output_file,
                                          FLAGS.num_output_shards)
    job_entry.check_not_inputs("heldout_file", (heldout,) if heldout else (), inputs)
    return PrepareConfig(input_files=inputs, output_files=outputs, heldout_file=heldout,
                         **settings)


def run_on_beam(config: PrepareConfig, options: str) -> prepare_job.PrepareSummary:
    """The job as an Apache Beam pipeline (Beam is imported only here: the `[beam]` extra)."""
    from data_tools.prepare import beam_prepare

    return beam_prepare.run(config, options)


@cli_main
def main(argv: Sequence[str]) -> None:
    job_entry.run_job(argv, config_from_flags, prepare_job.run, run_on_beam,
                      FLAGS.beam_pipeline_options,
                      [name for name in job_entry.LOCAL_ONLY_FLAGS if FLAGS[name].present])


def console_main() -> None:
    """The console-script form of `python -m data_tools.prepare_corpus`."""
    errors.run_app(main)


if __name__ == "__main__":
    console_main()
