"""Tests of bert_tf.data.input_pipeline on small TFRecord files written here.

The files are written with tf.io.TFRecordWriter and tf.train.Example directly (bert_tf must
not import data_tools), in the original schema, by tests/_input_records.py. Every example is
recognisable: the token at position 1 is `ID_BASE + example index` and is never masked by the
helper.
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import List

import numpy as np
import pytest
import tensorflow as tf
from _input_records import (
    CLS,
    ID_BASE,
    PRED,
    SEQ,
    VOCAB,
    collect,
    config,
    example_ids,
    example_ids_np,
    make_features,
    masking,
    serialize,
    write_files,
    write_records,
)
from _pretraining_helpers import fresh_pythonpath

from bert_tf.core import schema, tfrecord_format
from bert_tf.core.errors import UserError
from bert_tf.core.masking_rules import MaskingConfig
from bert_tf.data import input_config, input_pipeline, input_validation
from bert_tf.data.input_config import InputConfig
from bert_tf.data.input_pipeline import make_pretraining_dataset


def test_eval_pass_parses_every_example_exactly(tmp_path):
    examples = write_files(tmp_path, num_files=3, per_file=5)
    ds = make_pretraining_dataset(config(tmp_path, is_training=False, drop_remainder=False))
    batches = collect(ds)
    assert [len(b["input_ids"]) for b in batches] == [4, 4, 4, 3]
    seen = {}
    for b in batches:
        assert b["input_ids"].dtype == np.int32 and b["masked_lm_weights"].dtype == np.float32
        assert b["next_sentence_labels"].shape[1] == 1
        for row in range(len(b["input_ids"])):
            seen[int(b["input_ids"][row, 1]) - ID_BASE] = {k: v[row] for k, v in b.items()}
    assert sorted(seen) == list(range(15))
    for index, got in seen.items():
        for name, values in examples[index].items():
            np.testing.assert_array_equal(got[name], np.array(values), err_msg=name)


def test_resolved_files_are_used_instead_of_validating_again(tmp_path):
    write_files(tmp_path, num_files=3, per_file=5)
    cfg = config(tmp_path, is_training=False, drop_remainder=False)
    resolved = input_validation.validate_input_files(cfg)
    only_first = input_config.InputFiles(resolved.files[:1], resolved.compressions[:1],
                                             resolved.use_v2_feature_names)
    # The patterns match three files; the resolved list (one file) is what gets read.
    batches = collect(make_pretraining_dataset(
        dataclasses.replace(cfg, resolved_files=only_first)))
    assert sorted(i for b in batches for i in example_ids_np(b)) == list(range(5))


def test_training_batches_have_static_shapes_and_int32(tmp_path):
    write_files(tmp_path, num_files=2, per_file=5)
    ds = make_pretraining_dataset(config(tmp_path, batch_size=3))
    spec = ds.element_spec
    assert set(spec) == {f.name for f in schema.FEATURES}
    assert spec["input_ids"].shape.as_list() == [3, SEQ]
    assert spec["masked_lm_positions"].shape.as_list() == [3, PRED]
    assert spec["next_sentence_labels"].shape.as_list() == [3, 1]
    assert spec["input_ids"].dtype == tf.int32 and spec["masked_lm_weights"].dtype == tf.float32
    # Training repeats: 20 batches of 3 out of 10 examples, each example seen ~6 times.
    ids = [i for b in ds.take(20) for i in example_ids({"input_ids": b["input_ids"]})]
    assert len(ids) == 60 and set(ids) == set(range(10))


def test_v2_feature_names_are_detected_and_mapped_to_v1(tmp_path):
    examples = write_files(tmp_path, num_files=1, per_file=4, v2=True)
    ds = make_pretraining_dataset(config(tmp_path, is_training=False))
    (batch,) = collect(ds)
    assert "input_word_ids" not in batch and "input_type_ids" not in batch
    np.testing.assert_array_equal(batch["input_ids"][0], examples[0]["input_ids"])
    np.testing.assert_array_equal(batch["segment_ids"][3], examples[3]["segment_ids"])
    # Explicit flags: the wrong one is a clear error, the right one works.
    with pytest.raises(UserError, match="no feature input_ids .*it has input_word_ids"):
        make_pretraining_dataset(config(tmp_path, use_v2_feature_names=False))
    make_pretraining_dataset(config(tmp_path, use_v2_feature_names=True))


@pytest.mark.parametrize("gzip", [False, True])
def test_validation_opens_each_file_once(tmp_path, monkeypatch, gzip):
    # On gs:// every open is a round trip: the compression and the first record come from
    # one open per file.
    write_files(tmp_path, num_files=3, per_file=2, gzip=gzip)
    opened = []
    real_open = input_validation.fileio.open_file
    monkeypatch.setattr(input_validation.fileio, "open_file",
                        lambda path, mode: opened.append(path) or real_open(path, mode))
    inputs = input_validation.validate_input_files(config(tmp_path))
    assert sorted(opened) == sorted(inputs.files) and len(opened) == 3
    assert inputs.compressions == (("GZIP" if gzip else ""),) * 3


def test_an_unreadable_input_is_a_one_line_error(tmp_path, monkeypatch):
    write_files(tmp_path, num_files=1, per_file=2)

    def denied(path, mode):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(input_validation.fileio, "open_file", denied)
    with pytest.raises(UserError, match=r"^cannot read .*data-0.tfrecord: Permission denied$"):
        input_validation.validate_input_files(config(tmp_path))


def test_gzip_is_detected_from_magic_bytes(tmp_path):
    examples = write_files(tmp_path, num_files=2, per_file=4, gzip=True)
    assert open(tmp_path / "data-0.tfrecord", "rb").read(2) == b"\x1f\x8b"
    assert input_validation.detect_compression(os.fspath(tmp_path / "data-0.tfrecord")) == "GZIP"
    ds = make_pretraining_dataset(config(tmp_path, is_training=False, cycle_length=1))
    got = [i for b in collect(ds) for i in example_ids_np(b)]
    assert got == list(range(8))  # cycle_length=1 reads the files in order
    np.testing.assert_array_equal(collect(ds)[1]["masked_lm_ids"][0], examples[4]["masked_lm_ids"])
    with pytest.raises(UserError, match="data-0.tfrecord is not a TFRecord file.*gzip"):
        make_pretraining_dataset(config(tmp_path, compression=""))
    explicit = config(tmp_path, is_training=False, cycle_length=1, compression="gzip")
    assert explicit.compression == "GZIP"
    assert [i for b in collect(make_pretraining_dataset(explicit)) for i in example_ids_np(b)
            ] == list(range(8))


def test_mixed_plain_and_gzip_files(tmp_path):
    rng = np.random.default_rng(3)
    write_records(os.fspath(tmp_path / "data-0.tfrecord"),
                  [serialize(make_features(i, rng)) for i in range(3)])
    write_records(os.fspath(tmp_path / "data-1.tfrecord"),
                  [serialize(make_features(i, rng)) for i in range(3, 6)], gzip=True)
    ds = make_pretraining_dataset(config(tmp_path, is_training=False, drop_remainder=False))
    assert sorted(i for b in collect(ds) for i in example_ids_np(b)) == list(range(6))


@pytest.mark.parametrize("num_files,mode", [(4, "files"), (1, "records")])
def test_sharding_gives_disjoint_covering_shards(tmp_path, num_files, mode):
    write_files(tmp_path, num_files=num_files, per_file=12 // num_files)
    assert input_pipeline.shard_mode(num_files, tf.distribute.InputContext(2, 0, 2)) == mode
    shards = []
    for pipeline_id in range(2):
        ctx = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=pipeline_id,
                                         num_replicas_in_sync=2)
        ds = make_pretraining_dataset(config(tmp_path, is_training=False, batch_size=2), ctx)
        shards.append([i for b in collect(ds) for i in example_ids_np(b)])
    assert len(shards[0]) == len(shards[1]) == 6
    assert not set(shards[0]) & set(shards[1])
    assert sorted(shards[0] + shards[1]) == list(range(12))


@pytest.mark.parametrize("num_files", [4, 1])
def test_training_shards_are_disjoint_within_an_epoch(tmp_path, num_files):
    write_files(tmp_path, num_files=num_files, per_file=12 // num_files)
    shards = []
    for pipeline_id in range(2):
        ctx = tf.distribute.InputContext(2, pipeline_id, 2)
        # Buffer 1: no mixing across the epoch boundary, so 3 batches of 2 are one epoch.
        ds = make_pretraining_dataset(config(tmp_path, batch_size=2, shuffle_buffer_size=1), ctx)
        shards.append([i for b in collect(ds, 3) for i in example_ids_np(b)])
    assert sorted(shards[0] + shards[1]) == list(range(12))


def test_same_seed_same_batches_other_seed_other_batches(tmp_path):
    write_files(tmp_path, num_files=3, per_file=8)

    def run(seed):
        return collect(make_pretraining_dataset(config(tmp_path, seed=seed, masking=masking())), 8)

    first, again, other = run(7), run(7), run(8)
    for a, b in zip(first, again):
        for name in a:
            np.testing.assert_array_equal(a[name], b[name])
    assert any(not np.array_equal(a["input_mask"], b["input_mask"]) for a, b in zip(first, other))


@pytest.mark.parametrize("dynamic, skip", [(False, False), (True, False), (False, True)])
def test_iterator_checkpoint_resumes_the_same_sequence(tmp_path, dynamic, skip):
    write_files(tmp_path, num_files=3, per_file=6)
    cfg = config(tmp_path, seed=3, masking=masking() if dynamic else None,
                 skip_corrupt_records=skip)
    reference = collect(make_pretraining_dataset(cfg), 10)

    iterator = iter(make_pretraining_dataset(cfg))
    for _ in range(4):
        next(iterator)
    checkpoint = tf.train.Checkpoint(iterator=iterator)
    path = checkpoint.save(os.fspath(tmp_path / "ckpt" / "it"))
    next(iterator)  # move on, so the restore has something to undo

    restored = iter(make_pretraining_dataset(cfg))
    tf.train.Checkpoint(iterator=restored).restore(path).assert_consumed()
    resumed = [{k: v.numpy() for k, v in next(restored).items()} for _ in range(6)]
    # And the other way of resuming: skip the consumed batches.
    skipped = collect(make_pretraining_dataset(cfg).skip(4), 6)
    for want, got, got_skip in zip(reference[4:], resumed, skipped):
        for name in want:
            np.testing.assert_array_equal(got[name], want[name])
            np.testing.assert_array_equal(got_skip[name], want[name])


def test_dynamic_masking_gives_fresh_masks_of_the_same_records(tmp_path):
    examples = write_files(tmp_path, num_files=1, per_file=8)
    cfg = config(tmp_path, batch_size=8, shuffle_buffer_size=1,
                 masking=masking(masked_lm_prob=0.3))
    epochs = collect(make_pretraining_dataset(cfg), 3)  # one batch = one epoch
    from bert_tf.data.dynamic_masking import restore_original_ids
    masks = []
    for batch in epochs:
        original = restore_original_ids(*(tf.constant(batch[k]) for k in (
            "input_ids", "masked_lm_positions", "masked_lm_ids", "masked_lm_weights"))).numpy()
        by_id = {int(row[1]) - ID_BASE: row for row in original}
        for index, want in enumerate(examples):
            want_tokens = list(want["input_ids"])
            for p, t, w in zip(want["masked_lm_positions"], want["masked_lm_ids"],
                               want["masked_lm_weights"]):
                if w:
                    want_tokens[p] = t
            np.testing.assert_array_equal(by_id[index], want_tokens)
        order = np.argsort(original[:, 1])
        masks.append(batch["masked_lm_positions"][order])
    assert not np.array_equal(masks[0], masks[1]) and not np.array_equal(masks[1], masks[2])


def test_eval_with_dynamic_masking_masks_each_record_once_whatever_the_batching(tmp_path):
    # An eval input masks every record from (seed, file, record): each pass, any batch size
    # and any number of input pipelines give the same masks (periodic evaluations of a run
    # and runs of other layouts compare), unlike the stored ones; another seed, other masks.
    from bert_tf.data.dynamic_masking import restore_original_ids

    examples = write_files(tmp_path, num_files=2, per_file=6)
    cfg = config(tmp_path, is_training=False, drop_remainder=False,
                 masking=masking(masked_lm_prob=0.3))

    def masks_by_example(*datasets):
        found = {}
        for ds in datasets:
            for b in collect(ds):
                # Position 1 holds the example's id, maybe masked now: read it unmasked.
                original = restore_original_ids(*(tf.constant(b[k]) for k in (
                    "input_ids", "masked_lm_positions", "masked_lm_ids",
                    "masked_lm_weights"))).numpy()
                for i, index in enumerate(original[:, 1] - ID_BASE):
                    found[int(index)] = tuple(map(tuple, (b["input_ids"][i],
                                                     b["masked_lm_positions"][i])))
        return found

    first = masks_by_example(make_pretraining_dataset(cfg))
    assert sorted(first) == list(range(12))
    assert masks_by_example(make_pretraining_dataset(cfg)) == first
    assert masks_by_example(make_pretraining_dataset(dataclasses.replace(cfg, batch_size=5))
                            ) == first
    assert masks_by_example(*(make_pretraining_dataset(cfg, tf.distribute.InputContext(
        2, pipeline, 2)) for pipeline in range(2))) == first
    stored = {i: tuple(e["masked_lm_positions"]) for i, e in enumerate(examples)}
    assert sum(first[i][1] != stored[i] for i in stored) >= 6
    other_seed = masks_by_example(make_pretraining_dataset(dataclasses.replace(cfg, seed=99)))
    assert sum(other_seed[i] != first[i] for i in first) >= 6
    # masked_lm_prob 0.3 of 7-10 real tokens: 2 or 3 predictions (the stored ones have 1-3).
    assert {sum(1 for p in first[i][1] if p) for i in first} <= {2, 3}


# ----------------------------------------------------------------------------- errors


def test_wrong_max_seq_length_names_file_feature_and_flag(tmp_path):
    write_files(tmp_path, num_files=1, per_file=2)
    with pytest.raises(UserError) as e:
        make_pretraining_dataset(config(tmp_path, max_seq_length=32))
    assert str(e.value) == (
        f"input_ids has length {SEQ} in {tmp_path / 'data-0.tfrecord'} but --max_seq_length=32")
    with pytest.raises(UserError, match=f"masked_lm_positions has length {PRED} in .*data-0"
                                        r".tfrecord but --max_predictions_per_seq=5"):
        make_pretraining_dataset(config(tmp_path, max_predictions_per_seq=5))


def test_not_a_tfrecord(tmp_path):
    write_files(tmp_path, num_files=1, per_file=2)
    (tmp_path / "data-1.tfrecord").write_text("this is a text file, not records\n" * 20)
    with pytest.raises(UserError, match=r"data-1.tfrecord is not a TFRecord file or is corrupted"):
        make_pretraining_dataset(config(tmp_path))


def test_missing_feature_and_out_of_vocab_ids_in_first_record(tmp_path):
    rng = np.random.default_rng(0)
    features = make_features(0, rng)
    del features["next_sentence_labels"]
    write_records(os.fspath(tmp_path / "data-0.tfrecord"), [serialize(features)])
    with pytest.raises(UserError, match="data-0.tfrecord has no feature next_sentence_labels$"):
        make_pretraining_dataset(config(tmp_path))
    with pytest.raises(UserError, match=r"input_ids in .*data-0.tfrecord has token id 1000, "
                                        r"outside --vocab_size=900"):
        write_files(tmp_path, num_files=1, per_file=2)
        make_pretraining_dataset(config(tmp_path, vocab_size=900))


def test_no_matching_files_and_empty_files(tmp_path):
    with pytest.raises(UserError, match="no file matches"):
        make_pretraining_dataset(config(tmp_path))
    write_records(os.fspath(tmp_path / "data-0.tfrecord"), [])
    with pytest.raises(UserError, match="every matching file is empty"):
        make_pretraining_dataset(config(tmp_path))
    rng = np.random.default_rng(1)
    write_records(os.fspath(tmp_path / "data-1.tfrecord"), [serialize(make_features(0, rng))])
    ds = make_pretraining_dataset(config(tmp_path, is_training=False, drop_remainder=False))
    assert [example_ids_np(b) for b in collect(ds)] == [[0]]


def test_mixed_feature_names_are_rejected(tmp_path):
    rng = np.random.default_rng(2)
    write_records(os.fspath(tmp_path / "data-0.tfrecord"), [serialize(make_features(0, rng))])
    write_records(os.fspath(tmp_path / "data-1.tfrecord"),
                  [serialize(make_features(1, rng), v2=True)])
    with pytest.raises(UserError, match="data-1.tfrecord uses v2 feature names but .*data-0"):
        make_pretraining_dataset(config(tmp_path))


def test_out_of_range_id_in_a_later_record_fails_in_graph_with_a_clear_message(tmp_path):
    rng = np.random.default_rng(4)
    records = [make_features(i, rng) for i in range(6)]
    records[4]["masked_lm_ids"][0] = VOCAB + 7  # only the first record is checked eagerly
    write_records(os.fspath(tmp_path / "data-0.tfrecord"), [serialize(r) for r in records])
    ds = make_pretraining_dataset(config(tmp_path, is_training=False, batch_size=2))
    with pytest.raises(tf.errors.InvalidArgumentError) as e:
        collect(ds)
    error = input_validation.user_error_from(e.value)
    assert isinstance(error, UserError)
    assert str(error) == (
        f"masked_lm_ids has token id {VOCAB + 7} >= --vocab_size={VOCAB} in record 4 (counting "
        f"from 0) of {tmp_path / 'data-0.tfrecord'} (was the data written with another vocab?)")
    assert input_validation.user_error_from(ValueError("x")) is None


def write_damaged(path, records: List[bytes], damaged: int, how: str = "payload",
                  gzip: bool = False) -> int:
    """Writes framed `records` with record `damaged` broken; returns that frame's offset.

    how: "payload" flips a data byte (bad data checksum), "truncate" cuts the file inside
    that record (it must be the last one). With gzip, the damaged frames are compressed as
    they are: the gzip stream is sound, its content is not.
    """
    import gzip as gzip_module

    frames = [bytearray(tfrecord_format.frame(r)) for r in records]
    offset = sum(len(f) for f in frames[:damaged])
    if how == "payload":
        frames[damaged][tfrecord_format.HEADER_BYTES + 3] ^= 0x5A
    else:
        assert damaged == len(records) - 1
        frames[damaged] = frames[damaged][:len(frames[damaged]) - 7]
    data = b"".join(bytes(f) for f in frames)
    with open(path, "wb") as f:
        f.write(gzip_module.compress(data) if gzip else data)
    return offset


def damaged_files(tmp_path):
    """data-0: 6 records, record 2's payload damaged (4 lost); data-1: 5 records, the last
    one truncated (1 lost); data-2: 4 sound records. Returns the examples and the offsets."""
    rng = np.random.default_rng(7)
    examples = [make_features(i, rng) for i in range(15)]
    records = [serialize(e) for e in examples]
    offsets = [write_damaged(tmp_path / "data-0.tfrecord", records[0:6], 2),
               write_damaged(tmp_path / "data-1.tfrecord", records[6:11], 4, "truncate")]
    write_records(os.fspath(tmp_path / "data-2.tfrecord"), records[11:15])
    return examples, offsets


def expect_input_error(dataset) -> str:
    with pytest.raises(tf.errors.InvalidArgumentError) as e:
        collect(dataset)
    error = input_validation.user_error_from(e.value)
    assert isinstance(error, UserError), e.value
    return str(error)


@pytest.mark.parametrize("gzip", [False, True])
def test_a_damaged_record_mid_file_names_the_file_the_record_and_the_loss(tmp_path, gzip):
    rng = np.random.default_rng(3)
    records = [serialize(make_features(i, rng)) for i in range(8)]
    write_records(os.fspath(tmp_path / "data-0.tfrecord"), records[:3], gzip=gzip)
    offset = write_damaged(tmp_path / "data-1.tfrecord", records[3:], 3, gzip=gzip)
    ds = make_pretraining_dataset(config(tmp_path, is_training=False, batch_size=2))
    assert expect_input_error(ds) == (
        f"corrupted input TFRecord {tmp_path / 'data-1.tfrecord'}: record 3 (counting from 0, "
        f"at byte {offset}): bad data checksum; 2 record(s) from there to the end of the file "
        f"cannot be read (--skip_corrupt_records skips them and goes on)")


def test_a_multi_member_gzip_file_is_explained_not_called_damaged(tmp_path):
    import gzip as gzip_module

    rng = np.random.default_rng(8)
    frames = [tfrecord_format.frame(serialize(make_features(i, rng))) for i in range(4)]
    data = gzip_module.compress(b"".join(frames[:2])) + gzip_module.compress(b"".join(frames[2:]))
    (tmp_path / "data-0.tfrecord").write_bytes(data)
    ds = make_pretraining_dataset(config(tmp_path, is_training=False, batch_size=2))
    assert expect_input_error(ds) == (
        f"{tmp_path / 'data-0.tfrecord'}: its gzip trailer does not give the "
        f"{sum(map(len, frames))} bytes of records it holds: several gzip streams "
        f"concatenated? Recompress it as one stream (the trailer's size is how damaged "
        f"records are found)")
    # Skipping counts nothing lost: every record was read.
    cfg = config(tmp_path, is_training=False, batch_size=2, skip_corrupt_records=True)
    assert len([i for b in collect(make_pretraining_dataset(cfg)) for i in example_ids_np(b)]) == 4
    assert cfg.corrupt_records.count() == 0


def test_a_truncated_last_record_names_the_file(tmp_path):
    rng = np.random.default_rng(5)
    records = [serialize(make_features(i, rng)) for i in range(6)]
    offset = write_damaged(tmp_path / "data-0.tfrecord", records, 5, "truncate")
    ds = make_pretraining_dataset(config(tmp_path, is_training=False, batch_size=2))
    assert expect_input_error(ds) == (
        f"corrupted input TFRecord {tmp_path / 'data-0.tfrecord'}: record 5 (counting from 0, "
        f"at byte {offset}): record truncated; 1 record(s) from there to the end of the file "
        f"cannot be read (--skip_corrupt_records skips them and goes on)")


def test_skip_corrupt_records_goes_on_and_counts_exactly(tmp_path):
    examples, offsets = damaged_files(tmp_path)
    cfg = config(tmp_path, is_training=False, drop_remainder=False, batch_size=3,
                 skip_corrupt_records=True)
    assert cfg.corrupt_records.count() == 0  # nothing read yet
    seen = sorted(i for b in collect(make_pretraining_dataset(cfg)) for i in example_ids_np(b))
    # Everything before each damage, nothing after it in that file: 2 + 4 + 4 records.
    assert seen == [0, 1, 6, 7, 8, 9, 11, 12, 13, 14]
    assert cfg.corrupt_records.count() == 4 + 1
    assert cfg.corrupt_records.damaged() == {0: (1, offsets[0]), 1: (1, offsets[1])}
    assert cfg.corrupt_records.summary() == (
        f"skipped 5 corrupt input record(s): {tmp_path / 'data-0.tfrecord'}: 4 record(s) from "
        f"byte {offsets[0]} on (bad data checksum) x 1 pass(es); "
        f"{tmp_path / 'data-1.tfrecord'}: 1 record(s) from byte {offsets[1]} on (record "
        f"truncated) x 1 pass(es)")
    # replace() (the trainer's per-pipeline batch size) keeps the same count.
    assert dataclasses.replace(cfg, batch_size=2).corrupt_records is cfg.corrupt_records


def test_skip_corrupt_records_counts_every_training_pass(tmp_path):
    damaged_files(tmp_path)
    cfg = config(tmp_path, skip_corrupt_records=True, batch_size=5)
    batches = collect(make_pretraining_dataset(cfg), num_batches=8)  # 40 records: 4 passes
    ids = [i for b in batches for i in example_ids_np(b)]
    assert set(ids) == {0, 1, 6, 7, 8, 9, 11, 12, 13, 14}
    damaged = cfg.corrupt_records.damaged()
    assert sorted(damaged) == [0, 1]
    passes = [damaged[0][0], damaged[1][0]]
    assert min(passes) >= 4  # the prefetch may have read further
    assert cfg.corrupt_records.count() == 4 * passes[0] + 1 * passes[1]


def test_a_masked_position_out_of_range_in_a_later_record_names_file_and_record(tmp_path):
    rng = np.random.default_rng(6)
    records = [make_features(i, rng) for i in range(6)]
    records[2]["masked_lm_positions"][0] = SEQ  # only the first record is checked eagerly
    write_records(os.fspath(tmp_path / "data-0.tfrecord"), [serialize(r) for r in records])
    ds = make_pretraining_dataset(config(tmp_path, is_training=False, batch_size=4))
    assert expect_input_error(ds) == (
        f"masked_lm_positions has position {SEQ} outside [0, --max_seq_length={SEQ}) in "
        f"record 2 (counting from 0) of {tmp_path / 'data-0.tfrecord'}")
    records[2]["masked_lm_positions"][0] = -3
    write_records(os.fspath(tmp_path / "data-0.tfrecord"), [serialize(r) for r in records])
    ds = make_pretraining_dataset(config(tmp_path, is_training=False, batch_size=4))
    assert expect_input_error(ds).startswith("masked_lm_positions has position -3 outside")


@pytest.mark.parametrize("kwargs,message", [
    (dict(batch_size=0), "--batch_size must be positive"),
    (dict(max_predictions_per_seq=SEQ + 1), "--max_predictions_per_seq=17 must be in"),
    (dict(compression="ZLIB"), "compression must be one of"),
    (dict(use_v2_feature_names="yes"), "use_v2_feature_names must be"),
    (dict(masking=MaskingConfig(vocab_size=VOCAB + 1, max_predictions_per_seq=PRED)),
     "masking.vocab_size=5001 exceeds vocab_size=5000"),
    (dict(masking=MaskingConfig(vocab_size=VOCAB, max_predictions_per_seq=PRED - 1)),
     "masking.max_predictions_per_seq=2 differs"),
])
def test_config_validation(tmp_path, kwargs, message):
    with pytest.raises(UserError, match=message):
        config(tmp_path, **kwargs)


# ----------------------------------------------------------------------------- real writer


def test_reads_data_tools_records_and_dynamic_counts_match_the_writer(
        tmp_path, corpus_path, google_vocab_path):
    """End to end with our writer: gzip, v2 names, 2 shards; the masking rules agree."""
    import subprocess
    import sys

    from bert_tf.data.dynamic_masking import remask_batch

    text = tmp_path / "corpus.txt"
    text.write_bytes(corpus_path.read_bytes()[:120_000])
    out = tmp_path / "data-{shard}.tfrecord"
    result = subprocess.run(
        [sys.executable, "-m", "data_tools.create_pretraining_data", f"--input_file={text}",
         f"--output_file={out}", "--num_output_shards=2", f"--vocab_file={google_vocab_path}",
         "--max_seq_length=64", "--max_predictions_per_seq=10", "--dupe_factor=1",
         "--output_compression=gzip", "--use_v2_feature_names", "--num_workers=1"],
        capture_output=True, text=True, timeout=300, cwd=os.fspath(corpus_path.parents[2]))
    assert result.returncode == 0, result.stderr[-2000:]

    cfg = InputConfig(input_patterns=os.fspath(tmp_path / "data-*.tfrecord"), batch_size=32,
                      max_seq_length=64, max_predictions_per_seq=10, vocab_size=30522,
                      is_training=False, drop_remainder=False,
                      masking=MaskingConfig.from_vocab_file(
                          os.fspath(google_vocab_path), max_predictions_per_seq=10))
    inputs = input_validation.validate_input_files(cfg)
    assert inputs.compressions == ("GZIP", "GZIP") and inputs.use_v2_feature_names
    assert cfg.masking.mask_token_id == 103 and cfg.masking.vocab_size == 30522
    total = 0
    for index, batch in enumerate(make_pretraining_dataset(cfg)):
        ids = batch["input_ids"].numpy()
        assert np.all(ids[:, 0] == CLS)
        fresh = remask_batch(batch, tf.constant([1, index]), cfg.masking)
        # Same count rule as the writer: as many predictions per record as it stored.
        np.testing.assert_array_equal(fresh["masked_lm_weights"].numpy().sum(axis=1),
                                      batch["masked_lm_weights"].numpy().sum(axis=1))
        total += len(ids)
    assert total > 100


def test_unvalidated_input_fails_at_parse_time_with_a_clear_message(tmp_path):
    write_files(tmp_path, num_files=2, per_file=4, v2=True)
    cfg = config(tmp_path, is_training=False, validate_files=False, max_seq_length=2 * SEQ)
    inputs = input_validation.validate_input_files(cfg)  # reads one record: the naming only
    assert inputs.use_v2_feature_names and len(inputs.files) == 2
    with pytest.raises(tf.errors.InvalidArgumentError) as e:
        collect(make_pretraining_dataset(cfg))
    error = input_validation.user_error_from(e.value)
    assert str(error).startswith("an input record does not match the schema")
    # parse_example reports whichever seq-length feature it meets first.
    assert re.search(r"feature (input_word_ids|input_mask|input_type_ids): .*Values size: 16 "
                     r"but output shape: \[32\]", str(error)), str(error)


def test_masked_crc32c_known_values(tmp_path):
    # CRC-32C check value of "123456789" is 0xE3069283; then TFRecord's masking.
    crc = 0xE3069283
    assert tfrecord_format.masked_crc32c(b"123456789") == (
        ((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
    # And the framing TensorFlow writes reads back (CRCs included), plain and gzip.
    for gzip, name in ((False, "a.tfrecord"), (True, "b.tfrecord")):
        path = write_records(os.fspath(tmp_path / name), [b"first", b"second"], gzip=gzip)
        assert input_validation.read_first_record(path, "GZIP" if gzip else "") == b"first"


def test_corrupted_first_record_is_reported(tmp_path):
    path = write_records(os.fspath(tmp_path / "data-0.tfrecord"), [b"x" * 50])
    data = bytearray(open(path, "rb").read())
    data[20] ^= 0xFF  # flip a payload byte: the data checksum no longer matches
    open(path, "wb").write(bytes(data))
    with pytest.raises(UserError, match="data-0.tfrecord is not a TFRecord file or is corrupted: "
                                        "first record: bad data checksum"):
        input_validation.validate_input_files(config(tmp_path))


def test_validation_does_not_start_the_tensorflow_runtime(tmp_path):
    """The trainer validates input, then splits the CPU into logical devices."""
    import subprocess
    import sys

    write_files(tmp_path, num_files=2, per_file=3, gzip=True)
    script = (
        "import sys, tensorflow as tf\n"
        "from bert_tf.data import input_config, input_validation\n"
        f"cfg = input_config.InputConfig(input_patterns=sys.argv[1], batch_size=2, "
        f"max_seq_length={SEQ}, max_predictions_per_seq={PRED}, vocab_size={VOCAB})\n"
        "print(len(input_validation.validate_input_files(cfg).files))\n"
        "cpu = tf.config.list_physical_devices('CPU')[0]\n"
        "tf.config.set_logical_device_configuration(\n"
        "    cpu, [tf.config.LogicalDeviceConfiguration()] * 2)\n"
        "print(len(tf.config.list_logical_devices('CPU')))\n"
    )
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run(
        [sys.executable, "-c", script, os.fspath(tmp_path / "data-*.tfrecord")],
        capture_output=True, text=True, timeout=300, cwd=repo,
        env=dict(os.environ, PYTHONPATH=fresh_pythonpath(repo), TF_CPP_MIN_LOG_LEVEL="2"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["2", "2"]


def test_a_file_gone_after_validation_is_a_one_line_error_not_a_hang(tmp_path):
    write_files(tmp_path, num_files=2, per_file=3)
    cfg = config(tmp_path, is_training=False, drop_remainder=False)
    cfg = dataclasses.replace(cfg, resolved_files=input_validation.validate_input_files(cfg))
    os.remove(tmp_path / "data-1.tfrecord")  # TensorFlow's ignore_errors retried it for ever
    with pytest.raises(tf.errors.NotFoundError) as raised:
        collect(make_pretraining_dataset(cfg))
    message = str(input_validation.user_error_from(raised.value))
    assert message.startswith("cannot read an input TFRecord: ") and "data-1.tfrecord" in message
    assert "\n" not in message
