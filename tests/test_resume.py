"""Tests of bert_tf.training.resume under MultiWorkerMirroredStrategy: two workers on
loopback, each reading its own TFRecord file through the real input pipeline.

A run stopped at step 2 and resumed in new processes follows the uninterrupted run's
losses, although the records of steps 1-2 are made unreadable before the resume: each
worker restores its own saved iterator instead of re-reading them (a skip would fail). The
single-worker case is in test_trainer.py.

With an arithmetic input position (bert_tf.data.record_positions), the input TPUStrategy
uses, the same holds in training order: the workers reopen their input from the record
counts, through tf.distribute's distributed dataset as on TPUs. TensorFlow's TPUStrategy
needs a TPU system to initialise, so this is the closest CPU-testable form.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest
import tensorflow as tf
from _pretraining_helpers import (
    PREDS,
    SEQ,
    VOCAB,
    run_on_loopback,
    synthetic_examples,
    write_tfrecords,
)

from bert_tf.training import resume

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_resume_worker.py")
# As in _resume_worker.py.
SPLIT, PER_REPLICA_BATCH = 2, 4


def run_workers(phase, data, output_dir, tmp_path, position="iterator"):
    procs = run_on_loopback([
        [sys.executable, WORKER, f"--phase={phase}", f"--data={data}",
         f"--output_dir={output_dir}", f"--out={tmp_path / f'{phase}-{index}.npz'}",
         f"--position={position}"]
        for index in range(2)])
    for proc in procs:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return [np.load(tmp_path / f"{phase}-{index}.npz") for index in range(2)]


def write_parts(tmp_path, num_files, per_file):
    """part-<i>.tfrecord files of `per_file` synthetic examples each: (the examples, the
    paths, their glob)."""
    examples = synthetic_examples(num_files * per_file, seed=1)
    files = [write_tfrecords(tmp_path / f"part-{i}.tfrecord",
                             {k: v[per_file * i:per_file * (i + 1)] for k, v in examples.items()})
             for i in range(num_files)]
    return examples, files, os.fspath(tmp_path / "part-*.tfrecord")


def assert_on_the_uninterrupted_trajectory(first, second):
    """Each worker's split run (steps 1-SPLIT, then the resumed SPLIT+1-4) has the losses of
    its uninterrupted run."""
    for worker in range(2):
        assert second[worker]["part2_steps"].tolist() == [SPLIT, 4]
        np.testing.assert_allclose(
            np.concatenate([first[worker]["part1"], second[worker]["part2"]]),
            first[worker]["straight"], rtol=1e-6)


def corrupt_records(path, count):
    """Flips the first data byte of each of the first `count` records of a TFRecord file,
    in place: reading any of them fails its CRC check."""
    data = bytearray(open(path, "rb").read())
    offset = 0
    for _ in range(count):
        length = int.from_bytes(data[offset:offset + 8], "little")
        data[offset + 12] ^= 0xFF
        offset += 8 + 4 + length + 4
    open(path, "wb").write(bytes(data))


@pytest.mark.slow
def test_two_workers_resume_from_their_own_positions_on_the_same_trajectory(tmp_path):
    examples, files, data = write_parts(tmp_path, 2, 32)
    output_dir = tmp_path / "out"
    first = run_workers("first", data, output_dir, tmp_path)
    for worker in range(2):
        assert first[worker]["part1_steps"].tolist() == [0, SPLIT]
        position = output_dir / "split" / resume.POSITIONS_DIR / f"worker-{worker}-of-2"
        layout = tf.train.load_checkpoint(os.fspath(position / f"ckpt-{SPLIT}")).get_tensor(
            resume._LAYOUT_KEY).decode()
        assert layout.startswith(f"worker {worker} of 2, 2 replica(s)"), layout
    # The chief's training checkpoint holds no input position: each worker has its own.
    assert not tf.train.load_checkpoint(
        os.fspath(output_dir / "split" / f"ckpt-{SPLIT}")).has_tensor(resume._LAYOUT_KEY)

    # Worker i reads part-i (file sharding); steps 1-2 took its first 2 x 4 records.
    for path in files:
        corrupt_records(path, SPLIT * PER_REPLICA_BATCH)
        with pytest.raises(tf.errors.DataLossError):  # a skip would fail here
            next(iter(tf.data.TFRecordDataset(path)))
    second = run_workers("second", data, output_dir, tmp_path)
    assert_on_the_uninterrupted_trajectory(first, second)
    np.testing.assert_array_equal(first[0]["straight"], first[1]["straight"])


@pytest.mark.slow
def test_two_workers_reopen_an_arithmetic_position_on_the_same_trajectory(tmp_path):
    from bert_tf.data import input_config, record_positions
    from bert_tf.data.input_pipeline import make_pretraining_dataset

    # 8 files of 4 records: worker i reads files i, i+2, ... (file sharding); a window of 4
    # records is one file and one step's batch, in a seeded file order.
    examples, files, data = write_parts(tmp_path, 8, 4)
    output_dir = tmp_path / "out"
    first = run_workers("first", data, output_dir, tmp_path, "arithmetic")
    assert json.load(open(output_dir / record_positions.COUNTS_FILE))["files"][files[5]][1] == 4
    # No iterator is saved anywhere: the position is the step.
    assert not (output_dir / "split" / resume.POSITIONS_DIR).exists()

    # The files each worker's first SPLIT steps read, found from their records' token ids.
    config = record_positions.with_counts(input_config.InputConfig(
        input_patterns=data, batch_size=PER_REPLICA_BATCH, max_seq_length=SEQ,
        max_predictions_per_seq=PREDS, vocab_size=VOCAB, compression="",
        use_v2_feature_names=False, input_position="arithmetic", shuffle_buffer_size=4, seed=3))
    file_of = {tuple(row): i // 4 for i, row in enumerate(examples["input_ids"])}
    consumed = set()
    for worker in range(2):
        batches = make_pretraining_dataset(config, tf.distribute.InputContext(2, worker, 2))
        for batch in batches.take(SPLIT):
            consumed |= {file_of[tuple(row)] for row in batch["input_ids"].numpy()}
    assert len(consumed) == 2 * SPLIT  # whole files: 2 per worker
    for f in consumed:
        corrupt_records(files[f], 4)
    with pytest.raises(tf.errors.InvalidArgumentError, match="is damaged"):  # from the start
        for _ in make_pretraining_dataset(config, tf.distribute.InputContext(2, 0, 2)).take(4):
            pass
    second = run_workers("second", data, output_dir, tmp_path, "arithmetic")
    assert_on_the_uninterrupted_trajectory(first, second)
