"""Reading and writing the safetensors format with NumPy (no extra dependency).

The format (https://github.com/huggingface/safetensors, described in its README) is:

    8 bytes   little-endian uint64 N: the length of the JSON header
    N bytes   UTF-8 JSON: {"name": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]},
              ..., "__metadata__": {str: str}} (optional metadata)
    rest      the raw little-endian tensor bytes; tensor i is bytes [b, e) of this block

It is simple enough that a small reader/writer beats a dependency. `bfloat16` tensors (dtype
"BF16") are widened to float32 on read because NumPy has no bfloat16; the widening is exact
(a bfloat16 is the top half of a float32).
"""

from __future__ import annotations

import json
import struct
from typing import Dict, Mapping, Optional, Tuple

import numpy as np

from bert_tf import fileio
from bert_tf.errors import UserError

# safetensors dtype code -> NumPy dtype (always little-endian in the file).
_DTYPES: Dict[str, np.dtype] = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U64": np.dtype("<u8"),
    "U32": np.dtype("<u4"),
    "U16": np.dtype("<u2"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
_CODES: Dict[np.dtype, str] = {v: k for k, v in _DTYPES.items()}

# A header is JSON text describing at most a few thousand tensors; anything bigger is not a
# safetensors file (or a corrupt one) and must not make us allocate gigabytes.
_MAX_HEADER_BYTES = 100 * 1024 * 1024


def _bad(path: str, why: str) -> UserError:
    return UserError(f"{path} is not a valid safetensors file: {why}")


def read_header(path: str) -> Tuple[Dict[str, dict], Dict[str, str], int]:
    """Reads only the JSON header of a safetensors file.

    Args:
        path: a local or remote (`gs://`) file.

    Returns:
        (tensor entries {name: {"dtype", "shape", "data_offsets"}}, metadata, data start byte).

    Raises:
        UserError: the file is missing, truncated or has a malformed header.
    """
    if not fileio.exists(path):
        raise UserError(f"safetensors file not found: {path}")
    with fileio.open_file(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise _bad(path, "shorter than the 8-byte header length")
        (n,) = struct.unpack("<Q", head)
        if n > _MAX_HEADER_BYTES:
            raise _bad(path, f"header length {n} is implausibly large")
        raw = f.read(n)
    if len(raw) != n:
        raise _bad(path, f"header truncated ({len(raw)} of {n} bytes)")
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _bad(path, f"header is not JSON ({e})") from None
    if not isinstance(header, dict):
        raise _bad(path, "header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    return header, metadata, 8 + n


def _check_entry(path: str, name: str, entry: dict, data_len: int) -> Tuple[np.dtype, tuple, int, int]:
    try:
        code, shape, (begin, end) = entry["dtype"], tuple(entry["shape"]), entry["data_offsets"]
    except (KeyError, TypeError, ValueError):
        raise _bad(path, f"entry {name!r} lacks dtype/shape/data_offsets") from None
    if code == "BF16":
        dtype = np.dtype("<u2")  # Raw bits; widened to float32 by the caller.
    elif code in _DTYPES:
        dtype = _DTYPES[code]
    else:
        raise UserError(f"{path}: tensor {name!r} has dtype {code}, which bert_tf cannot read")
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if not (0 <= begin <= end <= data_len) or end - begin != expected:
        raise _bad(
            path,
            f"tensor {name!r} of shape {list(shape)} {code} needs {expected} bytes but its "
            f"data_offsets are [{begin}, {end}] in a data block of {data_len} bytes",
        )
    return dtype, shape, begin, end


def load_file(path: str) -> Dict[str, np.ndarray]:
    """Reads every tensor of a safetensors file.

    Args:
        path: a local or remote (`gs://`) file.

    Returns:
        {name: array} in the file's dtypes (BF16 widened to float32), in header order.

    Raises:
        UserError: the file is missing or malformed, or holds a dtype NumPy cannot represent.
    """
    header, _, start = read_header(path)
    with fileio.open_file(path, "rb") as f:
        f.seek(start)
        data = f.read()
    out: Dict[str, np.ndarray] = {}
    for name, entry in header.items():
        dtype, shape, begin, end = _check_entry(path, name, entry, len(data))
        arr = np.frombuffer(data, dtype=dtype, count=(end - begin) // dtype.itemsize,
                            offset=begin).reshape(shape)
        if entry["dtype"] == "BF16":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        # Copy so the arrays own native-endian memory and the big buffer can be freed.
        out[name] = arr.astype(arr.dtype.newbyteorder("="), copy=True)
    return out


def save_file(
    tensors: Mapping[str, np.ndarray],
    path: str,
    metadata: Optional[Mapping[str, str]] = None,
) -> None:
    """Writes tensors to a safetensors file, atomically (temporary name, then rename).

    Tensors are stored in sorted name order; the header is padded with spaces to a multiple
    of 8 bytes so that every tensor is aligned (as the reference writer does).

    Args:
        tensors: {name: array}; any shape, dtypes among F64/F32/F16/I64..U8/BOOL.
        path: the output file (local or `gs://`).
        metadata: optional string-to-string metadata, e.g. {"format": "pt"}.

    Raises:
        UserError: a dtype the format cannot hold, or an unwritable path.
    """
    header: Dict[str, object] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        arr = np.asarray(tensors[name])
        dtype = arr.dtype.newbyteorder("<")
        code = _CODES.get(dtype)
        if code is None:
            raise UserError(f"cannot store tensor {name!r} of dtype {arr.dtype} in safetensors")
        blob = np.ascontiguousarray(arr, dtype=dtype).tobytes()
        header[name] = {"dtype": code, "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    with fileio.atomic_output(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for blob in blobs:
            f.write(blob)
