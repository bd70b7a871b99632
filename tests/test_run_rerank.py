"""End-to-end tests of `python -m bert_tf.run_rerank` on the tiny BEIR folder built from the
bundled corpus (tests/_retrieval_helpers.build_beir: 40 passages, 24 train and 16 test
queries, each query a sentence and its positive the next two).

- --do_train with BCE over 2 BM25 negatives per positive on a one-layer model from random
  weights (the loss falls from ln 2), then --do_rerank of BM25's top 10 for the training
  queries: eval_results.txt holds the four BEIR figures of reranked_run.trec (recomputed
  here from the file) and the first stage's (recomputed from an independent BM25 ranking),
  the model ranks the positives it learned above BM25, and --export_dir's `score` signature
  gives the logits of the reranked run;
- --loss=listwise with --classifier_readout=cls and --fusion=rrf: groups of a positive and 2
  BM25 negatives, a batch counting groups (the loss falls from ln 3), the readout in
  finetune_task.json, and a written run that is the reciprocal rank fusion of BM25's order
  and the model's (the exported `score` signature's logits), the model's own order scored
  as reranker_* with the same reranking gain;
- --do_rerank alone from the trained directory with a TREC run file as the first stage;
- bad input is one `error:` line: a qrels id not in the corpus, an empty corpus, a query
  without a positive, a run file's passage not in the corpus, no --eval_dir, --rrf_k 0, no
  run mode, a directory that holds no reranker.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import re
import shutil

import numpy as np
import pytest
import tensorflow as tf
from _pretraining_helpers import TINY_FINETUNE_BERT, error_lines
from _retrieval_helpers import build_beir, write_beir_vocab

from bert_tf.finetune.retrieval import beir_data, fusion, ir_metrics, trec_run
from bert_tf.finetune.retrieval.bm25 import BM25Index

MODULE = "bert_tf.run_rerank"
LOSS_LINE = re.compile(r"step (\d+)/\d+ \| loss ([0-9.]+)")
STEPS = 270  # int(72 pairs / 8 * 30 epochs)
LISTWISE_STEPS = 120  # int(24 groups / 4 * 20 epochs)


@pytest.fixture(scope="module")
def beir(tmp_path_factory) -> str:
    return build_beir(tmp_path_factory.mktemp("beir") / "tiny")


def read_results(output_dir) -> dict:
    text = (pathlib.Path(output_dir) / "eval_results.txt").read_text()
    return {k: float(v) for k, v in (line.split(" = ") for line in text.splitlines())}


def train_and_rerank(cli, beir, root, *recipe):
    """run_rerank --do_train --do_rerank of a one-layer random model on `beir`'s train split
    (BM25's top 10, 2 negatives a positive), exported; returns (out, export, proc)."""
    vocab = root / "vocab.txt"  # the folder's own words: the vocabulary is not the subject
    config = root / "bert_config.json"
    config.write_text(json.dumps({**TINY_FINETUNE_BERT,
                                  "vocab_size": write_beir_vocab(beir, vocab)}))
    out, export = root / "out", root / "export" / "1"
    proc = cli.run(MODULE, [
        f"--bert_config_file={config}", f"--vocab_file={vocab}",
        f"--train_dir={beir}", f"--eval_dir={beir}", "--eval_split=train",
        f"--output_dir={out}", "--do_train", "--do_rerank", "--max_seq_length=64",
        "--learning_rate=1e-3", "--warmup_proportion=0", "--num_hard_negatives=2",
        "--rerank_top_k=10", f"--export_dir={export}", *recipe])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, export, proc


@pytest.fixture(scope="module")
def trained(cli, beir, tmp_path_factory):
    return train_and_rerank(cli, beir, tmp_path_factory.mktemp("rerank"),
                            "--train_batch_size=8", "--num_train_epochs=30",
                            "--log_every_n_steps=30")


def test_train_rerank_and_export(trained, beir):
    out, export, proc = trained
    losses = [float(m.group(2)) for m in LOSS_LINE.finditer(proc.stderr)]
    assert len(losses) == 1 + STEPS // 30  # step 1, then every 30th
    assert abs(losses[0] - math.log(2)) < 0.05  # a fresh one-logit head: ln 2
    assert losses[-1] < 0.5 * losses[0]
    assert "72 training pairs (24 positive) from 24 examples" in proc.stderr
    assert tf.train.latest_checkpoint(os.fspath(out)).endswith(f"ckpt-{STEPS}")
    assert json.loads((out / "finetune_task.json").read_text()) == {
        "kind": "classifier", "num_labels": 1, "do_lower_case": True, "max_seq_length": 64,
        "classifier_readout": "pooler", "reranker": True}
    assert (out / "label_list.json").read_text().strip() == "null"

    results = read_results(out)
    assert sorted(results) == sorted(
        list(ir_metrics.METRICS) + ["first_stage_" + m for m in ir_metrics.METRICS]
        + ["eval_loss", "global_step"])
    assert results["global_step"] == STEPS
    split = beir_data.read_split(beir, "train")
    # The reranked run, as written: the four figures recomputed from the file.
    reranked = trec_run.read_run(os.fspath(out / "reranked_run.trec"))
    assert sorted(reranked) == sorted(split.queries)
    for name, value in ir_metrics.evaluate(split.qrels, reranked).items():
        assert results[name] == pytest.approx(value, abs=1e-6), name
    # The first stage: BM25's top 10 of an index built here.
    ids = list(split.corpus)
    index = BM25Index([split.corpus[p].encoder_text for p in ids])
    qids = list(split.queries)
    rows, scores = index.top_k([split.queries[q] for q in qids], 10)
    bm25 = ir_metrics.run_from_top_k(qids, ids, rows, scores)
    assert {q: sorted(h) for q, h in bm25.items()} == {q: sorted(h) for q, h in reranked.items()}
    for name, value in ir_metrics.evaluate(split.qrels, bm25).items():
        assert results["first_stage_" + name] == pytest.approx(value, abs=1e-6), name
    # Only BM25's candidates are reordered: recall is BM25's; the positives the model learned
    # rank higher than BM25 ranks them.
    assert results["recall_at_100"] == results["first_stage_recall_at_100"] < 1.0
    assert results["ndcg_at_10"] > results["first_stage_ndcg_at_10"] + 0.05
    assert 0 < results["eval_loss"] < 2

    # The SavedModel's score signature: the reranked run's logits.
    import tensorflow_text  # noqa: F401

    loaded = tf.saved_model.load(os.fspath(export))
    qid = qids[0]
    pids = list(reranked[qid])
    got = loaded.signatures["score"](
        query=tf.constant([split.queries[qid]] * len(pids)),
        passage=tf.constant([split.corpus[p].encoder_text for p in pids]))
    np.testing.assert_allclose(got["logit"].numpy(), [reranked[qid][p] for p in pids],
                               rtol=0, atol=1e-5)
    np.testing.assert_allclose(got["score"].numpy(), 1 / (1 + np.exp(-got["logit"].numpy())),
                               rtol=1e-6)


def test_listwise_training_with_the_cls_readout(cli, beir, tmp_path):
    out, export, proc = train_and_rerank(
        cli, beir, tmp_path, "--loss=listwise", "--classifier_readout=cls",
        "--train_batch_size=4", "--num_train_epochs=20", "--log_every_n_steps=20",
        "--fusion=rrf")
    assert "24 training groups of 3 pairs (1 positive, 2 negatives)" in proc.stderr
    losses = [float(m.group(2)) for m in LOSS_LINE.finditer(proc.stderr)]
    assert len(losses) == 1 + LISTWISE_STEPS // 20
    assert abs(losses[0] - math.log(3)) < 0.1  # a fresh head: about uniform over the group
    assert losses[-1] < 0.5 * losses[0]
    assert tf.train.latest_checkpoint(os.fspath(out)).endswith(f"ckpt-{LISTWISE_STEPS}")
    info = json.loads((out / "finetune_task.json").read_text())
    assert info["classifier_readout"] == "cls" and info["reranker"] is True
    results = read_results(out)
    split = beir_data.read_split(beir, "train")
    reranked = trec_run.read_run(os.fspath(out / "reranked_run.trec"))
    for name, value in ir_metrics.evaluate(split.qrels, reranked).items():
        assert results[name] == pytest.approx(value, abs=1e-6), name

    # The model's own order from the exported score signature, BM25's from an index built
    # here: the written run is their fusion, the model's order is scored as reranker_*.
    import tensorflow_text  # noqa: F401

    score = tf.saved_model.load(os.fspath(export)).signatures["score"]
    ids = list(split.corpus)
    index = BM25Index([split.corpus[p].encoder_text for p in ids])
    qids = list(split.queries)
    rows, scores = index.top_k([split.queries[q] for q in qids], 10)
    bm25 = ir_metrics.run_from_top_k(qids, ids, rows, scores)
    model_run = {}
    for qid, hits in bm25.items():
        pids = list(hits)
        got = score(query=tf.constant([split.queries[qid]] * len(pids)),
                    passage=tf.constant([split.corpus[p].encoder_text for p in pids]))
        model_run[qid] = dict(zip(pids, got["logit"].numpy().astype(float)))
    fused = fusion.reciprocal_rank_fusion([model_run, bm25])
    assert {q: list(h) for q, h in reranked.items()} == {q: list(h) for q, h in fused.items()}
    for name, value in ir_metrics.evaluate(split.qrels, model_run).items():
        assert results["reranker_" + name] == pytest.approx(value, abs=1e-6), name
    # The model learned the positives; fused with BM25 it still ranks them above BM25.
    assert results["reranker_ndcg_at_10"] > results["first_stage_ndcg_at_10"] + 0.05
    assert results["ndcg_at_10"] > results["first_stage_ndcg_at_10"]


def test_rerank_a_run_file(cli, trained, beir, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(trained[0], out)
    (out / "eval_results.txt").unlink()
    split = beir_data.read_split(beir, "test")
    # Every passage, in a fixed scrambled order, as the run of some first stage.
    ids = sorted(split.corpus, key=lambda p: (p[::-1], p))
    run = {qid: {pid: float(len(ids) - r) for r, pid in enumerate(ids)} for qid in split.queries}
    run_file = tmp_path / "first.trec"
    trec_run.write_run(os.fspath(run_file), run, "scrambled")
    proc = cli.run(MODULE, [f"--output_dir={out}", "--do_rerank", f"--eval_dir={beir}",
                            f"--first_stage={run_file}", "--rerank_top_k=5",
                            "--max_seq_length=64"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "reranking 80 candidates of 16 queries" in proc.stderr
    results = read_results(out)
    assert results["global_step"] == STEPS  # evaluated, not trained
    top5 = {qid: dict(list(hits.items())[:5]) for qid, hits in run.items()}
    for name, value in ir_metrics.evaluate(split.qrels, top5).items():
        assert results["first_stage_" + name] == pytest.approx(value, abs=1e-6), name
    reranked = trec_run.read_run(os.fspath(out / "reranked_run.trec"))
    assert {q: sorted(h) for q, h in reranked.items()} == {q: sorted(h) for q, h in top5.items()}


def _bad_folder(tmp_path, name, edit) -> pathlib.Path:
    folder = pathlib.Path(build_beir(tmp_path / name, articles=2))
    edit(folder)
    return folder


def test_bad_input_is_one_line(cli, trained, beir, tmp_path):
    out = trained[0]

    def rerank(eval_dir, *more):
        proc = cli.run(MODULE, [f"--output_dir={out}", "--do_rerank",
                                f"--eval_dir={eval_dir}", *more])
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
        return error_lines(proc.stderr)

    def unknown_passage(folder):
        with open(folder / "qrels" / "test.tsv", "a") as f:
            f.write("q0_0\tnot_a_passage\t1\n")

    bad = _bad_folder(tmp_path, "unknown", unknown_passage)
    qrels = bad / "qrels" / "test.tsv"
    line = len(qrels.read_text().splitlines())
    assert rerank(bad) == [f"error: {qrels}:{line}: passage 'not_a_passage' is not in the "
                           "corpus"]
    empty = _bad_folder(tmp_path, "empty", lambda f: (f / "corpus.jsonl").write_text(""))
    assert rerank(empty) == [f"error: {empty / 'corpus.jsonl'}: empty corpus (no passage)"]

    def no_positive(folder):
        path = folder / "qrels" / "test.tsv"
        path.write_text(path.read_text().replace("q0_0\td0_0\t1", "q0_0\td0_0\t0"))

    zero = _bad_folder(tmp_path, "zero", no_positive)
    assert rerank(zero) == [f"error: {zero / 'qrels' / 'test.tsv'}:2: query 'q0_0' has no "
                            "positive (score > 0) in this split"]
    run_file = tmp_path / "run.trec"
    run_file.write_text("q0_0 Q0 d0_0 1 3.0 x\nq0_0 Q0 elsewhere 2 2.0 x\n")
    assert rerank(beir, f"--first_stage={run_file}") == [
        f"error: {run_file}:2: passage 'elsewhere' (of query 'q0_0') is not in the corpus of "
        f"{beir}"]

    proc = cli.run(MODULE, [f"--output_dir={out}", "--do_rerank"])
    assert error_lines(proc.stderr) == ["error: --do_rerank needs --eval_dir (a BEIR folder)"]
    assert rerank(beir, "--fusion=rrf", "--rrf_k=0") == ["error: --rrf_k must be > 0, got 0"]
    proc = cli.run(MODULE, [f"--output_dir={out}", f"--eval_dir={beir}"])
    assert error_lines(proc.stderr) == [
        "error: at least one of --do_train or --do_rerank must be true"]
    classifier = tmp_path / "classifier"
    shutil.copytree(out, classifier)
    info = json.loads((classifier / "finetune_task.json").read_text())
    del info["reranker"]
    (classifier / "finetune_task.json").write_text(json.dumps(info))
    proc = cli.run(MODULE, [f"--output_dir={classifier}", "--do_rerank",
                            f"--eval_dir={beir}"])
    assert error_lines(proc.stderr) == [
        f"error: {classifier} holds a fine-tuned classifier, not a reranker (train one with "
        "--do_train)"]
