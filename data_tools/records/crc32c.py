"""CRC-32C (Castagnoli) of many byte strings at once, for TFRecord framing.

TFRecord frames carry a masked CRC-32C of the length and of the data. The checksum itself is
`google-crc32c` (Google's C library; hardware CRC instructions where the CPU has them, a
portable C table otherwise): one call per record. It replaced a NumPy position-table
implementation that was several times slower (docs/results/data-jobs.md) and needed 1 KB of
table per byte position.
"""

from __future__ import annotations

import google_crc32c
import numpy as np

from bert_tf.core import tfrecord_format
from data_tools.records.byte_rows import Rows

crc32c_bytes = tfrecord_format.crc32c


def crc32c_rows(rows: Rows) -> np.ndarray:
    """CRC-32C of every row.

    Args:
        rows: the byte strings.

    Returns:
        uint32 [num_rows].
    """
    n = rows.num_rows
    if n == 0:
        return np.zeros(0, dtype=np.uint32)
    # The library takes bytes, not a NumPy buffer: one copy of the batch, then a slice a row.
    data = rows.data.tobytes()
    bounds = rows.offsets.tolist()
    value = google_crc32c.value
    return np.fromiter((value(data[bounds[i]:bounds[i + 1]]) for i in range(n)),
                       dtype=np.uint32, count=n)


def mask_crc(crc: np.ndarray) -> np.ndarray:
    """TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8 (mod 2^32)."""
    # The one definition, applied to a uint32 array (numpy wraps modulo 2^32).
    return tfrecord_format.mask_crc(np.asarray(crc, dtype=np.uint32))
