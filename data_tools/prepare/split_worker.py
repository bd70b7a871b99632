"""A worker's run over one split of the prepare-corpus job, its results held in bounded memory.

A plain split is --chunk_mb of input, so its chunks' results are held in memory and sent to
the parent whole. A whole-file split (a compressed file, or a file with --document_per=file)
can be gigabytes: past `SPILL_BYTES` of text, its further chunk results are pickled into a
file under the job's temporary directory on local disk, which the parent reads back one
chunk at a time (`SplitResult.chunk_results`) and removes. So a worker and the parent hold
about `SPILL_BYTES` of results per split in flight, whatever the file's size.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import tempfile
from typing import Any, Callable, Iterator, List

from bert_tf.core.errors import UserError, reason
from data_tools.inputs import splits
from data_tools.prepare import raw_documents

SPILL_BYTES = 64 << 20  # text of the chunk results held in memory per split


@dataclasses.dataclass
class SplitResult:
    """What a worker returns for one split.

    Attributes:
        held: the first chunks' results, in order.
        stats: what the split owns (`raw_documents.split_items`): lines, bytes, bad UTF-8.
        spill: a file holding the further results (pickled one after another), or "".
    """

    held: List[Any]
    stats: raw_documents.ReadStats
    spill: str = ""

    def chunk_results(self) -> Iterator[Any]:
        """Every chunk's result in order; the spill file is removed once read (or left)."""
        yield from self.held
        if not self.spill:
            return
        try:
            with open(self.spill, "rb") as f:
                while True:
                    try:
                        yield pickle.load(f)
                    except EOFError:
                        return
        finally:
            remove(self.spill)


def process_split(split: splits.Split, config: Any, process_chunk: Callable[[Any, Any], Any],
                  spill_dir: str) -> SplitResult:
    """`process_chunk(chunk, config)` for every chunk of `split`
    (`raw_documents.split_chunks` with `config`'s input format, --document_per and chunk size),
    spilling results past `SPILL_BYTES` of text into a file under `spill_dir` ("": never).

    Raises:
        UserError: unreadable input, or the spill file cannot be written; and what
            `process_chunk` raises.
    """
    stats = raw_documents.ReadStats()
    result = SplitResult([], stats)
    held_bytes = 0
    f = None
    try:
        for chunk in raw_documents.split_chunks(split, config.input_format, config.document_per,
                                                config.chunk_bytes, stats):
            done = process_chunk(chunk, config)
            if f is not None:
                pickle.dump(done, f, protocol=pickle.HIGHEST_PROTOCOL)
                continue
            result.held.append(done)
            held_bytes += chunk.num_bytes
            if held_bytes > SPILL_BYTES and spill_dir:
                fd, result.spill = tempfile.mkstemp(prefix=f"split-{split.index}-",
                                                    dir=spill_dir)
                f = os.fdopen(fd, "wb")
        if f is not None:
            f.close()
    except OSError as e:
        if f is not None:
            f.close()
            remove(result.spill)
        raise UserError(f"cannot write temporary file in {spill_dir}: {reason(e)}") from None
    except BaseException:
        if f is not None:
            f.close()
            remove(result.spill)
        raise
    return result


def remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass
