"""Remote paths without TensorFlow: Apache Beam's `FileSystems` behind `fileio`'s remote calls.

The light `bert-tf-data` install (packaging/data) runs the data jobs on machines without
TensorFlow, such as Dataflow workers. There `fileio` reaches `gs://` (and any scheme Beam
has a filesystem for) through this module, which offers the few `tf.io.gfile` calls
`fileio` makes (`GFile`, `exists`, `isdir`, `listdir`, `makedirs`, `remove`, `rename`,
`stat`, `glob`) on top of Beam's API. `gs://` needs `apache-beam[gcp]` (the Google Cloud
Storage client); without it the first remote call fails with a one-line `UserError`.
"""

from __future__ import annotations

import dataclasses
import io
from typing import IO, List

from bert_tf.core.errors import UserError

try:
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems
except ImportError:  # fileio only picks this module when Beam is importable
    raise UserError("remote paths need TensorFlow or Apache Beam: pip install "
                    "'bert-tf-data[gcp]' (or 'apache-beam[gcp]')") from None

# fileio's own readers detect gzip/bzip2 by magic bytes; Beam must hand over the raw bytes
# (its default, AUTO, would decompress `.gz` files behind their back).
_RAW = CompressionTypes.UNCOMPRESSED


def _filesystem(path: str):
    """Beam's filesystem for `path`'s scheme.

    Raises:
        UserError: Beam has none (e.g. `gs://` without `apache-beam[gcp]`).
    """
    try:
        return FileSystems.get_filesystem(path)
    except ValueError:
        scheme = path.split("://", 1)[0]
        hint = " (pip install 'apache-beam[gcp]')" if scheme == "gs" else ""
        raise UserError(f"{path}: Apache Beam has no filesystem for {scheme}://{hint}"
                        ) from None


def GFile(path: str, mode: str = "r") -> IO:  # noqa: N802 (tf.io.gfile's name)
    """Opens `path` for reading or writing (`mode` as `open`'s: r, rb, w, wb).

    Text modes decode and encode UTF-8. Writes are visible once the file is closed.
    """
    fs = _filesystem(path)
    if "r" in mode:
        raw = fs.open(path, compression_type=_RAW)
    elif "w" in mode:
        raw = fs.create(path, compression_type=_RAW)
    else:
        raise ValueError(f"unsupported mode {mode!r} for {path}")
    return raw if "b" in mode else io.TextIOWrapper(raw, encoding="utf-8")


def exists(path: str) -> bool:
    return _filesystem(path).exists(path) or isdir(path)


def _entries(directory: str, pattern: str) -> List[str]:
    prefix = directory.rstrip("/") + "/"
    return [m.path for m in _match(prefix + pattern)]


def _match(pattern: str):
    result = _filesystem(pattern).match([pattern])[0]
    return result.metadata_list


def isdir(path: str) -> bool:
    """True when any file lies under `path/` (object stores have no directories)."""
    return bool(_entries(path, "**"))


def listdir(path: str) -> List[str]:
    """Names of the files and subdirectories directly under `path`."""
    prefix = path.rstrip("/") + "/"
    names = {p[len(prefix):].split("/", 1)[0] for p in _entries(path, "**")}
    return sorted(n for n in names if n)


def makedirs(path: str) -> None:
    """Nothing to create on object stores; Beam's local filesystem makes the directories."""
    if not isdir(path) and not _filesystem(path).exists(path):
        try:
            _filesystem(path).mkdirs(path)
        except OSError:  # created meanwhile by another worker
            pass


def remove(path: str) -> None:
    _filesystem(path).delete([path])


def rename(src: str, dst: str, overwrite: bool = True) -> None:
    """Renames `src` to `dst`; Beam's renames replace `dst` (gcs: copy, then delete)."""
    if not overwrite and exists(dst):
        raise FileExistsError(dst)
    _filesystem(src).rename([src], [dst])


@dataclasses.dataclass(frozen=True)
class FileStat:
    """The part of `tf.io.gfile.stat`'s answer that fileio reads."""

    length: int


def stat(path: str) -> FileStat:
    return FileStat(length=_filesystem(path).size(path))


def glob(pattern: str) -> List[str]:
    """Files matching `pattern` (`*` stays within one path segment, as in tf.io.gfile)."""
    return [m.path for m in _match(pattern)]
