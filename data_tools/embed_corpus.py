r"""Embeds a (sharded) BEIR corpus with an exported bi-encoder into sharded embedding files.

    python -m bert_tf.export --output_dir=scifact_ft --export_dir=export/scifact/1
    python -m data_tools.embed_corpus --input_file='corpus/part-*.jsonl.gz' \
      --saved_model_dir=export/scifact/1 --output_dir=embeddings/scifact

Input: BEIR corpus files ({"_id", "title", "text"} per line; plain or gzip; globs and comma
lists), cut into shards of --shard_mb of input (a compressed file is one shard). Output, in
--output_dir: per shard a float32 `.npy` of the `embed` signature's vectors and the ids in
file order, then a manifest that `bert_tf.finetune.retrieval.embedding_store` reads
(docs/retrieval.md). A finished shard is never redone: after a kill, run the same command
again. --beam_pipeline_options runs the job as an Apache Beam pipeline (RunInference on the
same SavedModel) and writes the same bytes.
"""

from __future__ import annotations

import os
from typing import Sequence

from absl import flags

from bert_tf.core import errors, fileio
from bert_tf.core.errors import cli_main
from data_tools.embed import embed_job
from data_tools.runtime import job_entry

FLAGS = flags.FLAGS

flags.DEFINE_string("input_file", None, "BEIR corpus file(s), .jsonl or .jsonl.gz: "
                    "comma-separated files or globs, embedded in this order.")
flags.DEFINE_string("saved_model_dir", None, "An exported bi-encoder (python -m "
                    "bert_tf.export of a run_retrieval output_dir or a sentence-transformers "
                    "folder).")
flags.DEFINE_string("output_dir", None, "The embedding shards, embed_job.json and "
                    "manifest.json. Rerun into the same directory to resume.")
flags.DEFINE_string("signature", "embed", "The SavedModel signature: text (string [batch]) "
                    "-> embedding (float32 [batch, dim]).")
flags.DEFINE_integer("batch_size", 64, "Texts per call of the signature (the longest of a "
                     "shard first). The output depends on it: each batch is padded to its "
                     "longest text.")
flags.DEFINE_float("shard_mb", 64.0, "Input per shard, in MB (a compressed file is one "
                   "shard). The output's sharding depends on it.")
flags.DEFINE_integer("max_shards_per_run", 0, "Stop after embedding this many shards "
                     "(0: all); the next run goes on.")
flags.DEFINE_bool("progress", True, "Show a progress bar on stderr (local runner).")
flags.DEFINE_string("beam_pipeline_options", None,
                    "Run the job as an Apache Beam pipeline with these options (e.g. "
                    "\"--runner=DataflowRunner --project=P --region=R --temp_location=gs://..."
                    "\"); same output bytes as the local run. Needs the [beam] extra.")


def _absolute(path: str) -> str:
    return path if fileio.is_remote(path) else os.path.abspath(path)


def config_from_flags() -> embed_job.EmbedConfig:
    """Validates the flags and turns them into a frozen `EmbedConfig`."""
    for name in ("input_file", "saved_model_dir", "output_dir"):
        if not FLAGS[name].value:
            raise errors.UserError(f"--{name} is required")
    if not FLAGS.shard_mb > 0:
        raise errors.UserError(f"--shard_mb={FLAGS.shard_mb}: must be > 0")
    # Absolute paths: the job file records them, the same for either runner.
    inputs = tuple(map(_absolute, fileio.expand_patterns(FLAGS.input_file, "input_file")))
    output_dir = _absolute(FLAGS.output_dir)
    return embed_job.EmbedConfig(
        input_files=inputs, saved_model_dir=_absolute(FLAGS.saved_model_dir),
        output_dir=output_dir, signature=FLAGS.signature, batch_size=FLAGS.batch_size,
        shard_bytes=max(1, int(FLAGS.shard_mb * 1e6)),
        max_shards_per_run=FLAGS.max_shards_per_run, progress=FLAGS.progress)


def run_local(config: embed_job.EmbedConfig) -> None:
    embed_job.run(config)


def run_on_beam(config: embed_job.EmbedConfig, options: str) -> None:
    """The job as an Apache Beam pipeline (Beam is imported only here: the `[beam]` extra)."""
    from data_tools.embed import beam_embed

    beam_embed.run(config, options)


@cli_main
def main(argv: Sequence[str]) -> None:
    job_entry.run_job(argv, config_from_flags, run_local, run_on_beam,
                      FLAGS.beam_pipeline_options,
                      [name for name in ("progress",) if FLAGS[name].present])


def console_main() -> None:
    """The `bert-tf-embed-corpus` console script."""
    errors.run_app(main)


if __name__ == "__main__":
    console_main()
