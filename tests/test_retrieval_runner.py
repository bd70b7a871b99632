"""Tests for bert_tf.finetune.retrieval.retrieval_runner's host-side parts: the order in which
embedding settings are settled, the refusal of a pooling the checkpoint was not trained
with, and the config's one-line checks (the training input: test_training_input; the
command end to end: test_run_retrieval)."""

from __future__ import annotations

import pytest

from bert_tf.core.errors import UserError
from bert_tf.finetune.retrieval import retrieval_runner as rr
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


@pytest.mark.parametrize("kwargs, message", [
    ({}, "at least one of --do_train or --do_eval must be true"),
    ({"do_train": True}, "--do_train needs one of --train_dir (a BEIR folder) or --train_file"),
    ({"do_train": True, "train_dir": "a", "train_file": "b"}, "--do_train needs one of"),
    ({"do_eval": True}, "--do_eval needs --eval_dir (a BEIR folder)"),
    ({"do_eval": True, "eval_dir": "e", "pooling": "weightedmean"},
     "--pooling must be one of mean, cls, max, got 'weightedmean'"),
    ({"do_eval": True, "eval_dir": "e", "mini_batch_size": -1},
     "--mini_batch_size must be >= 0, got -1"),
    ({"do_eval": True, "eval_dir": "e", "hard_negatives_from": "bm25"},
     "--hard_negatives_from mines negatives for training: add --do_train"),
    ({"do_train": True, "train_dir": "t", "hard_negatives_from": "bm25",
      "hard_negative_range_min": 10, "hard_negative_range_max": 10},
     "--hard_negative_range_min=10 and --hard_negative_range_max=10: need 0 <= min < max"),
    ({"do_train": True, "train_dir": "t", "hard_negatives_from": "model",
      "num_hard_negatives": 3, "hard_negative_range_max": 2},
     "--num_hard_negatives=3 does not fit in ranks [0, 2): widen the range"),
    ({"do_train": True, "train_dir": "t", "hard_negatives_from": "tfidf"},
     "--hard_negatives_from must be one of bm25, model, got 'tfidf'"),
])
def test_config_checks(kwargs, message):
    with pytest.raises(UserError) as e:
        rr.RetrievalConfig(output_dir="o", **kwargs)
    assert str(e.value).startswith(message)
