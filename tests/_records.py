"""TFRecord framing for the data-job tests, without TensorFlow."""

from __future__ import annotations

from typing import List, Tuple

import numpy as np

from data_tools.records.byte_rows import Rows


def random_records(n: int = 120, seed: int = 0) -> Tuple[List[bytes], Rows]:
    """`n` records of random bytes (0 to 2,000 each, the first one empty, which is legal), as
    a list and as `Rows`."""
    rng = np.random.default_rng(seed)
    items = [rng.integers(0, 256, k).astype(np.uint8).tobytes()
             for k in rng.integers(0, 2000, n)]
    items[0] = b""
    data = np.frombuffer(b"".join(items), np.uint8)
    return items, Rows(data, np.array([len(x) for x in items], dtype=np.int64))


def count_frames(data: bytes) -> int:
    """Number of TFRecord frames in `data` (each: 8-byte length, 4-byte CRC, payload, 4-byte
    CRC); asserts that the frames cover `data` exactly."""
    n, at = 0, 0
    while at < len(data):
        at += 16 + int.from_bytes(data[at:at + 8], "little")
        n += 1
    assert at == len(data)
    return n
