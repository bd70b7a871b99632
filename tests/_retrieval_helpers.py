"""The retrieval tests' BEIR folder, built from the bundled corpus, and their tiny runs'
arguments (tests/test_run_retrieval.py, tests/test_run_retrieval_mining.py)."""

from __future__ import annotations

import json
import os
import pathlib

REPO = pathlib.Path(__file__).resolve().parent.parent


def build_beir(root: pathlib.Path, articles: int = 8, per_article: int = 5) -> str:
    """A BEIR folder: query = an article's sentence, positive = the next two; 40 passages
    from 8 articles; every third query is a test query, the others train."""
    text = (REPO / "data" / "corpus" / "wikitext2.bert.txt").read_text(encoding="utf-8")
    docs = [a.strip().split("\n") for a in text.split("\n\n") if a.strip()]
    (root / "qrels").mkdir(parents=True)
    corpus, queries, qrels = [], [], {"train": [], "test": []}
    for a, lines in enumerate(docs[:articles]):
        for j in range(per_article):
            start = j * 3
            if start + 3 > len(lines):
                break
            corpus.append({"_id": f"d{a}_{j}", "title": f"article {a}" if j == 0 else "",
                           "text": " ".join(lines[start + 1:start + 3])})
            queries.append({"_id": f"q{a}_{j}", "text": lines[start]})
            qrels["test" if j % 3 == 0 else "train"].append((f"q{a}_{j}", f"d{a}_{j}"))
    (root / "corpus.jsonl").write_text("".join(json.dumps(c) + "\n" for c in corpus))
    (root / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    for split, rows in qrels.items():
        (root / "qrels" / f"{split}.tsv").write_text(
            "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{p}\t1\n" for q, p in rows))
    return os.fspath(root)


def write_beir_vocab(beir: str, path: pathlib.Path) -> int:
    """Writes a vocabulary of the uncased words of `beir`'s passages and queries (~1,000) to
    `path`; returns its size. Every word is one id, as with Google's 30,522, but the
    embedding table, its AdamW update and the checkpoints are a thirtieth the size."""
    from bert_tf.core.tokenization import BasicTokenizer

    texts = []
    for name in ("corpus.jsonl", "queries.jsonl"):
        for line in pathlib.Path(beir, name).read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            texts += [row.get("title", ""), row["text"]]
    words = sorted(set(BasicTokenizer(do_lower_case=True).tokenize(" ".join(texts))))
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words
    path.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    return len(tokens)


def tiny_args(bert_config, vocab, beir, output_dir, *more):
    """run_retrieval's arguments for a tiny model on `beir` (its qrels/train.tsv unless
    --train_file is among `more`)."""
    train = [] if any(m.startswith("--train_file=") for m in more) else [f"--train_dir={beir}"]
    return [f"--bert_config_file={bert_config}", f"--vocab_file={vocab}", *train,
            f"--output_dir={output_dir}", "--max_query_length=32",
            "--max_passage_length=48", "--log_every_n_steps=1", *more]
