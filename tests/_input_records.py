"""Recognisable pretraining records for the input-pipeline tests, written with TensorFlow
(bert_tf must not import data_tools) in the original schema: the token at position 1 of
example i is `ID_BASE + i` and is never masked."""

from __future__ import annotations

import os
from typing import Dict, List

import numpy as np
import tensorflow as tf

from bert_tf.core import schema
from bert_tf.core.masking_rules import MaskingConfig
from bert_tf.data.input_config import InputConfig

SEQ = 16
PRED = 3
VOCAB = 5000
ID_BASE = 1000
CLS, SEP, MASK = 101, 102, 103


def make_features(index: int, rng: np.random.Generator, seq: int = SEQ, pred: int = PRED
                  ) -> Dict[str, list]:
    """One instance in the original schema: [CLS] A [SEP] B [SEP], zero-padded, 1-3 masks."""
    len_a = int(rng.integers(3, 6))
    len_b = int(rng.integers(2, 5))
    a = [ID_BASE + index] + [int(t) for t in rng.integers(200, 900, len_a - 1)]
    b = [int(t) for t in rng.integers(200, 900, len_b)]
    tokens = [CLS] + a + [SEP] + b + [SEP]
    segments = [0] * (len_a + 2) + [1] * (len_b + 1)
    n = len(tokens)
    # Mask among the maskable tokens after position 1 (which carries the example's id).
    candidates = [i for i in range(2, n) if tokens[i] not in (CLS, SEP)]
    count = min(pred, len(candidates), int(rng.integers(1, pred + 1)))
    positions = sorted(int(p) for p in rng.choice(candidates, count, replace=False))
    input_ids = list(tokens)
    for p in positions:
        input_ids[p] = MASK
    pad_seq, pad_pred = seq - n, pred - count
    return {
        "input_ids": input_ids + [0] * pad_seq,
        "input_mask": [1] * n + [0] * pad_seq,
        "segment_ids": segments + [0] * pad_seq,
        "masked_lm_positions": positions + [0] * pad_pred,
        "masked_lm_ids": [tokens[p] for p in positions] + [0] * pad_pred,
        "masked_lm_weights": [1.0] * count + [0.0] * pad_pred,
        "next_sentence_labels": [index % 2],
    }


def serialize(features: Dict[str, list], v2: bool = False) -> bytes:
    feature = {}
    for name, values in features.items():
        stored = schema.stored_name(name, v2)
        if name == "masked_lm_weights":
            feature[stored] = tf.train.Feature(float_list=tf.train.FloatList(value=values))
        else:
            feature[stored] = tf.train.Feature(int64_list=tf.train.Int64List(value=values))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def write_records(path: str, records: List[bytes], gzip: bool = False) -> str:
    options = tf.io.TFRecordOptions(compression_type="GZIP" if gzip else "")
    with tf.io.TFRecordWriter(path, options) as writer:
        for record in records:
            writer.write(record)
    return path


def write_files(tmp_path, num_files: int, per_file: int, v2: bool = False, gzip: bool = False,
                seed: int = 0) -> List[Dict[str, list]]:
    """Writes data-{i}.tfrecord files; returns all examples (index = global example id)."""
    rng = np.random.default_rng(seed)
    examples = [make_features(i, rng) for i in range(num_files * per_file)]
    for f in range(num_files):
        chunk = examples[f * per_file:(f + 1) * per_file]
        write_records(os.fspath(tmp_path / f"data-{f}.tfrecord"),
                      [serialize(e, v2) for e in chunk], gzip)
    return examples


def masking(**kwargs) -> MaskingConfig:
    """Dynamic-masking settings for the test records (Google's special ids)."""
    return MaskingConfig(**{"vocab_size": VOCAB, "max_predictions_per_seq": PRED, **kwargs})


def config(tmp_path, **kwargs) -> InputConfig:
    base = dict(input_patterns=os.fspath(tmp_path / "data-*.tfrecord"), batch_size=4,
                max_seq_length=SEQ, max_predictions_per_seq=PRED, vocab_size=VOCAB,
                shuffle_buffer_size=8, cycle_length=2)
    base.update(kwargs)
    return InputConfig(**base)


def example_ids(batch: Dict[str, tf.Tensor]) -> List[int]:
    return [int(t) - ID_BASE for t in batch["input_ids"].numpy()[:, 1]]


def collect(dataset: tf.data.Dataset, num_batches: int = None) -> List[Dict[str, np.ndarray]]:
    if num_batches is not None:
        dataset = dataset.take(num_batches)
    return [{k: v.numpy() for k, v in b.items()} for b in dataset]


def example_ids_np(batch: Dict[str, np.ndarray]) -> List[int]:
    return [int(t) - ID_BASE for t in batch["input_ids"][:, 1]]
