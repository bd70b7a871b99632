"""The jobs' sharded, atomically renamed (optionally gzip) output files.

`output_paths` turns --output_file and --num_output_shards into the shard paths.
`ShardedWriter` owns the output files (the framed TFRecords of `create_pretraining_data`,
the text of `prepare_corpus`): each is written under a temporary name beside its final name
and renamed only when every shard is complete; on any failure (including Ctrl-C) the
temporary files are removed. Remote paths (gs://) go through `bert_tf.core.fileio`.

GZIP output is one gzip stream per file, as `tf.io.TFRecordWriter` writes with
`TFRecordOptions(compression_type="GZIP")` and `tf.data.TFRecordDataset(...,
compression_type="GZIP")` reads; `gzip_compressor` makes that stream, here and in the Beam
runtime's shards.
"""

from __future__ import annotations

import contextlib
import os
import zlib
from typing import IO, List, Optional, Sequence

from bert_tf.core import fileio
from bert_tf.core.errors import UserError, reason

COMPRESSION_NONE = ""
COMPRESSION_GZIP = "gzip"
COMPRESSIONS = (COMPRESSION_NONE, COMPRESSION_GZIP)
# TensorFlow's ZlibCompressionOptions defaults (level 6 is zlib's default; memLevel 9).
_GZIP_LEVEL = 6
_GZIP_MEM_LEVEL = 9
_GZIP_WBITS = 16 + 15  # 16+: write a gzip header and trailer instead of a zlib one


def gzip_compressor() -> "zlib._Compress":
    """A zlib compressor that writes one gzip stream with TensorFlow's GZIP settings."""
    return zlib.compressobj(_GZIP_LEVEL, zlib.DEFLATED, _GZIP_WBITS, _GZIP_MEM_LEVEL)


def output_paths(output_file: str, num_output_shards: int | None) -> List[str]:
    """The output shard paths from --output_file and --num_output_shards.

    Raises:
        UserError: no output, or the two flags disagree.
    """
    names = fileio.split_list(output_file)
    if not names:
        raise UserError("--output_file is empty")
    if len(names) == 1 and "{shard}" in names[0]:
        n = 1 if num_output_shards is None else num_output_shards
        if n < 1:
            raise UserError(f"--num_output_shards={n}: must be >= 1")
        return [names[0].replace("{shard}", f"{i:05d}").replace("{num_shards}", f"{n:05d}")
                for i in range(n)]
    if any("{shard}" in name for name in names):
        raise UserError("--output_file: use {shard} in a single name, not in a list")
    if num_output_shards is not None and num_output_shards != len(names):
        raise UserError(f"--num_output_shards={num_output_shards} but --output_file lists "
                        f"{len(names)} file(s); put {{shard}} in a single name instead")
    return names


class ShardedWriter:
    """Writes byte blocks to N output files under temporary names; renames them on success.

    Use as a context manager: leaving the block normally renames every shard to its final
    name; leaving it with an exception removes every temporary file.

    Args:
        paths: the final output paths, one per shard.
        compression: "" (none) or "gzip".
    """

    def __init__(self, paths: Sequence[str], compression: str = COMPRESSION_NONE):
        if compression not in COMPRESSIONS:
            raise UserError(f"--output_compression={compression!r}: expected '' or 'gzip'")
        if len(set(paths)) != len(paths):
            raise UserError("the output files are not distinct")
        self.paths = list(paths)
        self.compression = compression
        self._temps: List[str] = []
        self._files: List[IO] = []
        self._compressors: List[Optional[object]] = []
        self.bytes_written = [0] * len(self.paths)  # uncompressed record bytes per shard

    def __enter__(self) -> "ShardedWriter":
        try:
            for path in self.paths:
                parent = os.path.dirname(path)
                if parent and not fileio.exists(parent):
                    try:
                        fileio.makedirs(parent)
                    except Exception as e:  # OSError locally, tf.errors for remote paths
                        raise UserError(f"cannot create output directory {parent}: "
                                        f"{reason(e)}") from None
                tmp = fileio.temp_name(path)
                try:
                    f = fileio.open_file(tmp, "wb")
                except Exception as e:
                    raise UserError(f"cannot write {path}: {reason(e)}") from None
                self._temps.append(tmp)
                self._files.append(f)
                if fileio.is_remote(tmp):
                    # tf.io.gfile creates a remote file only on its first write: an empty
                    # shard would otherwise have no temporary file to rename.
                    try:
                        f.write(b"")
                    except Exception as e:
                        raise UserError(f"cannot write {path}: {reason(e)}") from None
                self._compressors.append(
                    gzip_compressor() if self.compression == COMPRESSION_GZIP else None)
        except BaseException:
            self._abort()
            raise
        return self

    def write(self, shard: int, data) -> None:
        """Appends bytes (framed records) to one shard."""
        self.bytes_written[shard] += len(data)
        compressor = self._compressors[shard]
        if compressor is not None:
            data = compressor.compress(data)
        if len(data):
            try:
                self._files[shard].write(data)
            except OSError as e:  # e.g. a full disk: one line for the user, temps removed
                raise UserError(f"cannot write {self.paths[shard]}: {reason(e)}") from None

    def in_place_paths(self) -> Optional[List[str]]:
        """The temporary files, if other processes may write into them in place (local,
        uncompressed, nothing written yet); else None."""
        if (self.compression or any(self.bytes_written)
                or any(fileio.is_remote(t) for t in self._temps)):
            return None
        return list(self._temps)

    def count(self, shard: int, num_bytes: int) -> None:
        """Counts bytes another process wrote into a shard's file (`in_place_paths`)."""
        self.bytes_written[shard] += num_bytes

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self._abort()
            return
        try:
            for shard, f in enumerate(self._files):
                compressor = self._compressors[shard]
                if compressor is not None:
                    f.write(compressor.flush())
                f.close()
            for tmp, path in zip(self._temps, self.paths):
                fileio.rename(tmp, path)
        except BaseException as e:
            self._abort()
            if isinstance(e, OSError):
                raise UserError(f"cannot finish the output files ({self.paths[0]}, ...): "
                                f"{reason(e)}") from None
            raise

    def _abort(self) -> None:
        for f in self._files:
            with contextlib.suppress(Exception):
                f.close()
        for tmp in self._temps:
            with contextlib.suppress(Exception):
                if fileio.exists(tmp):
                    fileio.remove(tmp)
        self._files, self._temps = [], []
