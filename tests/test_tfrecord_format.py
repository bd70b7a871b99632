"""Tests of bert_tf.data.tfrecord_format against TensorFlow's own TFRecord writer and reader."""

from __future__ import annotations

import io
import os

import pytest
import tensorflow as tf

from bert_tf.data import tfrecord_format


def test_crc32c_check_value_and_mask():
    # The standard CRC-32C check value of "123456789" (RFC 3720, appendix B.4).
    assert tfrecord_format.crc32c(b"123456789") == 0xE3069283
    crc = 0xE3069283
    assert tfrecord_format.mask_crc(crc) == (
        (((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF
    assert tfrecord_format.crc32c(b"") == 0


def test_frames_equal_tf_writer_bytes_and_read_back(tmp_path):
    records = [b"", b"a", b"hello world" * 50, bytes(range(256))]
    path = os.fspath(tmp_path / "x.tfrecord")
    with tf.io.TFRecordWriter(path) as w:
        for r in records:
            w.write(r)
    data = open(path, "rb").read()
    assert data == b"".join(tfrecord_format.frame(r) for r in records)
    f = io.BytesIO(data)
    assert [tfrecord_format.read_frame(f) for _ in records] == records
    assert tfrecord_format.read_frame(f) is None
    assert [r.numpy() for r in tf.data.TFRecordDataset(path)] == records


@pytest.mark.parametrize("cut, message", [(5, "truncated record header"),
                                          (20, "record truncated")])
def test_truncated_frames(cut, message):
    data = tfrecord_format.frame(b"0123456789abcdef")
    with pytest.raises(tfrecord_format.FrameError, match=message):
        tfrecord_format.read_frame(io.BytesIO(data[:cut]))


@pytest.mark.parametrize("index, message", [(3, "bad length checksum"),
                                            (14, "bad data checksum")])
def test_corrupted_frames(index, message):
    data = bytearray(tfrecord_format.frame(b"0123456789abcdef"))
    data[index] ^= 0x40
    with pytest.raises(tfrecord_format.FrameError, match=message):
        tfrecord_format.read_frame(io.BytesIO(bytes(data)))
