"""Instances on long documents: this package against the original script, over many seeds.

    .venv/bin/python benchmarks/data/bench_long_documents.py --seeds=40 \\
        --reference_script=/path/to/bert/create_pretraining_data.py

The bundled WikiText sample regrouped into 4 "books" of ~0.6 MB (as bench_corpus_order.py),
dupe_factor 5. Each seed is a fresh run of each job; every record is read back and counted.
Prints, per job, the mean over seeds (± its standard error) of: instances, mean length,
the share under max_seq_length / 2 tokens, and the IsNext share; then our ratio to the
original.

Why seeds: the original draws ONE target length per document and dupe, short with
probability `short_seq_prob` (0.1). A book that draws a short target turns into thousands of
short single-sentence instances, which are always IsRandom; with 4 books x 5 dupes a run
holds 20 such draws, so one run's statistics are a lottery (the original alone ranged from
25,580 to 34,362 instances over seeds 1-12). Only means over seeds can be compared.
`--short_seq_prob=0` removes the lottery: then single runs compare directly.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import pathlib
import subprocess
import sys
import tempfile
from typing import List, Tuple

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks" / "common"))  # machine, measure
sys.path.insert(0, str(REPO / "benchmarks" / "data"))  # the other data benchmarks

import machine  # noqa: E402
from bench_corpus_order import as_books, read_documents, write_corpus  # noqa: E402
from bench_create_pretraining_data import prepare_reference  # noqa: E402

VOCAB = REPO / "data" / "vocab" / "bert-base-uncased-vocab.txt"
CORPUS = REPO / "data" / "corpus" / "wikitext2.bert.txt"


def statistics(path: pathlib.Path, seq: int) -> Tuple[float, float, float, float]:
    import tensorflow as tf

    from bert_tf.core import schema

    spec = schema.parsing_spec(seq, 20)
    lengths, labels = [], []
    for batch in tf.data.TFRecordDataset(str(path)).batch(4096).map(
            lambda x: tf.io.parse_example(x, spec)):
        lengths.append(batch[schema.INPUT_MASK].numpy().sum(1))
        labels.append(batch[schema.NEXT_SENTENCE_LABELS].numpy().reshape(-1))
    n = np.concatenate(lengths)
    r = np.concatenate(labels)
    return len(n), float(n.mean()), 100 * float((n < seq // 2).mean()), 100 * float(1 - r.mean())


def run(job: str, script, corpus: pathlib.Path, out: pathlib.Path, seed: int,
        extra: List[str]) -> Tuple[float, ...]:
    common = [f"--input_file={corpus}", f"--output_file={out}", f"--vocab_file={VOCAB}",
              "--dupe_factor=5", f"--random_seed={seed}"] + extra
    if job == "ours":
        cmd = [sys.executable, "-m", "data_tools.create_pretraining_data", "--log_examples=0",
               "--num_workers=1"] + common
    else:
        cmd = [sys.executable, str(script)] + common
    subprocess.run(cmd, check=True, capture_output=True, cwd=REPO,
                   env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    figures = statistics(out, 128)
    out.unlink()
    return figures


def summary(rows: np.ndarray) -> str:
    mean = rows.mean(0)
    se = rows.std(0, ddof=1) / np.sqrt(len(rows)) if len(rows) > 1 else np.zeros_like(mean)
    names = ("instances", "mean length", "% under 64", "% IsNext")
    return ", ".join(f"{k} {m:.1f} ± {s:.1f}" for k, m, s in zip(names, mean, se))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=12)
    parser.add_argument("--short_seq_prob", type=float, default=None)
    parser.add_argument("--reference_script", type=pathlib.Path, default=None)
    parser.add_argument("--parallel", type=int, default=2)
    args = parser.parse_args()
    print(machine.describe())
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="bench_long_docs_"))
    books = as_books(read_documents(CORPUS), 4)
    write_corpus(books, tmp / "books.txt")
    extra = [] if args.short_seq_prob is None else [f"--short_seq_prob={args.short_seq_prob}"]
    jobs = [("ours", None)]
    if args.reference_script:
        jobs.append(("original", prepare_reference(args.reference_script.resolve(), tmp)))
    results = {}
    with concurrent.futures.ThreadPoolExecutor(args.parallel) as pool:
        for job, script in jobs:
            futures = [pool.submit(run, job, script, tmp / "books.txt",
                                   tmp / f"{job}-{seed}.tfrecord", seed, extra)
                       for seed in range(1, args.seeds + 1)]
            results[job] = np.array([f.result() for f in futures])
            for seed, row in enumerate(results[job], 1):
                print(f"{job:<9} seed {seed:>3}: {int(row[0])} instances, mean length "
                      f"{row[1]:.1f}, {row[2]:.1f}% under 64, IsNext {row[3]:.1f}%")
    print(f"== 4 books, dupe_factor 5, {args.seeds} seeds, short_seq_prob "
          f"{args.short_seq_prob if args.short_seq_prob is not None else 0.1}")
    for job in results:
        print(f"{job:<9} {summary(results[job])}")
    if "original" in results:
        ratio = results["ours"].mean(0) / results["original"].mean(0)
        print("ours / original: " + ", ".join(f"{r:.3f}" for r in ratio))


if __name__ == "__main__":
    main()
