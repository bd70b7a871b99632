"""Tests for bert_tf.interop.safetensors_io: golden bytes, hand-made files, a real model file."""

import json
import os
import struct
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
from _pretraining_helpers import minilm_dir

from bert_tf.core.errors import UserError
from bert_tf.interop import safetensors_io


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
    names, metadata = safetensors_io.read_header(path)
    assert metadata == {"format": "pt"}
    assert sorted(names) == ["bf", "ids", "m", "s"]
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
    _, metadata = safetensors_io.read_header(path)
    assert metadata == {"format": "pt"}
    with open(path, "rb") as f:  # header padding keeps the data block aligned
        assert (8 + struct.unpack("<Q", f.read(8))[0]) % 8 == 0
    back = safetensors_io.load_file(path)
    assert sorted(back) == sorted(tensors)
    for name, arr in tensors.items():
        assert back[name].dtype == arr.dtype.newbyteorder("="), name
        np.testing.assert_array_equal(back[name], arr)


@pytest.mark.parametrize(
    "content, message",
    [
        (b"\x01\x02", "header too small"),
        (struct.pack("<Q", 50) + b"{}", "invalid header length"),
        (struct.pack("<Q", 3) + b"abc", "invalid JSON"),
        (struct.pack("<Q", 2**40), "header too large"),
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
    with pytest.raises(UserError,
                       match="bad.safetensors is not a valid safetensors file: .*offset"):
        safetensors_io.load_file(path)


def test_unknown_dtype_and_missing_file(tmp_path):
    path = str(tmp_path / "f8.safetensors")
    _handmade(path, {"x": {"dtype": "F8_E4M3", "shape": [1], "data_offsets": [0, 1]}}, b"\0")
    with pytest.raises(UserError, match="cannot read tensor 'x'"):
        safetensors_io.load_file(path)
    with pytest.raises(UserError, match="not found"):
        safetensors_io.load_file(str(tmp_path / "nope.safetensors"))


def test_unstorable_dtype(tmp_path):
    with pytest.raises(UserError, match="cannot store tensor 's'"):
        safetensors_io.save_file({"s": np.array(["a"])}, str(tmp_path / "s.safetensors"))


def test_reads_a_real_hugging_face_file():
    path = os.path.join(minilm_dir(), "model.safetensors")
    entries, metadata = safetensors_io.read_header(path)
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


def test_bfloat16_round_trip_is_exact_and_widened(tmp_path):
    values = np.array([1.0, -2.5, 3.140625, 1e-3], np.float32).astype(ml_dtypes.bfloat16)
    path = str(tmp_path / "bf.safetensors")
    safetensors_io.save_file({"w": values}, path)
    raw = open(path, "rb").read()
    header = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
    assert header["w"]["dtype"] == "BF16"
    back = safetensors_io.load_file(path)["w"]
    assert back.dtype == np.float32
    np.testing.assert_array_equal(back, values.astype(np.float32))


# Peak of the memory the reader allocates (Python and NumPy allocations; tracemalloc sees
# both). Pages of a memory-mapped file are not allocations: the OS can drop them at will.
_PEAK_SCRIPT = """
import sys, tracemalloc
from bert_tf.interop import safetensors_io
tracemalloc.start()
tensors = safetensors_io.load_file(sys.argv[1])
print(tracemalloc.get_traced_memory()[1])
"""


def test_reading_holds_each_tensor_once(tmp_path):
    # 8 tensors of 8 MB: a reader that holds the data block and a copy peaks at ~2x the file.
    path = str(tmp_path / "big.safetensors")
    safetensors_io.save_file({f"t{i}": np.full((1 << 21,), i, np.float32) for i in range(8)},
                             path)
    size = os.path.getsize(path)
    out = subprocess.run([sys.executable, "-c", _PEAK_SCRIPT, path], check=True,
                         capture_output=True, text=True, timeout=600).stdout
    growth = int(out.split()[-1])
    assert growth < 1.4 * size, (growth, size)
