"""Tests of data_tools.runtime.sharded_output: gzip byte-identical to TensorFlow's, atomic
shards."""

import os

import pytest
import tensorflow as tf
from _records import random_records

from bert_tf.core.errors import UserError
from data_tools.records.tfrecord_frames import frame_records
from data_tools.runtime.sharded_output import ShardedWriter


def test_gzip_byte_identical_to_tf_writer_and_readable(tmp_path):
    items, rows = random_records(seed=1)
    ref = tmp_path / "ref.tfrecord.gz"
    with tf.io.TFRecordWriter(str(ref), tf.io.TFRecordOptions(compression_type="GZIP")) as w:
        for x in items:
            w.write(x)
    out = tmp_path / "mine.tfrecord.gz"
    data = frame_records(rows).data.tobytes()
    with ShardedWriter([str(out)], "gzip") as writer:
        writer.write(0, data[:1000])  # block boundaries do not change the stream
        writer.write(0, data[1000:])
    assert out.read_bytes() == ref.read_bytes()
    got = [r.numpy() for r in tf.data.TFRecordDataset(str(out), compression_type="GZIP")]
    assert got == items


def test_shards_renamed_only_on_success(tmp_path):
    paths = [str(tmp_path / "sub" / f"s{i}.tfrecord") for i in range(3)]
    with ShardedWriter(paths) as writer:
        names = os.listdir(tmp_path / "sub")  # the missing directory was created
        assert len(names) == 3 and all(".tmp-" in name for name in names)
        for i in range(3):
            writer.write(i, bytes([i]) * (i + 1))
    assert [open(p, "rb").read() for p in paths] == [b"\x00", b"\x01\x01", b"\x02\x02\x02"]
    assert writer.bytes_written == [1, 2, 3]


def test_failure_leaves_no_file(tmp_path):
    paths = [str(tmp_path / f"s{i}.tfrecord") for i in range(2)]
    with pytest.raises(KeyboardInterrupt):
        with ShardedWriter(paths) as writer:
            writer.write(0, b"partial")
            raise KeyboardInterrupt
    assert os.listdir(tmp_path) == []


def test_unwritable_output_is_a_user_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(UserError, match="cannot"):
        with ShardedWriter([str(tmp_path / "ok.tfrecord"), str(blocker / "out.tfrecord")]):
            pass
    assert sorted(os.listdir(tmp_path)) == ["file"]  # the first shard's temp is gone too


def test_bad_compression_and_duplicate_paths(tmp_path):
    with pytest.raises(UserError, match="gzip"):
        ShardedWriter([str(tmp_path / "a")], "zstd")
    with pytest.raises(UserError, match="distinct"):
        ShardedWriter([str(tmp_path / "a"), str(tmp_path / "a")])


def test_write_error_is_a_user_error_and_removes_temps(tmp_path, monkeypatch):
    import errno

    from bert_tf.core import fileio

    real_open = fileio.open_file

    class FullDisk:
        def __init__(self, path):
            self.f = real_open(path, "wb")

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

        def close(self):
            self.f.close()

    monkeypatch.setattr(fileio, "open_file", lambda path, mode="r": FullDisk(path))
    out = str(tmp_path / "x.tfrecord")
    with pytest.raises(UserError, match=r"cannot write .*x.tfrecord: No space left on device"):
        with ShardedWriter([out]) as writer:
            writer.write(0, b"data")
    assert os.listdir(tmp_path) == []
