"""Retrieval: bi-encoders that embed queries and passages, exact search over a corpus, and
BEIR's evaluation.

* `beir_data`: BEIR folders (corpus, queries, qrels) and plain (query, positive[, negative
  ...]) training files.
* `batching`: seeded training batches with no text twice in a batch; `features`: their texts
  to encoder arrays, queries and passages each to their own length.
* `embedder`, `pooling`: the encoder's sequence output pooled into one vector per text.
* `contrastive_loss`: in-batch negatives (MultipleNegativesRankingLoss) as an `Objective`,
  and the cached-gradient form (GradCache) for large batches at bounded memory.
* `search`: exact top-k by dot product, block by block; `embedding_store`: corpus
  embeddings in shards on disk, reused while the model is unchanged.
* `ir_metrics`: nDCG@10, Recall@100, MRR@10, MAP@100 as BEIR computes them; `trec_run`:
  runs read and written as TREC run files; `fusion`: reciprocal rank fusion of runs.
* `st_folder`: a sentence-transformers folder's pooling, normalisation and lengths.
* `bm25`: BM25 by the bm25s library (tokenise, index, top k), shared with rerankers;
  `hard_negatives`: negatives mined by BM25 or the initial model, as sentence-transformers'
  mine_hard_negatives.
* `retrieval_runner`: `python -m bert_tf.run_retrieval`'s flow on the shared trainer;
  `training_input`: its examples, batch order and tf.data input; `corpus_eval`: its
  --do_eval (embed the corpus and queries, search, the metrics).
"""
