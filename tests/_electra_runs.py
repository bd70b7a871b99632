"""Shared helpers of the ELECTRA training tests (tests/test_electra_training.py,
tests/test_electra_distribution.py): tiny records and configs, the run's flags, and
`python -m bert_tf.run_pretraining` with ELECTRA's sampler replaced (`PATCHED_RUN`).
"""

from __future__ import annotations

import os
import pathlib
from typing import Dict

import numpy as np
from _pretraining_helpers import (
    pretraining_flags,
    synthetic_examples,
    write_bert_config,
    write_tfrecords,
    write_tiny_vocab,
)

MODULE = "bert_tf.run_pretraining"
# The records' "easy" tokens: every original token of easy-*.tfrecord is one of these 16 ids
# (5..20), while a uniform draw over the 128-token vocabulary is one of them 1 time in 8.
EASY_IDS = 16


def write_electra_data(root: pathlib.Path) -> pathlib.Path:
    """Writes into `root`: train-0.tfrecord (64 examples), eval.tfrecord (16),
    easy-train.tfrecord / easy-eval.tfrecord (the same kind of examples with every token in
    5..5 + EASY_IDS), bert_config.json (the tiny BERT with embedding_size 16 and dropout
    0.1), bert_config_no_dropout.json, and vocab.txt (the 128 ids' tokens)."""
    write_tfrecords(root / "train-0.tfrecord", synthetic_examples(64, seed=21,
                                                                  uneven_weights=False))
    write_tfrecords(root / "eval.tfrecord", synthetic_examples(16, seed=22))
    write_tfrecords(root / "easy-train.tfrecord", easy_examples(synthetic_examples(64, seed=23)))
    write_tfrecords(root / "easy-eval.tfrecord", easy_examples(synthetic_examples(32, seed=24)))
    write_bert_config(root / "bert_config.json", embedding_size=16, hidden_dropout_prob=0.1,
                      attention_probs_dropout_prob=0.1)
    write_bert_config(root / "bert_config_no_dropout.json", embedding_size=16)
    write_tiny_vocab(root / "vocab.txt")
    return root


def easy_examples(examples: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """`examples` with every real token and label mapped into 5 .. 5 + EASY_IDS - 1."""
    out = dict(examples)
    mask = examples["input_mask"].astype(bool)
    out["input_ids"] = np.where(mask, 5 + examples["input_ids"] % EASY_IDS, 0).astype(np.int32)
    weights = examples["masked_lm_weights"] > 0
    out["masked_lm_ids"] = np.where(weights, 5 + examples["masked_lm_ids"] % EASY_IDS,
                                    0).astype(np.int32)
    return out


def electra_flags(data: pathlib.Path, output_dir, **overrides):
    """`run_pretraining --objective=electra` flags of a 6-step tiny run on `data`'s
    train-0.tfrecord, with dynamic masks and dropout (a None override drops a flag)."""
    return pretraining_flags(data, output_dir, **dict(
        {"objective": "electra", "dynamic_masking": "true", "vocab_file": data / "vocab.txt",
         "eval_batch_size": 16}, **overrides))


# `python -m bert_tf.run_pretraining` with electra_objective.sample_replacements replaced
# (the objective looks it up when the step is traced), chosen by the environment variable
# ELECTRA_SAMPLER:
# - greedy: the generator's most likely token, the same on every replica whatever its seed
#   (the real draw gives each replica its own seed, so 2 replicas draw other samples than
#   1 device for the same examples, by design);
# - uniform: the real Gumbel-max draw from logits forced to zero, i.e. uniform token ids.
# With ELECTRA_RECORDS_IN_ORDER=1 the training input has no record shuffle (a buffer of 1):
# one device's batch b is then records 8b..8b+7 of the file, and 2 workers, each keeping
# every other record, read the same global batches (each worker's shuffle buffer is seeded
# by its pipeline id, so shuffled they would not).
PATCHED_RUN = """
import dataclasses, os, runpy
import tensorflow as tf
from bert_tf.data import input_pipeline
from bert_tf.training import electra_objective

real_sample = electra_objective.sample_replacements
if os.environ["ELECTRA_SAMPLER"] == "greedy":
    def sample(mlm_logits, seed):
        return tf.argmax(tf.stop_gradient(mlm_logits), axis=-1, output_type=tf.int32)
else:
    def sample(mlm_logits, seed):
        return real_sample(tf.zeros_like(mlm_logits), seed)
electra_objective.sample_replacements = sample
if os.environ.get("ELECTRA_RECORDS_IN_ORDER") == "1":
    real_dataset = input_pipeline.make_pretraining_dataset

    def in_order(config, *args):
        return real_dataset(dataclasses.replace(config, shuffle_buffer_size=1), *args)
    input_pipeline.make_pretraining_dataset = in_order
runpy.run_module("bert_tf.run_pretraining", run_name="__main__", alter_sys=True)
"""


def checkpoint_tensors(prefix) -> Dict[str, np.ndarray]:
    """Every saved tensor of a checkpoint but the object graph and the iterator's variant."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(os.fspath(prefix))
    return {k: reader.get_tensor(k) for k, dtype in reader.get_variable_to_dtype_map().items()
            if k != "_CHECKPOINTABLE_OBJECT_GRAPH" and dtype != tf.variant}


