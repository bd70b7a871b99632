"""Tests of data_tools.tfrecord_writer: byte-identical framing and gzip, atomic shards."""

import os

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.errors import UserError
from data_tools.bytes_ops import Rows
from data_tools.tfrecord_writer import ShardedWriter, frame_records


def _records(n=120, seed=0):
    rng = np.random.default_rng(seed)
    items = [rng.integers(0, 256, k).astype(np.uint8).tobytes()
             for k in rng.integers(0, 2000, n)]
    items[0] = b""  # an empty record is legal
    data = np.frombuffer(b"".join(items), np.uint8)
    return items, Rows(data, np.array([len(x) for x in items], dtype=np.int64))


def test_frames_byte_identical_to_tf_writer(tmp_path):
    items, rows = _records()
    ref = tmp_path / "ref.tfrecord"
    with tf.io.TFRecordWriter(str(ref)) as w:
        for x in items:
            w.write(x)
    frames = frame_records(rows)
    assert frames.data.tobytes() == ref.read_bytes()
    assert (frames.lengths == rows.lengths + 16).all()


def test_gzip_byte_identical_to_tf_writer_and_readable(tmp_path):
    items, rows = _records(seed=1)
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

    from bert_tf import fileio

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
