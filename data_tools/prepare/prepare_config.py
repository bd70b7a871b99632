"""`PrepareConfig`: what the prepare-corpus job reads, how it splits and filters documents,
and where it writes. `data_tools.prepare_corpus` builds it from the flags; it validates
itself, with one-line errors named after the flags, however it is built.
"""

from __future__ import annotations

import dataclasses
from typing import Tuple

from bert_tf.core.errors import UserError
from data_tools.prepare import raw_documents, sentences


@dataclasses.dataclass(frozen=True)
class PrepareConfig:
    """Everything the job needs (built from flags by `data_tools.prepare_corpus`).

    Attributes:
        input_files: expanded input paths, in order.
        output_files: one path per output shard.
        input_format: "text" or "jsonl".
        text_field: the JSON field holding a document's text (jsonl).
        document_per: "file", "line" or "blank_line": what one text document is.
        language: the sentence splitter's language (a code, e.g. "en", "de", "zh").
        min_sentences: documents with fewer sentences are dropped.
        min_chars: documents with fewer characters (sentences, without line breaks) are
            dropped.
        dedup: drop documents identical (after whitespace normalisation) to an earlier one.
        num_workers: processes (1 runs in this process).
        chunk_bytes: text per chunk (the output does not depend on it).
        progress_seconds: interval of progress lines (0: none).
        heldout_file: with `heldout_every`, the file that gets every heldout_every-th kept
            document instead of the shards ("" for none).
        heldout_every: hold out kept documents heldout_every-1, 2*heldout_every-1, ... (0:
            none); the others are dealt to the shards in turn (`deal`).
    """

    input_files: Tuple[str, ...]
    output_files: Tuple[str, ...]
    input_format: str = raw_documents.FORMAT_TEXT
    text_field: str = "text"
    document_per: str = raw_documents.PER_BLANK_LINE
    language: str = sentences.DEFAULT_LANGUAGE
    min_sentences: int = 1
    min_chars: int = 0
    dedup: bool = False
    num_workers: int = 1
    chunk_bytes: int = 1 << 20
    progress_seconds: float = 5.0
    heldout_file: str = ""
    heldout_every: int = 0

    def __post_init__(self) -> None:
        if self.input_format not in raw_documents.FORMATS:
            raise UserError(f"--input_format={self.input_format!r}: expected one of "
                            f"{', '.join(raw_documents.FORMATS)}")
        if self.document_per not in raw_documents.DOCUMENT_PER:
            raise UserError(f"--document_per={self.document_per!r}: expected one of "
                            f"{', '.join(raw_documents.DOCUMENT_PER)}")
        if not self.text_field:
            raise UserError("--text_field is empty: name the JSON field with the text")
        object.__setattr__(self, "language", sentences.check_language(self.language))
        if self.min_sentences < 0:
            raise UserError(f"--min_sentences={self.min_sentences}: must be >= 0")
        if self.min_chars < 0:
            raise UserError(f"--min_chars={self.min_chars}: must be >= 0")
        if self.num_workers < 1:
            raise UserError(f"--num_workers={self.num_workers}: must be >= 1")
        if self.chunk_bytes < 1:
            raise UserError(f"--chunk_mb={self.chunk_bytes / 1e6}: must be > 0")
        if len(set(self.output_files)) != len(self.output_files):
            raise UserError("--output_file: the output files are not distinct")
        if self.heldout_every < 0 or self.heldout_every == 1:
            raise UserError(f"--heldout_every={self.heldout_every}: must be 0 (none) or >= 2 "
                            "(1 would hold out every document)")
        if bool(self.heldout_every) != bool(self.heldout_file):
            raise UserError("--heldout_file and --heldout_every go together: name the "
                            "held-out file and how often a document goes to it")
        if self.heldout_file and self.heldout_file in self.output_files:
            raise UserError(f"--heldout_file={self.heldout_file} is also an --output_file")

    @property
    def outputs(self) -> Tuple[str, ...]:
        """Every file the job writes: the shards, then the held-out file if any."""
        return self.output_files + ((self.heldout_file,) if self.heldout_file else ())

    def deal(self, k: int) -> Tuple[int, bool]:
        """Where the k-th kept document (from 0, in input order) goes.

        Returns:
            (index into `outputs`, whether it is that file's first document: no blank line
            before it).
        """
        shards = len(self.output_files)
        every = self.heldout_every
        if every and k % every == every - 1:
            return shards, k < every
        train = k - k // every if every else k  # training documents before this one
        return train % shards, train < shards
