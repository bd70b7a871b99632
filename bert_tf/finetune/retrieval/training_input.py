"""The bi-encoder's training input: examples read (and negatives mined), the batches of every
step, and the tf.data pipeline that serves them.

    read_training_examples  ->  mined_examples (--hard_negatives_from)  ->  batch_order
        ->  features.training_features  ->  train_dataset_fn

Training batches come from `batching.no_duplicate_batches` (no text twice in a batch),
epoch e from (seed, e), so the input position is a function of the step and a resumed run
sees the batches it would have. Mined negatives are written to the output_dir
(`hard_negatives.MINED_FILE`) before training; a resumed run reads them back rather than
mining with the trained model.
"""

from __future__ import annotations

import os
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
from absl import logging

from bert_tf.core.errors import UserError
from bert_tf.finetune.retrieval import batching, beir_data, hard_negatives
from bert_tf.training import trainer


def read_training_examples(train_file: str, train_dir: str, mining: bool = False
                           ) -> Tuple[List[beir_data.TrainingExample], List[str]]:
    """The training examples, and the passages negatives may be mined from: the BEIR
    folder's corpus (qrels/train.tsv's pairs), or the file's positives.

    Raises:
        UserError: bad input, or `mining` with a file that has negatives.
    """
    if train_file:
        examples = beir_data.read_training_pairs(train_file)
        if mining and examples[0].negatives:
            raise UserError(f"--hard_negatives_from: {train_file} has negatives already; "
                            "give (query, positive) pairs to mine them")
        return examples, [e.positive for e in examples]
    split = beir_data.read_split(train_dir, "train")
    return (beir_data.pairs_from_split(split),
            [p.encoder_text for p in split.corpus.values()])


def mined_examples(mining: hard_negatives.MiningConfig, output_dir: str,
                   examples: List[beir_data.TrainingExample], passages: List[str],
                   saved: Optional[Dict[str, object]], model_fn: Callable[[], object],
                   tokenizer, max_query_length: int, max_passage_length: int,
                   batch_size: int) -> List[beir_data.TrainingExample]:
    """`examples` with mined negatives, written to output_dir; a resumed run (`saved`: its
    finetune_task.json) reads the ones it trained with.

    Args:
        model_fn: () -> the bi-encoder with its initial weights (mining by "model").
        tokenizer, max_query_length, max_passage_length, batch_size: how "model" embeds.

    Raises:
        UserError: a resumed run asked to mine otherwise, or no example left to train on.
    """
    path = os.path.join(output_dir, hard_negatives.MINED_FILE)
    if saved is not None:
        if saved.get("hard_negatives") != mining.settings():
            raise UserError(f"{output_dir} was trained with hard negatives "
                            f"{saved.get('hard_negatives')}; continue with the same flags")
        logging.info("reading the hard negatives this run mined: %s", path)
        return beir_data.read_training_pairs(path)
    pool = hard_negatives.build_pool(examples, passages)
    logging.info("mining %d hard negative(s) per query by %s: ranks [%d, %d) of %d "
                 "passages for %d queries", mining.num_negatives, mining.source,
                 mining.range_min, mining.range_max, len(pool.texts), len(pool.queries))
    if mining.source == "bm25":
        rank = hard_negatives.bm25_rank(pool.texts)
    else:
        rank = hard_negatives.model_rank(model_fn(), pool.texts, tokenizer, max_query_length,
                                         max_passage_length, batch_size)
    kept, dropped = hard_negatives.mine(examples, pool, rank, mining)
    if dropped:
        logging.warning("%d of %d examples dropped: fewer than %d negatives in the ranks",
                        dropped, len(examples), mining.num_negatives)
    hard_negatives.write_examples(path, kept)
    return kept


def batch_order(examples: List[beir_data.TrainingExample], batch_size: int, steps: int,
                seed: int) -> np.ndarray:
    """int32 [steps, batch_size]: the example indices of every training batch, epoch after
    epoch of `batching.no_duplicate_batches`.

    Raises:
        UserError: the examples cannot fill one batch without a repeated text.
    """
    texts = [e.texts for e in examples]
    batches: List[List[int]] = []
    epoch = 0
    while len(batches) < steps:
        more = batching.no_duplicate_batches(texts, batch_size, batching.epoch_rng(seed, epoch))
        if not more:
            raise UserError(f"--train_batch_size={batch_size}: the {len(examples)} training "
                            f"examples cannot fill one batch without a repeated text")
        batches.extend(more)
        epoch += 1
    return np.asarray(batches[:steps], np.int32)


def _trim(batch, prefix: str):
    """The `prefix` arrays cut to their longest row, rounded up to a multiple of 8."""
    import tensorflow as tf

    mask = batch[prefix + "input_mask"]
    longest = tf.reduce_max(tf.reduce_sum(mask, axis=-1))
    length = tf.minimum(tf.shape(mask)[-1], (longest + 7) // 8 * 8)
    return {k: (v[..., :length] if k.startswith(prefix) else v) for k, v in batch.items()}


def train_dataset_fn(arrays: Dict[str, np.ndarray], order: np.ndarray) -> trainer.DatasetFn:
    """The batches of `order` ([steps, global batch]) as replica batches, cut to length."""
    import tensorflow as tf

    def dataset_fn(context, per_replica_batch: int, first_batch: int = 0):
        tensors = {k: tf.constant(v) for k, v in arrays.items()}
        rows = tf.data.Dataset.from_tensor_slices(order.reshape(-1, per_replica_batch))
        if context.num_input_pipelines > 1:
            rows = rows.shard(context.num_input_pipelines, context.input_pipeline_id)

        @tf.autograph.experimental.do_not_convert
        def gather(index):
            batch = {k: tf.gather(t, index) for k, t in tensors.items()}
            return _trim(_trim(batch, "query_"), "passage_")

        return rows.skip(first_batch).map(gather, num_parallel_calls=tf.data.AUTOTUNE,
                                          deterministic=True).prefetch(2)

    dataset_fn.arithmetic_position = True  # the position is the step (trainer.distribute_dataset)
    return dataset_fn


