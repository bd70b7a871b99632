"""--do_eval of a bi-encoder: embed the corpus and the queries, exact top-k, BEIR's metrics.

    passages -> shards of SHARD_ROWS vectors (or the stored ones, `embedding_store`)
    queries  -> vectors -> `search.top_k` (k = 100, the query's own id skipped)
             -> `ir_metrics.evaluate` -> {ndcg_at_10, recall_at_100, mrr_at_10, map_at_100}
             (and the run, written as a TREC run file: run_rerank's --first_stage)

Texts are embedded longest first, each batch cut to its longest row (rounded up to a
multiple of 8), as sentence-transformers' `encode` sorts by length: padding is masked out of
attention and pooling, so the cut changes no vector beyond float rounding, only the work.
One traced function takes every batch shape. Memory holds one shard's arrays and vectors at
a time, plus the query vectors.
"""

from __future__ import annotations

import hashlib
from typing import Callable, Dict, Iterator, List, Mapping, Optional, Sequence

import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf.core import fileio
from bert_tf.finetune.retrieval import embedding_store, features, ir_metrics, search, trec_run
from bert_tf.finetune.retrieval.beir_data import BeirSplit

SHARD_ROWS = 16384  # passages embedded (and stored) per shard
TOP_K = 100  # the deepest cutoff of ir_metrics.METRICS
RUN_FILE = "run.trec"  # in run_retrieval's output_dir: the --do_eval run
RUN_NAME = "bert_tf_bi_encoder"
LENGTH_MULTIPLE = 8
PROGRESS_ROWS = 1024  # a log line per this many texts embedded

Embed = Callable[[Dict[str, np.ndarray]], np.ndarray]


def embed_function(model) -> Embed:
    """A function of int32 encoder arrays [batch, length] -> float32 [batch, dim] vectors."""
    spec = {name: tf.TensorSpec([None, None], tf.int32) for name in features.INPUT_NAMES}

    @tf.function(input_signature=[spec], autograph=False)
    def embed(inputs):
        return model(inputs, training=False)["embedding"]

    return lambda arrays: embed({k: tf.constant(v) for k, v in arrays.items()}).numpy()


def embed_texts(embed: Embed, texts: Sequence[str], tokenizer, max_length: int,
                batch_size: int, what: str) -> np.ndarray:
    """float32 [texts, dim]: the vectors of `texts`, in their order (module docstring).

    Args:
        what: the flag of max_length (--max_query_length, --max_passage_length).
    """
    encoded = features.encode_texts(texts, tokenizer, max_length, what)
    if encoded.num_truncated:
        logging.info("%d of %d texts cut to --%s=%d", encoded.num_truncated, len(texts), what,
                     max_length)
    arrays = encoded.arrays
    lengths = arrays["input_mask"].sum(axis=1)
    order = np.argsort(-lengths, kind="stable")
    out = None
    for start in range(0, len(texts), batch_size):
        rows = order[start:start + batch_size]
        width = min(max_length, -(-int(lengths[rows].max()) // LENGTH_MULTIPLE)
                    * LENGTH_MULTIPLE)
        vectors = embed({k: v[rows, :width] for k, v in arrays.items()})
        done = start + len(rows)
        if done // PROGRESS_ROWS > start // PROGRESS_ROWS and done < len(texts):
            logging.info("embedded %d of %d texts", done, len(texts))
        if out is None:
            out = np.empty((len(texts), vectors.shape[1]), np.float32)
        out[rows] = vectors
    return out if out is not None else np.zeros((0, 0), np.float32)


def _vocab_digest(vocab_file: str) -> str:
    with fileio.open_file(vocab_file, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def corpus_settings(pooling: str, normalize: bool, max_passage_length: int,
                    do_lower_case: bool, vocab_file: str) -> Dict[str, object]:
    """What the passage vectors depend on besides the weights and the texts (the store's
    fingerprint)."""
    return {"pooling": pooling, "normalize": normalize, "max_passage_length": max_passage_length,
            "do_lower_case": do_lower_case, "vocab_sha256": _vocab_digest(vocab_file)}


def _shards(embed: Embed, texts: Sequence[str], tokenizer, max_length: int,
            batch_size: int) -> Iterator[np.ndarray]:
    for start in range(0, len(texts), SHARD_ROWS):
        logging.info("embedding passages %d to %d of %d", start + 1,
                     min(start + SHARD_ROWS, len(texts)), len(texts))
        yield embed_texts(embed, texts[start:start + SHARD_ROWS], tokenizer, max_length,
                          batch_size, "max_passage_length")


def corpus_embeddings(model, split: BeirSplit, tokenizer, settings: Mapping[str, object],
                      batch_size: int, embeddings_dir: str = "", embed: Optional[Embed] = None
                      ) -> embedding_store.StoredEmbeddings:
    """The corpus vectors: read from `embeddings_dir` when its fingerprint matches, else
    embedded with `embed` (default: `embed_function(model)`), and written there when given."""
    ids = list(split.corpus)
    texts = [split.corpus[pid].encoder_text for pid in ids]
    max_length = int(settings["max_passage_length"])
    embed = embed or embed_function(model)
    if not embeddings_dir:
        shards = list(_shards(embed, texts, tokenizer, max_length, batch_size))
        return embedding_store.StoredEmbeddings(ids=ids, shards=shards, fingerprint="")
    fingerprint = embedding_store.fingerprint(model.get_weights(), settings, zip(ids, texts))
    stored = embedding_store.read_embeddings(embeddings_dir, fingerprint)
    if stored is not None:
        logging.info("reusing the corpus embeddings in %s (fingerprint %s): %d passages",
                     embeddings_dir, fingerprint[:12], len(stored.ids))
        return stored
    stored = embedding_store.write_embeddings(
        embeddings_dir, ids, _shards(embed, texts, tokenizer, max_length, batch_size),
        fingerprint)
    logging.info("wrote the corpus embeddings to %s (fingerprint %s)", embeddings_dir,
                 fingerprint[:12])
    return stored


def evaluate(model, split: BeirSplit, tokenizer, settings: Mapping[str, object],
             max_query_length: int, batch_size: int, embeddings_dir: str = "",
             run_file: str = "") -> Dict[str, float]:
    """BEIR's metrics of `model` on `split` (module docstring).

    Args:
        model: a `BertEmbedder` (or any model returning {"embedding"}).
        split: the eval split (`beir_data.read_split`).
        tokenizer: a `FullTokenizer`.
        settings: `corpus_settings(...)`.
        max_query_length: tokens per query, [CLS] and [SEP] included.
        batch_size: texts embedded at once.
        embeddings_dir: where corpus vectors are stored and reused ("" = nowhere).
        run_file: also write the run (each query's top TOP_K) there as a TREC run file
            (`trec_run`; "" = nowhere), e.g. for a reranker's first stage.

    Returns:
        {"ndcg_at_10", "recall_at_100", "mrr_at_10", "map_at_100"}.
    """
    embed = embed_function(model)  # traced once, for passages and queries
    corpus = corpus_embeddings(model, split, tokenizer, settings, batch_size, embeddings_dir,
                               embed)
    query_ids: List[str] = list(split.queries)
    logging.info("embedding %d queries", len(query_ids))
    queries = embed_texts(embed, [split.queries[q] for q in query_ids],
                          tokenizer, max_query_length, batch_size, "max_query_length")
    indices, scores = search.top_k(queries, corpus.shards, TOP_K,
                                   skip_rows=search.identical_rows(query_ids, corpus.ids))
    run = ir_metrics.run_from_top_k(query_ids, corpus.ids, indices, scores)
    if run_file:
        trec_run.write_run(run_file, run, RUN_NAME)
    return ir_metrics.evaluate(split.qrels, run)
