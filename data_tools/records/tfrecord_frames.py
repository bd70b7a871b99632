"""TFRecord framing of whole batches of records, with numpy and without TensorFlow.

A TFRecord file is a sequence of frames (integers little-endian):

    uint64 length | uint32 masked_crc32c(length bytes) | data | uint32 masked_crc32c(data)

`frame_records` builds the frames of a whole batch at once, so worker processes stay small
and start fast; `data_tools.runtime.sharded_output` writes them to the output files.
"""

from __future__ import annotations

import numpy as np

from data_tools.records.byte_rows import Rows, concat_rows, fixed_width
from data_tools.records.crc32c import crc32c_rows, mask_crc


def frame_records(records: Rows) -> Rows:
    """TFRecord frames of every row.

    Args:
        records: the serialised records (e.g. tf.train.Example bytes).

    Returns:
        `Rows`: row i is the complete frame of record i (16 bytes longer than the record).
    """
    n = records.num_rows
    length_bytes = fixed_width(records.lengths.astype("<u8")[:, None])  # [n, 8]
    length_crc = mask_crc(crc32c_rows(Rows(length_bytes.reshape(-1), np.full(n, 8))))
    data_crc = mask_crc(crc32c_rows(records))
    return concat_rows(
        [
            length_bytes,
            fixed_width(length_crc.astype("<u4")[:, None]),
            records,
            fixed_width(data_crc.astype("<u4")[:, None]),
        ],
        n,
    )
