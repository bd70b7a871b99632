"""Tests of data_tools.records.crc32c against published CRC-32C check values and a bitwise loop."""

import numpy as np

from data_tools.records.byte_rows import Rows
from data_tools.records.crc32c import crc32c_bytes, crc32c_rows, mask_crc


def _rows(items):
    data = np.frombuffer(b"".join(items), np.uint8) if items else np.zeros(0, np.uint8)
    return Rows(data, np.array([len(x) for x in items], dtype=np.int64))


# The check value of CRC-32C ("123456789") and the iSCSI test vectors of RFC 3720 B.4.
VECTORS = [
    (b"123456789", 0xE3069283),
    (bytes(32), 0x8A9136AA),
    (b"\xff" * 32, 0x62A8AB43),
    (bytes(range(32)), 0x46DD794E),
    (bytes(range(31, -1, -1)), 0x113FDB5C),
    (b"", 0x00000000),
]


def test_known_vectors_bytewise_and_vectorised():
    for data, crc in VECTORS:
        assert crc32c_bytes(data) == crc
    got = crc32c_rows(_rows([d for d, _ in VECTORS]))
    assert [int(x) for x in got] == [c for _, c in VECTORS]


def _bitwise_crc32c(data: bytes) -> int:
    """Reference: the reflected Castagnoli CRC one bit at a time, straight from its definition."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def test_ragged_rows_match_bitwise_reference():
    rng = np.random.default_rng(1)
    sizes = list(rng.integers(0, 300, 200)) + [4096, 4097, 9000]
    items = [rng.integers(0, 256, n).astype(np.uint8).tobytes() for n in sizes]
    expected = [_bitwise_crc32c(x) for x in items]
    assert crc32c_rows(_rows(items)).tolist() == expected
    assert [crc32c_bytes(x) for x in items] == expected
    assert crc32c_rows(_rows([])).shape == (0,)


def test_leading_zero_bytes_are_not_ignored():
    # Right-aligned padding must not make b"\x00a" and b"a" collide.
    got = crc32c_rows(_rows([b"a", b"\x00a", b"\x00\x00a"])).tolist()
    assert got == [crc32c_bytes(b"a"), crc32c_bytes(b"\x00a"), crc32c_bytes(b"\x00\x00a")]
    assert len(set(got)) == 3


def test_mask_crc_hand_computed():
    # rotate right by 15 then add 0xa282ead8 mod 2^32.
    crc = 0xE3069283
    rotated = ((crc >> 15) | (crc << 17)) & 0xFFFFFFFF
    assert int(mask_crc(np.array([crc]))[0]) == (rotated + 0xA282EAD8) & 0xFFFFFFFF
    assert int(mask_crc(np.array([0]))[0]) == 0xA282EAD8
    assert int(mask_crc(np.array([1 << 15]))[0]) == 0xA282EAD9
