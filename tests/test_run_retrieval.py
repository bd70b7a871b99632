"""End-to-end tests of `python -m bert_tf.run_retrieval` on a tiny BEIR folder built from the
bundled corpus (data/corpus/wikitext2.bert.txt): each query is a sentence, its positive the
next two sentences of the article, 40 passages from 8 articles.

- zero-shot eval of the real all-MiniLM-L6-v2 (a sentence-transformers folder: its mean
  pooling, normalisation and 256 tokens): eval_results.txt equals the metrics of a NumPy
  ranking of the embeddings bert_tf's embedder gives in this process, and the stored corpus
  embeddings are those vectors;
- --do_train with in-batch negatives on a one-layer model from random weights: the loss
  falls, the checkpoint and finetune_task.json are written, then --do_eval scores it; a
  second eval with the same --embeddings_dir reuses the stored vectors (log line, manifest
  untouched) and gives the same figures;
- GradCache (--mini_batch_size=2, batch 4, --train_file pairs with a hard negative) gives
  the plain loss's first-step loss, gradients and weights after one step (dropout off);
- bad input is one `error:` line: a qrels id not in the corpus, a pooling config bert_tf
  cannot honour, GradCache asked to run XLA-compiled.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import re

import numpy as np
import pytest
import tensorflow as tf
from _pretraining_helpers import TINY_FINETUNE_BERT, error_lines, minilm_dir
from _retrieval_helpers import build_beir, tiny_args

MODULE = "bert_tf.run_retrieval"
LOSS_LINE = re.compile(r"step (\d+)/\d+ \| loss ([0-9.]+)")


@pytest.fixture(scope="module")
def beir(tmp_path_factory) -> str:
    return build_beir(tmp_path_factory.mktemp("beir") / "tiny")


def read_results(output_dir) -> dict:
    text = (pathlib.Path(output_dir) / "eval_results.txt").read_text()
    return {k: float(v) for k, v in (line.split(" = ") for line in text.splitlines())}


def check(proc) -> None:
    assert proc.returncode == 0, proc.stderr[-3000:]


def reference_metrics(queries: np.ndarray, passages: np.ndarray, query_ids, passage_ids,
                      qrels) -> dict:
    """BEIR's four figures for one relevant passage per query (score 1), from a full NumPy
    ranking: nDCG@10 = 1/log2(1 + rank), MRR@10 = 1/rank (both 0 below 10), Recall@100 =
    [rank <= 100], MAP@100 = 1/rank (0 below 100)."""
    scores = queries @ passages.T
    out = {"ndcg_at_10": [], "mrr_at_10": [], "recall_at_100": [], "map_at_100": []}
    for i, qid in enumerate(query_ids):
        (relevant,) = qrels[qid]
        rank = 1 + int(np.sum(scores[i] > scores[i, passage_ids.index(relevant)]))
        out["ndcg_at_10"].append(1 / math.log2(1 + rank) if rank <= 10 else 0.0)
        out["mrr_at_10"].append(1 / rank if rank <= 10 else 0.0)
        out["recall_at_100"].append(float(rank <= 100))
        out["map_at_100"].append(1 / rank if rank <= 100 else 0.0)
    return {k: float(np.mean(v)) for k, v in out.items()}


def test_zero_shot_minilm_eval_equals_a_numpy_ranking_of_its_embeddings(cli, beir, tmp_path):
    from bert_tf.core.tokenization import FullTokenizer
    from bert_tf.finetune import warm_start
    from bert_tf.finetune.retrieval import beir_data, corpus_eval, embedding_store
    from bert_tf.finetune.retrieval.embedder import BertEmbedder

    model_dir = minilm_dir()
    out, store = tmp_path / "out", tmp_path / "store"
    proc = cli.run(MODULE, [f"--init_checkpoint={model_dir}", f"--eval_dir={beir}",
                            f"--output_dir={out}", "--do_eval", f"--embeddings_dir={store}",
                            "--eval_batch_size=16"])
    check(proc)
    # The folder's settings, read from modules.json, 1_Pooling and sentence_bert_config.
    assert "mean pooling, normalised, queries 256 and passages 256 tokens, lower-cased" \
        in proc.stderr
    results = read_results(out)

    # The same model embedded here in one batch, padded to the longest text: no sorting, no
    # cut (mean pooling over the mask makes the padding length irrelevant).
    split = beir_data.read_split(beir, "test")
    init = warm_start.resolve(model_dir, "", "")
    embedder = BertEmbedder(init.config, "mean", True)
    tokenizer = FullTokenizer(init.vocab_file, True)

    def arrays(texts, n=None):  # n=None: padded to the longest text, cut nowhere
        n = n or 2 + max(len(tokenizer.encode(t)) for t in texts)
        assert n <= 256, "the reference cuts nothing: every text within the 256 tokens"
        return {k: tf.constant(v) for k, v in
                corpus_eval.features.encode_texts(texts, tokenizer, n).arrays.items()}

    embedder(arrays(["x"], 8))
    warm_start.load_encoder_weights(embedder, init.files)
    pids, qids = list(split.corpus), list(split.queries)
    passages = embedder(arrays([split.corpus[p].encoder_text for p in pids]))[
        "embedding"].numpy()
    queries = embedder(arrays([split.queries[q] for q in qids]))["embedding"].numpy()
    np.testing.assert_allclose(np.linalg.norm(passages, axis=1), 1.0, rtol=1e-5)

    manifest = embedding_store.read_manifest(os.fspath(store))
    stored = embedding_store.read_embeddings(os.fspath(store), manifest["fingerprint"])
    assert stored.ids == pids
    np.testing.assert_allclose(np.concatenate(stored.shards), passages, atol=2e-5)

    expected = reference_metrics(queries, passages, qids, pids, split.qrels)
    for name, value in expected.items():
        assert results[name] == pytest.approx(value, abs=1e-6), name
    # A real model finds most next sentences: not a degenerate ranking.
    assert 0.5 < results["ndcg_at_10"] < 1.0 and results["recall_at_100"] == 1.0
    assert results["global_step"] == 0


@pytest.fixture(scope="module")
def bert_config(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("cfg") / "bert_config.json"
    path.write_text(json.dumps(TINY_FINETUNE_BERT))
    return os.fspath(path)


def losses(stderr: str) -> list:
    return [float(m.group(2)) for m in LOSS_LINE.finditer(stderr)]


def test_train_then_eval_and_reuse_stored_embeddings(cli, beir, bert_config,
                                                     google_vocab_path, tmp_path):
    out, store = tmp_path / "out", tmp_path / "store"
    proc = cli.run(MODULE, tiny_args(
        bert_config, google_vocab_path, beir, out, "--do_train", "--do_eval",
        f"--eval_dir={beir}", f"--embeddings_dir={store}", "--train_batch_size=8",
        "--learning_rate=2e-3", "--num_train_epochs=12", "--warmup_proportion=0"))
    check(proc)
    seen = losses(proc.stderr)
    assert len(seen) == 36  # int(24 / 8 * 12) steps, each reported
    # In-batch negatives from random weights: ln 8 at the start, far below at the end.
    assert abs(seen[0] - math.log(8)) < 0.3
    assert np.mean(seen[-6:]) < 0.5 * seen[0]
    assert tf.train.latest_checkpoint(os.fspath(out)).endswith("ckpt-36")
    task = json.loads((out / "finetune_task.json").read_text())
    assert task == {"kind": "bi_encoder", "pooling": "mean", "normalize": True,
                    "max_query_length": 32, "max_passage_length": 48,
                    "do_lower_case": True, "similarity_scale": 20.0}
    first = read_results(out)
    assert first["global_step"] == 36
    assert set(first) == {"ndcg_at_10", "recall_at_100", "mrr_at_10", "map_at_100",
                          "global_step"}
    assert 0 < first["ndcg_at_10"] <= 1 and first["recall_at_100"] == 1.0  # 40 passages
    # run.trec, run_rerank's --first_stage: every passage of every query, the same figures.
    from bert_tf.finetune.retrieval import beir_data, ir_metrics, trec_run

    run = trec_run.read_run(os.fspath(out / "run.trec"))
    split = beir_data.read_split(beir, "test")
    assert sorted(run) == sorted(split.queries) and {len(h) for h in run.values()} == {40}
    for name, value in ir_metrics.evaluate(split.qrels, run).items():
        assert first[name] == pytest.approx(value, abs=1e-6), name
    assert "wrote the corpus embeddings" in proc.stderr
    manifest = store / "manifest.json"
    mtime = manifest.stat().st_mtime_ns
    (out / "eval_results.txt").unlink()

    # Eval only, from the trained output_dir (its own config, vocab and settings).
    proc = cli.run(MODULE, [f"--output_dir={out}", "--do_eval", f"--eval_dir={beir}",
                            f"--embeddings_dir={store}"])
    check(proc)
    assert "reusing the corpus embeddings in" in proc.stderr
    assert "embedding passages" not in proc.stderr
    assert manifest.stat().st_mtime_ns == mtime
    assert read_results(out) == first


def _checkpoint_weights(output_dir) -> dict:
    """The model's weights and the optimizer's slots (Adam's first moment after one step is
    0.1 x the gradient) in the latest checkpoint."""
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(os.fspath(output_dir)))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if name.startswith(("model/", "optimizer/")) and "iteration" not in name
            and reader.get_tensor(name).dtype.kind == "f"}


def test_grad_cache_step_equals_the_plain_step(cli, beir, bert_config, google_vocab_path,
                                               tmp_path):
    # --train_file pairs with one hard negative each (the passage of the next query):
    # 4 queries against 8 passages, embedded 2 at a time.
    from bert_tf.finetune.retrieval import beir_data

    split = beir_data.read_split(beir, "train")
    qids = list(split.qrels)
    rows = [(split.queries[q], split.corpus[next(iter(split.qrels[q]))].encoder_text,
             split.corpus[next(iter(split.qrels[qids[(i + 1) % len(qids)]]))].encoder_text)
            for i, q in enumerate(qids)]
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("query\tpositive\tnegative\n" + "".join("\t".join(r) + "\n" for r in rows))
    runs = {}
    for mini in (0, 2):
        out = tmp_path / f"mini{mini}"
        # One step: int(24 / 4 * 0.17) = 1; dropout is off in TINY_FINETUNE_BERT.
        proc = cli.run(MODULE, tiny_args(
            bert_config, google_vocab_path, beir, out, "--do_train", f"--train_file={pairs}",
            "--train_batch_size=4", "--num_train_epochs=0.17", "--learning_rate=1e-3",
            f"--mini_batch_size={mini}"))
        assert "training on 24 examples (1 negatives each)" in proc.stderr
        check(proc)
        runs[mini] = (losses(proc.stderr), _checkpoint_weights(out))
    (plain_losses, plain), (cached_losses, cached) = runs[0], runs[2]
    assert len(plain_losses) == len(cached_losses) == 1
    assert abs(plain_losses[0] - cached_losses[0]) < 1e-5
    assert sorted(plain) == sorted(cached) and len(plain) > 10
    worst = max(float(np.max(np.abs(plain[k] - cached[k]))) for k in plain)
    assert worst < 1e-5
    # Adam's moments after one step are 0.1 g and 0.001 g^2: the gradients themselves agree
    # to 1e-4 of each variable's largest (the attention key bias, whose gradient is ~0,
    # aside: rounding noise of 1e-27).
    moments = {k: float(np.max(np.abs(plain[k]))) for k in plain
               if k.startswith("optimizer/_variables/")}  # (not its _trainable_variables)
    assert max(moments.values()) > 1e-3
    checked = [k for k, top in moments.items() if top > 1e-6]
    assert len(checked) > 10
    assert max(float(np.max(np.abs(plain[k] - cached[k]))) / moments[k] for k in checked) < 1e-4


def test_bad_input_is_one_line(cli, beir, bert_config, google_vocab_path, tmp_path):
    bad = pathlib.Path(build_beir(tmp_path / "bad", articles=2))
    qrels = bad / "qrels" / "test.tsv"
    with open(qrels, "a") as f:
        f.write("q0_0\tnot_a_passage\t1\n")
    line = len(qrels.read_text().splitlines())
    proc = cli.run(MODULE, [f"--init_checkpoint={minilm_dir()}", f"--eval_dir={bad}",
                            f"--output_dir={tmp_path / 'o1'}", "--do_eval"])
    assert proc.returncode == 2
    assert error_lines(proc.stderr) == [
        f"error: {qrels}:{line}: passage 'not_a_passage' is not in the corpus"]
    assert "Traceback" not in proc.stderr

    folder = tmp_path / "st"
    (folder / "1_Pooling").mkdir(parents=True)
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling",
         "type": "sentence_transformers.models.Pooling"}]))
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(
        {"pooling_mode_mean_tokens": False, "pooling_mode_weightedmean_tokens": True}))
    proc = cli.run(MODULE, [f"--init_checkpoint={folder}", f"--eval_dir={beir}",
                            f"--output_dir={tmp_path / 'o2'}", "--do_eval"])
    assert proc.returncode == 2
    assert error_lines(proc.stderr) == [
        f"error: {folder}/1_Pooling/config.json: pooling mode 'weightedmean' is not supported "
        "(bert_tf pools with mean, cls, max)"]

    proc = cli.run(MODULE, tiny_args(bert_config, google_vocab_path, beir, tmp_path / "o3",
                                     "--do_train", "--train_batch_size=4", "--mini_batch_size=2",
                                     "--use_xla"))
    assert proc.returncode == 2
    assert error_lines(proc.stderr) == [
        "error: --mini_batch_size (GradCache) does not run XLA-compiled yet: drop --use_xla "
        "or --mini_batch_size (TPUs need XLA)"]
