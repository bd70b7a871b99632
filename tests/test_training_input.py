"""Tests for bert_tf.finetune.retrieval.training_input: the batches of several epochs with
no text twice, the tf.data input reopened at a batch and cut to each batch's longest row,
and the examples mined negatives are read for (the mining itself: test_hard_negatives; end
to end: test_run_retrieval)."""

from __future__ import annotations

import pytest

from bert_tf.core.errors import UserError
from bert_tf.finetune.retrieval import training_input as ti
from bert_tf.finetune.retrieval.beir_data import TrainingExample


def test_batch_order_spans_epochs_without_a_text_twice_in_a_batch():
    # Examples 0-3 share one positive: at most one of them per batch.
    examples = [TrainingExample(f"q{i}", "common" if i < 4 else f"p{i}") for i in range(12)]
    order = ti.batch_order(examples, batch_size=4, steps=7, seed=3)
    assert order.shape == (7, 4)
    for row in order:
        texts = [t for i in row for t in examples[i].texts]
        assert len(texts) == len(set(texts))
    assert (ti.batch_order(examples, 4, 7, 3) == order).all()  # the seed alone decides
    first_epoch = [i for row in order[:2] for i in row]
    assert len(set(first_epoch)) == 8  # no example twice within an epoch
    with pytest.raises(UserError, match="cannot fill one batch without a repeated text"):
        ti.batch_order([TrainingExample(f"q{i}", "same") for i in range(5)], 2, 1, 0)


def test_train_input_reopens_at_a_batch_and_cuts_each_batch_to_its_longest_row():
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    arrays = {}
    for prefix, shape in (("query_", (6, 16)), ("passage_", (6, 2, 24))):
        lengths = rng.integers(3, 12, size=shape[:-1])
        mask = (np.arange(shape[-1]) < lengths[..., None]).astype(np.int32)
        arrays.update({prefix + "input_ids": mask * 7, prefix + "input_mask": mask,
                       prefix + "segment_ids": np.zeros_like(mask)})
    order = np.array([[0, 1], [2, 3], [4, 5], [1, 0]], np.int32)  # 4 steps of 2
    dataset_fn = ti.train_dataset_fn(arrays, order)
    assert dataset_fn.arithmetic_position
    context = tf.distribute.InputContext()
    batches = list(dataset_fn(context, 2))
    assert [b["query_input_mask"].shape[0] for b in batches] == [2, 2, 2, 2]
    for batch, rows in zip(batches, order):
        for prefix in ("query_", "passage_"):
            mask = arrays[prefix + "input_mask"][rows]
            width = -(-int(mask.sum(-1).max()) // 8) * 8
            np.testing.assert_array_equal(batch[prefix + "input_mask"].numpy(),
                                          mask[..., :width])
    # Resuming at step 3 reopens at the third batch (the position is the step).
    again = list(dataset_fn(context, 2, 2))
    assert len(again) == 2
    for a, b in zip(again, batches[2:]):
        assert all(np.array_equal(a[k].numpy(), b[k].numpy()) for k in a)
    # Two replicas of 1: the same rows in replica batches, in order.
    halves = [b["query_input_mask"].numpy() for b in dataset_fn(context, 1)]
    assert len(halves) == 8
    for half, row in zip(halves, order.reshape(-1)):
        np.testing.assert_array_equal(half[0], arrays["query_input_mask"][row][:half.shape[1]])
        assert half.shape[1] % 8 == 0 and half[0].sum() == arrays["query_input_mask"][row].sum()


def test_mining_reads_the_corpus_or_the_positives_and_refuses_a_file_with_negatives(tmp_path):
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("q1\tp1\nq2\tp2\nq1\tp3\n")
    examples, passages = ti.read_training_examples(str(pairs), "", mining=True)
    assert [(e.query, e.positive) for e in examples] == [("q1", "p1"), ("q2", "p2"),
                                                        ("q1", "p3")]
    assert passages == ["p1", "p2", "p3"]
    with_negatives = tmp_path / "triples.tsv"
    with_negatives.write_text("q1\tp1\tn1\n")
    assert ti.read_training_examples(str(with_negatives), "")[0][0].negatives == ("n1",)
    with pytest.raises(UserError, match=r"triples.tsv has negatives already; give \(query, "
                                        r"positive\) pairs to mine them$"):
        ti.read_training_examples(str(with_negatives), "", mining=True)
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text('{"_id": "a", "title": "T", "text": "x"}\n'
                                       '{"_id": "b", "text": "y"}\n')
    (beir / "queries.jsonl").write_text('{"_id": "q", "text": "query"}\n')
    (beir / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq\tb\t1\n")
    examples, passages = ti.read_training_examples("", str(beir), mining=True)
    assert [(e.query, e.positive) for e in examples] == [("query", "y")]
    assert passages == ["T x", "y"]  # the whole corpus, as the encoder reads it
