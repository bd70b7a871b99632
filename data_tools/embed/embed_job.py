"""The embed-corpus job: its config, the plan both runners share, and the local runner.

    plan the shards (`corpus_shards.plan`)  ->  load the SavedModel (its signature checked,
    the vectors' width)  ->  the job file (`embed_store.start_job`: a rerun of the same job
    resumes, another job is refused)  ->  the shards not finished yet, in order
    ->  per shard: read its passages, embed them batch by batch, write its two files
    ->  when every shard is finished: ids unique across shards, the manifest

The local runner embeds one shard at a time in this process (TensorFlow uses the cores)
with a progress bar (tqdm, on stderr: input bytes, passages per second). The Beam runner
(`beam_embed`) runs the same steps per shard on workers. --max_shards_per_run stops after N
shards (a run cut short on purpose; the next run goes on), as a kill would, but cleanly.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Callable, List, Optional, Tuple

from absl import logging

from bert_tf.core import fileio
from bert_tf.core.errors import UserError
from data_tools.embed import corpus_shards, embed_store, saved_model_embed
from data_tools.inputs import splits


@dataclasses.dataclass(frozen=True)
class EmbedConfig:
    """The flags of embed_corpus.

    Attributes:
        input_files: the corpus files, in order (their shards are numbered in this order).
        saved_model_dir: an exported bi-encoder (`python -m bert_tf.export`).
        output_dir: the shards, the job file and the manifest (`embed_store`).
        signature: the SavedModel signature that embeds text.
        batch_size: texts per call of the signature (the output depends on it: padding).
        shard_bytes: input bytes per shard (the output's sharding depends on it).
        max_shards_per_run: stop after this many shards (0: all).
        progress: show the progress bar.
    """

    input_files: Tuple[str, ...]
    saved_model_dir: str
    output_dir: str
    signature: str = saved_model_embed.SIGNATURE
    batch_size: int = 64
    shard_bytes: int = 64 << 20
    max_shards_per_run: int = 0
    progress: bool = True

    def __post_init__(self) -> None:
        if not self.input_files:
            raise UserError("--input_file is required")
        for name in ("saved_model_dir", "output_dir"):
            if not getattr(self, name):
                raise UserError(f"--{name} is required")
        if self.batch_size < 1:
            raise UserError(f"--batch_size must be >= 1, got {self.batch_size}")
        if self.shard_bytes < 1:
            raise UserError("--shard_mb must be > 0")
        if self.max_shards_per_run < 0:
            raise UserError(f"--max_shards_per_run must be >= 0, got {self.max_shards_per_run}")


@dataclasses.dataclass(frozen=True)
class Plan:
    """What a run does.

    Attributes:
        shards: every shard of the job.
        pending: the shards this run embeds (not finished, at most --max_shards_per_run).
        finished: how many were finished before this run.
        dim: the vectors' width.
        fingerprint: the manifest's (the job file's digest).
    """

    shards: List[splits.Split]
    pending: List[splits.Split]
    finished: int
    dim: int
    fingerprint: str


def prepare(config: EmbedConfig, embedder: saved_model_embed.SignatureEmbedder) -> Plan:
    """The shards, checked against the output directory's job (module docstring).

    Raises:
        UserError: an unreadable input, another job's output directory.
    """
    shards = corpus_shards.plan(config.input_files, config.shard_bytes)
    job = {"inputs": [[path, fileio.size(path)] for path in config.input_files],
           "saved_model_sha256": saved_model_embed.model_digest(config.saved_model_dir),
           "signature": config.signature, "batch_size": config.batch_size,
           "shard_bytes": config.shard_bytes, "num_shards": len(shards)}
    embed_store.start_job(config.output_dir, job)
    removed = embed_store.remove_temporaries(config.output_dir)
    if removed:
        logging.info("removed %d temporary file(s) of an earlier run", removed)
    done = embed_store.finished_shards(config.output_dir, len(shards))
    pending = [s for s in shards if s.index not in done]
    if config.max_shards_per_run:
        pending = pending[:config.max_shards_per_run]
    logging.info("%d shard(s) of %d input file(s), %.1f MB: %d finished before, %d to embed "
                 "now", len(shards), len(config.input_files),
                 sum(s.size for s in shards) / 1e6, len(done), len(pending))
    return Plan(shards, pending, len(done), embedder.dim, embed_store.job_fingerprint(job))


def embed_one(split: splits.Split, config: EmbedConfig, embedder, dim: int, count: int,
              progress: Optional[Callable[[int, float], None]] = None) -> int:
    """Reads, embeds and writes one shard; returns its passages.

    Args:
        progress: called after each batch with its passages and its share of the shard's
            stored bytes.
    """
    passages = corpus_shards.read_shard(split)
    scale = split.size / max(1, sum(passages.sizes))  # a compressed shard: stored bytes
    on_batch = progress and (lambda rows: progress(
        len(rows), scale * sum(passages.sizes[i] for i in rows)))
    vectors = saved_model_embed.embed_shard(embedder, passages.texts, config.batch_size, dim,
                                            on_batch)
    embed_store.write_shard(config.output_dir, split.index, count, vectors, passages.ids)
    return len(passages.ids)


def finish(config: EmbedConfig, plan: Plan) -> bool:
    """Writes the manifest if every shard is finished; returns whether it did."""
    left = len(plan.shards) - len(embed_store.finished_shards(config.output_dir,
                                                              len(plan.shards)))
    if left:
        logging.info("%d shard(s) left: run the same command again to embed them", left)
        return False
    manifest = embed_store.write_manifest(config.output_dir, len(plan.shards), plan.dim,
                                          plan.fingerprint)
    logging.info("wrote %s: %d passages x %d in %d shard(s)",
                 os.path.join(config.output_dir, embed_store.MANIFEST), manifest["rows"],
                 manifest["dim"], len(plan.shards))
    return True


def run(config: EmbedConfig) -> bool:
    """Runs the job locally (module docstring); returns whether the manifest was written.

    Raises:
        UserError: bad input, in one line.
    """
    from tqdm import tqdm

    embedder = saved_model_embed.SignatureEmbedder(config.saved_model_dir, config.signature)
    plan = prepare(config, embedder)
    start, passages = time.monotonic(), 0
    total = sum(s.size for s in plan.pending)
    with tqdm(total=total, unit="B", unit_scale=True, desc="embedding", mininterval=1.0,
              disable=not config.progress or not total) as bar:

        def progress(n: int, stored_bytes: float) -> None:
            nonlocal passages
            passages += n
            bar.update(stored_bytes)
            bar.set_postfix(passages=passages, refresh=False)

        for split in plan.pending:
            embed_one(split, config, embedder, plan.dim, len(plan.shards), progress)
    seconds = time.monotonic() - start
    if plan.pending:
        logging.info("embedded %d passages in %d shard(s) in %.1f s (%.1f passages/s)",
                     passages, len(plan.pending), seconds, passages / max(seconds, 1e-9))
    return finish(config, plan)
