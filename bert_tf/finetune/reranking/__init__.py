"""Reranking: a cross-encoder that scores (query, passage) pairs, on the classification
flow with one logit (python -m bert_tf.run_rerank).

* `rerank_pairs`: (query, passage, label) training pairs from a BEIR folder's qrels with
  BM25-mined negatives, or from a file of (query, positive, negatives).
* `rerank_objective`: per-example binary cross-entropy of the one logit.
* `first_stage`: the candidates to rerank, BM25's top k or a TREC run file's; TREC run
  files read and written.
* `rerank_task`: the task the shared runner fine-tunes and evaluates (`BertClassifier`
  with one label): --do_rerank scores the candidates, writes the reranked run and BEIR's
  metrics.
"""
