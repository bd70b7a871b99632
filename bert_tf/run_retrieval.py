"""Train and evaluate a bi-encoder (query and passage embeddings) on BEIR folders.

    python -m bert_tf.run_retrieval --init_checkpoint=all-MiniLM-L6-v2 \\
        --eval_dir=beir/scifact --output_dir=scifact_out --do_eval

    python -m bert_tf.run_retrieval --init_checkpoint=pretrain_out \\
        --train_dir=beir/scifact --eval_dir=beir/scifact --output_dir=scifact_ft \\
        --do_train --do_eval --train_batch_size=64 --mini_batch_size=16

--init_checkpoint takes what the fine-tuning commands take (a bert_tf run, a Google or a
Hugging Face checkpoint) and sentence-transformers folders, whose pooling, normalisation and
maximum length become the defaults. Training minimises in-batch negatives
(MultipleNegativesRankingLoss: cosine x --similarity_scale) over batches with no text twice,
with the negatives of --train_file or mined by --hard_negatives_from=bm25|model;
--mini_batch_size > 0 computes it by GradCache, for large batches at bounded memory.
--do_eval writes eval_results.txt: ndcg_at_10, recall_at_100, mrr_at_10, map_at_100 on
--eval_split, as BEIR computes them, and run.trec, the top 100 of each query as a TREC run
file (`python -m bert_tf.run_rerank --first_stage=run.trec` reranks it).
"""

from __future__ import annotations

from absl import flags, logging

from bert_tf import install_check
from bert_tf.core import errors
from bert_tf.core.errors import UserError, cli_main
from bert_tf.training import distribution_flags

FLAGS = flags.FLAGS
# bert_tf.finetune.retrieval.pooling.POOLING_MODES, spelt out: defining a flag must not
# import Keras.
POOLING_MODES = ("mean", "cls", "max")

flags.DEFINE_string("init_checkpoint", None,
                    "A bert_tf checkpoint or output directory, a Google TF1 checkpoint, a "
                    "Hugging Face directory or a sentence-transformers folder (detected).")
flags.DEFINE_string("bert_config_file", None,
                    "bert_config.json (default: the one beside --init_checkpoint).")
flags.DEFINE_string("vocab_file", None, "vocab.txt (default: beside --init_checkpoint).")
flags.DEFINE_bool("do_lower_case", None, "Lower-case and strip accents (default: what a "
                  "sentence-transformers folder says, else true).")
flags.DEFINE_string("output_dir", None, "Checkpoints, finetune_task.json, eval_results.txt.")
flags.DEFINE_bool("do_train", False, "Train the bi-encoder.")
flags.DEFINE_bool("do_eval", False, "Evaluate on --eval_dir's --eval_split.")
flags.DEFINE_string("train_dir", None, "A BEIR folder: (query, positive) pairs from "
                    "qrels/train.tsv.")
flags.DEFINE_string("train_file", None, "Training pairs: .tsv (query<TAB>positive"
                    "[<TAB>negative...]) or .jsonl (query, positive, negative(s)); .gz too.")
flags.DEFINE_string("eval_dir", None, "A BEIR folder: corpus.jsonl, queries.jsonl, "
                    "qrels/<split>.tsv.")
flags.DEFINE_string("eval_split", "test", "The qrels split --do_eval scores.")
flags.DEFINE_enum("pooling", None, list(POOLING_MODES), "Token vectors to one vector "
                  "(default: a sentence-transformers folder's mode, else mean).")
flags.DEFINE_bool("normalize", None, "L2-normalise the vectors (default: true, or whether "
                  "a sentence-transformers folder has a Normalize module).")
flags.DEFINE_enum("loss", "in_batch", ["in_batch"], "in_batch: every other passage of the "
                  "batch is a negative (MultipleNegativesRankingLoss).")
flags.DEFINE_enum("hard_negatives_from", None, ["bm25", "model"], "Mine hard negatives for "
                  "each training query: by BM25 (bm25s) over the passages, or by the model "
                  "before training; written to output_dir/hard_negatives.jsonl.")
flags.DEFINE_integer("num_hard_negatives", 1, "Mined negatives per example "
                     "(sentence-transformers' num_negatives).")
flags.DEFINE_integer("hard_negative_range_min", 0, "Skip this many best-ranked non-positive "
                     "passages (likely unlabelled positives; sentence-transformers' range_min).")
flags.DEFINE_integer("hard_negative_range_max", 100, "Mine from ranks below this "
                     "(sentence-transformers' range_max).")
flags.DEFINE_enum("hard_negative_sampling", "top", ["top", "random"], "top: the best-ranked "
                  "candidates; random: drawn from the range with --seed.")
flags.DEFINE_float("similarity_scale", 20.0, "Multiplies the cosines in the loss "
                   "(1 / temperature).")
flags.DEFINE_integer("max_query_length", None, "Tokens per query, [CLS] and [SEP] included "
                     "(default: a sentence-transformers folder's max_seq_length, else 64).")
flags.DEFINE_integer("max_passage_length", None, "Tokens per passage (default: a "
                     "sentence-transformers folder's max_seq_length, else 256).")
flags.DEFINE_integer("mini_batch_size", 0, "GradCache: texts embedded per pass while the "
                     "loss covers the whole batch (0 = off: one pass).")
flags.DEFINE_string("embeddings_dir", None, "Store the corpus embeddings here and reuse "
                    "them while the model, settings and corpus are unchanged.")
flags.DEFINE_integer("train_batch_size", 32, "GLOBAL training batch (in-batch negatives).")
flags.DEFINE_integer("eval_batch_size", 64, "Texts embedded at once in eval.")
flags.DEFINE_float("learning_rate", 2e-5, "Peak learning rate (AdamW).")
flags.DEFINE_float("num_train_epochs", 1.0, "Epochs of training.")
flags.DEFINE_float("warmup_proportion", 0.1, "Share of the steps with linear warmup.")
flags.DEFINE_float("weight_decay_rate", 0.01, "Decoupled weight decay (not on LayerNorm "
                   "and biases).")
flags.DEFINE_float("clip_norm", 1.0, "Global-norm gradient clipping (0 = off).")
flags.DEFINE_integer("seed", 12345, "Seeds the batches, dropout and any fresh weights.")
distribution_flags.define_flags()
flags.DEFINE_integer("save_checkpoints_steps", 1000, "Checkpoint every N steps and at the "
                     "end.")
flags.DEFINE_integer("keep_checkpoint_max", 1, "Recent checkpoints to keep.")
flags.DEFINE_integer("steps_per_loop", 1, "Train steps between progress and checkpoint "
                     "checks (run in calls of about 2 s).")
flags.DEFINE_integer("log_every_n_steps", 100, "Progress line every N steps (and 30 s).")
flags.DEFINE_integer("max_steps_per_run", 0, "Stop after N steps with a checkpoint.")


def config_from_flags():
    """The frozen `retrieval_runner.RetrievalConfig` of the parsed flags."""
    from bert_tf.finetune.retrieval.retrieval_runner import RetrievalConfig

    return RetrievalConfig(
        output_dir=FLAGS.output_dir or "", init_checkpoint=FLAGS.init_checkpoint or "",
        bert_config_file=FLAGS.bert_config_file or "", vocab_file=FLAGS.vocab_file or "",
        do_train=FLAGS.do_train, do_eval=FLAGS.do_eval, train_dir=FLAGS.train_dir or "",
        train_file=FLAGS.train_file or "", eval_dir=FLAGS.eval_dir or "",
        eval_split=FLAGS.eval_split, pooling=FLAGS.pooling, normalize=FLAGS.normalize,
        max_query_length=FLAGS.max_query_length, max_passage_length=FLAGS.max_passage_length,
        do_lower_case=FLAGS.do_lower_case, loss=FLAGS.loss,
        hard_negatives_from=FLAGS.hard_negatives_from or "",
        num_hard_negatives=FLAGS.num_hard_negatives,
        hard_negative_range_min=FLAGS.hard_negative_range_min,
        hard_negative_range_max=FLAGS.hard_negative_range_max,
        hard_negative_sampling=FLAGS.hard_negative_sampling,
        similarity_scale=FLAGS.similarity_scale, mini_batch_size=FLAGS.mini_batch_size,
        embeddings_dir=FLAGS.embeddings_dir or "", train_batch_size=FLAGS.train_batch_size,
        eval_batch_size=FLAGS.eval_batch_size, learning_rate=FLAGS.learning_rate,
        num_train_epochs=FLAGS.num_train_epochs, warmup_proportion=FLAGS.warmup_proportion,
        weight_decay_rate=FLAGS.weight_decay_rate, clip_norm=FLAGS.clip_norm, seed=FLAGS.seed,
        distribution=distribution_flags.config_from_flags(),
        save_checkpoints_steps=FLAGS.save_checkpoints_steps,
        keep_checkpoint_max=FLAGS.keep_checkpoint_max, steps_per_loop=FLAGS.steps_per_loop,
        log_every_n_steps=FLAGS.log_every_n_steps, max_steps_per_run=FLAGS.max_steps_per_run)


@cli_main
def main(argv) -> None:
    if len(argv) > 1:
        raise UserError(f"unexpected arguments: {' '.join(argv[1:])}")
    logging.set_verbosity(logging.INFO)
    config = config_from_flags()
    from bert_tf.finetune.retrieval import retrieval_runner
    from bert_tf.training.checkpointing import Terminated

    try:
        retrieval_runner.run(config)
    except Terminated as e:
        errors.exit_at_once(str(e), errors.EXIT_TERMINATED)  # the checkpoint is written


def console_main() -> None:
    """The `bert-tf-retrieval` console script."""
    errors.run_app(main, preflight=install_check.problems)


if __name__ == "__main__":
    console_main()
