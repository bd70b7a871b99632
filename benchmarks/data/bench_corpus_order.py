"""Where the instances of `create_pretraining_data` go, traced back to their source documents.

    .venv/bin/python benchmarks/data/bench_corpus_order.py
        [--reference_script=.../create_pretraining_data.py]

Runs the job on the WikiText sample (dupe_factor 5) and on the same text regrouped into 4
"books" of ~0.6 MB, then traces every record to its source document: masked tokens are put
back, and each segment is matched by the 6-grams of token ids that occur in one document
only. Prints, per job (and for the original script when given):

- |Spearman rho| between a record's position in its output file and its document's
  position in the corpus (0 for a random order);
- records whose document equals the previous record's, over what a random order gives
  (1.0 for a random order; dupes written together push it up);
- on the books: IsRandom records whose B segment comes from A's own document;
- NSP negatives: the IsRandom records' mean corpus distance between A's document and B's,
  |i - j| / number of documents (about 1/3 for B's document drawn uniformly from the whole
  corpus, as the original draws it; small when B comes from A's neighbourhood), on the
  articles in corpus order and sorted by topic (each article's most frequent word of 6+
  letters, a crude topic key that puts related articles side by side);
- NSP negatives' variety: distinct B openings (B's first 4 token ids, masked tokens put
  back) per IsRandom record, and per IsNext record as a baseline. The original draws a
  document and a start sentence per negative, so its negatives open about as variously as
  the IsNext records do; a few fixed start positions would bring the IsRandom figure down
  (the model could then tell negatives by their opening).

A markdown summary, ours beside the original's, ends the output.
"""

from __future__ import annotations

import argparse
import collections
import pathlib
import shutil
import sys
import tempfile
from typing import Dict, Iterator, List, Optional, Tuple

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks" / "common"))  # machine, measure
sys.path.insert(0, str(REPO / "benchmarks" / "data"))  # the other data benchmarks

import machine  # noqa: E402
from bench_create_pretraining_data import (  # noqa: E402
    DEFAULT_CORPUS,
    DEFAULT_VOCAB,
    prepare_reference,
    run_ours,
    run_reference,
)

_N = 6  # n-gram length used to identify a document
_OPENING = 4  # B's first token ids that make its opening
# Per record: document of A, document of B (-1: untraced), is_random, B's opening.
Record = Tuple[int, int, int, Tuple[int, ...]]


def read_documents(path: pathlib.Path) -> List[List[str]]:
    docs, doc = [], []
    for line in path.read_text(encoding="utf-8").split("\n"):
        if line.strip():
            doc.append(line.strip())
        elif doc:
            docs.append(doc)
            doc = []
    if doc:
        docs.append(doc)
    return docs


def as_books(docs: List[List[str]], n: int) -> List[List[str]]:
    """The documents regrouped, in order, into `n` documents of about equal size."""
    per = -(-len(docs) // n)
    return [[line for d in docs[i:i + per] for line in d] for i in range(0, len(docs), per)]


def by_topic(docs: List[List[str]]) -> List[List[str]]:
    """The documents sorted by their most frequent word of 6+ letters (then by position)."""
    def topic(k: int) -> str:
        words = collections.Counter(w for line in docs[k] for w in line.lower().split()
                                    if len(w) >= 6 and w.isalpha())
        return words.most_common(1)[0][0] if words else ""
    return [docs[k] for k in sorted(range(len(docs)), key=lambda k: (topic(k), k))]


def negative_distance(records: List[Record], num_docs: int) -> Tuple[float, int]:
    """(mean |i - j| / num_docs over traced IsRandom records, how many were traced)."""
    from data_tools.pretraining_data.negatives import mean_distance

    pairs = np.array([(a, b) for a, b, r, _ in records if r == 1 and a >= 0 and b >= 0])
    if not len(pairs):
        return float("nan"), 0
    return mean_distance(pairs[:, 0], pairs[:, 1], num_docs), len(pairs)


def write_corpus(docs: List[List[str]], path: pathlib.Path) -> None:
    path.write_text("\n\n".join("\n".join(d) for d in docs) + "\n", encoding="utf-8")


def ngram_index(docs: List[List[str]], tokenizer) -> Dict[Tuple[int, ...], int]:
    """6-grams of token ids that occur in exactly one document -> that document."""
    owner: Dict[Tuple[int, ...], int] = {}
    for k, doc in enumerate(docs):
        ids = [i for sent in tokenizer.encode_batch(doc) for i in sent]
        for g in {tuple(ids[j:j + _N]) for j in range(len(ids) - _N + 1)}:
            owner[g] = k if owner.get(g, k) == k else -1
    return {g: k for g, k in owner.items() if k >= 0}


def trace(path: pathlib.Path, index: Dict[Tuple[int, ...], int]) -> List[Record]:
    """(document of A, document of B or -1, is_random, B's first token ids) per record, in
    file order."""
    import tensorflow as tf

    from bert_tf.core import schema

    spec = schema.parsing_spec(128, 20)
    out = []
    for batch in tf.data.TFRecordDataset(str(path)).batch(2048).map(
            lambda x: tf.io.parse_example(x, spec)):
        ids = batch[schema.INPUT_IDS].numpy()
        seg = batch[schema.SEGMENT_IDS].numpy()
        mask = batch[schema.INPUT_MASK].numpy()
        pos = batch[schema.MASKED_LM_POSITIONS].numpy()
        lab = batch[schema.MASKED_LM_IDS].numpy()
        w = batch[schema.MASKED_LM_WEIGHTS].numpy()
        rnd = batch[schema.NEXT_SENTENCE_LABELS].numpy().reshape(-1)
        for r in range(len(ids)):
            row = ids[r].copy()
            keep = w[r] > 0
            row[pos[r][keep]] = lab[r][keep]  # put the masked tokens back
            n = int(mask[r].sum())
            docs = []
            for s in (0, 1):
                sel = row[1:n][seg[r][1:n] == s][:-1]  # drop the segment's closing [SEP]
                votes = collections.Counter(
                    index[g] for g in (tuple(sel[j:j + _N].tolist())
                                       for j in range(len(sel) - _N + 1)) if g in index)
                docs.append(votes.most_common(1)[0][0] if votes else -1)
            # `sel` is now B's tokens.
            out.append((docs[0], docs[1], int(rnd[r]), tuple(sel[:_OPENING].tolist())))
    return out


def distinct_openings(records: List[Record], is_random: int) -> Tuple[float, int]:
    """(distinct B openings per record, records) among the records with that NSP label.

    Every record counts, traced or not: the opening is read from the record itself.
    """
    openings = [o for _, _, r, o in records if r == is_random]
    return len(set(openings)) / max(len(openings), 1), len(openings)


def order_figures(records: List[Record]) -> Tuple[float, float]:
    docs = np.array([a for a, _, _, _ in records if a >= 0])
    n = len(docs)
    # Spearman's rho: Pearson's on ranks, tied documents sharing their mean rank.
    _, inverse, counts = np.unique(docs, return_inverse=True, return_counts=True)
    ranks = (np.cumsum(counts) - counts + (counts - 1) / 2)[inverse]
    rho = float(np.corrcoef(np.arange(n), ranks)[0, 1])
    counts = np.bincount(docs)
    expected = float((counts * (counts - 1)).sum()) / (n * (n - 1))
    return abs(rho), float(np.mean(docs[1:] == docs[:-1])) / expected


def measure(vocab: pathlib.Path, corpus: pathlib.Path, args,
            reference_script: Optional[pathlib.Path] = None) -> Iterator[Dict[str, object]]:
    """Runs ours (and the original, when given) on `corpus` as articles, sorted by topic and
    as 4 books; yields one row of figures per job and corpus form, as each is measured.

    Args:
        vocab: WordPiece vocabulary.
        corpus: one sentence per line, a blank line between documents.
        args: has `dupe_factor` and `num_workers` (passed to the jobs).
        reference_script: the original create_pretraining_data.py, or None.
    """
    from bert_tf.core import tokenization

    tokenizer = tokenization.FullTokenizer(str(vocab), True)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="bench_order_"))
    try:
        docs = read_documents(corpus)
        forms = (("articles", docs), ("topics", by_topic(docs)), ("books", as_books(docs, 4)))
        jobs = [("ours", None)]
        if reference_script:
            jobs.append(("original", prepare_reference(reference_script.resolve(), tmp)))
        for name, corpus_docs in forms:
            write_corpus(corpus_docs, tmp / f"{name}.txt")
            index = ngram_index(corpus_docs, tokenizer)
            for job, script in jobs:
                out = tmp / f"{job}-{name}.tfrecord"
                if script is None:
                    res = run_ours(tmp / f"{name}.txt", vocab, out, args)
                else:
                    res = run_reference(script, tmp / f"{name}.txt", vocab, out, args)
                records = trace(out, index)
                out.unlink()
                rho, adjacency = order_figures(records)
                rnd = [(a, b) for a, b, r, _ in records if r == 1 and a >= 0 and b >= 0]
                distance, n_rnd = negative_distance(records, len(corpus_docs))
                openings, n_random = distinct_openings(records, 1)
                next_openings, n_next = distinct_openings(records, 0)
                yield {"job": job, "corpus": name, "documents": len(corpus_docs),
                       "ngrams": len(index), "records": len(records), "wall": res["wall"],
                       "traced": sum(a >= 0 for a, _, _, _ in records) / len(records),
                       "rho": rho, "adjacency": adjacency,
                       "same_document": sum(a == b for a, b in rnd) / max(len(rnd), 1),
                       "random_traced": len(rnd), "distance": distance,
                       "distance_traced": n_rnd, "openings": openings,
                       "is_random": n_random, "next_openings": next_openings,
                       "is_next": n_next}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=pathlib.Path, default=DEFAULT_CORPUS)
    parser.add_argument("--vocab", type=pathlib.Path, default=DEFAULT_VOCAB)
    parser.add_argument("--dupe_factor", type=int, default=5)
    parser.add_argument("--num_workers", type=int, default=2)
    parser.add_argument("--reference_script", type=pathlib.Path, default=None)
    args = parser.parse_args()
    if not args.corpus.is_file():
        args.corpus = REPO / "data" / "corpus" / "wikitext2.bert.txt"
    if not args.vocab.is_file():
        args.vocab = REPO / "data" / "vocab" / "bert-base-uncased-vocab.txt"
    print(machine.describe())
    rows = []
    for row in measure(args.vocab, args.corpus, args, args.reference_script):
        if row["job"] == "ours":
            print(f"== {row['corpus']}: {row['documents']} documents, {row['ngrams']} unique "
                  "6-grams")
        print(f"{row['job']:<9} {row['records']} records ({100 * row['traced']:.1f}% traced), "
              f"{row['wall']:.1f} s: |Spearman rho| {row['rho']:.3f}, same document as the "
              f"previous record {row['adjacency']:.2f}x random, IsRandom from A's document "
              f"{100 * row['same_document']:.1f}% ({row['random_traced']} traced), negatives' "
              f"mean distance |i - j| / N {row['distance']:.3f} ({row['distance_traced']} "
              f"traced), distinct B openings per IsRandom record {row['openings']:.3f} "
              f"({row['is_random']} records), per IsNext record {row['next_openings']:.3f} "
              f"({row['is_next']})", flush=True)
        rows.append(row)
    summary(rows, args)


def summary(rows: List[Dict[str, object]], args) -> None:
    """A markdown table: each figure of ours beside the original's (when it ran)."""
    print(f"\n## Summary\n\n{machine.describe()}; dupe_factor {args.dupe_factor}, "
          f"{args.num_workers} worker(s) for ours, both jobs' default --random_seed\n")
    figures = (("\\|Spearman rho\\|", "rho", "{:.3f}"),
               ("same document as the previous record (x random)", "adjacency", "{:.2f}"),
               ("IsRandom from A's document", "same_document", "{:.1%}"),
               ("negatives' mean \\|i - j\\| / N (uniform: 0.333)", "distance", "{:.3f}"),
               (f"distinct B openings ({_OPENING} ids) per IsRandom record", "openings",
                "{:.3f}"),
               (f"distinct B openings ({_OPENING} ids) per IsNext record", "next_openings",
                "{:.3f}"))
    forms = list(dict.fromkeys(str(r["corpus"]) for r in rows))
    print("| figure | " + " | ".join(f"{f}: ours | {f}: original" for f in forms) + " |")
    print("|---|" + "---:|" * (2 * len(forms)))
    for label, key, fmt in figures:
        cells = []
        for form in forms:
            for job in ("ours", "original"):
                found = [r for r in rows if r["corpus"] == form and r["job"] == job]
                cells.append(fmt.format(found[0][key]) if found else "not run")
        print(f"| {label} | " + " | ".join(cells) + " |")
    if not args.reference_script:
        print("\noriginal: not run (give --reference_script)")


if __name__ == "__main__":
    main()
