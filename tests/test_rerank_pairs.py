"""Tests of bert_tf.finetune.reranking.rerank_pairs: (query, passage, label) pairs from
examples (positives 1, negatives 0, each pair once, a positive never a negative), training
pairs of a BEIR folder with BM25 negatives equal to an independent BM25 ranking's, of a file
as written, and rerank pairs labelled by the qrels."""

import pytest
from _retrieval_helpers import build_beir

from bert_tf.core.errors import UserError
from bert_tf.finetune.reranking import rerank_pairs
from bert_tf.finetune.retrieval import beir_data
from bert_tf.finetune.retrieval.beir_data import TrainingExample
from bert_tf.finetune.retrieval.bm25 import BM25Index
from bert_tf.finetune.retrieval.hard_negatives import MiningConfig


def _triples(pairs):
    return [(p.text_a, p.text_b, p.label) for p in pairs]


def test_pairs_from_examples():
    examples = [TrainingExample("q", "p1", ("n1", "p2")), TrainingExample("q", "p2", ("n1",)),
                TrainingExample("r", "p1", ("n1",), where="f.tsv:4")]
    pairs = rerank_pairs.pairs_from_examples(examples)
    # p2 is a positive of q, so not its negative; (q, n1) once; r's pairs are its own.
    assert _triples(pairs) == [("q", "p1", 1.0), ("q", "n1", 0.0), ("q", "p2", 1.0),
                               ("r", "p1", 1.0), ("r", "n1", 0.0)]
    assert [p.guid for p in pairs] == [f"train-{i}" for i in range(5)]
    assert pairs[-1].where == "f.tsv:4"


def test_beir_training_pairs_take_bm25_negatives(tmp_path):
    beir = build_beir(tmp_path / "beir")
    mining = MiningConfig("bm25", num_negatives=2, range_min=1)
    pairs = rerank_pairs.training_pairs(beir, "", mining)
    split = beir_data.read_split(beir, "train")
    texts = [p.encoder_text for p in split.corpus.values()]
    index = BM25Index(texts)
    expected = []
    for qid, judged in split.qrels.items():
        query = split.queries[qid]
        positives = {split.corpus[pid].encoder_text for pid in judged}
        rows, _ = index.top_k([query], len(texts))
        ranked = [texts[int(i)] for i in rows[0] if i >= 0 and texts[int(i)] not in positives]
        expected += [(query, p, 1.0) for p in positives] + [(query, n, 0.0)
                                                            for n in ranked[1:3]]
    assert _triples(pairs) == expected
    assert len(pairs) == 3 * len(split.qrels) == 72  # one positive each in this folder


def test_file_training_pairs_as_written(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_text("query\tpositive\tnegative\nq one\tp one\tn one\nq two\tp two\tp one\n")
    pairs = rerank_pairs.training_pairs("", str(path), MiningConfig("bm25"))
    assert _triples(pairs) == [("q one", "p one", 1.0), ("q one", "n one", 0.0),
                               ("q two", "p two", 1.0), ("q two", "p one", 0.0)]


def test_one_source_only(tmp_path):
    for train_dir, train_file in (("", ""), ("a", "b")):
        with pytest.raises(UserError, match="--do_train needs one of --train_dir"):
            rerank_pairs.training_pairs(train_dir, train_file, MiningConfig("bm25"))


def test_rerank_pairs_are_labelled_by_the_qrels(tmp_path):
    beir = build_beir(tmp_path / "beir")
    split = beir_data.read_split(beir, "test")
    qid = next(iter(split.qrels))
    (relevant,) = split.qrels[qid]
    candidates = {q: [] for q in split.queries}
    candidates[qid] = ["d7_4", relevant, "d0_1"]
    pairs = rerank_pairs.rerank_pairs(split, candidates)
    assert pairs.keys == [(qid, "d7_4"), (qid, relevant), (qid, "d0_1")]
    assert [(e.text_a, e.text_b, e.label) for e in pairs.examples] == [
        (split.queries[qid], split.corpus[pid].encoder_text, float(pid == relevant))
        for pid in candidates[qid]]
    with pytest.raises(UserError, match="the first stage found no candidate for any query"):
        rerank_pairs.rerank_pairs(split, {q: [] for q in split.queries})


def test_groups_from_examples():
    examples = [TrainingExample("q", "p1", ("n1", "p2", "n2", "n3")),
                TrainingExample("q", "p2", ("n1", "p1")),  # one usable negative: dropped
                TrainingExample("r", "p1", ("n1", "n2"), where="f.tsv:4")]
    groups, dropped = rerank_pairs.groups_from_examples(examples, num_negatives=2)
    # p2 is a positive of q, so not its negative; each group the first 2 usable negatives.
    assert [_triples(g) for g in groups] == [
        [("q", "p1", 1.0), ("q", "n1", 0.0), ("q", "n2", 0.0)],
        [("r", "p1", 1.0), ("r", "n1", 0.0), ("r", "n2", 0.0)]]
    assert dropped == 1
    assert [p.guid for p in groups[1]] == ["train-1-0", "train-1-1", "train-1-2"]
    assert groups[1][0].where == "f.tsv:4"


def test_beir_training_groups_hold_the_pairs_of_bce(tmp_path):
    beir = build_beir(tmp_path / "beir")
    mining = MiningConfig("bm25", num_negatives=2, range_min=1)
    groups = rerank_pairs.training_groups(beir, "", mining)
    # One positive a query in this folder: the groups are bce's pairs, three at a time.
    assert [t for g in groups for t in _triples(g)] == _triples(
        rerank_pairs.training_pairs(beir, "", mining))
    assert len(groups) == 24 and {len(g) for g in groups} == {3}
    path = tmp_path / "train.tsv"
    path.write_text("query\tpositive\tnegative\nq one\tp one\tq one\n")
    with pytest.raises(UserError, match="no training example has 2 negative"):
        rerank_pairs.training_groups("", str(path), mining)
