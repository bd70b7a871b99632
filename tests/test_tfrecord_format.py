"""Tests of bert_tf.core.tfrecord_format against TensorFlow's own TFRecord writer and reader."""

from __future__ import annotations

import io
import os

import pytest
import tensorflow as tf

from bert_tf.core import tfrecord_format


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


def frames_with(records, damage):
    """The framed records as one bytes, `damage(list of bytearrays)` applied first."""
    frames = [bytearray(tfrecord_format.frame(r)) for r in records]
    damage(frames)
    return b"".join(bytes(f) for f in frames)


RECORDS = [bytes([i]) * (10 + 7 * i) for i in range(6)]


def test_count_damaged_tail_skips_a_bad_payload_by_its_length():
    def flip_payload(frames):
        frames[2][tfrecord_format.HEADER_BYTES + 1] ^= 0x01
        frames[4][-1] ^= 0x80  # a second damaged record: its data checksum
    data = frames_with(RECORDS, flip_payload)
    offset = sum(len(tfrecord_format.frame(r)) for r in RECORDS[:2])
    f = io.BytesIO(data)
    f.seek(offset)
    # Records 2..5: two damaged and two sound ones, all lost to a reader that stops at 2.
    assert tfrecord_format.count_damaged_tail(f) == (4, "bad data checksum")


def test_count_damaged_tail_resyncs_after_a_bad_length():
    def break_length(frames):
        frames[1][2] ^= 0x10  # the length now fails its checksum: the extent is unknown
    data = frames_with(RECORDS, break_length)
    f = io.BytesIO(data)
    f.seek(len(tfrecord_format.frame(RECORDS[0])))
    # The damaged frame counts as one, then the search finds frames 2..5 again.
    assert tfrecord_format.count_damaged_tail(f) == (5, "bad length checksum")


def test_count_damaged_tail_of_a_truncated_file_and_of_sound_frames():
    data = frames_with(RECORDS, lambda frames: None)
    f = io.BytesIO(data[:-3])
    f.seek(sum(len(tfrecord_format.frame(r)) for r in RECORDS[:5]))
    assert tfrecord_format.count_damaged_tail(f) == (1, "record truncated")
    f = io.BytesIO(data)
    f.seek(len(tfrecord_format.frame(RECORDS[0])))
    assert tfrecord_format.count_damaged_tail(f) == (5, "")  # nothing damaged from here on
    assert tfrecord_format.count_damaged_tail(io.BytesIO(b"")) == (0, "")
