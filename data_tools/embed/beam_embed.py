"""The embed-corpus job as an Apache Beam pipeline, with Beam's RunInference.

`python -m data_tools.embed_corpus ... --beam_pipeline_options="--runner=DataflowRunner ..."`
writes the bytes of the local run (`embed_job.run`):

1. The launcher loads the SavedModel (a missing signature fails here, not on a worker),
   plans the shards and checks the job file exactly as the local runner does, and leaves
   out the shards a previous run finished.
2. Workers read their shards (`corpus_shards.read_shard`) and emit each batch of
   `saved_model_embed.batch_rows` as one element, (shard, rows) -> texts, and each shard's
   ids.
3. `RunInference` with `EmbedModelHandler` (a `ModelHandler` that loads the SavedModel once
   per worker process and calls its `embed` signature) embeds each element as it is: Beam's
   own batching is held at one element, so the batches, and the bytes, are the local ones.
   (Beam's TensorFlow handlers load Keras models through tensorflow_hub, and call the model
   rather than a named signature, so they do not fit an exported SavedModel.)
4. Each shard's vectors are grouped with its ids and the shard is written by
   `embed_store.write_shard` (atomic renames, its .npy last), so a finished shard survives a
   failed or cancelled job and a rerun embeds only the others.
5. The launcher checks the ids and writes the manifest (`embed_job.finish`).

Memory per worker: one shard's passages and vectors (--shard_mb of text), plus the model.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Dict, Iterable, Optional, Sequence

import numpy as np
from absl import logging
from apache_beam.ml.inference.base import KeyedModelHandler, ModelHandler, RunInference

from data_tools.embed import corpus_shards, embed_store, saved_model_embed
from data_tools.embed.embed_job import EmbedConfig, finish, prepare
from data_tools.runtime import beam_runtime
from data_tools.runtime.beam_runtime import NAMESPACE, beam


class EmbedModelHandler(ModelHandler):
    """RunInference's handler for an exported bi-encoder: examples are batches of texts
    (tuples of str), predictions float32 [texts, dim] arrays.

    Args:
        model_dir: the SavedModel.
        signature: its embedding signature.
    """

    def __init__(self, model_dir: str, signature: str = saved_model_embed.SIGNATURE) -> None:
        super().__init__(min_batch_size=1, max_batch_size=1)  # an element is a batch
        self.model_dir = model_dir
        self.signature = signature

    def load_model(self) -> saved_model_embed.SignatureEmbedder:
        return saved_model_embed.SignatureEmbedder(self.model_dir, self.signature)

    def run_inference(self, batch: Sequence[Sequence[str]],
                      model: saved_model_embed.SignatureEmbedder,
                      inference_args: Optional[Dict[str, Any]] = None) -> Iterable[np.ndarray]:
        return [model(list(texts)) for texts in batch]

    def get_num_bytes(self, batch: Sequence[Sequence[str]]) -> int:
        return sum(len(t.encode("utf-8")) for texts in batch for t in texts)

    def get_metrics_namespace(self) -> str:
        return f"{NAMESPACE}_embed"


class _ReadShard(beam.DoFn):
    """split -> ((shard, rows bytes), texts) per batch; the shard's ids on the "ids" output."""

    def __init__(self, batch_size: int):
        self.batch_size = batch_size

    def process(self, split):
        passages = corpus_shards.read_shard(split)
        beam.metrics.Metrics.counter(NAMESPACE, "passages").inc(len(passages.ids))
        yield beam.pvalue.TaggedOutput("ids", (split.index, passages.ids))
        for rows in saved_model_embed.batch_rows(passages.texts, self.batch_size):
            yield (split.index, rows.tobytes()), tuple(passages.texts[i] for i in rows)


def _write_shard(item, output_dir: str, count: int, dim: int) -> int:
    """(shard, {"ids": [ids], "vectors": [(rows bytes, vectors), ...]}) -> the shard's files."""
    shard, groups = item
    (ids,) = groups["ids"]
    vectors = np.zeros((len(ids), dim), np.float32)
    for rows, batch in groups["vectors"]:
        vectors[np.frombuffer(rows, np.int64)] = batch
    embed_store.write_shard(output_dir, shard, count, vectors, ids)
    return shard


def run(config: EmbedConfig, options: str) -> bool:
    """Runs the job on Beam; writes the local run's shards and manifest.

    Args:
        options: Beam pipeline options, e.g. "--runner=DataflowRunner --project=...".

    Returns:
        Whether the manifest was written (every shard finished).

    Raises:
        UserError: as the local run, before the pipeline starts where possible.
    """
    config = dataclasses.replace(  # workers may run elsewhere
        config, input_files=tuple(map(beam_runtime.absolute, config.input_files)),
        saved_model_dir=beam_runtime.absolute(config.saved_model_dir),
        output_dir=beam_runtime.absolute(config.output_dir))
    opts = beam_runtime.pipeline_options(options, list(config.input_files)
                                         + [config.saved_model_dir, config.output_dir])
    plan = prepare(config, saved_model_embed.SignatureEmbedder(config.saved_model_dir,
                                                               config.signature))
    if plan.pending:
        start = time.monotonic()
        p = beam.Pipeline(options=opts)
        read = (p | "Shards" >> beam.Create(plan.pending)
                | "SpreadShards" >> beam.Reshuffle()
                | "Read" >> beam.ParDo(_ReadShard(config.batch_size)).with_outputs(
                    "ids", main="batches"))
        vectors = (read.batches
                   | "Embed" >> RunInference(KeyedModelHandler(
                       EmbedModelHandler(config.saved_model_dir, config.signature)))
                   | "ByShard" >> beam.MapTuple(lambda key, v: (key[0], (key[1], v))))
        _ = ({"ids": read.ids, "vectors": vectors} | "Group" >> beam.CoGroupByKey()
             | "Write" >> beam.Map(_write_shard, config.output_dir, len(plan.shards),
                                   plan.dim))
        counters = beam_runtime.execute(p)
        seconds = time.monotonic() - start
        passages = counters.get("passages")
        logging.info("Beam: embedded %s passages in %d shard(s) in %.1f s%s",
                     passages if passages is not None else "?", len(plan.pending), seconds,
                     f" ({passages / max(seconds, 1e-9):.1f} passages/s)" if passages else "")
    return finish(config, plan)
