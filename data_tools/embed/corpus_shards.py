"""A BEIR corpus in shards: the plan (byte ranges of the input files) and the passages of one.

Input: BEIR corpus files, one JSON object per line,

    {"_id": "doc1", "title": "...", "text": "..."}       (title optional; _id a string or
                                                          an integer, meaning its string)

plain or gzip-compressed (`.gz`, or gzip's magic bytes), strict UTF-8, a byte-order mark at
the start of a file dropped, blank lines skipped. A passage's text is BEIR's
`title + " " + text`, stripped: what `bert_tf.finetune.retrieval.beir_data.Passage.encoder_text`
gives, so the vectors are the ones run_retrieval embeds (tests/test_embed_corpus.py reads the
same file with both). data_tools imports only bert_tf.core, so the rule is spelt out here.

Shards are `data_tools.inputs.splits`' byte ranges of --shard_mb: a shard owns the lines that
start in its range; a compressed file is one shard. The plan depends on the files' sizes and
first bytes and on --shard_mb only, so a rerun, a resumed run and a Beam run cut the same
shards. Bad input names its file and line: a line that is not a JSON object, a missing or
empty `_id`, a `text` that is not a string, a line that is not UTF-8, and an id repeated
within the shard (`embed_store.check_unique_ids` checks across shards).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import zlib
from typing import Iterator, List, Sequence, Tuple

from bert_tf.core import fileio
from bert_tf.core.errors import UserError, reason
from data_tools.inputs import splits


@dataclasses.dataclass(frozen=True)
class ShardPassages:
    """One shard's passages in file order.

    Attributes:
        ids: the passage ids.
        texts: what the encoder reads (module docstring).
        sizes: bytes of each passage's line, as stored in a plain file (the progress bar's
            unit; a compressed file's lines count their decompressed bytes).
    """

    ids: List[str]
    texts: List[str]
    sizes: List[int]


def plan(files: Sequence[str], shard_bytes: int) -> List[splits.Split]:
    """The shards of `files` (module docstring).

    Raises:
        UserError: a file cannot be read.
    """
    return splits.plan(files, shard_bytes)[0]


def _lines_before(path: str, start: int) -> int:
    """Lines of `path` before the first line that starts at or after byte `start` (read
    only when an error needs a line number)."""
    if start <= 0:
        return 0
    with fileio.open_file(path, "rb") as f:
        data = f.read(start - 1)
    return data.count(b"\n") + 1


def _raw_lines(split: splits.Split) -> Iterator[Tuple[int, bytes]]:
    """(line index within the split, line bytes without "\\n") for the split's lines."""
    try:
        raw = fileio.open_file(split.path, "rb")
    except Exception as e:  # OSError locally, tf.errors.* remotely
        raise UserError(f"cannot read {split.path}: {reason(e)}") from None
    with raw:
        n = -1
        try:
            if split.end < 0:  # a compressed file, read whole
                for n, data in enumerate(gzip.GzipFile(fileobj=raw)):
                    yield n, data.rstrip(b"\n")
                return
            for block in splits.range_blocks(raw, split.start, split.end):
                lines = block.split(b"\n")
                if block.endswith(b"\n"):
                    lines.pop()
                for data in lines:
                    n += 1
                    yield n, data
        except (OSError, EOFError, zlib.error) as e:  # a damaged or truncated gzip
            raise UserError(f"{split.path}:{n + 2}: cannot read: {reason(e)}") from None


def parse_line(line: str, where: str) -> Tuple[str, str]:
    """(id, encoder text) of one corpus line; `where` is `path:line` for messages.

    Raises:
        UserError: not a JSON object, a bad `_id`, or a `title`/`text` that is not a string.
    """
    try:
        record = json.loads(line)
    except ValueError as e:
        raise UserError(f"{where}: not valid JSON ({reason(e)})") from None
    if not isinstance(record, dict):
        raise UserError(f"{where}: expected a JSON object, found {type(record).__name__}")
    pid = record.get("_id")
    if isinstance(pid, bool) or not isinstance(pid, (str, int)) or pid == "":
        problem = ("missing" if "_id" not in record else "empty" if pid == ""
                   else f"not a string: {json.dumps(pid)}")
        raise UserError(f"{where}: field '_id' is {problem}")
    fields = []
    for key, required in (("title", False), ("text", True)):
        value = record.get(key)
        if value is None and not required:
            value = ""
        if not isinstance(value, str):
            problem = "missing" if key not in record else f"not a string: {json.dumps(value)}"
            raise UserError(f"{where}: field {key!r} is {problem}")
        fields.append(value)
    return str(pid), (fields[0] + " " + fields[1]).strip()


def read_shard(split: splits.Split) -> ShardPassages:
    """The passages of one shard (module docstring).

    Raises:
        UserError: bad input, naming the file and line.
    """
    ids: List[str] = []
    texts: List[str] = []
    sizes: List[int] = []
    seen = {}
    first_line = None  # of the split in its file: counted only for a message

    def where(n: int) -> str:
        nonlocal first_line
        if first_line is None:
            first_line = 0 if split.end < 0 else _lines_before(split.path, split.start)
        return f"{split.path}:{first_line + n + 1}"

    for n, data in _raw_lines(split):
        try:
            line = data.decode("utf-8")
        except UnicodeDecodeError:
            raise UserError(f"{where(n)}: not UTF-8") from None
        if n == 0 and split.start <= 0:
            line = line.lstrip("\ufeff")
        line = line.rstrip("\r")
        if not line.strip():
            continue
        try:  # the line number only on an error: it costs a read of the file up to here
            pid, text = parse_line(line, "")
        except UserError as e:
            raise UserError(f"{where(n)}{e}") from None
        if pid in seen:
            raise UserError(f"{where(n)}: passage id {pid!r} repeats line "
                            f"{where(seen[pid]).rsplit(':', 1)[1]}")
        seen[pid] = n
        ids.append(pid)
        texts.append(text)
        sizes.append(len(data) + 1)
    return ShardPassages(ids, texts, sizes)
