"""Tests of data_tools.records.byte_rows: varints against hand-worked encodings, row
concatenation."""

import numpy as np
import pytest

from data_tools.records.byte_rows import (
    Rows,
    concat_rows,
    encode_varints,
    fixed_width,
    varint_length,
)


def _as_list(part, n):
    if isinstance(part, Rows):
        return part.to_list()
    return [bytes(row) for row in np.broadcast_to(part, (n, part.shape[1]))]


def test_varint_hand_worked():
    # 1 -> 01; 127 -> 7f; 128 -> 80 01; 300 -> ac 02; 16384 -> 80 80 01; 2^35 -> 5 bytes.
    values = np.array([[1, 127, 128], [300, 16384, 2**35]])
    rows = encode_varints(values)
    assert isinstance(rows, Rows)
    assert rows.to_list() == [b"\x01\x7f\x80\x01", b"\xac\x02\x80\x80\x01\x80\x80\x80\x80\x80\x01"]
    assert varint_length(values).tolist() == [[1, 1, 2], [2, 3, 6]]


def test_varint_small_values_are_one_byte_matrix():
    values = np.array([[0, 5, 127], [1, 2, 3]])
    out = encode_varints(values)
    assert isinstance(out, np.ndarray) and out.dtype == np.uint8
    assert out.tolist() == [[0, 5, 127], [1, 2, 3]]


def test_varint_matches_python_reference_on_random_values():
    rng = np.random.default_rng(0)
    values = rng.integers(0, 2**40, size=(50, 7)) >> rng.integers(0, 40, size=(50, 7))

    def ref(v):
        out = bytearray()
        while True:
            b = v & 0x7F
            v >>= 7
            out.append(b | (0x80 if v else 0))
            if not v:
                return bytes(out)

    got = _as_list(encode_varints(values), 50)
    assert got == [b"".join(ref(int(v)) for v in row) for row in values]


def test_varint_rejects_negative():
    with pytest.raises(ValueError):
        encode_varints(np.array([[-1]]))


def test_concat_rows_mixes_ragged_fixed_and_constant_parts():
    ragged = Rows(np.frombuffer(b"abcdef", np.uint8), np.array([1, 0, 5]))
    fixed = np.array([[1, 2], [3, 4], [5, 6]], dtype=np.uint8)
    out = concat_rows([b"<", ragged, fixed, np.array([[9]], np.uint8), b">"], 3)
    assert out.to_list() == [b"<a\x01\x02\x09>", b"<\x03\x04\x09>", b"<bcdef\x05\x06\x09>"]
    assert out.lengths.tolist() == [6, 5, 10]
    assert out.offsets.tolist() == [0, 6, 11, 21]
    assert out.row(2) == b"<bcdef\x05\x06\x09>"


def test_fixed_width_is_little_endian():
    out = fixed_width(np.array([[1.0], [0.5]], dtype=">f4"))
    assert out.tolist() == [[0, 0, 0x80, 0x3F], [0, 0, 0, 0x3F]]
    assert fixed_width(np.array([[258]], dtype="<u8")).tolist() == [[2, 1, 0, 0, 0, 0, 0, 0]]
