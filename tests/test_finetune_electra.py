"""Fine-tuning an ELECTRA discriminator: `heads.ElectraClassifier`, --classifier_head and the
three layouts of --init_checkpoint (a bert_tf `--objective=electra` run, transformers'
ElectraForPreTraining folder, a google-research/electra checkpoint).

- ELECTRA's head equals a NumPy reference: dense + erf GELU + dense on the [CLS] row of the
  sequence output;
- each layout is detected as ELECTRA (`InitModel.kind`) and warm-starts the discriminator's
  encoder exactly, its embeddings projection (E 16 -> H 32) included;
- run_classifier from the run and from the transformers folder trains 3 steps, evaluates,
  records `classifier_head: electra`, and the serving SavedModel of the run rebuilds the same
  head (its probabilities = softmax of the restored model's logits); run_tagging from the
  run trains 3 steps and evaluates;
- the head's one-line errors.

One tiny ELECTRA (1 layer, hidden 32, embeddings 16, vocabulary 96), made once per module.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import shutil

import numpy as np
import pytest
import tensorflow as tf
from _pretraining_helpers import REPO_ROOT, short_tagging_flags
from _served_classifier import assert_served_equals_restored

from bert_tf.core.errors import UserError
from bert_tf.finetune import heads, runner, warm_start
from bert_tf.finetune.classification.classification_task import (
    ClassificationSettings,
    ClassificationTask,
)
from bert_tf.interop import formats
from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.electra import ElectraPretrainingModel
from bert_tf.modeling.weight_map import encoder_weight_map, get_weights

DATA = REPO_ROOT / "data" / "finetune"
HF_TINY = REPO_ROOT / "tests" / "data" / "electra_tiny" / "discriminator"
CONFIG = BertConfig(vocab_size=96, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=64, max_position_embeddings=64, embedding_size=16,
                    type_vocab_size=2)
# The vader words most frequent first would do as well: the runs check plumbing, not skill.
WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "i", "the", "a", "is", "so", "and",
         "to", "my", "it", "this", "love", "good", "bad", "hate", "sad", "happy", "!", ".",
         ","] + [f"w{i}" for i in range(72)]


@pytest.fixture(scope="module")
def layouts(tmp_path_factory):
    """{"run": a bert_tf ELECTRA run dir, "google": its google-research/electra checkpoint,
    "hf": transformers' ElectraForPreTraining folder (tests/data/electra_tiny) + vocab.txt}."""
    root = tmp_path_factory.mktemp("electra_ft")
    vocab = "\n".join(WORDS) + "\n"
    run = root / "run"
    run.mkdir()
    model = ElectraPretrainingModel(CONFIG, 0.25, sampling_seed=3)
    for i, variable in enumerate(model.weights):  # distinct weights, so a swap shows
        variable.assign(np.random.default_rng(i).normal(0, 0.2, variable.shape))
    tf.train.Checkpoint(model=model).write(os.fspath(run / "ckpt-5"))
    (run / "checkpoint").write_text('model_checkpoint_path: "ckpt-5"\n'
                                    'all_model_checkpoint_paths: "ckpt-5"\n')
    CONFIG.to_json_file(os.fspath(run / "bert_config.json"))
    (run / "vocab.txt").write_text(vocab)
    files = formats.read_model(formats.detect_format(os.fspath(run)), os.fspath(run))
    google = formats.write_model("google", files, os.fspath(root / "google"))
    hf = root / "hf"
    shutil.copytree(HF_TINY, hf)
    (hf / "vocab.txt").write_text(vocab)
    return {"run": os.fspath(run), "google": google, "hf": os.fspath(hf)}


def _gelu_erf(x):
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def test_the_electra_head_is_dense_gelu_dense_on_cls():
    model = heads.ElectraClassifier(CONFIG, 3)
    for i, variable in enumerate(model.weights):
        variable.assign(np.random.default_rng(100 + i).normal(0, 0.5, variable.shape))
    rng = np.random.default_rng(0)
    inputs = {"input_ids": rng.integers(5, 96, (2, 7)).astype("int32"),
              "input_mask": np.array([[1] * 7, [1] * 4 + [0] * 3], "int32"),
              "segment_ids": np.array([[0] * 4 + [1] * 3, [0] * 7], "int32")}
    cls = model.encoder(inputs)["sequence_output"].numpy()[:, 0].astype(np.float64)
    w1, b1 = (v.numpy().astype(np.float64) for v in model.head_hidden.weights)
    w2, b2 = (v.numpy().astype(np.float64) for v in model.head.weights)
    expected = _gelu_erf(cls @ w1 + b1) @ w2 + b2  # [2, 3]
    np.testing.assert_allclose(model(inputs)["logits"].numpy(), expected, atol=1e-5)
    assert model.head_hidden.kernel.shape == (32, 32) and model.head.kernel.shape == (32, 3)


@pytest.mark.parametrize("layout", ["run", "hf", "google"])
def test_each_layout_warm_starts_the_discriminator(layouts, layout):
    init = warm_start.resolve(layouts[layout], "", "")
    assert init.kind == "electra"
    task = ClassificationTask(ClassificationSettings(task_name="tsv", data_dir="",
                                                     text_column="t", label_column="l"))
    task.label_list = ["neg", "pos"]
    task.settle_head(init.kind, os.fspath(pathlib.Path(layouts[layout]) / "none"))
    assert task.head == "electra"
    model = task.build_model(init.config)
    assert isinstance(model, heads.ElectraClassifier)
    warm_start.load_encoder_weights(model, init.files)
    ours = get_weights(encoder_weight_map(model.encoder))
    assert "embeddings_project/kernel" in ours
    for name, value in ours.items():
        if name in init.files.weights:  # google-research/electra keeps no pooler
            np.testing.assert_array_equal(value, init.files.weights[name], err_msg=name)
    assert set(ours) - set(init.files.weights) <= {"pooler/kernel", "pooler/bias"}


def _classifier_flags(init, out):
    return [f"--init_checkpoint={init}", f"--output_dir={out}", "--task_name=tsv",
            f"--data_dir={DATA / 'vader_tiny' / 'binary'}", "--text_column=sentence",
            "--label_column=label", "--do_train", "--do_eval", "--max_seq_length=32",
            "--train_batch_size=32", "--num_train_epochs=0.32", "--learning_rate=1e-3"]


@pytest.mark.parametrize("layout", ["run", "hf"])
def test_run_classifier_fine_tunes_electra_with_its_head(cli, layouts, layout, tmp_path):
    out = tmp_path / "out"
    proc = cli.run("bert_tf.run_classifier", _classifier_flags(layouts[layout], out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = (out / "eval_results.txt").read_text()
    assert "global_step = 3" in results and "eval_accuracy" in results  # 300 / 32 * 0.32
    info = json.loads((out / runner.TASK_FILE).read_text())
    assert (info["classifier_head"], info["classifier_readout"]) == ("electra", "cls")
    if layout != "run":
        return
    # The serving SavedModel rebuilds ELECTRA's head: the same probabilities as the
    # checkpoint restored into an ElectraClassifier.
    export_dir = tmp_path / "sm" / "1"
    proc = cli.run("bert_tf.export", [f"--output_dir={out}", f"--export_dir={export_dir}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    model = heads.model_of_kind("classifier", CONFIG, 2, "cls", "electra")
    assert_served_equals_restored(export_dir, out, model, layouts["run"] + "/vocab.txt",
                                  ["i love this so good !", "bad and sad ."])


def test_run_tagging_fine_tunes_electra(cli, layouts, tmp_path):
    out = tmp_path / "out"
    proc = cli.run("bert_tf.run_tagging", short_tagging_flags(layouts["run"], out, 32, 32, 3,
                                                             1e-3))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "global_step = 3" in (out / "eval_results.txt").read_text()


def test_head_errors_are_one_line(tmp_path):
    with pytest.raises(UserError,
                       match="--classifier_head must be one of auto, bert, electra, modernbert"):
        ClassificationSettings(task_name="sst2", data_dir="", classifier_head="roberta")
    with pytest.raises(UserError, match="reads \\[CLS\\]: --classifier_readout=mean"):
        ClassificationSettings(task_name="sst2", data_dir="", classifier_head="electra",
                               classifier_readout="mean")
    (tmp_path / runner.TASK_FILE).write_text(json.dumps({"classifier_head": "electra"}))
    task = ClassificationTask(ClassificationSettings(task_name="sst2", data_dir="",
                                                     classifier_head="bert"))
    with pytest.raises(UserError, match="fine-tuned with --classifier_head=electra, not bert"):
        task.settle_head("", os.fspath(tmp_path))
    auto = ClassificationTask(ClassificationSettings(task_name="sst2", data_dir=""))
    auto.settle_head("bert", os.fspath(tmp_path))  # the fine-tuned directory's own head
    assert auto.head == "electra"
    auto.settle_head("bert", os.fspath(tmp_path / "fresh"))  # BERT's behaviour unchanged
    assert auto.head == "bert"


def test_run_glue_passes_its_head_to_classification_only():
    from bert_tf.finetune.scorecard.scorecard_runs import Model, Protocol, Run, fingerprint
    from bert_tf.finetune.scorecard.suite import ScoredTask

    sst = ScoredTask("sst2", "classification", (("task_name", "sst2"), ("data_dir", "d")),
                     (("accuracy", "eval_accuracy"),))
    ner = ScoredTask("ner", "tagging", (("train_file", "t"), ("eval_file", "e")),
                     (("f1", "eval_f1"),))
    model = Model("random", "", "c.json", "v.txt", True)
    auto, electra = (Protocol("fixed", (1e-3,), (1,), classifier_head=h)
                     for h in ("auto", "electra"))
    # "auto" is the default: earlier records' fingerprints still match.
    assert "classifier_head" not in fingerprint(Run(model, sst, 1e-3, 1), auto)["protocol"]
    assert fingerprint(Run(model, sst, 1e-3, 1), electra)["protocol"]["classifier_head"] == \
        "electra"
    assert "classifier_head" not in fingerprint(Run(model, ner, 1e-3, 1), electra)["protocol"]
    task = sst.build(sst.evaluations[0], 0, 0, True, "pooler", "electra")
    assert task.settings.classifier_head == "electra"
    assert sst.build(sst.evaluations[0], 0, 0, True).settings.classifier_head == "auto"
