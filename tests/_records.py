"""TFRecord framing for the data-job tests, without TensorFlow."""

from __future__ import annotations


def count_frames(data: bytes) -> int:
    """Number of TFRecord frames in `data` (each: 8-byte length, 4-byte CRC, payload, 4-byte
    CRC); asserts that the frames cover `data` exactly."""
    n, at = 0, 0
    while at < len(data):
        at += 16 + int.from_bytes(data[at:at + 8], "little")
        n += 1
    assert at == len(data)
    return n
