"""Tests for bert_tf.finetune.retrieval.retrieval_runner's host-side parts: the order in which
embedding settings are settled, the refusal of a pooling the checkpoint was not trained
with, the batches of several epochs with no text twice, and the config's one-line checks
(the command end to end: test_run_retrieval)."""

from __future__ import annotations

import pytest

from bert_tf.core.errors import UserError
from bert_tf.finetune.retrieval import retrieval_runner as rr
from bert_tf.finetune.retrieval.beir_data import TrainingExample
from bert_tf.finetune.retrieval.st_folder import SentenceTransformerFolder

FOLDER = SentenceTransformerFolder("m", pooling="cls", normalize=False, max_seq_length=128,
                                   do_lower_case=False)


def test_settings_come_from_the_flag_then_the_run_then_the_folder_then_the_defaults():
    config = rr.RetrievalConfig(output_dir="o", do_eval=True, eval_dir="e")
    assert rr.settle(config, None, None) == rr.EmbeddingSettings("mean", True, 64, 256, True)
    assert rr.settle(config, None, FOLDER) == rr.EmbeddingSettings("cls", False, 128, 128,
                                                                   False)
    saved = {"pooling": "max", "normalize": True, "max_query_length": 32,
             "max_passage_length": 100, "do_lower_case": True}
    assert rr.settle(config, saved, FOLDER) == rr.EmbeddingSettings("max", True, 32, 100, True)
    flags = rr.RetrievalConfig(output_dir="o", do_eval=True, eval_dir="e", pooling="max",
                               max_passage_length=512, do_lower_case=False)
    assert rr.settle(flags, saved, None) == rr.EmbeddingSettings("max", True, 32, 512, False)
    other = rr.RetrievalConfig(output_dir="o", do_eval=True, eval_dir="e", pooling="cls")
    with pytest.raises(UserError, match=r"^o was trained with --pooling=max; evaluate and "
                                        r"continue with the same, not cls$"):
        rr.settle(other, saved, None)


def test_batch_order_spans_epochs_without_a_text_twice_in_a_batch():
    # Examples 0-3 share one positive: at most one of them per batch.
    examples = [TrainingExample(f"q{i}", "common" if i < 4 else f"p{i}") for i in range(12)]
    order = rr.batch_order(examples, batch_size=4, steps=7, seed=3)
    assert order.shape == (7, 4)
    for row in order:
        texts = [t for i in row for t in examples[i].texts]
        assert len(texts) == len(set(texts))
    assert (rr.batch_order(examples, 4, 7, 3) == order).all()  # the seed alone decides
    first_epoch = [i for row in order[:2] for i in row]
    assert len(set(first_epoch)) == 8  # no example twice within an epoch
    with pytest.raises(UserError, match="cannot fill one batch without a repeated text"):
        rr.batch_order([TrainingExample(f"q{i}", "same") for i in range(5)], 2, 1, 0)


@pytest.mark.parametrize("kwargs, message", [
    ({}, "at least one of --do_train or --do_eval must be true"),
    ({"do_train": True}, "--do_train needs one of --train_dir (a BEIR folder) or --train_file"),
    ({"do_train": True, "train_dir": "a", "train_file": "b"}, "--do_train needs one of"),
    ({"do_eval": True}, "--do_eval needs --eval_dir (a BEIR folder)"),
    ({"do_eval": True, "eval_dir": "e", "pooling": "weightedmean"},
     "--pooling must be one of mean, cls, max, got 'weightedmean'"),
    ({"do_eval": True, "eval_dir": "e", "mini_batch_size": -1},
     "--mini_batch_size must be >= 0, got -1"),
])
def test_config_checks(kwargs, message):
    with pytest.raises(UserError) as e:
        rr.RetrievalConfig(output_dir="o", **kwargs)
    assert str(e.value).startswith(message)


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
    dataset_fn = rr.train_dataset_fn(arrays, order)
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
