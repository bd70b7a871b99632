"""Tests for `python -m bert_tf.convert_checkpoint`: round trips, warm-starting a real
pretraining run from converted checkpoints, and one-line errors for bad input."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf
from _pretraining_helpers import minilm_dir

from bert_tf.interop import google_checkpoint
from bert_tf.interop import model_files as convert
from bert_tf.interop.formats import convert as run_convert
from bert_tf.interop.native import read_native, write_native
from bert_tf.modeling.config import BertConfig

CLI_ENV = {"TF_CPP_MIN_LOG_LEVEL": "3"}  # the `cli` fixture's server (conftest.py)

SEQ, PREDS = 16, 3
CONFIG = dict(vocab_size=40, hidden_size=8, num_hidden_layers=2, num_attention_heads=2,
              intermediate_size=12, max_position_embeddings=32, type_vocab_size=2,
              hidden_act="gelu", hidden_dropout_prob=0.0,
              attention_probs_dropout_prob=0.0)


def _python(cli, *args):
    """`python -m MODULE ARGS...` (args: "-m", MODULE, ARGS...), in its own process."""
    assert args[0] == "-m"
    return cli.run(args[1], args[2:], timeout=900)


def _vocab(path, size):
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(size - 5)]
    path.write_text("\n".join(words) + "\n")
    return str(path)


def _random_weights(config, seed, heads=True):
    rng = np.random.default_rng(seed)
    return {n: (0.2 * rng.standard_normal(s)).astype(np.float32)
            for n, s in convert.expected_shapes(config).items()
            if heads or not n.startswith(("mlm/", "nsp/"))}


def _assert_same(a, b):
    assert sorted(a) == sorted(b)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def _tfrecord(path, vocab_size, n=4, seed=0):
    """A tiny pretraining TFRecord in the original schema."""
    rng = np.random.default_rng(seed)
    with tf.io.TFRecordWriter(str(path)) as writer:
        for _ in range(n):
            ids = rng.integers(5, vocab_size, SEQ)
            ids[0], ids[7], ids[-1] = 2, 3, 3  # [CLS] A [SEP] B [SEP]
            segments = (np.arange(SEQ) > 7).astype(np.int64)
            positions = np.sort(rng.choice(np.arange(1, 7), PREDS, replace=False))

            def ints(v):
                return tf.train.Feature(int64_list=tf.train.Int64List(value=list(map(int, v))))

            feature = {
                "input_ids": ints(ids), "input_mask": ints(np.ones(SEQ)),
                "segment_ids": ints(segments), "masked_lm_positions": ints(positions),
                "masked_lm_ids": ints(ids[positions]),
                "masked_lm_weights": tf.train.Feature(
                    float_list=tf.train.FloatList(value=[1.0] * PREDS)),
                "next_sentence_labels": ints([rng.integers(0, 2)]),
            }
            writer.write(tf.train.Example(
                features=tf.train.Features(feature=feature)).SerializeToString())
    return str(path)


def _pretrain(cli, tmp_path, init_checkpoint, bert_config_file, vocab_size, name):
    """Runs 1 step of `python -m bert_tf.run_pretraining` warm-started from a checkpoint.

    The learning rate is so small that the step changes no weight by more than ~1e-9, so the
    saved checkpoint shows what was loaded at step 0.
    """
    data = _tfrecord(tmp_path / f"{name}.tfrecord", vocab_size)
    out = tmp_path / f"{name}_run"
    result = _python(
        cli, "-m", "bert_tf.run_pretraining", f"--bert_config_file={bert_config_file}",
        f"--input_file={data}", f"--output_dir={out}", f"--init_checkpoint={init_checkpoint}",
        "--do_train=true", "--train_batch_size=2", f"--max_seq_length={SEQ}",
        f"--max_predictions_per_seq={PREDS}", "--num_train_steps=1", "--num_warmup_steps=0",
        "--learning_rate=1e-10", "--weight_decay_rate=0", "--save_checkpoints_steps=1",
        "--use_xla=false", "--log_every_n_steps=1")
    assert result.returncode == 0, result.stderr[-3000:]
    return str(out), result.stderr


def test_round_trips_through_google_and_hf_are_exact(tmp_path, capsys):
    config = BertConfig.from_dict(CONFIG)
    weights = _random_weights(config, 0)
    vocab = _vocab(tmp_path / "vocab.txt", 40)
    write_native(convert.ModelFiles(config, weights, vocab, "test"), str(tmp_path / "native"))
    for fmt in ("google", "hf"):
        run_convert("bert_tf", fmt, str(tmp_path / "native"), str(tmp_path / fmt))
        run_convert(fmt, "bert_tf", str(tmp_path / fmt), str(tmp_path / f"back_{fmt}"))
        back = read_native(str(tmp_path / f"back_{fmt}"))
        assert back.config == config, fmt
        _assert_same(back.weights, weights)
        assert open(back.vocab_file).read() == open(vocab).read()
    assert "lacks" not in capsys.readouterr().err  # nothing was missing on the way


def test_vocab_file_extending_the_input_s_resizes_the_output(tmp_path, capsys):
    """--vocab_file appends two tokens to the input's vocabulary; with --base_vocab_file when
    the input has none beside it (the initial values: tests/test_vocab_resize.py)."""
    config = BertConfig.from_dict(CONFIG)
    weights = _random_weights(config, 3)
    base = _vocab(tmp_path / "base.txt", 40)
    extended = tmp_path / "extended.txt"
    extended.write_text(open(base).read() + "w3-w4\n##w7\n")
    google_checkpoint.write(convert.ModelFiles(config, weights, None, "test"),
                            str(tmp_path / "g"))  # no vocab.txt beside
    run_convert("google", "hf", str(tmp_path / "g"), str(tmp_path / "hf"),
                vocab_file=str(extended), base_vocab_file=base)
    hf = json.load(open(tmp_path / "hf" / "config.json"))
    assert hf["vocab_size"] == 42
    assert open(tmp_path / "hf" / "vocab.txt").read() == extended.read_text()
    from bert_tf.interop import hf_checkpoint

    back = hf_checkpoint.read(str(tmp_path / "hf"))
    for name in ("embeddings/word_embeddings", "mlm/output_bias"):
        assert back.weights[name].shape[0] == 42
        np.testing.assert_array_equal(back.weights[name][:40], weights[name])
        # "w3-w4" is "w3", "-" ([UNK], left out), "w4": the mean of rows 8 and 9; "##w7" is
        # only [UNK]: the mean of all 40 rows.
        mean = (weights[name][8].astype(np.float64) + weights[name][9]) / 2
        np.testing.assert_array_equal(back.weights[name][40], mean.astype(np.float32))
        np.testing.assert_allclose(back.weights[name][41], weights[name].mean(axis=0),
                                   rtol=1e-6)
    np.testing.assert_array_equal(back.weights["layer_1/output/kernel"],
                                  weights["layer_1/output/kernel"])
    assert "wrote hf model" in capsys.readouterr().out


@pytest.mark.slow  # two short pretraining runs in subprocesses (~30 s each)
def test_google_checkpoint_warm_starts_run_pretraining(tmp_path, cli):
    config = BertConfig.from_dict(CONFIG)
    # A Google release without the NSP head (cls/seq_relationship/*).
    weights = {n: v for n, v in _random_weights(config, 1).items() if not n.startswith("nsp/")}
    vocab = _vocab(tmp_path / "vocab.txt", 40)
    google_checkpoint.write(convert.ModelFiles(config, weights, vocab, "test"),
                            str(tmp_path / "google"))

    result = _python(cli, "-m", "bert_tf.convert_checkpoint", "--from_format=google",
                     "--to_format=bert_tf", f"--input={tmp_path / 'google'}",
                     f"--output={tmp_path / 'converted'}")
    assert result.returncode == 0, result.stderr
    notes = [line for line in result.stderr.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "lacks 2 weight(s) (NSP head), freshly initialised: nsp/kernel, " \
        "nsp/bias" in notes[0]
    assert sorted(os.listdir(tmp_path / "converted")) == [
        "bert_config.json", "checkpoint", "ckpt-0.data-00000-of-00001", "ckpt-0.index",
        "vocab.txt"]

    out, log = _pretrain(cli, tmp_path, str(tmp_path / "converted"),
                         str(tmp_path / "converted" / "bert_config.json"), 40, "google")
    # The run says which weights it initialised freshly: the NSP head, nothing else.
    fresh = [line for line in log.splitlines() if "NOT in the checkpoint" in line]
    assert len(fresh) == 1 and "2 model variables" in fresh[0] and "nsp_head" in fresh[0]
    trained = read_native(out)
    for name, value in weights.items():
        np.testing.assert_allclose(trained.weights[name], value, atol=1e-6, err_msg=name)
    assert set(trained.weights) - set(weights) == {"nsp/kernel", "nsp/bias"}


@pytest.mark.slow  # converts a real 22M-parameter model and trains it one step (~40 s)
def test_sentence_transformers_model_warm_starts_with_fresh_heads(tmp_path, cli):
    source = minilm_dir()
    result = _python(cli, "-m", "bert_tf.convert_checkpoint", "--from_format=hf",
                     "--to_format=bert_tf", f"--input={source}", f"--output={tmp_path / 'mini'}")
    assert result.returncode == 0, result.stderr
    assert "lacks 7 weight(s) (MLM head, NSP head)" in result.stderr
    config = json.load(open(tmp_path / "mini" / "bert_config.json"))
    assert config["hidden_act"] == convert.activation_name("gelu_erf", "bert_tf")

    out, log = _pretrain(cli, tmp_path, str(tmp_path / "mini"),
                         str(tmp_path / "mini" / "bert_config.json"), 30522, "mini")
    fresh = [line for line in log.splitlines() if "NOT in the checkpoint" in line]
    assert len(fresh) == 1 and "7 model variables" in fresh[0]
    assert "mlm_head" in fresh[0] and "nsp_head" in fresh[0]
    from bert_tf.interop import hf_checkpoint

    source_weights = hf_checkpoint.read(source).weights
    trained = read_native(out)
    for name in ("embeddings/word_embeddings", "layer_5/output/layer_norm/gamma",
                 "layer_2/attention/query/kernel", "pooler/kernel"):
        np.testing.assert_allclose(trained.weights[name], source_weights[name], atol=1e-6)


def test_bad_input_is_one_line_and_non_zero(tmp_path, cli):
    config = BertConfig.from_dict(CONFIG)
    weights = _random_weights(config, 2)
    vocab = _vocab(tmp_path / "vocab.txt", 40)
    google_checkpoint.write(convert.ModelFiles(config, weights, vocab, "test"),
                            str(tmp_path / "g"))
    # The same checkpoint with a config that disagrees, one with an unknown key, a short vocab.
    (tmp_path / "wrong.json").write_text(json.dumps({**CONFIG, "intermediate_size": 10}))
    (tmp_path / "unknown.json").write_text(json.dumps({**CONFIG, "num_layers": 2}))
    short_vocab = _vocab(tmp_path / "short.txt", 39)
    base = ["-m", "bert_tf.convert_checkpoint", "--from_format=google", "--to_format=hf",
            f"--input={tmp_path / 'g'}", f"--output={tmp_path / 'out'}"]
    cases = [
        ([f"--bert_config_file={tmp_path / 'wrong.json'}"],
         "variable bert/encoder/layer_0/intermediate/dense/bias has shape [12] but the "
         "bert_config implies [10]"),
        ([f"--bert_config_file={tmp_path / 'unknown.json'}"], "unknown key 'num_layers'"),
        ([f"--vocab_file={short_vocab}"],
         "short.txt has 39 tokens, fewer than the 40 of the base vocabulary"),
        ([f"--base_vocab_file={short_vocab}"], "--base_vocab_file applies only with --vocab_file"),
        (["--to_format=onnx"], "--to_format"),
    ]
    for extra, message in cases:
        result = _python(cli, *base, *extra)
        assert result.returncode != 0
        errors = [line for line in result.stderr.splitlines() if line.startswith(("error:",
                                                                                  "FATAL"))]
        assert len(errors) == 1 and message in errors[0], result.stderr
        assert "Traceback" not in result.stderr
        assert not (tmp_path / "out").exists()
    # An existing output is refused before anything is read.
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("x")
    result = _python(cli, *base)
    assert result.returncode == 2 and "already exists" in result.stderr
    assert os.listdir(tmp_path / "out") == ["keep.txt"]


def test_hf_output_s_tokenizer_follows_do_lower_case(tmp_path, cli):
    """The hf output's tokenizer files: casing inferred from the vocabulary (uncased here) or
    given by --do_lower_case (tests/test_hf_tokenizer_files.py checks the ids)."""
    config = BertConfig.from_dict(CONFIG)
    vocab = _vocab(tmp_path / "vocab.txt", 40)
    google_checkpoint.write(convert.ModelFiles(config, _random_weights(config, 5), vocab,
                                               "test"), str(tmp_path / "g"))
    for flag, lower in (([], True), (["--do_lower_case=false"], False)):
        out = tmp_path / f"hf_{lower}"
        result = _python(cli, "-m", "bert_tf.convert_checkpoint", "--from_format=google",
                         "--to_format=hf", f"--input={tmp_path / 'g'}", f"--output={out}",
                         *flag)
        assert result.returncode == 0, result.stderr
        tokenizer_config = json.load(open(out / "tokenizer_config.json"))
        assert (tokenizer_config["do_lower_case"], tokenizer_config["model_max_length"]) == (
            lower, CONFIG["max_position_embeddings"])
        assert (out / "tokenizer.json").exists()
