"""File access for local paths and remote filesystems (`gs://` on Cloud/Colab TPU).

Local paths use Python's own file objects, so tools that only touch local files do not pay
for importing TensorFlow (seconds and hundreds of MB). Any path with a URL scheme goes through
`tf.io.gfile`, imported on first use: `gs://` and `ram://` work with TensorFlow alone, while
`s3://` and `hdfs://` have needed the `tensorflow-io` package since TensorFlow 2.6 (not a
dependency of this package, and not tested here). Where TensorFlow is not installed (the
light `bert-tf-data` install of the data jobs, e.g. on Dataflow workers), remote paths go
through Apache Beam's `FileSystems` instead (`bert_tf.core.fileio_beam`; `gs://` needs
`apache-beam[gcp]`).

Every output is written under a temporary name and renamed when complete (`atomic_output`),
so a crash or Ctrl-C never leaves a partial file under its final name.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import glob as _glob
import importlib.util
import os
import sys
import uuid
from typing import IO, Callable, Iterable, Iterator, List, TypeVar

from bert_tf.core.errors import UserError, reason

T = TypeVar("T")
R = TypeVar("R")


def is_remote(path: str) -> bool:
    """True for paths with a URL scheme other than `file://` (handled by tf.io.gfile)."""
    return "://" in path and not path.startswith("file://")


def _local(path: str) -> str:
    return path[len("file://"):] if path.startswith("file://") else path


def _tensorflow_installed() -> bool:
    if "tensorflow" in sys.modules:
        return True
    try:
        return importlib.util.find_spec("tensorflow") is not None
    except ImportError:  # a finder that refuses the module (a sandbox, a test) hides it
        return False


def _gfile():
    """tf.io.gfile where TensorFlow is installed, else Beam's FileSystems (same calls).

    Raises:
        UserError: neither is installed.
    """
    # Deferred: only remote paths need either. find_spec does not import TensorFlow, so a
    # data job never loads it only to learn that it is there.
    if _tensorflow_installed():
        import tensorflow as tf

        return tf.io.gfile
    from bert_tf.core import fileio_beam

    return fileio_beam


def open_file(path: str, mode: str = "r", encoding: str | None = None) -> IO:
    """Opens a local or remote file. Binary modes return bytes; text modes decode UTF-8."""
    if is_remote(path):
        f = _gfile().GFile(path, mode.replace("t", ""))
        return f
    if "b" in mode:
        return open(_local(path), mode)
    return open(_local(path), mode, encoding=encoding or "utf-8")


def exists(path: str) -> bool:
    return _gfile().exists(path) if is_remote(path) else os.path.exists(_local(path))


def isdir(path: str) -> bool:
    return _gfile().isdir(path) if is_remote(path) else os.path.isdir(_local(path))


def listdir(path: str) -> List[str]:
    """Names in directory `path` (local or remote)."""
    return _gfile().listdir(path) if is_remote(path) else os.listdir(_local(path))


def makedirs(path: str) -> None:
    if is_remote(path):
        _gfile().makedirs(path)
    else:
        os.makedirs(_local(path), exist_ok=True)


def remove(path: str) -> None:
    if is_remote(path):
        _gfile().remove(path)
    else:
        os.remove(_local(path))


def rename(src: str, dst: str) -> None:
    """Renames `src` to `dst`, replacing `dst` (atomic on local filesystems)."""
    if is_remote(src):
        _gfile().rename(src, dst, overwrite=True)
    else:
        os.replace(_local(src), _local(dst))


def size(path: str) -> int:
    return _gfile().stat(path).length if is_remote(path) else os.path.getsize(_local(path))


def expand_patterns(patterns: str, what: str = "input_file") -> List[str]:
    """Expands comma-separated globs into a sorted, de-duplicated list of files.

    Args:
        patterns: e.g. `"data/a-*.txt,gs://bucket/b.txt"`.
        what: the flag name, used in error messages.

    Returns:
        The matching files, in pattern order and sorted within each pattern.

    Raises:
        UserError: no pattern given, or a pattern that matches no file.
    """
    files: List[str] = []
    seen = set()
    parts = split_list(patterns)
    if not parts:
        raise UserError(f"--{what} is empty: give a file, a glob or a comma-separated list")
    for pattern in parts:
        if is_remote(pattern):
            try:
                matches = sorted(_gfile().glob(pattern))
            except Exception as e:  # tf.errors.*: no network, no such bucket, no access
                raise UserError(f"--{what}: cannot list {pattern!r}: {reason(e)}") from None
        else:
            matches = sorted(m for m in _glob.glob(_local(pattern)) if os.path.isfile(m))
        if not matches:
            raise UserError(f"--{what}: no file matches {pattern!r}")
        for m in matches:
            if m not in seen:
                seen.add(m)
                files.append(m)
    return files


def split_list(value: str) -> List[str]:
    """Splits a comma-separated flag value, dropping empty items."""
    return [p.strip() for p in value.split(",") if p.strip()] if value else []


def temp_name(path: str) -> str:
    """A unique temporary name beside `path` (same directory, so the rename is cheap)."""
    return f"{path}.tmp-{uuid.uuid4().hex[:12]}"


@contextlib.contextmanager
def atomic_output(path: str, mode: str = "wb") -> Iterator[IO]:
    """Writes `path` under a temporary name and renames it only when the block completes.

    On any exception (including KeyboardInterrupt) the temporary file is removed and the
    final name is left untouched.

    Raises:
        UserError: the directory does not exist or is not writable.
    """
    tmp = temp_name(path)
    try:
        f = open_file(tmp, mode)
    except Exception as e:  # OSError locally, tf.errors.* for remote paths
        raise UserError(f"cannot write {path}: {reason(e)}") from None
    try:
        with f:
            yield f
        rename(tmp, path)
    except BaseException:
        with contextlib.suppress(Exception):
            remove(tmp)
        raise


def check_writable_dir(path: str, what: str = "output_dir") -> None:
    """Creates directory `path` if needed and checks that a file can be written there.

    Raises:
        UserError: naming --`what`, when it cannot be created, is a file, or is read-only.
    """
    try:
        makedirs(path)
    except Exception as e:  # OSError locally, tf.errors.* remotely
        raise UserError(f"--{what}={path}: cannot create it ({reason(e)})") from None
    if not isdir(path):
        raise UserError(f"--{what}={path} is not a directory")
    probe = os.path.join(path, ".write_probe")
    with atomic_output(probe, "wb") as f:
        f.write(b"ok")
    remove(probe)


def map_files(fn: Callable[[T], R], items: Iterable[T]) -> List[R]:
    """[fn(item) for item in items], on up to 16 threads: file reads (local or `gs://`)
    spend their time waiting, so checking hundreds of shards is not one round trip each."""
    items = list(items)
    if len(items) <= 1:
        return [fn(item) for item in items]
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(16, len(items))) as pool:
        return list(pool.map(fn, items))
