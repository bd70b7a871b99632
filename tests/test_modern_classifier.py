"""Tests for bert_tf.finetune.heads.ModernClassifier: transformers' ModernBERT classifier.

The reference is tests/data/modernbert_tiny/golden_classifier.npz (scripts/
make_modernbert_golden.py): `ModernBertForSequenceClassification` loaded from the tiny MLM
folder, its new classifier set from a seeded generator, its logits with classifier_pooling
"cls" and "mean".
"""

import os

import numpy as np
import pytest
from _pretraining_helpers import REPO_ROOT

from bert_tf.finetune import heads, warm_start
from bert_tf.interop import hf_checkpoint

DATA = str(REPO_ROOT / "tests" / "data" / "modernbert_tiny")
TOLERANCE = 1e-4  # the bar; measured below it by two orders (assert messages)


@pytest.fixture(scope="module")
def files():
    return hf_checkpoint.read(DATA)


def _classifier(files, readout):
    model = heads.classifier(files.config, 3, head="modernbert", readout=readout)
    warm_start.load_encoder_weights(model, files)
    golden = np.load(os.path.join(DATA, "golden_classifier.npz"))
    model.head.kernel.assign(golden["classifier_kernel"])
    model.head.bias.assign(golden["classifier_bias"])
    return model, golden


def _logits(model, golden_rows):
    ids, mask = golden_rows["input_ids"], golden_rows["attention_mask"]
    return model({"input_ids": ids, "input_mask": mask,
                  "segment_ids": np.zeros_like(ids)})["logits"].numpy()


@pytest.mark.parametrize("readout", ["cls", "mean"])
def test_logits_equal_transformers(files, readout):
    model, golden = _classifier(files, readout)
    rows = np.load(os.path.join(DATA, "golden.npz"))
    ours = _logits(model, rows)
    theirs = golden[f"logits_{readout}"]
    assert ours.shape == theirs.shape == (3, 3)
    diff = float(np.abs(ours - theirs).max())
    assert diff < TOLERANCE, f"readout {readout}: max |ours - transformers| = {diff}"


def test_dense_and_norm_start_from_the_mlm_head(files):
    model, _ = _classifier(files, "cls")
    np.testing.assert_array_equal(model.head_hidden.kernel.numpy(),
                                  files.weights["mlm/transform/kernel"])
    np.testing.assert_array_equal(model.head_norm.gamma.numpy(),
                                  files.weights["mlm/transform/layer_norm/gamma"])


def test_without_an_mlm_head_they_start_fresh(files):
    encoder_only = dict(files.weights)
    for name in [n for n in encoder_only if n.startswith("mlm/")]:
        del encoder_only[name]
    bare = files.__class__(**{**files.__dict__, "weights": encoder_only})
    model = heads.classifier(files.config, 3, head="modernbert", readout="cls")
    before = model.head_hidden.kernel.numpy().copy()
    warm_start.load_encoder_weights(model, bare)
    np.testing.assert_array_equal(model.head_hidden.kernel.numpy(), before)
    assert not np.allclose(before, files.weights["mlm/transform/kernel"])


def test_pooler_readout_is_read_as_cls_and_others_refused(files):
    assert heads.classifier(files.config, 2, head="modernbert").readout == "cls"
    with pytest.raises(ValueError, match="ModernClassifier reads"):
        heads.ModernClassifier(files.config, 2, readout="pooler")
