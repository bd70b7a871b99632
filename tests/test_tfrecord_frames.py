"""Tests of data_tools.records.tfrecord_frames: frames byte-identical to TensorFlow's writer."""

import tensorflow as tf
from _records import random_records

from data_tools.records.tfrecord_frames import frame_records


def test_frames_byte_identical_to_tf_writer(tmp_path):
    items, rows = random_records()
    ref = tmp_path / "ref.tfrecord"
    with tf.io.TFRecordWriter(str(ref)) as w:
        for x in items:
            w.write(x)
    frames = frame_records(rows)
    assert frames.data.tobytes() == ref.read_bytes()
    assert (frames.lengths == rows.lengths + 16).all()
