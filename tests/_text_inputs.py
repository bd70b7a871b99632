"""Text inputs for the data-job tests: the same text in every form the jobs accept."""

from __future__ import annotations

import bz2
import gzip
from typing import Dict


def input_variants(text: bytes) -> Dict[str, bytes]:
    """The same text as the data jobs may find it: plain, gzip, bzip2, gzip without its
    suffix (found by its magic bytes) and plain with a UTF-8 byte-order mark."""
    return {"plain.txt": text, "text.txt.gz": gzip.compress(text),
            "text.txt.bz2": bz2.compress(text), "renamed.txt": gzip.compress(text),
            "bom.txt": b"\xef\xbb\xbf" + text}
