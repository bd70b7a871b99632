"""Throughput of the pretraining input pipeline alone: batches/s and examples/s.

Writes a few thousand random records (batch 32, seq 128, 20 predictions by default) into a
temporary directory, then times the training pipeline with static masks and with dynamic
masking side by side in one run, plus the plain eval pass. The trainer must never wait for
input: the target is >= 20x the trainer's consumption (~5-10 examples/s for BERT-Small on a
2-core CPU), i.e. >= 200 examples/s.

    python benchmarks/pretraining/bench_input_pipeline.py [--num_records=4096] [--num_files=4]
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from absl import app, flags  # noqa: E402

from bert_tf.core import schema  # noqa: E402
from bert_tf.core.masking_rules import MaskingConfig  # noqa: E402
from bert_tf.data.input_config import InputConfig  # noqa: E402
from bert_tf.data.input_pipeline import make_pretraining_dataset  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_integer("num_records", 4096, "Records to generate.")
flags.DEFINE_integer("num_files", 4, "Files to spread them over.")
flags.DEFINE_integer("batch_size", 32, "Batch size.")
flags.DEFINE_integer("max_seq_length", 128, "Sequence length.")
flags.DEFINE_integer("max_predictions_per_seq", 20, "Predictions per sequence.")
flags.DEFINE_integer("num_batches", 300, "Batches timed per configuration.")
flags.DEFINE_integer("warmup_batches", 20, "Batches read before timing (buffers filling).")

VOCAB = 30522
TARGET_EXAMPLES_PER_S = 200.0  # 20x a BERT-Small CPU trainer's ~10 examples/s


def write_records(directory: str, num_records: int, num_files: int, seq: int, pred: int) -> str:
    """Random records in the schema; returns the glob."""
    rng = np.random.default_rng(0)
    writers = [tf.io.TFRecordWriter(os.path.join(directory, f"bench-{i:03d}.tfrecord"))
               for i in range(num_files)]
    for r in range(num_records):
        n = int(rng.integers(seq // 2, seq + 1))
        ids = np.zeros(seq, np.int64)
        ids[:n] = rng.integers(1000, VOCAB, n)
        ids[0], ids[n // 2], ids[n - 1] = 101, 102, 102
        k = min(pred, max(1, round(n * 0.15)))
        positions = np.sort(rng.choice(np.arange(1, n // 2), k, replace=False))
        values = {
            schema.INPUT_IDS: ids, schema.INPUT_MASK: (np.arange(seq) < n).astype(np.int64),
            schema.SEGMENT_IDS: ((np.arange(seq) > n // 2) & (np.arange(seq) < n)).astype(np.int64),
            schema.MASKED_LM_POSITIONS: np.pad(positions, (0, pred - k)),
            schema.MASKED_LM_IDS: np.pad(ids[positions], (0, pred - k)),
            schema.NEXT_SENTENCE_LABELS: np.array([r % 2]),
        }
        feature = {name: tf.train.Feature(int64_list=tf.train.Int64List(value=v))
                   for name, v in values.items()}
        feature[schema.MASKED_LM_WEIGHTS] = tf.train.Feature(
            float_list=tf.train.FloatList(value=[1.0] * k + [0.0] * (pred - k)))
        example = tf.train.Example(features=tf.train.Features(feature=feature))
        writers[r % num_files].write(example.SerializeToString())
    for w in writers:
        w.close()
    return os.path.join(directory, "bench-*.tfrecord")


def time_dataset(dataset: tf.data.Dataset, num_batches: int, warmup: int):
    """(wall seconds, process CPU seconds) to pull `num_batches` batches after `warmup`."""
    iterator = iter(dataset)
    for _ in range(warmup):
        next(iterator)
    start, cpu_start = time.perf_counter(), time.process_time()
    for _ in range(num_batches):
        next(iterator)
    return time.perf_counter() - start, time.process_time() - cpu_start


def main(argv):
    del argv
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        pattern = write_records(tmp, FLAGS.num_records, FLAGS.num_files, FLAGS.max_seq_length,
                                FLAGS.max_predictions_per_seq)
        print(f"wrote {FLAGS.num_records} records in {FLAGS.num_files} files "
              f"({time.perf_counter() - start:.1f} s)")
        base = dict(input_patterns=pattern, batch_size=FLAGS.batch_size,
                    max_seq_length=FLAGS.max_seq_length,
                    max_predictions_per_seq=FLAGS.max_predictions_per_seq, vocab_size=VOCAB)
        eval_batches = FLAGS.num_records // FLAGS.batch_size
        runs = [
            ("train, static masks", InputConfig(**base), FLAGS.num_batches, FLAGS.warmup_batches),
            ("train, dynamic masking",
             InputConfig(**base, masking=MaskingConfig(
                 vocab_size=VOCAB, max_predictions_per_seq=FLAGS.max_predictions_per_seq)),
             FLAGS.num_batches, FLAGS.warmup_batches),
            ("eval (one pass)", InputConfig(**base, is_training=False),
             eval_batches - FLAGS.warmup_batches // 4, FLAGS.warmup_batches // 4),
        ]
        print(f"batch {FLAGS.batch_size}, seq {FLAGS.max_seq_length}, "
              f"{FLAGS.max_predictions_per_seq} predictions, {os.cpu_count()} CPUs")
        # CPU ms per batch: what the pipeline takes from the trainer's cores at steady state.
        print(f"{'pipeline':<26}{'batches/s':>12}{'examples/s':>14}{'x target':>10}"
              f"{'CPU ms/batch':>14}")
        rates = {}
        for name, config, n, warmup in runs:
            seconds, cpu = time_dataset(make_pretraining_dataset(config), n, warmup)
            rates[name] = n * FLAGS.batch_size / seconds
            print(f"{name:<26}{n / seconds:>12.1f}{rates[name]:>14.0f}"
                  f"{rates[name] / TARGET_EXAMPLES_PER_S:>10.1f}{1000 * cpu / n:>14.2f}")
        ratio = rates["train, dynamic masking"] / rates["train, static masks"]
        print(f"dynamic / static masking throughput: {ratio:.2f}")
        print(f"target: >= {TARGET_EXAMPLES_PER_S:.0f} examples/s (20x a ~10 examples/s trainer)")


if __name__ == "__main__":
    app.run(main)
