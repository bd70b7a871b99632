"""Throughput of `data_tools.prepare_corpus` (MB/s of input text) for 1 and 2 workers.

The bundled corpus (one sentence per line) is turned back into raw documents: each article's
sentences joined into paragraphs of --paragraph sentences, repeated --repeat times with a
different article order. Both input formats are measured: plain text (a blank line between
documents) and gzip-compressed JSON Lines (as WikiExtractor --json writes), each with
--dedup, whose duplicates (the repeats) are dropped. Also prints sentencex's own speed on the
same paragraphs in one process: the ceiling for one worker. Beside wall-clock MB/s, MB per
CPU-second (this process and its workers) shows the cost of parallelism when other jobs
share the cores.

    python benchmarks/data/bench_prepare_corpus.py [--corpus=...] [--repeat=4] [--workers=1,2]
"""

from __future__ import annotations

import argparse
import functools
import gzip
import json
import os
import random
import sys
import tempfile
import time
from typing import Iterator, List

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks", "common"))  # machine, measure

import measure  # noqa: E402
from absl import logging  # noqa: E402
from machine import describe  # noqa: E402

from data_tools.prepare import prepare_job, sentences  # noqa: E402
from data_tools.prepare.prepare_config import PrepareConfig  # noqa: E402


def articles(path: str, per_paragraph: int) -> List[str]:
    """The corpus' articles as raw documents: sentences joined into paragraphs of
    `per_paragraph` sentences, one paragraph per line."""
    found, article = [], []
    with open(path, encoding="utf-8") as f:
        for line in list(f) + [""]:
            line = line.strip()
            if line:
                article.append(line)
            elif article:
                found.append("\n".join(" ".join(article[i:i + per_paragraph])
                                       for i in range(0, len(article), per_paragraph)))
                article = []
    return found


def shuffled_documents(docs: List[str], repeat: int) -> Iterator[str]:
    """`docs` `repeat` times, each copy in its own seeded order (copy r: seed r)."""
    for r in range(repeat):
        order = list(range(len(docs)))
        random.Random(r).shuffle(order)
        yield from (docs[i] for i in order)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--corpus", default=os.path.join(ROOT, "data", "corpus",
                                                         "wikitext2.bert.txt"))
    parser.add_argument("--repeat", type=int, default=4)
    parser.add_argument("--paragraph", type=int, default=6)
    parser.add_argument("--workers", default="1,2")
    args = parser.parse_args()
    logging.set_verbosity(logging.WARNING)
    print(describe())
    originals = articles(args.corpus, args.paragraph)
    docs = list(shuffled_documents(originals, args.repeat))
    mb = sum(len(d.encode("utf-8")) + 2 for d in docs) / 1e6
    start = time.perf_counter()
    for doc in docs[:len(originals)]:
        sentences.split_document(doc)
    split_s = time.perf_counter() - start
    print(f"{len(docs)} documents, {mb:.1f} MB of text; sentencex alone, one process: "
          f"{mb / args.repeat / split_s:.2f} MB/s")
    with tempfile.TemporaryDirectory() as tmp:
        text = os.path.join(tmp, "raw.txt")
        with open(text, "w", encoding="utf-8") as f:
            f.write("\n\n".join(docs) + "\n")
        jsonl = os.path.join(tmp, "raw.jsonl.gz")
        with gzip.open(jsonl, "wt", encoding="utf-8") as f:
            for i, doc in enumerate(docs):
                f.write(json.dumps({"id": str(i), "url": "", "title": "", "text": doc}) + "\n")
        for fmt, path in (("text", text), ("jsonl", jsonl)):
            for workers in [int(w) for w in args.workers.split(",")]:
                out = os.path.join(tmp, f"out-{fmt}-{workers}.txt")
                config = PrepareConfig((path,), (out,), input_format=fmt,
                                       dedup=True, num_workers=workers,
                                       progress_seconds=0)
                summary, seconds, cpu = measure.timed(functools.partial(prepare_job.run, config))
                print(f"{fmt:<6} {workers} worker(s): {seconds:6.2f} s, "
                      f"{summary.text_bytes / 1e6 / seconds:6.2f} MB/s of text "
                      f"({summary.text_bytes / 1e6 / cpu:5.2f} MB per CPU-second); "
                      f"{summary.documents} documents, {summary.sentences} sentences, "
                      f"{summary.duplicates} duplicates dropped", flush=True)


if __name__ == "__main__":
    main()
