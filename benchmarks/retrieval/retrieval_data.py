"""bench_retrieval.py's data stage: the BEIR folder every arm reads, and its training pairs.

Full runs read ../shared/data/retrieval/scifact as it is (nothing copied; its four files'
content digests key the arms). --smoke writes a small BEIR folder into the cache instead:
the first --smoke_train and --smoke_test queries of each split (in qrels order), every passage
they judge relevant, and the corpus's first passages (file order) up to --smoke_passages.

`pairs.jsonl` beside it holds the (query, positive) pairs bert_tf trains on, written by
bert_tf's own reader (`beir_data.pairs_from_split`, one pair per relevant train qrels row, in
qrels order), so that sentence-transformers' arm trains on the same pairs, not a re-reading.

Pure Python (bert_tf's BEIR reader imports no TensorFlow).
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Dict

import budget_cache

from bert_tf.finetune.retrieval import beir_data

FILES = ("corpus.jsonl", "queries.jsonl", "qrels/train.tsv", "qrels/test.tsv")


def _file(folder: str, name: str) -> str:
    """`name` in the folder, or its .gz (beir_data.find_file's rule)."""
    if name.startswith("qrels/"):
        return os.path.join(folder, name)
    return beir_data.find_file(folder, name)


def content(folder: str) -> Dict[str, str]:
    """{file: 16-hex content digest} of the folder's four files (the arms' cache keys)."""
    return {name: budget_cache.content_digest(_file(folder, name)) for name in FILES}


def _write_subset(source: str, out: str, passages: int, train: int, test: int) -> None:
    """The smoke folder (module docstring), written under a temporary name, then renamed."""
    splits = {name: beir_data.read_split(source, name) for name in ("train", "test")}
    keep = {"train": list(splits["train"].qrels)[:train],
            "test": list(splits["test"].qrels)[:test]}
    corpus = splits["train"].corpus
    wanted = {pid for name, split in splits.items() for qid in keep[name]
              for pid in split.qrels[qid]}
    for pid in corpus:
        if len(wanted) >= passages:
            break
        wanted.add(pid)
    tmp = f"{out}.tmp{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(os.path.join(tmp, "qrels"))
    with open(os.path.join(tmp, "corpus.jsonl"), "w", encoding="utf-8") as f:
        for pid, p in corpus.items():
            if pid in wanted:
                f.write(json.dumps({"_id": pid, "title": p.title, "text": p.text}) + "\n")
    queries = {qid: splits[name].queries[qid] for name in keep for qid in keep[name]}
    with open(os.path.join(tmp, "queries.jsonl"), "w", encoding="utf-8") as f:
        for qid, text in queries.items():
            f.write(json.dumps({"_id": qid, "text": text}) + "\n")
    for name, split in splits.items():
        with open(os.path.join(tmp, "qrels", f"{name}.tsv"), "w", encoding="utf-8") as f:
            f.write("query-id\tcorpus-id\tscore\n")
            for qid in keep[name]:
                for pid, score in split.qrels[qid].items():
                    f.write(f"{qid}\t{pid}\t{score}\n")
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)


def _write_pairs(folder: str, path: str) -> int:
    examples = beir_data.pairs_from_split(beir_data.read_split(folder, "train"))
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        for e in examples:
            f.write(json.dumps({"query": e.query, "positive": e.positive}) + "\n")
    os.replace(tmp, path)
    return len(examples)


def prepare(cache: str, source: str, smoke: bool, passages: int, train: int,
            test: int) -> Dict[str, object]:
    """The data stage's marker: {"folder", "pairs", "content", "counts", "provenance"}.

    Args:
        cache: the benchmark's cache folder.
        source: the SciFact BEIR folder (--data_dir).
        smoke: write the small folder (module docstring) instead of reading `source`.
        passages, train, test: its size (smoke only).
    """
    from bert_tf.core.errors import UserError

    try:
        missing = [name for name in FILES if not os.path.exists(_file(source, name))]
    except UserError as e:
        raise SystemExit(f"--data_dir: {e}") from None
    if missing:
        raise SystemExit(f"--data_dir={source}: no {missing[0]} (a BEIR folder: corpus.jsonl, "
                         "queries.jsonl, qrels/train.tsv, qrels/test.tsv)")
    source_digest = budget_cache.digest(content(source))
    key = {"source": source_digest, "smoke": [passages, train, test] if smoke else None}
    stage_dir = os.path.join(cache, "data", f"scifact-{budget_cache.digest(key)}")
    marker = budget_cache.done(stage_dir, "data")
    if marker:
        return marker
    os.makedirs(stage_dir, exist_ok=True)
    folder = source
    if smoke:
        folder = os.path.join(stage_dir, "beir")
        _write_subset(source, folder, passages, train, test)
    pairs = os.path.join(stage_dir, "pairs.jsonl")
    n_pairs = _write_pairs(folder, pairs)
    train_split = beir_data.read_split(folder, "train")
    test_split = beir_data.read_split(folder, "test", train_split.corpus)
    counts = {"passages": len(train_split.corpus), "train_queries": len(train_split.qrels),
              "train_pairs": n_pairs, "test_queries": len(test_split.qrels),
              "test_pairs": sum(len(j) for j in test_split.qrels.values())}
    return budget_cache.finish(stage_dir, "data", {
        "folder": os.path.abspath(folder), "pairs": pairs, "content": content(folder),
        "source": os.path.abspath(source), "counts": counts})
