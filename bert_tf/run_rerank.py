"""Train a cross-encoder reranker on BEIR folders and rerank a first stage's candidates.

    python -m bert_tf.run_rerank --init_checkpoint=pretrain_out \\
        --train_dir=beir/scifact --eval_dir=beir/scifact --output_dir=scifact_rerank \\
        --do_train --do_rerank --first_stage=bm25 --rerank_top_k=100

A cross-encoder reads `[CLS] query [SEP] passage [SEP]` and gives one relevance logit (BERT's
classifier head on the pooled output, as transformers' BertForSequenceClassification with
one label): run_classifier's flow on the same runner, trained with binary cross-entropy on
(query, passage, label) pairs: each positive of --train_dir's qrels/train.tsv with label 1
and --num_hard_negatives BM25-mined negatives (bm25s) with label 0, or the rows of
--train_file (query, positive, negatives; run_retrieval's hard_negatives.jsonl is one).
--loss=listwise trains on the same as groups (a positive and its negatives) with a softmax
over each group instead; --classifier_readout picks the head's input. --fusion=rrf writes
the reciprocal rank fusion of the first stage's order and the model's instead of the
model's alone.
--do_rerank scores the --rerank_top_k candidates of --first_stage (bm25, or a TREC run file
such as a bi-encoder's) for --eval_dir's --eval_split queries, writes reranked_run.trec and,
in eval_results.txt, ndcg_at_10, recall_at_100, mrr_at_10 and map_at_100 as BEIR computes
them, the first stage's four as first_stage_*, and eval_loss. --export_dir writes a
SavedModel with a `score` signature (query, passage -> score); `python -m
bert_tf.convert_checkpoint --to_format=cross_encoder` a folder that sentence-transformers'
CrossEncoder loads.
"""

from __future__ import annotations

from absl import flags

from bert_tf import finetune_main
from bert_tf.finetune import cli

FLAGS = flags.FLAGS
cli.define_common_flags(max_seq_length=256, learning_rate=2e-5, train_batch_size=32,
                        eval_batch_size=64, run_modes={
                            "do_train": "Train the cross-encoder.",
                            "do_rerank": "Rerank --eval_dir's --eval_split: the "
                                         "--rerank_top_k candidates of --first_stage."})
flags.DEFINE_string("train_dir", None, "A BEIR folder: positives from qrels/train.tsv, "
                    "negatives mined by BM25 from its corpus.")
flags.DEFINE_string("train_file", None, "Training rows instead: .tsv (query<TAB>positive"
                    "[<TAB>negative...]) or .jsonl (query, positive, negative(s)); .gz too. "
                    "Rows without negatives get BM25's from the file's positives.")
flags.DEFINE_integer("num_hard_negatives", 4, "BM25 negatives per positive (label 0).")
flags.DEFINE_integer("hard_negative_range_min", 0, "Skip this many best-ranked non-positive "
                     "passages (likely unlabelled positives).")
flags.DEFINE_integer("hard_negative_range_max", 100, "Mine from BM25 ranks below this.")
flags.DEFINE_enum("hard_negative_sampling", "top", ["top", "random"], "top: the best-ranked "
                  "candidates; random: drawn from the range with --seed.")
flags.DEFINE_string("eval_dir", None, "The BEIR folder --do_rerank scores: corpus.jsonl, "
                    "queries.jsonl, qrels/<split>.tsv.")
flags.DEFINE_string("eval_split", "test", "The qrels split --do_rerank scores.")
flags.DEFINE_string("first_stage", "bm25", "The candidates: bm25 (bm25s over --eval_dir's "
                    "corpus) or a TREC run file (query-id Q0 corpus-id rank score name).")
flags.DEFINE_integer("rerank_top_k", 100, "Candidates reranked per query.")
flags.DEFINE_enum("loss", "bce", ["bce", "listwise"], "bce: binary cross-entropy of each "
                  "(query, passage) pair, --train_batch_size pairs a batch; listwise: softmax "
                  "cross-entropy over each positive and its --num_hard_negatives negatives, "
                  "--train_batch_size such groups a batch (each of 1 + --num_hard_negatives "
                  "pairs).")
cli.define_classifier_readout_flag()
flags.DEFINE_enum("fusion", "none", ["none", "rrf"], "none: the reranked run is the model's "
                  "order; rrf: the reciprocal rank fusion of the first stage's order and the "
                  "model's (sum of 1 / (--rrf_k + rank)), the model's own scored as "
                  "reranker_* in eval_results.txt.")
flags.DEFINE_float("rrf_k", 60.0, "The reciprocal rank fusion constant (Cormack et al.'s 60).")


def _task():
    from bert_tf.finetune.reranking.rerank_task import RerankSettings, RerankTask

    return RerankTask(RerankSettings(
        train_dir=FLAGS.train_dir or "", train_file=FLAGS.train_file or "",
        eval_dir=FLAGS.eval_dir or "", eval_split=FLAGS.eval_split,
        first_stage=FLAGS.first_stage, rerank_top_k=FLAGS.rerank_top_k,
        num_hard_negatives=FLAGS.num_hard_negatives,
        hard_negative_range_min=FLAGS.hard_negative_range_min,
        hard_negative_range_max=FLAGS.hard_negative_range_max,
        hard_negative_sampling=FLAGS.hard_negative_sampling, seed=FLAGS.seed,
        loss=FLAGS.loss, classifier_readout=FLAGS.classifier_readout, fusion=FLAGS.fusion,
        rrf_k=FLAGS.rrf_k))


# The `bert-tf-rerank` console script is console_main.
main, console_main = finetune_main.entry_points(_task, __name__, eval_mode="do_rerank")


if __name__ == "__main__":
    console_main()
