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
TOLERANCE = 1e-4  # the bar


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


# ids 0-4 as tests/data/modernbert_tiny's golden rows ([PAD] [CLS] [SEP] [UNK] [MASK]), then
# the words of data/finetune/vader_tiny, then fillers up to the model's 256 ids.
WORDS = ["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]", "i", "the", "a", "is", "so", "and",
         "to", "my", "it", "this", "love", "good", "bad", "hate", "sad", "happy", "!", ".", ","]


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory):
    """transformers' ModernBertForMaskedLM folder (the tiny golden) with a WordPiece vocab."""
    import shutil

    folder = tmp_path_factory.mktemp("modernbert") / "hf"
    shutil.copytree(DATA, folder)
    words = WORDS + [f"w{i}" for i in range(256 - len(WORDS))]
    (folder / "vocab.txt").write_text("\n".join(words) + "\n")
    return folder


def test_run_classifier_fine_tunes_modernbert_with_its_head(cli, hf_folder, tmp_path):
    """--classifier_head=auto picks ModernBERT's head for the transformers folder; the run
    trains, evaluates, records the head, and the serving SavedModel rebuilds it."""
    import json

    from _served_classifier import assert_served_equals_restored

    from bert_tf.finetune import runner

    out = tmp_path / "out"
    data = REPO_ROOT / "data" / "finetune" / "vader_tiny" / "binary"
    proc = cli.run("bert_tf.run_classifier", [
        f"--init_checkpoint={hf_folder}", f"--output_dir={out}", "--task_name=tsv",
        f"--data_dir={data}", "--text_column=sentence", "--label_column=label", "--do_train",
        "--do_eval", "--max_seq_length=32", "--train_batch_size=32",
        "--num_train_epochs=0.32", "--learning_rate=1e-3"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "global_step = 3" in (out / "eval_results.txt").read_text()  # 300 / 32 * 0.32
    info = json.loads((out / runner.TASK_FILE).read_text())
    assert (info["classifier_head"], info["classifier_readout"]) == ("modernbert", "cls")
    export_dir = tmp_path / "sm" / "1"
    proc = cli.run("bert_tf.export", [f"--output_dir={out}", f"--export_dir={export_dir}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    files = hf_checkpoint.read(str(hf_folder))
    model = heads.model_of_kind("classifier", files.config, 2, "cls", "modernbert")
    assert_served_equals_restored(export_dir, out, model, hf_folder / "vocab.txt",
                                  ["i love this so good !", "bad and sad ."])
