"""The TFRecord container format, without TensorFlow: CRC-32C checksums and record framing.

A TFRecord file is a sequence of frames:

    uint64 length (little-endian) | uint32 masked_crc32c(length bytes) | data | uint32 masked_crc32c(data)

The "mask" rotates the CRC right by 15 bits and adds a constant, so that CRCs of data that
itself contains CRCs stay well distributed. This module holds the one definition of both, for
the writer in `data_tools` (which checksums whole batches of records) and for the
reader's validation in `bert_tf.data.input_validation` (which checks one record before TensorFlow
starts).
"""

from __future__ import annotations

import struct
from typing import BinaryIO, Optional

import google_crc32c

MASK_DELTA = 0xA282EAD8
HEADER_BYTES = 12  # uint64 length + uint32 masked CRC of the length
FOOTER_BYTES = 4  # uint32 masked CRC of the data


def crc32c(data: bytes) -> int:
    """CRC-32C of `data` (Google's C library, `google-crc32c`)."""
    return google_crc32c.value(data)


def mask_crc(crc: int) -> int:
    """TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + MASK_DELTA (mod 2^32)."""
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + MASK_DELTA) & 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """The checksum stored in TFRecord frames."""
    return mask_crc(crc32c(data))


class FrameError(ValueError):
    """A frame that is truncated or whose checksum does not match."""


def read_frame(f: BinaryIO) -> Optional[bytes]:
    """Reads one record from a binary stream positioned at a frame, checksums verified.

    Returns:
        The record's data, or None at a clean end of file.

    Raises:
        FrameError: truncated header or data, or a checksum mismatch (the message says which).
    """
    header = f.read(HEADER_BYTES)
    if not header:
        return None
    if len(header) < HEADER_BYTES:
        raise FrameError("truncated record header")
    length, length_crc = struct.unpack("<QI", header)
    if masked_crc32c(header[:8]) != length_crc:
        raise FrameError("bad length checksum")
    data, footer = f.read(length), f.read(FOOTER_BYTES)
    if len(data) < length or len(footer) < FOOTER_BYTES:
        raise FrameError("record truncated")
    if struct.unpack("<I", footer)[0] != masked_crc32c(data):
        raise FrameError("bad data checksum")
    return data


def frame(data: bytes) -> bytes:
    """One record framed for a TFRecord file (single-record writer, for tests and tools)."""
    header = struct.pack("<Q", len(data))
    return b"".join((header, struct.pack("<I", masked_crc32c(header)), data,
                     struct.pack("<I", masked_crc32c(data))))
