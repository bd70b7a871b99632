"""Tiny GLUE-layout folders built from the bundled data, for the scorecard tests.

SST-2 comes from VADER's rated sentences (data/finetune/vader_tiny/binary: neg/pos -> 0/1);
RTE and MNLI from the SNLI subset (data/finetune/snli_tiny: RTE folds neutral and
contradiction into not_entailment). MNLI gets GLUE's five files plus a diagnostic folder.
"""

from __future__ import annotations

import json
import pathlib
from typing import List

DATA = pathlib.Path(__file__).resolve().parent.parent / "data" / "finetune"


def _tsv(path: pathlib.Path, header: List[str], rows: List[List[str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["\t".join(header)] + ["\t".join(r) for r in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _snli(split: str) -> List[dict]:
    path = DATA / "snli_tiny" / f"{split}.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def write_sst2(glue_dir: pathlib.Path, dev_is_train: bool = False) -> None:
    """SST-2; `dev_is_train`: dev.tsv holds the training rows (a model that learns them
    scores well above chance, so seeds and learning rates give different scores)."""
    source = DATA / "vader_tiny" / "binary"
    labels = {"neg": "0", "pos": "1"}
    for split in ("train", "dev", "test"):
        name = "train" if dev_is_train and split == "dev" else split
        rows = [line.split("\t") for line in
                (source / f"{name}.tsv").read_text(encoding="utf-8").splitlines()[1:]]
        if split == "test":
            _tsv(glue_dir / "SST-2" / "test.tsv", ["index", "sentence"],
                 [[str(i), r[0]] for i, r in enumerate(rows)])
        else:
            _tsv(glue_dir / "SST-2" / f"{split}.tsv", ["sentence", "label"],
                 [[r[0], labels[r[1]]] for r in rows])


def write_rte(glue_dir: pathlib.Path, dev_is_train: bool = False) -> None:
    """RTE; `dev_is_train` as for `write_sst2`."""
    for split in ("train", "dev", "test"):
        rows = _snli("train" if dev_is_train and split == "dev" else split)
        header = ["index", "sentence1", "sentence2"] + ([] if split == "test" else ["label"])
        out = []
        for i, r in enumerate(rows):
            label = "entailment" if r["gold_label"] == "entailment" else "not_entailment"
            out.append([str(i), r["sentence1"], r["sentence2"]]
                       + ([] if split == "test" else [label]))
        _tsv(glue_dir / "RTE" / f"{split}.tsv", header, out)


def write_mnli(glue_dir: pathlib.Path) -> None:
    files = {"train.tsv": "train", "dev_matched.tsv": "dev", "dev_mismatched.tsv": "dev",
             "test_matched.tsv": "test", "test_mismatched.tsv": "test"}
    for name, split in files.items():
        rows = _snli(split)
        labelled = not name.startswith("test")
        header = ["index", "sentence1", "sentence2"] + (["gold_label"] if labelled else [])
        half = rows[: len(rows) // 2] if "mismatched" in name else rows
        _tsv(glue_dir / "MNLI" / name, header,
             [[str(i), r["sentence1"], r["sentence2"]] + ([r["gold_label"]] if labelled else [])
              for i, r in enumerate(half)])
    _tsv(glue_dir / "diagnostic" / "diagnostic.tsv", ["index", "sentence1", "sentence2"],
         [[str(i), r["sentence1"], r["sentence2"]] for i, r in enumerate(_snli("test")[:20])])


def write_wnli(glue_dir: pathlib.Path) -> None:
    """A WNLI folder whose training majority is 1 (for the majority-class submission)."""
    rows = _snli("train")[:30]
    for split in ("train", "dev"):
        _tsv(glue_dir / "WNLI" / f"{split}.tsv", ["index", "sentence1", "sentence2", "label"],
             [[str(i), r["sentence1"], r["sentence2"], "1" if i % 3 else "0"]
              for i, r in enumerate(rows)])
    _tsv(glue_dir / "WNLI" / "test.tsv", ["index", "sentence1", "sentence2"],
         [[str(i), r["sentence1"], r["sentence2"]] for i, r in enumerate(rows[:7])])
