"""Tests of bert_tf.training.resume under MultiWorkerMirroredStrategy: two workers on
loopback, each reading its own TFRecord file through the real input pipeline.

A run stopped at its checkpoint at step 2 (a copy of the uninterrupted run without its
later checkpoint) and resumed in new processes follows the uninterrupted run's losses,
although the records of steps 1-2 are made unreadable before the resume: each worker
restores its own saved iterator instead of re-reading them (a skip would fail). The
single-worker case is in test_trainer.py.

With an arithmetic input position (bert_tf.data.record_positions), the input TPUStrategy
uses, the same holds in training order: the workers reopen their input from the record
counts, through tf.distribute's distributed dataset as on TPUs. TensorFlow's TPUStrategy
needs a TPU system to initialise, so this is the closest CPU-testable form.
"""

from __future__ import annotations

import json
import os
import shutil
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
POSITIONS = ("iterator", "arithmetic")


def run_workers(cli, phase, jobs, tmp_path):
    """Runs `phase` of every job ({position: (data glob, output_dir)}) in one process per
    worker; returns {position: [each worker's arrays]}."""
    def out(position, index):
        return tmp_path / f"{phase}-{position}-{index}.npz"

    procs = run_on_loopback(cli, [
        [sys.executable, WORKER, f"--phase={phase}"] + [
            f"--job={position},{data},{output_dir},{out(position, index)}"
            for position, (data, output_dir) in jobs.items()]
        for index in range(2)], timeout=900)  # every position's runs: allow for a busy machine
    for proc in procs:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return {position: [np.load(out(position, index)) for index in range(2)]
            for position in jobs}


def write_parts(tmp_path, num_files, per_file):
    """part-<i>.tfrecord files of `per_file` synthetic examples each: (the examples, the
    paths, their glob)."""
    examples = synthetic_examples(num_files * per_file, seed=1)
    files = [write_tfrecords(tmp_path / f"part-{i}.tfrecord",
                             {k: v[per_file * i:per_file * (i + 1)] for k, v in examples.items()})
             for i in range(num_files)]
    return examples, files, os.fspath(tmp_path / "part-*.tfrecord")


def stop_at_split(output_dir):
    """output_dir/split: output_dir/straight as a run stopped after its checkpoint at step
    SPLIT leaves it (its training checkpoint and each worker's input position at SPLIT)."""
    split = output_dir / "split"
    shutil.copytree(output_dir / "straight", split)
    for index in [split, *sorted((split / resume.POSITIONS_DIR).glob("worker-*"))]:
        for path in index.glob("ckpt-*"):
            if not path.name.startswith(f"ckpt-{SPLIT}."):
                path.unlink()
        tf.compat.v1.train.update_checkpoint_state(os.fspath(index), f"ckpt-{SPLIT}",
                                                   [f"ckpt-{SPLIT}"])


def assert_on_the_uninterrupted_trajectory(first, second):
    """Each worker's resumed run (steps SPLIT+1-4) has the losses of its uninterrupted
    run."""
    for worker in range(2):
        assert second[worker]["part2_steps"].tolist() == [SPLIT, 4]
        np.testing.assert_allclose(second[worker]["part2"], first[worker]["straight"][SPLIT:],
                                   rtol=1e-6)


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


def arithmetic_config(data):
    """The arithmetic training input of _resume_worker.py, counted afresh (no cache)."""
    from bert_tf.data import input_config, record_positions

    return record_positions.with_counts(input_config.InputConfig(
        input_patterns=data, batch_size=PER_REPLICA_BATCH, max_seq_length=SEQ,
        max_predictions_per_seq=PREDS, vocab_size=VOCAB, compression="",
        use_v2_feature_names=False, input_position="arithmetic", shuffle_buffer_size=4, seed=3))


@pytest.fixture(scope="module")
def two_worker_runs(tmp_path_factory, cli):
    """Both tests' runs, in one cluster per phase: each worker trains the uninterrupted run
    for both input positions, each is copied as stopped at step SPLIT, the records of steps
    1-SPLIT are made unreadable, and new processes resume both copies."""
    from bert_tf.data import record_positions
    from bert_tf.data.input_pipeline import make_pretraining_dataset

    tmp = tmp_path_factory.mktemp("resume")
    runs = {}
    # Iterator: 2 files of 32 records; worker i reads part-i (file sharding).
    (tmp / "iterator").mkdir()
    runs["iterator"] = dict(zip(("examples", "files", "data"),
                                write_parts(tmp / "iterator", 2, 32)))
    # Arithmetic: 8 files of 4 records; worker i reads files i, i+2, ... (file sharding); a
    # window of 4 records is one file and one step's batch, in a seeded file order.
    (tmp / "arithmetic").mkdir()
    runs["arithmetic"] = dict(zip(("examples", "files", "data"),
                                  write_parts(tmp / "arithmetic", 8, 4)))
    for position in POSITIONS:
        runs[position]["output_dir"] = tmp / f"out-{position}"
    jobs = {p: (runs[p]["data"], runs[p]["output_dir"]) for p in POSITIONS}
    first = run_workers(cli, "first", jobs, tmp)
    for position in POSITIONS:
        stop_at_split(runs[position]["output_dir"])

    # Steps 1-2 took each iterator worker's first 2 x 4 records of its file.
    for path in runs["iterator"]["files"]:
        corrupt_records(path, SPLIT * PER_REPLICA_BATCH)
    # The arithmetic files each worker's first SPLIT steps read, found from their records'
    # token ids.
    arithmetic = runs["arithmetic"]
    arithmetic["counted"] = json.load(open(
        arithmetic["output_dir"] / record_positions.COUNTS_FILE))["files"]
    config = arithmetic_config(arithmetic["data"])
    file_of = {tuple(row): i // 4 for i, row in enumerate(arithmetic["examples"]["input_ids"])}
    consumed = set()
    for worker in range(2):
        batches = make_pretraining_dataset(config, tf.distribute.InputContext(2, worker, 2))
        for batch in batches.take(SPLIT):
            consumed |= {file_of[tuple(row)] for row in batch["input_ids"].numpy()}
    for f in consumed:
        corrupt_records(arithmetic["files"][f], 4)
    arithmetic["consumed"], arithmetic["config"] = consumed, config

    second = run_workers(cli, "second", jobs, tmp)
    for position in POSITIONS:
        runs[position]["first"], runs[position]["second"] = first[position], second[position]
    return runs


@pytest.mark.slow
def test_two_workers_resume_from_their_own_positions_on_the_same_trajectory(two_worker_runs):
    run = two_worker_runs["iterator"]
    output_dir, first = run["output_dir"], run["first"]
    for worker in range(2):
        position = output_dir / "split" / resume.POSITIONS_DIR / f"worker-{worker}-of-2"
        layout = resume.saved_layout(os.fspath(position / f"ckpt-{SPLIT}"))
        assert layout.startswith(f"worker {worker} of 2, 2 replica(s)"), layout
    # The chief's training checkpoint holds no input position: each worker has its own.
    assert resume.saved_layout(os.fspath(output_dir / "split" / f"ckpt-{SPLIT}")) is None

    # Worker i read part-i; the records of its steps 1-2 were made unreadable before the
    # resume, so a skip would have failed.
    for path in run["files"]:
        with pytest.raises(tf.errors.DataLossError):
            next(iter(tf.data.TFRecordDataset(path)))
    assert_on_the_uninterrupted_trajectory(first, run["second"])
    np.testing.assert_array_equal(first[0]["straight"], first[1]["straight"])


@pytest.mark.slow
def test_two_workers_reopen_an_arithmetic_position_on_the_same_trajectory(two_worker_runs):
    from bert_tf.data.input_pipeline import make_pretraining_dataset

    run = two_worker_runs["arithmetic"]
    assert run["counted"][run["files"][5]][1] == 4
    # No iterator is saved anywhere (in either phase): the position is the step.
    assert not (run["output_dir"] / "split" / resume.POSITIONS_DIR).exists()
    # The records of the workers' first SPLIT steps (whole files: 2 per worker) were made
    # unreadable before the resume: reading from the start fails.
    assert len(run["consumed"]) == 2 * SPLIT
    config = run["config"]  # the record counts of the sound files
    with pytest.raises(tf.errors.InvalidArgumentError, match="is damaged"):  # from the start
        for _ in make_pretraining_dataset(config, tf.distribute.InputContext(2, 0, 2)).take(4):
            pass
    assert_on_the_uninterrupted_trajectory(run["first"], run["second"])
