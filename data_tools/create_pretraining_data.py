r"""Writes pretraining TFRecords (masked LM + next sentence prediction) from raw text.

Same flags, defaults and output schema as google-research/bert's create_pretraining_data.py,
plus streaming (bounded memory), parallel workers, sharded and gzip output, whole-word
masking with one decision per word, n-gram masking, an MLM-only mode and packed MLM-only rows.

    python -m data_tools.create_pretraining_data \
      --input_file=data/corpus/wikitext2.bert.txt \
      --output_file='out/data/train-{shard}-of-{num_shards}.tfrecord' --num_output_shards=4 \
      --vocab_file=out/vocab.txt --dupe_factor=10

Input: one sentence per line, a blank line between documents (globs and comma lists).
Output: one tf.train.Example per instance with the features of `bert_tf/core/schema.py`.

`--feature_set=packed_mlm` (masked LM only) fills every row with several documents, each as
[CLS] tokens [SEP] (a long document cut at sentence ends into row-sized pieces), and writes
two more features: `doc_ids` (1..k, the document of each token in its row; 0 for padding)
and `position_ids` (each token's position in its document, restarting at 0 at its [CLS]).
The trainer keeps attention within each document and takes positions from them.
The same --random_seed, inputs and outputs give byte-identical files for any --num_workers.
"""

from __future__ import annotations

from typing import Sequence

from absl import flags

from bert_tf.core import errors, schema
from bert_tf.core.errors import UserError, cli_main
from data_tools.pretraining_data import create_job, instances, masking
from data_tools.pretraining_data.create_config import CreateConfig
from data_tools.runtime import job_entry, process_pool

FLAGS = flags.FLAGS

# The original's flags (names and defaults).
flags.DEFINE_string("input_file", None, "Input text file(s): comma-separated files or globs.")
flags.DEFINE_string("output_file", None,
                    "Output TFRecord file(s): a comma-separated list (one per shard), or one "
                    "name containing {shard} (and optionally {num_shards}) with "
                    "--num_output_shards.")
flags.DEFINE_string("vocab_file", None, "The WordPiece vocabulary file.")
flags.DEFINE_bool("do_lower_case", True, "Lower-case the input (uncased models).")
flags.DEFINE_bool("do_whole_word_mask", False,
                  "Mask whole words (all WordPieces of a word) instead of single pieces.")
flags.DEFINE_integer("max_seq_length", 128, "Maximum sequence length.")
flags.DEFINE_integer("max_predictions_per_seq", 20,
                     "Maximum number of masked LM predictions per sequence.")
flags.DEFINE_integer("random_seed", 12345, "Random seed for data generation.")
flags.DEFINE_integer("dupe_factor", 10,
                     "Number of times to duplicate the input data (with different masks).")
flags.DEFINE_float("masked_lm_prob", 0.15, "Masked LM probability.")
flags.DEFINE_float("short_seq_prob", 0.1,
                   "Probability of creating sequences shorter than the maximum length.")

# Beyond the original.
flags.DEFINE_string("whole_word_mask_mode", masking.MODE_FIXED,
                    "With --do_whole_word_mask: 'fixed' draws the 80/10/10 [MASK]/keep/random "
                    "decision once per word (or n-gram span); 'original' draws it per piece "
                    "as google-research/bert does.")
flags.DEFINE_integer("max_ngram_size", 1,
                     "Mask spans of up to this many units (words with --do_whole_word_mask, "
                     "else pieces); span length n has probability proportional to 1/n.")
flags.DEFINE_bool("no_nsp", False,
                  "MLM only: pack whole sentences across document boundaries ([SEP] between "
                  "documents) into [CLS] ... [SEP]; segment ids and NSP labels are all 0.")
flags.DEFINE_enum("feature_set", schema.FEATURE_SET_BERT, list(schema.FEATURE_SETS),
                  "bert: the original features (NSP pairs, or --no_nsp blocks). packed_mlm: "
                  "MLM only, several whole documents per row ([CLS] ... [SEP] each; long ones "
                  "cut into row-sized pieces), plus doc_ids and position_ids features; "
                  "--short_seq_prob does not apply.")
flags.DEFINE_string("output_compression", "", "'' (none) or 'gzip'.")
flags.DEFINE_bool("use_v2_feature_names", False,
                  "Name features input_word_ids / input_type_ids instead of input_ids / "
                  "segment_ids.")
flags.DEFINE_integer("num_workers", None, "Worker processes (default: all cores).")
flags.DEFINE_integer("num_output_shards", None,
                     "Number of output files when --output_file contains {shard}.")
flags.DEFINE_float("chunk_mb", 0.5,
                   "Text per chunk, the unit of parallel work, in MB. The output depends on "
                   "it (not on --num_workers).")
flags.DEFINE_float("shuffle_memory_mb", 16,
                   "Memory for the global shuffle of all records; beyond it, the workers "
                   "spill records to temporary files, each written and read once, and read "
                   "them back in buckets of at most this size, one per worker (the output "
                   "does not depend on it).")
flags.DEFINE_string("temp_dir", None,
                    "Directory for the shuffle's temporary files (default: beside local "
                    "outputs; the machine's temporary directory when the outputs are "
                    "remote). Removed when the job ends, also on errors and Ctrl-C.")
flags.DEFINE_integer("log_examples", 3, "Number of decoded instances logged at the start.")
flags.DEFINE_float("progress_seconds", 5.0, "Seconds between progress lines (0: none).")
flags.DEFINE_string("beam_pipeline_options", None,
                    "Run the job as an Apache Beam pipeline with these options (e.g. "
                    "\"--runner=DataflowRunner --project=P --region=R --temp_location=gs://..."
                    "\"); same output bytes as the local run. Needs the [beam] extra.")


def config_from_flags() -> CreateConfig:
    """Validates the flags and turns them into a frozen `CreateConfig`."""
    for name in ("input_file", "output_file", "vocab_file"):
        if not FLAGS[name].value:
            raise UserError(f"--{name} is required")
    num_workers = FLAGS.num_workers
    if num_workers is None:
        num_workers = process_pool.default_num_workers()
    compression = FLAGS.output_compression.strip().lower()
    compression = "" if compression == "none" else compression
    if not FLAGS.chunk_mb > 0:
        raise UserError(f"--chunk_mb={FLAGS.chunk_mb}: must be > 0")
    if not FLAGS.shuffle_memory_mb >= 1:
        raise UserError(f"--shuffle_memory_mb={FLAGS.shuffle_memory_mb}: must be >= 1")
    packed = FLAGS.feature_set == schema.FEATURE_SET_PACKED_MLM
    # Flag values are checked by CreateConfig itself; the files only after that.
    settings = dict(
        vocab_file=FLAGS.vocab_file,
        do_lower_case=FLAGS.do_lower_case,
        packing=instances.PackingConfig(max_seq_length=FLAGS.max_seq_length,
                                        short_seq_prob=FLAGS.short_seq_prob,
                                        nsp=not (FLAGS.no_nsp or packed), packed=packed),
        masked_lm_prob=FLAGS.masked_lm_prob,
        max_predictions_per_seq=FLAGS.max_predictions_per_seq,
        do_whole_word_mask=FLAGS.do_whole_word_mask,
        whole_word_mask_mode=FLAGS.whole_word_mask_mode,
        max_ngram_size=FLAGS.max_ngram_size,
        random_seed=FLAGS.random_seed,
        dupe_factor=FLAGS.dupe_factor,
        output_compression=compression,
        use_v2_feature_names=FLAGS.use_v2_feature_names,
        num_workers=num_workers,
        chunk_bytes=max(1, int(FLAGS.chunk_mb * 1e6)),
        shuffle_memory_bytes=int(FLAGS.shuffle_memory_mb * 2**20),
        temp_dir=FLAGS.temp_dir or "",
        log_examples=max(0, FLAGS.log_examples),
        progress_seconds=FLAGS.progress_seconds,
    )
    CreateConfig(input_files=(), output_files=(), **settings)
    inputs, outputs = job_entry.job_files(FLAGS.input_file, FLAGS.output_file,
                                          FLAGS.num_output_shards)
    return CreateConfig(input_files=inputs, output_files=outputs, **settings)


def run_on_beam(config: CreateConfig, options: str) -> create_job.CreateSummary:
    """The job as an Apache Beam pipeline (Beam is imported only here: the `[beam]` extra)."""
    from data_tools.pretraining_data import beam_create

    return beam_create.run(config, options)


@cli_main
def main(argv: Sequence[str]) -> None:
    job_entry.run_job(argv, config_from_flags, create_job.run, run_on_beam,
                      FLAGS.beam_pipeline_options,
                      [name for name in job_entry.LOCAL_ONLY_FLAGS if FLAGS[name].present])


def console_main() -> None:
    """The `bert-tf-create-data` console script."""
    errors.run_app(main)


if __name__ == "__main__":
    console_main()
