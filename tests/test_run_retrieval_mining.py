"""End-to-end tests of run_retrieval's mined hard negatives (--hard_negatives_from) on the
tiny BEIR folder of tests/_retrieval_helpers.py (24 training queries, 40 passages):

- bm25: output_dir/hard_negatives.jsonl holds, for every training query, the passage at
  rank --hard_negative_range_min of an independent BM25 ranking of the corpus without the
  query's positive; training uses them (1 negative each); a run stopped after one step and
  resumed reads the mined file back instead of mining again (the file untouched), and a
  resumed run asked to mine otherwise is refused in one line;
- model: the negatives are the ones the initial model's embeddings rank (the seeded random
  model rebuilt here, exact NumPy search), never a positive.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from _pretraining_helpers import TINY_FINETUNE_BERT, error_lines
from _retrieval_helpers import build_beir, tiny_args

from bert_tf.finetune.retrieval import beir_data

MODULE = "bert_tf.run_retrieval"


@pytest.fixture(scope="module")
def beir(tmp_path_factory) -> str:
    return build_beir(tmp_path_factory.mktemp("beir") / "tiny")


@pytest.fixture(scope="module")
def bert_config(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("cfg") / "bert_config.json"
    path.write_text(json.dumps(TINY_FINETUNE_BERT))
    return os.fspath(path)


def check(proc) -> None:
    assert proc.returncode == 0, proc.stderr[-3000:]


def mined(output_dir) -> list:
    lines = (output_dir / "hard_negatives.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def expected_negatives(split, scores_of, rank_min: int, count: int) -> dict:
    """{query text: its negatives}: ranks [rank_min, rank_min + count) of the corpus by
    `scores_of(query index)`, ties by corpus order, the query's positives left out."""
    texts = [p.encoder_text for p in split.corpus.values()]
    out = {}
    for q, (qid, judged) in enumerate(split.qrels.items()):
        positives = {split.corpus[pid].encoder_text for pid in judged}
        scores = scores_of(q)
        order = [int(i) for i in np.lexsort((np.arange(len(texts)), -scores))
                 if texts[i] not in positives]
        out[split.queries[qid]] = texts_at(texts, order[rank_min:rank_min + count])
    return out


def texts_at(texts, rows):
    return [texts[i] for i in rows]


def test_bm25_negatives_train_and_resume_from_the_mined_file(cli, beir, bert_config,
                                                             google_vocab_path, tmp_path):
    from bert_tf.finetune.retrieval.bm25 import BM25Index

    out = tmp_path / "out"
    args = tiny_args(bert_config, google_vocab_path, beir, out, "--do_train",
                     "--train_batch_size=4", "--num_train_epochs=0.34",
                     "--hard_negatives_from=bm25", "--hard_negative_range_min=2",
                     "--hard_negative_range_max=20")
    proc = cli.run(MODULE, args + ["--max_steps_per_run=1"])
    check(proc)
    assert ("mining 1 hard negative(s) per query by bm25: ranks [2, 20) of 40 passages for "
            "24 queries") in proc.stderr
    assert "training on 24 examples (1 negatives each): 2 steps of 4" in proc.stderr
    split = beir_data.read_split(beir, "train")
    index = BM25Index([p.encoder_text for p in split.corpus.values()])
    queries = list(split.queries.values())
    bm25 = {p["query"]: p["negatives"] for p in mined(out)}
    want = expected_negatives(split, lambda q: np.where(
        index.scores(queries[q]) > 0, index.scores(queries[q]), -np.inf), 2, 1)
    assert bm25 == want and len(bm25) == 24
    for row in mined(out):
        assert row["positive"] not in row["negatives"]
    task = json.loads((out / "finetune_task.json").read_text())
    assert task["hard_negatives"] == {"from": "bm25", "num_negatives": 1, "range_min": 2,
                                      "range_max": 20, "sampling": "top", "seed": 12345}

    stamp = (out / "hard_negatives.jsonl").stat().st_mtime_ns
    proc = cli.run(MODULE, args)
    check(proc)
    assert "reading the hard negatives this run mined" in proc.stderr
    assert "mining" not in proc.stderr and "step 2/2" in proc.stderr
    assert (out / "hard_negatives.jsonl").stat().st_mtime_ns == stamp

    proc = cli.run(MODULE, args + ["--hard_negative_range_min=1"])
    assert proc.returncode == 2
    assert error_lines(proc.stderr) == [
        f"error: {out} was trained with hard negatives {task['hard_negatives']}; continue "
        "with the same flags"]


def test_model_negatives_are_the_initial_models_ranking(cli, beir, bert_config,
                                                        google_vocab_path, tmp_path):
    from bert_tf.core.tokenization import FullTokenizer
    from bert_tf.finetune import warm_start
    from bert_tf.finetune.retrieval import corpus_eval
    from bert_tf.finetune.retrieval import retrieval_runner as rr

    out = tmp_path / "out"
    proc = cli.run(MODULE, tiny_args(
        bert_config, google_vocab_path, beir, out, "--do_train", "--train_batch_size=4",
        "--num_train_epochs=0.17", "--hard_negatives_from=model", "--num_hard_negatives=2",
        "--hard_negative_range_max=10", "--seed=7"))
    check(proc)
    assert "mining 2 hard negative(s) per query by model" in proc.stderr
    assert "training on 24 examples (2 negatives each): 1 steps of 4" in proc.stderr

    # The same seeded fresh model, its embeddings ranked here by NumPy.
    settings = rr.EmbeddingSettings("mean", True, 32, 48, True)
    model = rr.initial_model(warm_start.resolve("", bert_config, google_vocab_path), settings,
                             seed=7)
    embed = corpus_eval.embed_function(model)
    tokenizer = FullTokenizer(google_vocab_path, True)
    split = beir_data.read_split(beir, "train")
    passages = corpus_eval.embed_texts(embed, [p.encoder_text for p in split.corpus.values()],
                                       tokenizer, 48, 64, "max_passage_length")
    queries = corpus_eval.embed_texts(embed, list(split.queries.values()), tokenizer, 32, 64,
                                      "max_query_length")
    scores = queries @ passages.T
    want = expected_negatives(split, lambda q: scores[q], 0, 2)
    got = {p["query"]: p["negatives"] for p in mined(out)}
    assert got == want
    for row in mined(out):
        assert row["positive"] not in row["negatives"] and len(set(row["negatives"])) == 2
