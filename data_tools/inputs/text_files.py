"""Opening the data jobs' text inputs: one set of rules for prepare_corpus, build_vocab and
create_pretraining_data.

- Local paths or anything `bert_tf.core.fileio` opens (gs://).
- Compression: gzip when a file's name ends in ".gz" or it starts with gzip's magic bytes,
  bzip2 (WikiExtractor --compress) for ".bz2" or its magic, so renamed dumps work too.
- Encoding (`decode`): UTF-8; invalid bytes are replaced by U+FFFD and counted; a
  byte-order mark at the start of a file is dropped (the readers call `strip_bom` on a
  file's first text).
"""

from __future__ import annotations

import bz2
import gzip
import io
import zlib
from typing import IO, Callable, Optional, Tuple

from bert_tf.core import fileio
from bert_tf.core.errors import UserError, reason

BLOCK = 1 << 20
BOM = "\ufeff"
BOM_UTF8 = BOM.encode("utf-8")
REPLACEMENT = "\ufffd"
_GZIP_MAGIC = b"\x1f\x8b"
_REPLACEMENT_UTF8 = REPLACEMENT.encode("utf-8")


class _CountingReader(io.RawIOBase):
    """A raw stream over a (local or gfile) file object that reports the bytes it reads."""

    def __init__(self, f: IO, on_read: Callable[[int], None]):
        self._f = f
        self._on_read = on_read

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self._f.read(len(buffer))
        n = len(data)
        buffer[:n] = data
        self._on_read(n)
        return n

    def close(self) -> None:
        self._f.close()
        super().close()


def compression(path: str, head: bytes) -> Optional[str]:
    """"gzip" or "bzip2" by the name's suffix or the first 4 bytes `head`; None for plain."""
    if path.endswith(".gz") or head[:2] == _GZIP_MAGIC:
        return "gzip"
    if path.endswith(".bz2") or (head[:3] == b"BZh" and head[3:4].isdigit()):
        return "bzip2"
    return None


def open_input(path: str, on_stored_bytes: Callable[[int], None]) -> io.BufferedReader:
    """The file's decompressed bytes; `on_stored_bytes(n)` is called as stored bytes are read
    (compressed ones for a compressed file: what progress against file sizes needs).

    Raises:
        UserError: the file cannot be opened.
    """
    try:
        raw = fileio.open_file(path, "rb")
    except Exception as e:  # OSError locally, tf.errors.* remotely
        raise UserError(f"cannot read input file {path}: {reason(e)}") from None
    stored = io.BufferedReader(_CountingReader(raw, on_stored_bytes), BLOCK)
    try:
        head = stored.peek(4)[:4]
    except Exception as e:
        stored.close()
        raise UserError(f"cannot read input file {path}: {reason(e)}") from None
    kind = compression(path, head)
    if kind == "gzip":
        return io.BufferedReader(gzip.GzipFile(fileobj=stored, mode="rb"), BLOCK)
    if kind == "bzip2":
        return io.BufferedReader(bz2.BZ2File(stored, mode="rb"), BLOCK)
    return stored


def decode(data: bytes) -> Tuple[str, int]:
    """UTF-8 text of `data` and the number of invalid byte sequences replaced (a genuine
    U+FFFD in the input is not counted)."""
    try:
        return data.decode("utf-8"), 0
    except UnicodeDecodeError:
        text = data.decode("utf-8", "replace")
        return text, text.count(REPLACEMENT) - data.count(_REPLACEMENT_UTF8)


def strip_bom(text: str) -> str:
    """`text` without a leading byte-order mark."""
    return text[1:] if text.startswith(BOM) else text


def reraise(path: str, e: BaseException) -> None:
    """Turns a read error of `path` (corrupt gzip/bzip2 data, a truncated stream, a remote
    read failure) into a one-line UserError; other exceptions propagate."""
    if isinstance(e, (OSError, EOFError, zlib.error)) or type(e).__module__.startswith(
            "tensorflow"):
        raise UserError(f"cannot read input file {path}: {reason(e)}") from None
    raise e
