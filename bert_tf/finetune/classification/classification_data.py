"""Sentence and sentence-pair classification (and regression) data: readers and featurizer.

Readers turn a task's files into `Example`s; `featurize` turns them into the model's arrays.
Pure Python and NumPy (no TensorFlow).

Tasks (`get_task`):

* GLUE, in the layouts of the GLUE download (TSV, split on tabs, no quoting; columns found by
  their header names, so MNLI's 12-column train and 16-column dev files read alike):
  cola (train/dev have NO header: source, label, original mark, sentence), sst2, mrpc, stsb
  (regression on `score`), qqp, mnli (dev = dev_matched.tsv, plus the splits dev_mismatched
  and test_mismatched), qnli, rte, wnli. Their label lists are fixed (sorted) strings.
* Your own data: `tsv`, `csv` (header row names the columns; csv allows quoting) or `jsonl`
  (one JSON object per line): train/dev/test.<ext> in data_dir, with `text_column`, optional
  `text_pair_column` and `label_column`. The label list is the sorted set of training labels
  (`build_label_list`), saved with the model by `bert_tf.finetune.label_list`.

A file whose label column is absent (or whose labels are all empty) has `has_labels=False`:
GLUE test files, or your unlabelled test file. Training on it is refused here; evaluating on
it is refused by the caller (`require_labels`).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from bert_tf.core import fileio
from bert_tf.core.errors import UserError, reason

Label = Union[str, float, None]


@dataclasses.dataclass(frozen=True)
class Example:
    """One sentence (pair). `label` is a string, a float (regression) or None (unlabelled).

    `guid` is the file's own id (GLUE's `index`/`id` column) or `<split>-<row>`; `where` is
    `path:line`, for error messages.
    """

    guid: str
    text_a: str
    text_b: Optional[str]
    label: Label
    where: str = ""


@dataclasses.dataclass(frozen=True)
class SplitData:
    """The examples of one file and whether it carries labels."""

    path: str
    examples: List[Example]
    has_labels: bool


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """Where a task's files are and which columns hold what.

    Attributes:
        name: the task name (`sst2`, ..., `tsv`, `csv`, `jsonl`).
        file_format: "tsv", "csv" or "jsonl".
        files: split name -> file name inside data_dir.
        text_column, text_pair_column, label_column: column names (header / JSON keys).
        label_list: the fixed labels (GLUE), or None: built from the training labels.
        is_regression: labels are floats (STS-B); `featurize` gets `label_list=None`.
        id_column: the column whose value becomes `Example.guid`, when the file has it.
        headerless: splits without a header row (CoLA train/dev), read by `positions`:
            (number of fields, index of the text, index of the label).
    """

    name: str
    file_format: str
    files: Dict[str, str]
    text_column: str
    text_pair_column: Optional[str]
    label_column: str
    label_list: Optional[Tuple[str, ...]]
    is_regression: bool = False
    id_column: Optional[str] = "index"
    headerless: Tuple[str, ...] = ()
    positions: Tuple[int, int, int] = (0, 0, 0)


_SPLITS = {"train": "train.tsv", "dev": "dev.tsv", "test": "test.tsv"}
_BINARY = ("0", "1")
_ENTAIL = ("entailment", "not_entailment")
GLUE_TASKS: Dict[str, TaskSpec] = {
    "cola": TaskSpec("cola", "tsv", _SPLITS, "sentence", None, "label", _BINARY,
                     headerless=("train", "dev"), positions=(4, 3, 1)),
    "sst2": TaskSpec("sst2", "tsv", _SPLITS, "sentence", None, "label", _BINARY),
    "mrpc": TaskSpec("mrpc", "tsv", _SPLITS, "#1 String", "#2 String", "Quality", _BINARY),
    "stsb": TaskSpec("stsb", "tsv", _SPLITS, "sentence1", "sentence2", "score", None,
                     is_regression=True),
    "qqp": TaskSpec("qqp", "tsv", _SPLITS, "question1", "question2", "is_duplicate", _BINARY,
                    id_column="id"),
    "mnli": TaskSpec("mnli", "tsv", {
        "train": "train.tsv", "dev": "dev_matched.tsv", "dev_mismatched": "dev_mismatched.tsv",
        "test": "test_matched.tsv", "test_mismatched": "test_mismatched.tsv"},
        "sentence1", "sentence2", "gold_label", ("contradiction", "entailment", "neutral")),
    "qnli": TaskSpec("qnli", "tsv", _SPLITS, "question", "sentence", "label", _ENTAIL),
    "rte": TaskSpec("rte", "tsv", _SPLITS, "sentence1", "sentence2", "label", _ENTAIL),
    "wnli": TaskSpec("wnli", "tsv", _SPLITS, "sentence1", "sentence2", "label", _BINARY),
}
GENERIC_FORMATS = ("tsv", "csv", "jsonl")


def get_task(task_name: str, text_column: Optional[str] = None,
             text_pair_column: Optional[str] = None, label_column: Optional[str] = None,
             regression: bool = False) -> TaskSpec:
    """The spec of a GLUE task, or of your own tsv/csv/jsonl files with the named columns.

    Raises:
        UserError: unknown task, or a generic format without `text_column`/`label_column`.
    """
    name = task_name.lower()
    if name in GLUE_TASKS:
        return GLUE_TASKS[name]
    if name not in GENERIC_FORMATS:
        raise UserError(f"unknown task {task_name!r}; choose one of "
                        f"{', '.join(list(GLUE_TASKS) + list(GENERIC_FORMATS))}")
    if not text_column or not label_column:
        raise UserError(f"--task_name={name} needs --text_column and --label_column")
    files = {s: f"{s}.{name}" for s in ("train", "dev", "test")}
    return TaskSpec(name, name, files, text_column, text_pair_column or None, label_column,
                    None, is_regression=regression, id_column=None)


def read_split(task: TaskSpec, data_dir: str, split: str) -> SplitData:
    """Reads `split` ("train", "dev", "test", or a task's extra split) of `task`.

    Raises:
        UserError: one line naming the file (and line): missing file, malformed row, missing
            text column, a training file without labels, a label that is not a number
            (regression), labels given on some rows only.
    """
    if split not in task.files:
        raise UserError(f"task {task.name} has no split {split!r} "
                        f"(it has {', '.join(task.files)})")
    path = os.path.join(data_dir, task.files[split])
    text = _read_text(path)
    if split in task.headerless:
        rows = _positional_rows(task, path, text)
    elif task.file_format == "jsonl":
        rows = _jsonl_rows(task, path, text)
    else:
        rows = _table_rows(task, path, text)
    examples = [Example(guid or f"{split}-{i}", text_a, text_b, label, f"{path}:{line}")
                for i, (line, guid, text_a, text_b, label) in enumerate(rows)]
    labelled = [e.label is not None for e in examples]
    if any(labelled) and not all(labelled):
        missing = examples[labelled.index(False)]
        raise UserError(f"{missing.where}: no label, but other rows of the file have one")
    has_labels = bool(examples) and all(labelled)
    if split == "train" and not examples:
        raise UserError(f"{path}: training file has no examples")
    if split == "train" and not has_labels:
        raise UserError(f"{path}: training file has no labels (column {task.label_column!r})")
    if task.is_regression and has_labels:
        examples = [dataclasses.replace(e, label=_to_float(e.label, e.where)) for e in examples]
    return SplitData(path, examples, has_labels)


def require_labels(data: SplitData, why: str = "--do_eval") -> None:
    """Raises UserError when `data` has no labels, e.g. evaluation asked on a test file."""
    if not data.has_labels:
        raise UserError(f"{why} needs labels, but {data.path} has none")


Row = Tuple[int, Optional[str], str, Optional[str], Optional[str]]  # line, id, a, b, label


def _read_text(path: str) -> str:
    if not fileio.exists(path):
        raise UserError(f"{path}: no such file")
    with fileio.open_file(path, "rb") as f:
        data = f.read()
    try:
        return data.decode("utf-8-sig")  # GLUE's MRPC files start with a BOM.
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise UserError(f"{path}:{line}: not UTF-8") from None


def _lines(text: str) -> List[Tuple[int, str]]:
    """(line number, line) of non-empty lines; not splitlines(), which also splits at \\x85."""
    return [(n, line.rstrip("\r")) for n, line in enumerate(text.split("\n"), 1)
            if line.rstrip("\r")]


def _positional_rows(task: TaskSpec, path: str, text: str) -> List[Row]:
    num_fields, text_index, label_index = task.positions
    rows = []
    for n, line in _lines(text):
        fields = line.split("\t")
        if len(fields) != num_fields:
            raise UserError(f"{path}:{n}: expected {num_fields} tab-separated fields, "
                            f"found {len(fields)}")
        rows.append((n, None, fields[text_index], None, fields[label_index] or None))
    return rows


def _table_rows(task: TaskSpec, path: str, text: str) -> List[Row]:
    """Rows of a TSV (tab-split, no quoting) or CSV (quoting allowed) file with a header."""
    if task.file_format == "csv":
        reader = csv.reader(io.StringIO(text, newline=""), strict=True)
        records: List[Tuple[int, List[str]]] = []
        start = 1
        try:
            for fields in reader:
                if fields:  # A CSV record may span lines; report the line it starts on.
                    records.append((start, fields))
                start = reader.line_num + 1
        except csv.Error as e:  # e.g. a quote left open, or text after a closing quote
            raise UserError(f"{path}:{start}: {reason(e)}") from None
        kind = "comma-separated"
    else:
        records = [(n, line.split("\t")) for n, line in _lines(text)]
        kind = "tab-separated"
    if not records:
        raise UserError(f"{path}: empty file (expected a header row)")
    header = [name.strip() for name in records[0][1]]

    for name in (task.text_column, task.text_pair_column):
        if name is not None and name not in header:
            raise UserError(f"{path}:{records[0][0]}: no column {name!r} in the header "
                            f"(columns: {', '.join(header)})")
    text_i, pair_i, label_i, id_i = (
        header.index(name) if name in header else None
        for name in (task.text_column, task.text_pair_column, task.label_column, task.id_column))
    rows = []
    for n, fields in records[1:]:
        if len(fields) != len(header):
            raise UserError(f"{path}:{n}: expected {len(header)} {kind} fields "
                            f"(as the header), found {len(fields)}")
        rows.append((n, None if id_i is None else fields[id_i], fields[text_i],
                     None if pair_i is None else fields[pair_i],
                     None if label_i is None else fields[label_i] or None))
    return rows


def _jsonl_rows(task: TaskSpec, path: str, text: str) -> List[Row]:
    rows = []
    for n, line in _lines(text):
        try:
            record = json.loads(line)
        except ValueError as e:
            raise UserError(f"{path}:{n}: not valid JSON ({reason(e)})") from None
        if not isinstance(record, dict):
            raise UserError(f"{path}:{n}: expected a JSON object, found "
                            f"{type(record).__name__}")
        for key in (task.text_column, task.text_pair_column):
            if key is not None and not isinstance(record.get(key), str):
                problem = "missing" if key not in record else "not a string"
                raise UserError(f"{path}:{n}: field {key!r} is {problem}")
        texts = [None if key is None else record[key]
                 for key in (task.text_column, task.text_pair_column)]
        label = record.get(task.label_column)
        if isinstance(label, bool) or not isinstance(label, (str, int, float, type(None))):
            raise UserError(f"{path}:{n}: label {task.label_column!r} must be a string "
                            f"or a number, found {json.dumps(label)}")
        rows.append((n, None, texts[0], texts[1], None if label in (None, "") else str(label)))
    return rows


def _to_float(value: Label, where: str) -> float:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise UserError(f"{where}: regression label {value!r} is not a number") from None


def build_label_list(task: TaskSpec, train: SplitData) -> Optional[List[str]]:
    """The label list (index = class id): GLUE's fixed list, or the sorted training labels.

    Sorted so that the same training file always gives the same ids. None for regression.
    """
    if task.is_regression:
        return None
    if task.label_list is not None:
        return list(task.label_list)
    return sorted({str(e.label) for e in train.examples})


@dataclasses.dataclass
class ClassificationFeatures:
    """Model inputs for `n` examples.

    Attributes:
        arrays: "input_ids", "input_mask", "segment_ids": int32 [n, max_seq_length];
            "label_ids": int32 [n] class index, or float32 [n] for regression (absent when
            the examples have no labels).
        guids: `Example.guid` per row, for writing predictions.
        num_truncated: examples whose tokens did not all fit in max_seq_length.
        has_labels: whether "label_ids" is present.
    """

    arrays: Dict[str, np.ndarray]
    guids: List[str]
    num_truncated: int
    has_labels: bool

    def __len__(self) -> int:
        return len(self.guids)


def truncated_lengths(len_a: int, len_b: int, budget: int) -> Tuple[int, int]:
    """Lengths after trimming a pair to `budget` tokens as BERT's run_classifier does.

    That procedure drops the last token of the longer sequence (of B on a tie) one at a time;
    this computes where it ends without the loop: the longer side shrinks to what the shorter
    leaves, or, when the shorter alone takes half the budget, A keeps ceil(budget / 2).
    """
    if len_a + len_b <= budget:
        return len_a, len_b
    if len_a > len_b and 2 * len_b <= budget:
        return budget - len_b, len_b
    if len_a <= len_b and 2 * len_a <= budget:
        return len_a, budget - len_a
    return (budget + 1) // 2, budget // 2


def featurize(examples: Sequence[Example], label_list: Optional[Sequence[str]], tokenizer,
              max_seq_length: int) -> ClassificationFeatures:
    """Tokenizes examples into `[CLS] A [SEP] (B [SEP])`, padded with 0 to max_seq_length.

    Args:
        examples: from `read_split`; all labelled or all unlabelled.
        label_list: class names (index = label id), or None for regression (float labels).
        tokenizer: a `bert_tf.core.tokenization.FullTokenizer`; its `encode` fast path gives
            the same ids as `convert_tokens_to_ids(tokenize(text))`.
        max_seq_length: the sequence length, special tokens included.

    Returns:
        `ClassificationFeatures`; pairs too long are trimmed with `truncated_lengths`, a single
        text to max_seq_length - 2 tokens, and counted in `num_truncated`.

    Raises:
        UserError: a label not in `label_list` (names file and line), max_seq_length too small.
    """
    has_pairs = any(e.text_b is not None for e in examples)
    if max_seq_length < (3 if has_pairs else 2):
        raise UserError(f"max_seq_length={max_seq_length} leaves no room for text")
    has_labels = bool(examples) and all(e.label is not None for e in examples)
    label_index = None if label_list is None else {x: i for i, x in enumerate(label_list)}
    n = len(examples)
    input_ids = np.zeros((n, max_seq_length), np.int32)
    segment_ids = np.zeros((n, max_seq_length), np.int32)
    lengths = np.zeros(n, np.int64)
    labels = np.zeros(n, np.float32 if label_list is None else np.int32)
    cls_id, sep_id = tokenizer.vocab["[CLS]"], tokenizer.vocab["[SEP]"]
    num_truncated = 0
    for row, example in enumerate(examples):
        ids_a = tokenizer.encode(example.text_a)
        ids_b = [] if example.text_b is None else tokenizer.encode(example.text_b)
        if example.text_b is None:
            len_a, len_b = min(len(ids_a), max_seq_length - 2), 0
        else:
            len_a, len_b = truncated_lengths(len(ids_a), len(ids_b), max_seq_length - 3)
        num_truncated += (len_a, len_b) != (len(ids_a), len(ids_b))
        tokens = [cls_id, *ids_a[:len_a], sep_id]
        if example.text_b is not None:
            tokens += [*ids_b[:len_b], sep_id]
            segment_ids[row, len_a + 2:len(tokens)] = 1
        input_ids[row, :len(tokens)] = tokens
        lengths[row] = len(tokens)
        if has_labels:
            labels[row] = _label_value(example, label_index, label_list)
    input_mask = (np.arange(max_seq_length)[None, :] < lengths[:, None]).astype(np.int32)
    arrays = {"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids}
    if has_labels:
        arrays["label_ids"] = labels
    return ClassificationFeatures(arrays, [e.guid for e in examples], num_truncated, has_labels)


def _label_value(example: Example, label_index: Optional[Dict[str, int]],
                 label_list: Optional[Sequence[str]]) -> float:
    if label_index is None:
        return _to_float(example.label, example.where)
    index = label_index.get(str(example.label))
    if index is None:
        shown = ", ".join(label_list or ())
        raise UserError(f"{example.where}: label {example.label!r} is not one of the "
                        f"training labels ({shown})")
    return index
