"""Tests of bert_tf.data.record_positions: training input reopened at any batch without reading
what was consumed, on the same order as an uninterrupted run.

Files of unequal record counts, windows that straddle files, several epochs, and the three
shardings (one pipeline, files per pipeline, records per pipeline). Records are recognisable
by their example id (the layout of tests/_input_records.py).
"""

from __future__ import annotations

import json
import os
from typing import List

import numpy as np
import pytest
import tensorflow as tf
from _input_records import (
    collect,
    config,
    example_ids_np,
    make_features,
    masking,
    serialize,
    write_records,
)

from bert_tf.core.errors import UserError
from bert_tf.data import input_validation, record_positions
from bert_tf.data.input_pipeline import make_pretraining_dataset

SIZES = (5, 9, 3, 7)  # records per file: windows of 4 straddle files


def write_uneven(tmp_path, sizes=SIZES) -> List[List[int]]:
    """data-{i}.tfrecord with sizes[i] records; returns each file's example ids."""
    rng = np.random.default_rng(0)
    ids, next_id = [], 0
    for f, n in enumerate(sizes):
        ids.append(list(range(next_id, next_id + n)))
        write_records(os.fspath(tmp_path / f"data-{f}.tfrecord"),
                      [serialize(make_features(i, rng)) for i in ids[-1]])
        next_id += n
    return ids


def arithmetic_config(tmp_path, cache: str = "", **kwargs):
    cfg = config(tmp_path, input_position="arithmetic", shuffle_buffer_size=4, seed=5, **kwargs)
    return record_positions.with_counts(cfg, cache)


def ids_of(batches) -> List[int]:
    return [i for b in batches for i in example_ids_np(b)]


# (pipelines, files): one pipeline; 2 pipelines over 4 files (files sharded); 2 pipelines
# over 1 file (records sharded: every pipeline reads the file, keeping every other record).
LAYOUTS = [(1, SIZES), (2, SIZES), (2, (13,))]


@pytest.mark.parametrize("pipelines, sizes", LAYOUTS)
def test_reopening_at_any_batch_continues_the_uninterrupted_order(tmp_path, pipelines, sizes):
    write_uneven(tmp_path, sizes)
    cfg = arithmetic_config(tmp_path, batch_size=2, masking=masking())
    pipeline = pipelines - 1  # with 2, the one whose records are not the first
    context = tf.distribute.InputContext(pipelines, pipeline, pipelines)
    reference = collect(make_pretraining_dataset(cfg, context), 40)  # > 3 epochs
    for first in (1, 5, 11, 13, 26, 33):
        reopened = collect(make_pretraining_dataset(cfg, context, first_batch=first), 4)
        for want, got in zip(reference[first:first + 4], reopened):
            for name in want:  # the records, and the dynamic masks drawn for them
                np.testing.assert_array_equal(got[name], want[name], err_msg=name)


@pytest.mark.parametrize("pipelines, sizes", LAYOUTS)
def test_each_epoch_reads_every_record_once_in_a_new_order(tmp_path, pipelines, sizes):
    files = write_uneven(tmp_path, sizes)
    cfg = arithmetic_config(tmp_path, batch_size=1)
    every = sorted(i for ids in files for i in ids)
    shards = []
    for pipeline in range(pipelines):
        context = tf.distribute.InputContext(pipelines, pipeline, pipelines)
        stream = ids_of(collect(make_pretraining_dataset(cfg, context), 3 * len(every)))
        if len(sizes) >= pipelines:  # files sharded: this pipeline's files
            per_epoch = sum(sizes[pipeline::pipelines])
        else:  # records sharded: every pipelines-th record of the stream
            per_epoch = (len(every) - pipeline + pipelines - 1) // pipelines
        epochs = [stream[e * per_epoch:(e + 1) * per_epoch] for e in range(3)]
        assert len(set(epochs[0])) == per_epoch
        assert all(sorted(e) == sorted(epochs[0]) for e in epochs)
        assert epochs[0] != epochs[1] != epochs[2]
        assert epochs[0] != sorted(epochs[0])  # shuffled, not in file order
        shards.append(set(epochs[0]))
    assert set().union(*shards) == set(every)  # the pipelines split the data
    assert sum(map(len, shards)) == len(every)


def test_windows_mix_records_of_neighbouring_files(tmp_path):
    files = write_uneven(tmp_path)
    file_of = {i: f for f, ids in enumerate(files) for i in ids}
    cfg = arithmetic_config(tmp_path, batch_size=4)  # a batch = a window
    windows = [ids_of([b]) for b in collect(make_pretraining_dataset(cfg), 6)]
    assert any(len({file_of[i] for i in window}) > 1 for window in windows)
    # Within a window the order is not the files' (4! orders: 1 in 24 keeps it by chance).
    assert sum(window != sorted(window) for window in windows) >= 4


def test_reopening_reads_no_file_consumed_before_its_window(tmp_path):
    files = write_uneven(tmp_path)
    file_of = {i: f for f, ids in enumerate(files) for i in ids}
    cfg = arithmetic_config(tmp_path, batch_size=1)
    per_epoch = sum(SIZES)
    stream = ids_of(collect(make_pretraining_dataset(cfg), 2 * per_epoch))
    # Reopen in the 2nd epoch, 6 records into its 4th window: 3 windows (12 records) are
    # consumed in this epoch. Files wholly among them precede the window in this epoch's
    # order (a window is a stretch of the file stream), so reading them again is not needed.
    first = per_epoch + 3 * 4 + 2
    consumed = stream[per_epoch:per_epoch + 12]
    done = [f for f, ids in enumerate(files) if set(ids) <= set(consumed)]
    assert done, "the seed should put a whole file in the first 3 windows"
    for f in done:
        os.remove(tmp_path / f"data-{f}.tfrecord")  # a skip from the start would fail here
    reopened = ids_of(collect(make_pretraining_dataset(cfg, first_batch=first), 10))
    assert reopened == stream[first:first + 10]
    assert not {file_of[i] for i in reopened} & set(done)
    with pytest.raises(tf.errors.NotFoundError):
        collect(make_pretraining_dataset(cfg), 2 * per_epoch)


def test_record_counts_are_counted_once_and_cached_by_path_and_size(tmp_path, monkeypatch):
    write_uneven(tmp_path)
    cache = os.fspath(tmp_path / "out" / record_positions.COUNTS_FILE)
    os.makedirs(os.path.dirname(cache))
    assert arithmetic_config(tmp_path, cache).record_counts == SIZES
    saved = json.load(open(cache))["files"]
    assert [saved[os.fspath(tmp_path / f"data-{f}.tfrecord")][1] for f in range(4)] == list(SIZES)

    counted = []
    real = record_positions.count_files
    monkeypatch.setattr(record_positions, "count_files",
                        lambda files, compressions: counted.append(files) or real(files,
                                                                                   compressions))
    assert arithmetic_config(tmp_path, cache).record_counts == SIZES
    assert counted == []  # a resume reads the cache, not the data
    rng = np.random.default_rng(1)  # file 2 rewritten with 6 records: counted again
    write_records(os.fspath(tmp_path / "data-2.tfrecord"),
                  [serialize(make_features(100 + i, rng)) for i in range(6)])
    assert arithmetic_config(tmp_path, cache).record_counts == (5, 9, 6, 7)
    assert counted == [[os.fspath(tmp_path / "data-2.tfrecord")]]
    with open(cache, "w") as f:
        f.write("{not json")  # a damaged cache is counted again, not trusted
    assert arithmetic_config(tmp_path, cache).record_counts == (5, 9, 6, 7)
    assert [f for f in os.listdir(tmp_path / "out") if ".tmp" in f] == []


def test_gzip_files_are_counted_like_plain_ones(tmp_path):
    rng = np.random.default_rng(0)
    write_records(os.fspath(tmp_path / "data-0.tfrecord"),
                  [serialize(make_features(i, rng)) for i in range(7)], gzip=True)
    cfg = arithmetic_config(tmp_path, batch_size=1)
    assert cfg.record_counts == (7,)
    assert sorted(ids_of(collect(make_pretraining_dataset(cfg), 7))) == list(range(7))


def test_iterator_positions_and_eval_need_no_counts(tmp_path):
    write_uneven(tmp_path)
    assert record_positions.with_counts(config(tmp_path)).record_counts is None
    evaluation = config(tmp_path, input_position="arithmetic", is_training=False)
    assert record_positions.with_counts(evaluation).record_counts is None
    with pytest.raises(ValueError, match="first_batch needs"):
        make_pretraining_dataset(config(tmp_path), first_batch=3)


def test_bad_settings_are_one_line_errors(tmp_path):
    write_uneven(tmp_path, (1,))
    with pytest.raises(UserError, match="--input_position must be iterator or arithmetic"):
        config(tmp_path, input_position="random")
    uncounted = config(tmp_path, input_position="arithmetic")
    uncounted = uncounted.__class__(**{**uncounted.__dict__,
                                       "resolved_files": input_validation.validate_input_files(
                                           uncounted)})
    with pytest.raises(UserError, match="needs the record count of every input file"):
        make_pretraining_dataset(uncounted)
    one_record = arithmetic_config(tmp_path, batch_size=1)
    with pytest.raises(UserError, match="input pipeline 1 of 2 has no records to read: 1 "
                                        "file"):
        make_pretraining_dataset(one_record, tf.distribute.InputContext(2, 1, 2))


def test_counting_a_file_gone_after_validation_fails_at_once(tmp_path):
    write_uneven(tmp_path)
    inputs = input_validation.validate_input_files(config(tmp_path))
    os.remove(tmp_path / "data-2.tfrecord")  # ignore_errors alone retried it for ever
    with pytest.raises(tf.errors.NotFoundError, match="data-2.tfrecord"):
        record_positions.count_files(inputs.files, inputs.compressions)
