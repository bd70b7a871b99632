"""Reading and writing safetensors files through the `safetensors` package's NumPy API.

Local files are memory-mapped by the library: reading holds each tensor once (the old
hand-written reader read the whole data block and then copied every tensor, about 2x the
file in RAM). Remote files (`gs://`, ...) are first copied to a local temporary file, since
the library maps only local files. `bfloat16` tensors are read and written as `ml_dtypes`
bfloat16 (TensorFlow's own bfloat16 NumPy type); `load_file` widens them to float32, which is
exact, so callers see ordinary NumPy dtypes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from typing import Dict, Iterator, List, Mapping, Optional, Tuple

import ml_dtypes
import numpy as np
import safetensors
import safetensors.numpy

from bert_tf.core import fileio
from bert_tf.core.errors import UserError, reason

_BFLOAT16 = np.dtype(ml_dtypes.bfloat16)


def _bad(path: str, why: str) -> UserError:
    return UserError(f"{path} is not a valid safetensors file: {why}")


@contextlib.contextmanager
def _local_path(path: str) -> Iterator[str]:
    """`path` itself when local; else a local temporary copy, removed afterwards."""
    if not fileio.exists(path):
        raise UserError(f"safetensors file not found: {path}")
    if not fileio.is_remote(path):
        yield path
        return
    with tempfile.TemporaryDirectory() as tmp:
        local = os.path.join(tmp, "copy.safetensors")
        with fileio.open_file(path, "rb") as src, open(local, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 24)
        yield local


@contextlib.contextmanager
def _opened(path: str) -> Iterator["safetensors.safe_open"]:
    with _local_path(path) as local:
        try:
            handle = safetensors.safe_open(local, framework="np")
        except (safetensors.SafetensorError, OSError, ValueError) as e:
            raise _bad(path, reason(e)) from None
        with handle as f:
            yield f


def read_header(path: str) -> Tuple[List[str], Dict[str, str]]:
    """The tensor names (in file order) and the string metadata of a safetensors file.

    Raises:
        UserError: the file is missing or its header is malformed.
    """
    with _opened(path) as f:
        return list(f.keys()), dict(f.metadata() or {})


def load_file(path: str) -> Dict[str, np.ndarray]:
    """Reads every tensor of a safetensors file.

    Args:
        path: a local or remote (`gs://`) file.

    Returns:
        {name: array} in the file's dtypes (BF16 widened to float32), in header order.

    Raises:
        UserError: the file is missing or malformed, or holds a dtype NumPy cannot represent.
    """
    out: Dict[str, np.ndarray] = {}
    with _opened(path) as f:
        for name in f.keys():
            try:
                arr = f.get_tensor(name)
            except (safetensors.SafetensorError, AttributeError, KeyError, TypeError,
                    ValueError) as e:
                raise UserError(f"{path}: cannot read tensor {name!r}: {reason(e)}") from None
            out[name] = arr.astype(np.float32) if arr.dtype == _BFLOAT16 else arr
    return out


def save_file(
    tensors: Mapping[str, np.ndarray],
    path: str,
    metadata: Optional[Mapping[str, str]] = None,
) -> None:
    """Writes tensors to a safetensors file, atomically (temporary name, then rename).

    Args:
        tensors: {name: array}; float64/32/16, bfloat16 (`ml_dtypes`), int64..uint8 or bool,
            any byte order (stored little-endian).
        path: the output file (local or `gs://`).
        metadata: optional string-to-string metadata, e.g. {"format": "pt"}.

    Raises:
        UserError: a dtype the format cannot hold, or an unwritable path.
    """
    arrays = {}
    for name, value in tensors.items():
        arr = np.asarray(value)
        if arr.dtype.kind not in "fiub" and arr.dtype != _BFLOAT16:
            raise UserError(f"cannot store tensor {name!r} of dtype {arr.dtype} in safetensors")
        arrays[name] = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<"))
    meta = {str(k): str(v) for k, v in metadata.items()} if metadata else None
    if fileio.is_remote(path):
        with tempfile.TemporaryDirectory() as tmp:
            local = os.path.join(tmp, "out.safetensors")
            _save(arrays, local, meta, path)
            with open(local, "rb") as src, fileio.atomic_output(path, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 24)
        return
    tmp = fileio.temp_name(path)
    try:
        _save(arrays, tmp, meta, path)
        fileio.rename(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def _save(arrays: Dict[str, np.ndarray], local: str, meta: Optional[Dict[str, str]],
          path: str) -> None:
    try:
        safetensors.numpy.save_file(arrays, local, metadata=meta)
    except (safetensors.SafetensorError, OSError, ValueError, KeyError) as e:
        raise UserError(f"cannot write {path}: {reason(e)}") from None
