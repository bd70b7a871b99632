"""Retrieval data: BEIR folders and plain training pairs. Pure Python (no TensorFlow).

A BEIR folder (the layout of the BEIR benchmark's downloads):

    corpus.jsonl (or corpus.jsonl.gz)  {"_id": ..., "title": ..., "text": ...} per line
    queries.jsonl (or .jsonl.gz)       {"_id": ..., "text": ...} per line
    qrels/<split>.tsv                  a header line, then query-id <TAB> corpus-id <TAB> score

As BEIR's loader does, a split keeps only the queries its qrels name, and a passage is
encoded as `title + " " + text`, stripped (`Passage.encoder_text`). Unlike BEIR's loader,
which skips the first qrels line whatever it holds and keeps the last of repeated ids, bad
input stops with one line naming the file (and line): an id in the qrels that is not in the
corpus or the queries, an empty corpus, a query without a positive (score > 0) in the split,
a malformed or repeated line.

Plain training pairs (`read_training_pairs`), one example per line:

    .tsv    query <TAB> positive [<TAB> negative ...]   (an optional header line starting
            "query<TAB>positive" or "anchor<TAB>positive" is skipped)
    .jsonl  {"query": ..., "positive": ..., "negative": ... or "negatives": [...]}

Every row of a file has the same number of negatives (a batch is one tensor).

Files are read as the fine-tuning readers read theirs: local or remote (`bert_tf.core.fileio`),
gzip when the name ends in ".gz" or the file starts with gzip's magic bytes, strict UTF-8 (an
invalid byte is an error naming its line), a byte-order mark at the start dropped, lines
split at "\\n" only.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import zlib
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from bert_tf.core import fileio
from bert_tf.core.errors import UserError, reason

SPLITS = ("train", "dev", "test")
QRELS_HEADER = ("query-id", "corpus-id", "score")
_GZIP_MAGIC = b"\x1f\x8b"
_PAIR_HEADERS = (("query", "positive"), ("anchor", "positive"))


@dataclasses.dataclass(frozen=True)
class Passage:
    """One corpus document: its id, title ("" when absent) and text."""

    id: str
    title: str
    text: str

    @property
    def encoder_text(self) -> str:
        """What the encoder reads: BEIR's `title + " " + text`, stripped."""
        return (self.title + " " + self.text).strip()


@dataclasses.dataclass(frozen=True)
class BeirSplit:
    """One split of a BEIR folder, checked against its corpus and queries.

    Attributes:
        corpus: {passage id: Passage}, in file order.
        queries: {query id: text} of the queries the split's qrels name, in qrels order.
        qrels: {query id: {passage id: score}} (scores as in the file; > 0 is relevant).
        qrels_path: the qrels file, for messages.
    """

    corpus: Dict[str, Passage]
    queries: Dict[str, str]
    qrels: Dict[str, Dict[str, int]]
    qrels_path: str


@dataclasses.dataclass(frozen=True)
class TrainingExample:
    """A query, its positive passage and any hard negatives; `where` is `path:line`."""

    query: str
    positive: str
    negatives: Tuple[str, ...] = ()
    where: str = ""

    @property
    def texts(self) -> Tuple[str, ...]:
        return (self.query, self.positive) + self.negatives


def read_lines(path: str) -> Iterator[Tuple[int, str]]:
    """(line number, line) for the non-empty lines of a text file, streamed.

    Raises:
        UserError: the file is missing or unreadable, or a line is not UTF-8.
    """
    if not fileio.exists(path):
        raise UserError(f"{path}: no such file")
    try:
        raw = fileio.open_file(path, "rb")
    except Exception as e:  # OSError locally, tf.errors.* remotely
        raise UserError(f"cannot read {path}: {reason(e)}") from None
    with raw:
        head = raw.read(2)
        raw.seek(0)
        f = gzip.GzipFile(fileobj=raw) if path.endswith(".gz") or head == _GZIP_MAGIC else raw
        n = 0
        try:
            for n, data in enumerate(f, 1):
                try:
                    line = data.decode("utf-8")
                except UnicodeDecodeError:
                    raise UserError(f"{path}:{n}: not UTF-8") from None
                if n == 1:
                    line = line.lstrip("\ufeff")
                line = line.rstrip("\n").rstrip("\r")
                if line.strip():
                    yield n, line
        except (OSError, EOFError, zlib.error) as e:  # a damaged or truncated gzip
            raise UserError(f"{path}:{n + 1}: cannot read: {reason(e)}") from None


def _json_objects(path: str) -> Iterator[Tuple[int, Dict[str, Any]]]:
    for n, line in read_lines(path):
        try:
            record = json.loads(line)
        except ValueError as e:
            raise UserError(f"{path}:{n}: not valid JSON ({reason(e)})") from None
        if not isinstance(record, dict):
            raise UserError(f"{path}:{n}: expected a JSON object, found {type(record).__name__}")
        yield n, record


def _id(record: Mapping[str, Any], path: str, n: int) -> str:
    value = record.get("_id")
    # BEIR's ids are strings; integers (some exports write them bare) mean the same string.
    if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
        problem = ("missing" if "_id" not in record else "empty" if value == ""
                   else f"not a string: {json.dumps(value)}")
        raise UserError(f"{path}:{n}: field '_id' is {problem}")
    return str(value)


def _text(record: Mapping[str, Any], key: str, path: str, n: int, required: bool = True) -> str:
    value = record.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        problem = "missing" if key not in record else f"not a string: {json.dumps(value)}"
        raise UserError(f"{path}:{n}: field {key!r} is {problem}")
    return value


def find_file(data_dir: str, name: str) -> str:
    """`data_dir/name`, or `data_dir/name.gz` when only that exists.

    Raises:
        UserError: neither exists, or both do (which one is meant?).
    """
    plain, packed = os.path.join(data_dir, name), os.path.join(data_dir, name + ".gz")
    found = [p for p in (plain, packed) if fileio.exists(p)]
    if not found:
        raise UserError(f"{data_dir}: no {name} or {name}.gz (a BEIR folder holds corpus.jsonl, "
                        f"queries.jsonl and qrels/<split>.tsv)")
    if len(found) == 2:
        raise UserError(f"{data_dir}: both {name} and {name}.gz exist: keep one")
    return found[0]


def read_corpus(path: str) -> Dict[str, Passage]:
    """{id: Passage} from a BEIR corpus file, in file order.

    Raises:
        UserError: malformed line, repeated id, or no passage at all.
    """
    corpus: Dict[str, Passage] = {}
    lines: Dict[str, int] = {}
    for n, record in _json_objects(path):
        pid = _id(record, path, n)
        if pid in corpus:
            raise UserError(f"{path}:{n}: passage id {pid!r} repeats line {lines[pid]}")
        corpus[pid] = Passage(pid, _text(record, "title", path, n, required=False),
                              _text(record, "text", path, n))
        lines[pid] = n
    if not corpus:
        raise UserError(f"{path}: empty corpus (no passage)")
    return corpus


def read_queries(path: str) -> Dict[str, str]:
    """{id: text} from a BEIR queries file, in file order.

    Raises:
        UserError: malformed line, repeated id, or no query at all.
    """
    queries: Dict[str, str] = {}
    lines: Dict[str, int] = {}
    for n, record in _json_objects(path):
        qid = _id(record, path, n)
        if qid in queries:
            raise UserError(f"{path}:{n}: query id {qid!r} repeats line {lines[qid]}")
        queries[qid] = _text(record, "text", path, n)
        lines[qid] = n
    if not queries:
        raise UserError(f"{path}: no query")
    return queries


QrelsRow = Tuple[int, str, str, int]  # line, query id, passage id, score


def read_qrels_rows(path: str) -> List[QrelsRow]:
    """The rows of a qrels TSV file, after its header line.

    Raises:
        UserError: no header (the first line is a row), a row without three tab-separated
            fields, a score that is not an integer, a repeated (query, passage) pair, or no
            row at all.
    """
    rows: List[QrelsRow] = []
    seen: Dict[Tuple[str, str], int] = {}
    header = False
    for n, line in read_lines(path):
        fields = line.split("\t")
        if not header:
            header = True
            if len(fields) == 3 and _integer(fields[2].strip()) is not None:
                raise UserError(f"{path}:{n}: expected the header line "
                                f"'{chr(9).join(QRELS_HEADER)}', found a row")
            continue
        if len(fields) != 3:
            raise UserError(f"{path}:{n}: expected 3 tab-separated fields (query-id, "
                            f"corpus-id, score), found {len(fields)}")
        qid, pid, score_text = (f.strip() for f in fields)
        score = _integer(score_text)
        if not qid or not pid or score is None:
            what = "an empty id" if not qid or not pid else f"score {score_text!r} (an integer)"
            raise UserError(f"{path}:{n}: {what}")
        if (qid, pid) in seen:
            raise UserError(f"{path}:{n}: query {qid!r} and passage {pid!r} repeat line "
                            f"{seen[qid, pid]}")
        seen[qid, pid] = n
        rows.append((n, qid, pid, score))
    if not rows:
        raise UserError(f"{path}: no qrels row")
    return rows


def _integer(text: str) -> Optional[int]:
    try:
        return int(text)
    except ValueError:
        return None


def check_qrels(rows: Sequence[QrelsRow], corpus: Mapping[str, Passage],
                queries: Mapping[str, str], path: str) -> Dict[str, Dict[str, int]]:
    """{query id: {passage id: score}} from `rows`, every id checked.

    Raises:
        UserError: the first id not in the queries or the corpus (with its line and how many
            rows have such ids), or the first query without a positive (score > 0).
    """
    for ids, kind, field in ((queries, "queries", 1), (corpus, "corpus", 2)):
        unknown = [row for row in rows if row[field] not in ids]
        if unknown:
            n, qid, pid = unknown[0][:3]
            what = f"query {qid!r}" if field == 1 else f"passage {pid!r}"
            more = f" ({len(unknown)} rows name ids not in the {kind})" if len(unknown) > 1 else ""
            raise UserError(f"{path}:{n}: {what} is not in the {kind}{more}")
    qrels: Dict[str, Dict[str, int]] = {}
    first_line: Dict[str, int] = {}
    for n, qid, pid, score in rows:
        qrels.setdefault(qid, {})[pid] = score
        first_line.setdefault(qid, n)
    for qid, judged in qrels.items():
        if not any(score > 0 for score in judged.values()):
            raise UserError(f"{path}:{first_line[qid]}: query {qid!r} has no positive "
                            f"(score > 0) in this split")
    return qrels


def qrels_path(data_dir: str, split: str) -> str:
    return os.path.join(data_dir, "qrels", f"{split}.tsv")


def read_split(data_dir: str, split: str, corpus: Optional[Dict[str, Passage]] = None,
               queries: Optional[Dict[str, str]] = None) -> BeirSplit:
    """Reads and checks one split of the BEIR folder `data_dir`.

    Args:
        data_dir: the folder (local or remote).
        split: the qrels file's name without ".tsv" (train, dev, test, or another).
        corpus, queries: the folder's corpus and queries when already read (another split).

    Raises:
        UserError: a missing file or any problem of the module docstring.
    """
    path = qrels_path(data_dir, split)
    if not fileio.exists(path):
        present = sorted(name[:-4] for name in _listdir(os.path.join(data_dir, "qrels"))
                         if name.endswith(".tsv"))
        raise UserError(f"{path}: no such file (qrels splits in {data_dir}: "
                        f"{', '.join(present) or 'none'})")
    if corpus is None:
        corpus = read_corpus(find_file(data_dir, "corpus.jsonl"))
    if queries is None:
        queries = read_queries(find_file(data_dir, "queries.jsonl"))
    qrels = check_qrels(read_qrels_rows(path), corpus, queries, path)
    return BeirSplit(corpus=corpus, queries={qid: queries[qid] for qid in qrels}, qrels=qrels,
                     qrels_path=path)


def _listdir(path: str) -> List[str]:
    return fileio.listdir(path) if fileio.isdir(path) else []


def pairs_from_split(split: BeirSplit) -> List[TrainingExample]:
    """One (query, positive passage) example per relevant qrels row, in qrels order."""
    return [TrainingExample(split.queries[qid], split.corpus[pid].encoder_text,
                            where=f"{split.qrels_path}:{qid}/{pid}")
            for qid, judged in split.qrels.items() for pid, score in judged.items() if score > 0]


def read_training_pairs(path: str) -> List[TrainingExample]:
    """Training examples from a .tsv or .jsonl file (optionally .gz), module docstring.

    Raises:
        UserError: another extension, a malformed line, an empty text, rows with different
            numbers of negatives, or no example.
    """
    name = path[:-3] if path.endswith(".gz") else path
    if name.endswith(".tsv"):
        examples = _tsv_pairs(path)
    elif name.endswith(".jsonl"):
        examples = _jsonl_pairs(path)
    else:
        raise UserError(f"{path}: training pairs must be a .tsv or .jsonl file (optionally .gz)")
    if not examples:
        raise UserError(f"{path}: no training example")
    width = len(examples[0].negatives)
    for example in examples:
        if len(example.negatives) != width:
            raise UserError(f"{example.where}: {len(example.negatives)} negatives, but the "
                            f"first example has {width} (every row needs the same number)")
    return examples


def _tsv_pairs(path: str) -> List[TrainingExample]:
    examples = []
    for n, line in read_lines(path):
        fields = line.split("\t")
        if not examples and tuple(f.strip().lower() for f in fields[:2]) in _PAIR_HEADERS:
            continue  # the header line
        if len(fields) < 2:
            raise UserError(f"{path}:{n}: expected query <TAB> positive [<TAB> negative ...], "
                            f"found {len(fields)} field")
        empty = [i + 1 for i, f in enumerate(fields) if not f.strip()]
        if empty:
            raise UserError(f"{path}:{n}: field {empty[0]} is empty")
        examples.append(TrainingExample(fields[0], fields[1], tuple(fields[2:]), f"{path}:{n}"))
    return examples


def _jsonl_pairs(path: str) -> List[TrainingExample]:
    examples = []
    for n, record in _json_objects(path):
        texts = [_text(record, key, path, n) for key in ("query", "positive")]
        if "negative" in record and "negatives" in record:
            raise UserError(f"{path}:{n}: give 'negative' or 'negatives', not both")
        if "negatives" in record:
            negatives = record["negatives"]
            if not isinstance(negatives, list) or not all(isinstance(t, str) for t in negatives):
                raise UserError(f"{path}:{n}: field 'negatives' must be a list of strings")
        else:
            negatives = [_text(record, "negative", path, n)] if "negative" in record else []
        texts += negatives
        empty = [i + 1 for i, t in enumerate(texts) if not t.strip()]
        if empty:
            raise UserError(f"{path}:{n}: text {empty[0]} is empty")
        examples.append(TrainingExample(texts[0], texts[1], tuple(texts[2:]), f"{path}:{n}"))
    return examples
