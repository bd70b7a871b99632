"""Tests of bert_tf.export.classifier_serving's `RerankerServingModule`: the `score` signature
of a run_rerank model gives sentence-transformers' CrossEncoder scores of the same model's
cross-encoder folder (tests/data/cross_encoder_tiny/golden.json, made in the transformers venv
by scripts/make_cross_encoder_golden.py), and the in-process model's logits. (The
`ClassifierServingModule` is tested with the other tasks' in tests/test_task_serving.py.)"""

import json
import pathlib

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the ops the SavedModel needs)

from bert_tf.core.tokenization import FullTokenizer
from bert_tf.export import task_serving
from bert_tf.finetune.classification import classification_data
from bert_tf.finetune.classification.classification_data import Example
from bert_tf.modeling.config import BertConfig

DATA = pathlib.Path(__file__).resolve().parent / "data" / "cross_encoder_tiny"


@pytest.fixture(scope="module")
def golden():
    return json.loads((DATA / "golden.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    export_dir = str(tmp_path_factory.mktemp("rerank") / "1")
    task_serving.export_finetuned(str(DATA / "run"), export_dir)
    return tf.saved_model.load(export_dir)


def _score(loaded, pairs, signature="score"):
    queries = tf.constant([q for q, _ in pairs])
    passages = tf.constant([p for _, p in pairs])
    if signature == "classify_pair":
        return loaded.signatures[signature](text_a=queries, text_b=passages)
    return loaded.signatures[signature](query=queries, passage=passages)


def test_signatures(exported):
    assert sorted(exported.signatures) == ["classify_pair", "score", "serving_default"]
    spec = exported.signatures["serving_default"].structured_input_signature[1]
    assert sorted(spec) == ["passage", "query"]


def test_score_equals_cross_encoder_scores(exported, golden):
    pairs = [tuple(p) for p in golden["pairs"]]
    out = _score(exported, pairs)
    # CrossEncoder applies the folder's Sigmoid; with Identity it returns the logit.
    np.testing.assert_allclose(out["score"].numpy(), golden["scores"], rtol=0, atol=1e-5)
    np.testing.assert_allclose(out["logit"].numpy(), golden["logits"], rtol=0, atol=1e-5)
    # The scores differ from pair to pair (a random model, not a constant output).
    assert np.ptp(golden["scores"]) > 0.2
    # The default signature is `score`; classify_pair gives the logit as its score.
    default = exported.signatures["serving_default"](
        query=tf.constant([pairs[0][0]]), passage=tf.constant([pairs[0][1]]))
    assert float(default["score"][0]) == pytest.approx(golden["scores"][0], abs=1e-5)
    pair = _score(exported, pairs, "classify_pair")["score"].numpy()
    np.testing.assert_allclose(pair, golden["logits"], rtol=0, atol=1e-5)


def test_score_equals_the_host_featurizer_and_model(exported, golden):
    # The training path: classification_data.featurize (longest-first truncation) and the
    # restored model, on the golden pairs (one is longer than max_seq_length 24).
    run = DATA / "run"
    config = BertConfig.from_json_file(str(run / "bert_config.json"))
    model = task_serving.restore_finetuned(str(run), "classifier", config, 1, "pooler", "bert")
    tokenizer = FullTokenizer(str(run / "vocab.txt"), True)
    pairs = [tuple(p) for p in golden["pairs"]]
    feats = classification_data.featurize(
        [Example(str(i), q, p, None) for i, (q, p) in enumerate(pairs)], None, tokenizer,
        golden["max_seq_length"])
    assert feats.num_truncated == 1
    logits = model({k: tf.constant(v) for k, v in feats.arrays.items()})["logits"].numpy()
    served = _score(exported, pairs)["logit"].numpy()
    np.testing.assert_allclose(served, logits[:, 0], rtol=0, atol=1e-5)
