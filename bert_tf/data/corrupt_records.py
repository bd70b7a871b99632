"""Damaged TFRecords: how many records a damaged file loses, and the skipped-record count.

TensorFlow's TFRecord reader ends a file at its first damaged frame. `count_lost_records`
scans one file on the host from the damage on; `CorruptRecords` holds, in-graph, which files
an input pipeline found damaged (with `InputConfig.skip_corrupt_records`) and turns that into
an exact count of skipped records for the progress lines and the end-of-run summary.
"""

from __future__ import annotations

import gzip
import zlib
from typing import Dict, Tuple

import tensorflow as tf

from bert_tf.core import errors, fileio, tfrecord_format


def count_lost_records(path: str, compression: str, offset: int) -> Tuple[int, str]:
    """(records lost, the problem) of a file whose reading stopped at the frame at `offset`.

    A host-side scan of that one file from `offset` on (`tfrecord_format.count_damaged_tail`);
    for gzip, `offset` is in the decompressed stream.
    """
    try:
        with fileio.open_file(path, "rb") as raw:
            f = gzip.GzipFile(fileobj=raw) if compression == "GZIP" else raw
            f.seek(offset)
            return tfrecord_format.count_damaged_tail(f)
    except (OSError, EOFError, zlib.error, tf.errors.OpError) as e:
        return 1, f"unreadable ({errors.reason(e)})"


class CorruptRecords:
    """The damaged records an input pipeline skipped (`InputConfig.skip_corrupt_records`).

    Counting is exact and costs nothing while the data is sound. TensorFlow's TFRecord reader
    ends a file at its first damaged frame (with `ignore_errors`, the rest of that file is not
    read in that pass), so the pipeline tells sound files from damaged ones by the bytes each
    file yields (every record's length plus its 16 framing bytes) against the file's size:
    a file that ends early is recorded here, in-graph, as (file, offset of its damage, number
    of passes that met it). The lost records are counted on the host, only when asked and
    once per damaged file, by a scan of that file from the damage on
    (`count_lost_records`): count() = sum over damaged files of passes x lost records. A
    tf.data counter inside the pipeline could only count the errors, not the records that
    the reader never reached.

    One instance per input (train or eval), shared by its input pipelines in this process;
    the counts are this process's (other workers count their own files), and include batches
    already prefetched.

    Args:
        files: the input files (`InputFiles.files`); indices refer to them.
        compressions: their compressions.
    """

    def __init__(self, files=(), compressions=()):
        self.files = tuple(files)
        self.compressions = tuple(compressions)
        self._table = None
        self._lost = {}  # (file index, offset) -> (records, problem)

    def table(self, files: Tuple[str, ...], compressions: Tuple[str, ...]):
        """The in-graph record: file index -> [passes, offset] (created on first use, so that
        building configs does not start the TensorFlow runtime)."""
        if self._table is None:
            self.files, self.compressions = tuple(files), tuple(compressions)
            with tf.init_scope():
                # A lookup table, not a tf.Variable: a strategy's scope would mirror a variable.
                self._table = tf.lookup.experimental.MutableHashTable(
                    tf.int64, tf.int64, default_value=tf.constant([0, -1], tf.int64))
        elif tuple(files) != self.files:
            raise ValueError("one CorruptRecords per input: these are other files")
        return self._table

    def damaged(self) -> Dict[int, Tuple[int, int]]:
        """{file index: (passes that met its damage, offset of the damage)}."""
        if self._table is None:
            return {}
        keys, values = self._table.export()
        return {int(k): (int(v[0]), int(v[1])) for k, v in zip(keys.numpy(), values.numpy())
                if v[0] > 0}

    def _lost_in(self, index: int, offset: int) -> Tuple[int, str]:
        if (index, offset) not in self._lost:
            self._lost[index, offset] = count_lost_records(
                self.files[index], self.compressions[index], offset)
        return self._lost[index, offset]

    def count(self) -> int:
        """Records skipped so far (exact; see the class docstring)."""
        return sum(passes * self._lost_in(i, offset)[0]
                   for i, (passes, offset) in self.damaged().items())

    def summary(self) -> str:
        """One line: the count, and each damaged file with where and why."""
        parts = []
        for i, (passes, offset) in sorted(self.damaged().items()):
            lost, problem = self._lost_in(i, offset)
            if not lost:
                continue  # a false alarm (e.g. a multi-member gzip file): nothing skipped
            parts.append(f"{self.files[i]}: {lost} record(s) from byte {offset} on "
                         f"({problem or 'damaged'}) x {passes} pass(es)")
        return f"skipped {self.count()} corrupt input record(s)" + (
            ": " + "; ".join(parts) if parts else "")
