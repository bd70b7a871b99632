"""The tokenized corpus on local disk, for random access to any document's sentences.

The original `create_pretraining_data.py` holds the whole tokenized corpus in memory, and
draws the B segment of an IsRandom instance from a document picked uniformly from the
whole corpus, starting at a sentence picked uniformly within it. This package streams
the corpus in chunks instead, so the create job runs in two passes over the chunks:

1. each chunk is tokenized once and written here as one file (`write_chunk`), and a
   table of every document's sentences is built from what the chunks report
   (`IndexBuilder`): a few integers per chunk in memory, 16 bytes per document on disk;
2. each chunk is then packed, and a random next segment is read from the file of the
   document drawn (`data_tools.pretraining_data.negatives.RandomNext`): a few `pread`s of a
   few hundred bytes, so memory stays flat however large the corpus, and every sentence of
   the corpus can open a random B, as in the original.

A chunk file holds, after a header of four int64 (magic, documents, sentences, tokens):
the chunk's corpus document ids (int64 [documents]), each document's first sentence
(int64 [documents + 1]), each sentence's first token (int64 [sentences + 1]) and the token
ids (uint16 [tokens] when they all fit, as with any vocab of up to 65,536 tokens, else
int32); documents and sentences without tokens are not stored. The disk space is about
2.5 bytes per token with uint16 ids (about half the text of English).
"""

from __future__ import annotations

import collections
import dataclasses
import os
import tempfile
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from bert_tf.core import fileio

# The first header field names the ids' type: uint16 when every id fits (a vocab of at most
# 65,536 tokens: half the disk), else int32.
_MAGIC = {0x42455254544F4B31: np.dtype(np.int32),  # "BERTTOK1"
          0x42455254544F4B32: np.dtype(np.uint16)}  # "BERTTOK2"
_MAGIC_OF = {dtype: magic for magic, dtype in _MAGIC.items()}
_HEADER = 32
_TABLE_ROW = 16  # int64 (global first sentence, number of sentences) per document


def chunk_path(directory: str, index: int) -> str:
    """The file of chunk `index`."""
    return os.path.join(directory, f"chunk-{index:020d}.tok")


def table_path(directory: str) -> str:
    """The documents' table (written by `IndexBuilder`)."""
    return os.path.join(directory, "documents.tbl")


@dataclasses.dataclass(frozen=True)
class ChunkInfo:
    """What a stored chunk reports to the index (small: a few integers per document).

    Attributes:
        index: the chunk's index.
        doc_ids: int64 [documents]: corpus document id of each stored document (the pieces
            of a document longer than a chunk share one id, in consecutive chunks).
        doc_sentences: int64 [documents]: sentences of each.
    """

    index: int
    doc_ids: np.ndarray
    doc_sentences: np.ndarray


def write_chunk(directory: str, index: int, documents: Sequence[Sequence[Sequence[int]]],
                doc_ids: Sequence[int]) -> ChunkInfo:
    """Writes one tokenized chunk (under a temporary name, then renamed).

    Args:
        directory: the store.
        index: the chunk's index.
        documents: documents -> sentences -> token ids; empty sentences and documents
            without tokens are skipped (as `instances.DocumentBuffer` skips them).
        doc_ids: the corpus id of each document.

    Returns:
        The chunk's report for `IndexBuilder`.
    """
    kept_ids: List[int] = []
    doc_first: List[int] = [0]
    lengths: List[int] = []
    flat: List[np.ndarray] = []
    for doc, doc_id in zip(documents, doc_ids):
        sents = [s for s in doc if len(s)]
        if not sents:
            continue
        kept_ids.append(doc_id)
        lengths.extend(len(s) for s in sents)
        flat.extend(np.asarray(s, np.int64) for s in sents)
        doc_first.append(len(lengths))
    sent_off = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=sent_off[1:])
    ids = np.concatenate(flat) if flat else np.zeros(0, np.int64)
    dtype = np.dtype(np.uint16 if not len(ids) or (ids.min() >= 0 and ids.max() < 1 << 16)
                     else np.int32)
    ids = ids.astype(dtype)
    header = np.array([_MAGIC_OF[dtype], len(kept_ids), len(lengths), len(ids)], np.int64)
    with fileio.atomic_output(chunk_path(directory, index)) as f:
        for part in (header, np.asarray(kept_ids, np.int64), np.asarray(doc_first, np.int64),
                     sent_off, ids):
            f.write(part.tobytes())
    first = np.asarray(doc_first, np.int64)
    return ChunkInfo(index, np.asarray(kept_ids, np.int64), np.diff(first))


def read_chunk(directory: str, index: int
               ) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A whole stored chunk: (doc_ids int64 [d], doc_first int64 [d + 1], sent_off int64
    [s + 1], ids int32 [t], whatever their type on disk)."""
    with fileio.open_file(chunk_path(directory, index), "rb") as f:
        data = f.read()
    magic, n_docs, n_sents, n_tokens = np.frombuffer(data, np.int64, 4).tolist()
    if magic not in _MAGIC:
        raise ValueError(f"{chunk_path(directory, index)}: not a token store chunk")
    at = _HEADER
    out = []
    for count, dtype in ((n_docs, np.int64), (n_docs + 1, np.int64), (n_sents + 1, np.int64),
                         (n_tokens, _MAGIC[magic])):
        out.append(np.frombuffer(data, dtype, count, at))
        at += count * np.dtype(dtype).itemsize
    out[-1] = out[-1].astype(np.int32)
    return tuple(out)  # type: ignore[return-value]


@dataclasses.dataclass(frozen=True)
class StoreIndex:
    """Where every document's sentences are: small (O(chunks)), given to every worker.

    Chunks are numbered by position (0, 1, ... in chunk order); `chunk_ids` gives each
    position's chunk index (`documents.Chunk.index`, which names its file).

    Attributes:
        directory: the store.
        num_documents: documents with tokens in the corpus (a document cut into pieces
            counts once): the random next document is drawn uniformly from these.
        chunk_ids: int64 [chunks]: the chunk index of each position, increasing.
        sent_base: int64 [chunks + 1]: global number of each chunk's first sentence.
        doc_base: int64 [chunks + 1]: number in the table of each chunk's first document.
        docs_per_chunk: int64 [chunks]: documents stored in each chunk.
    """

    directory: str
    num_documents: int
    chunk_ids: np.ndarray
    sent_base: np.ndarray
    doc_base: np.ndarray
    docs_per_chunk: np.ndarray

    def position(self, chunk_id: int) -> int:
        """The position of chunk `chunk_id`."""
        pos = int(np.searchsorted(self.chunk_ids, chunk_id))
        if pos >= len(self.chunk_ids) or self.chunk_ids[pos] != chunk_id:
            raise KeyError(f"chunk {chunk_id} is not in the store")
        return pos

    def table_numbers(self, chunk_id: int, doc_ids: Sequence[int]) -> np.ndarray:
        """int64 [documents]: the table number of each document of chunk `chunk_id`, given
        their ids (the chunk's pieces of one document share a number)."""
        ids = np.asarray(doc_ids, np.int64)
        if not len(ids):
            return np.zeros(0, np.int64)
        return (self.doc_base[self.position(chunk_id)]
                + np.concatenate([[0], np.cumsum(ids[1:] != ids[:-1])]))


class IndexBuilder:
    """Builds the documents' table from the chunks' reports, given in chunk order.

    A document cut into pieces (consecutive chunks, one id) gets one row: its first global
    sentence and its sentences over all pieces; the table is streamed to disk, so memory is
    O(chunks).
    """

    def __init__(self, directory: str):
        self.directory = directory
        self._temp = fileio.temp_name(table_path(directory))
        self._file = fileio.open_file(self._temp, "wb")
        self._sent_base = [0]
        self._chunk_ids: List[int] = []
        self._doc_base: List[int] = []
        self._docs_per_chunk: List[int] = []
        self._rows = 0
        self._open: Optional[Tuple[int, int, int]] = None  # (doc id, first sentence, count)

    def add(self, info: ChunkInfo) -> None:
        if self._chunk_ids and info.index <= self._chunk_ids[-1]:
            raise ValueError(f"chunk {info.index} reported out of order")
        self._chunk_ids.append(info.index)
        base = self._sent_base[-1]
        starts = base + np.concatenate([[0], np.cumsum(info.doc_sentences)[:-1]])
        rows = []
        first_row = -1
        for doc_id, start, count in zip(info.doc_ids.tolist(), starts.tolist(),
                                        info.doc_sentences.tolist()):
            if self._open is not None and self._open[0] == doc_id:
                # The next piece of the same document (cut because it is longer than a
                # chunk): in this chunk or the next.
                self._open = (doc_id, self._open[1], self._open[2] + count)
            else:
                if self._open is not None:
                    rows.append(self._open[1:])
                    self._rows += 1
                self._open = (doc_id, start, count)
            if first_row < 0:
                first_row = self._rows
        if rows:
            self._file.write(np.asarray(rows, np.int64).tobytes())
        self._doc_base.append(first_row if first_row >= 0
                              else self._rows + (self._open is not None))
        self._docs_per_chunk.append(len(info.doc_ids))
        self._sent_base.append(base + int(info.doc_sentences.sum()))

    def finish(self) -> StoreIndex:
        if self._open is not None:
            self._file.write(np.asarray([self._open[1:]], np.int64).tobytes())
            self._rows += 1
            self._open = None
        self._file.close()
        fileio.rename(self._temp, table_path(self.directory))
        return StoreIndex(self.directory, self._rows, np.asarray(self._chunk_ids, np.int64),
                          np.asarray(self._sent_base, np.int64),
                          np.asarray(self._doc_base + [self._rows], np.int64),
                          np.asarray(self._docs_per_chunk, np.int64))

    def close(self) -> None:
        """Closes the table (and removes it when `finish` was not reached)."""
        if not self._file.closed:
            self._file.close()
            fileio.remove(self._temp)


_LOCAL_COPIES: Dict[str, str] = {}


def local_directory(directory: str) -> str:
    """`directory` itself when local; else a copy on this machine's disk, made once per
    process (Beam workers reading a store under gs://: random reads need a local file)."""
    if not fileio.is_remote(directory):
        return directory
    if directory not in _LOCAL_COPIES:
        local = tempfile.mkdtemp(prefix="bert_tf_tokens-")
        for name in fileio.listdir(directory):
            with fileio.open_file(os.path.join(directory, name), "rb") as src, \
                    open(os.path.join(local, os.path.basename(name.rstrip("/"))), "wb") as dst:
                while True:
                    block = src.read(1 << 24)
                    if not block:
                        break
                    dst.write(block)
        _LOCAL_COPIES[directory] = local
    return _LOCAL_COPIES[directory]


class Reader:
    """Random reads of the store (`os.pread` on a few open files): a document's table row,
    a chunk's sentence offsets and token ids (chunks by position)."""

    def __init__(self, index: StoreIndex, max_open: int = 256):
        self.index = index
        self.max_open = max_open
        self.directory = local_directory(index.directory)
        self._table = os.open(table_path(self.directory), os.O_RDONLY)
        self._files: "collections.OrderedDict[int, int]" = collections.OrderedDict()
        # chunk -> (offsets at, ids at, ids' dtype)
        self._layout: Dict[int, Tuple[int, int, np.dtype]] = {}

    def close(self) -> None:
        for fd in [self._table] + list(self._files.values()):
            os.close(fd)
        self._files.clear()
        self._table = -1

    def __del__(self):
        if getattr(self, "_table", -1) >= 0:
            self.close()

    def document(self, number: int) -> Tuple[int, int]:
        """(global first sentence, sentences) of document `number` of the table."""
        first, count = np.frombuffer(os.pread(self._table, _TABLE_ROW, number * _TABLE_ROW),
                                     np.int64).tolist()
        return first, count

    def _fd(self, chunk: int) -> int:
        fd = self._files.get(chunk)
        if fd is not None:
            self._files.move_to_end(chunk)
            return fd
        if len(self._files) >= self.max_open:
            os.close(self._files.popitem(last=False)[1])
        fd = os.open(chunk_path(self.directory, int(self.index.chunk_ids[chunk])), os.O_RDONLY)
        self._files[chunk] = fd
        if chunk not in self._layout:
            n_docs = int(self.index.docs_per_chunk[chunk])
            n_sents = int(self.index.sent_base[chunk + 1] - self.index.sent_base[chunk])
            offsets_at = _HEADER + 8 * (2 * n_docs + 1)
            magic = int(np.frombuffer(os.pread(fd, 8, 0), np.int64)[0])
            self._layout[chunk] = (offsets_at, offsets_at + 8 * (n_sents + 1), _MAGIC[magic])
        return fd

    def sentence_offsets(self, chunk: int, lo: int, hi: int) -> np.ndarray:
        """int64 [hi - lo + 1]: token offsets of local sentences lo..hi-1 and the end of
        sentence hi - 1, in chunk `chunk`."""
        fd = self._fd(chunk)
        at = self._layout[chunk][0] + 8 * lo
        return np.frombuffer(os.pread(fd, 8 * (hi - lo + 1), at), np.int64)

    def tokens(self, chunk: int, lo: int, hi: int) -> np.ndarray:
        """int32 [hi - lo]: token ids lo..hi-1 of chunk `chunk`."""
        fd = self._fd(chunk)
        _, ids_at, dtype = self._layout[chunk]
        size = dtype.itemsize
        return np.frombuffer(os.pread(fd, size * (hi - lo), ids_at + size * lo),
                             dtype).astype(np.int32)
