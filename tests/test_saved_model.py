"""End-to-end tests of `python -m bert_tf.export` (SavedModel): a fresh process loads and
serves it."""

import json
import logging
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
from _pretraining_helpers import fresh_pythonpath

from bert_tf.core.tokenization import FullTokenizer
from bert_tf.interop import model_files as convert
from bert_tf.interop.native import load_pretrained, write_native
from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.pretraining_model import BertPretrainingModel
from bert_tf.modeling.weight_map import get_weights, pretraining_weight_map

CLI_ENV = {"TF_CPP_MIN_LOG_LEVEL": "3"}  # the `cli` fixture's server (conftest.py)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": fresh_pythonpath(REPO)}


def _run(*args, **kwargs):
    return subprocess.run([sys.executable, *args], cwd=REPO, env=ENV, capture_output=True,
                          text=True, timeout=600, **kwargs)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, google_vocab_path):
    """A pretraining output dir: ckpt-0 + checkpoint index + bert_config.json."""
    keras.utils.set_random_seed(3)
    config = BertConfig(vocab_size=30522, hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=32, max_position_embeddings=64,
                        type_vocab_size=2, hidden_act="gelu_approximate")
    model = BertPretrainingModel(config)
    weights = get_weights(pretraining_weight_map(model))
    path = str(tmp_path_factory.mktemp("run") / "pretrain")
    write_native(convert.ModelFiles(config, weights, None, "test"), path)
    return path


@pytest.fixture(scope="module")
def exported(run_dir, tmp_path_factory, google_vocab_path, cli):
    export_dir = str(tmp_path_factory.mktemp("export") / "bert" / "1")
    os.makedirs(os.path.dirname(export_dir))
    result = cli.run("bert_tf.export", [f"--output_dir={run_dir}",
                                        f"--vocab_file={google_vocab_path}",
                                        "--do_lower_case=true", f"--export_dir={export_dir}",
                                        "--max_seq_length=32"])
    assert result.returncode == 0, result.stderr
    assert f"as saved_model to {export_dir}" in result.stdout
    return export_dir


SERVE = textwrap.dedent("""
    import json, sys
    import tensorflow as tf
    import tensorflow_text  # registers the tokenizer ops
    loaded = tf.saved_model.load(sys.argv[1])
    requests = json.loads(sys.argv[2])
    out = {}
    for name, kwargs in requests.items():
        fn = loaded.signatures[name]
        result = fn(**{k: tf.constant(v) for k, v in kwargs.items()})
        out[name] = {k: v.numpy().tolist() if v.dtype != tf.string else
                     [[[t.decode() for t in row] for row in m] for m in v.numpy()]
                     for k, v in result.items()}
    out["signatures"] = sorted(loaded.signatures)
    print(json.dumps(out))
""")


@pytest.mark.slow  # exports in a subprocess (~25 s), then serves in another
def test_fresh_process_serves_requests_equal_to_keras(exported, run_dir, google_vocab_path):
    assert sorted(os.listdir(os.path.dirname(exported))) == ["1"]  # No temporary left over.
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, 30000, (2, 9)).astype(np.int32)
    ids[:, 0] = 101
    mask = np.ones_like(ids)
    mask[1, 6:] = 0
    segments = np.zeros_like(ids)
    segments[:, 5:] = 1
    requests = {
        "serving_default": {"text_a": ["Hello, world!", "Serving BERT from a SavedModel."]},
        "serve_text_pair": {"text_a": ["who wrote it?"], "text_b": ["she did."]},
        "serve_ids": {"input_word_ids": ids.tolist(), "input_mask": mask.tolist(),
                      "input_type_ids": segments.tolist()},
        "fill_mask": {"text": ["the capital of [MASK] is paris.", "two [MASK] [MASK] here"]},
    }
    result = _run("-c", SERVE, exported, json.dumps(requests))
    assert result.returncode == 0, result.stderr
    served = json.loads(result.stdout.strip().splitlines()[-1])
    assert served["signatures"] == ["fill_mask", "serve_ids", "serve_text_pair",
                                    "serving_default"]

    model = load_pretrained(run_dir).model
    tokenizer = FullTokenizer(google_vocab_path, do_lower_case=True)

    def keras_outputs(i, m, s):
        out = model.encoder({"input_ids": np.array(i, np.int32),
                             "input_mask": np.array(m, np.int32),
                             "segment_ids": np.array(s, np.int32)})
        return np.asarray(out["sequence_output"]), np.asarray(out["pooled_output"])

    # serving_default: ids as the Python tokenizer, outputs as the Keras model.
    text = served["serving_default"]
    expected_ids = [[101] + tokenizer.convert_tokens_to_ids(tokenizer.tokenize(t)) + [102]
                    for t in requests["serving_default"]["text_a"]]
    assert [row[:len(e)] for row, e in zip(text["input_ids"], expected_ids)] == expected_ids
    seq, pooled = keras_outputs(text["input_ids"], text["input_mask"], text["segment_ids"])
    np.testing.assert_allclose(text["sequence_output"], seq, atol=1e-5)
    np.testing.assert_allclose(text["pooled_output"], pooled, atol=1e-5)

    pair = served["serve_text_pair"]
    assert pair["input_ids"] == [[101, 2040, 2626, 2009, 1029, 102, 2016, 2106, 1012, 102]]
    assert pair["segment_ids"] == [[0] * 6 + [1] * 4]
    seq, pooled = keras_outputs(pair["input_ids"], pair["input_mask"], pair["segment_ids"])
    np.testing.assert_allclose(pair["pooled_output"], pooled, atol=1e-5)

    seq, pooled = keras_outputs(ids, mask, segments)
    np.testing.assert_allclose(served["serve_ids"]["sequence_output"], seq, atol=1e-5)
    np.testing.assert_allclose(served["serve_ids"]["pooled_output"], pooled, atol=1e-5)

    fill = served["fill_mask"]
    assert fill["mask_positions"] == [[4, -1], [2, 3]]
    assert np.array(fill["top_k_ids"]).shape == (2, 2, 5)  # k = 5 by default
    # The top candidate at the first mask is the MLM head's argmax there.
    row = [101] + tokenizer.convert_tokens_to_ids(tokenizer.tokenize("the capital of")) + [103] \
        + tokenizer.convert_tokens_to_ids(tokenizer.tokenize("is paris.")) + [102]
    logits = model({"input_ids": np.array([row], np.int32),
                    "input_mask": np.ones((1, len(row)), np.int32),
                    "segment_ids": np.zeros((1, len(row)), np.int32),
                    "masked_lm_positions": np.array([[4]], np.int32)})["mlm_logits"]
    order = np.argsort(-np.asarray(logits)[0, 0])[:5]
    assert fill["top_k_ids"][0][0] == order.tolist()
    assert fill["top_k_tokens"][0][0] == tokenizer.convert_ids_to_tokens(order)
    scores = np.array(fill["top_k_scores"][0][0])
    assert (np.diff(scores) <= 0).all() and 0 < scores[0] < 1


def test_saved_model_cli_shows_the_signatures(exported):
    result = subprocess.run([os.path.join(os.path.dirname(sys.executable), "saved_model_cli"),
                             "show", "--all", "--dir", exported], capture_output=True, text=True,
                            env=ENV, timeout=300)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for signature in ("serving_default", "serve_text_pair", "serve_ids", "fill_mask"):
        assert f"signature_def['{signature}']" in out
    for name in ("text_a", "text_b", "input_word_ids", "input_mask", "input_type_ids", "text",
                 "pooled_output", "sequence_output", "top_k_tokens", "top_k_scores"):
        assert f"['{name}'] tensor_info" in out, name
    # Variable batch and sequence length.
    assert "shape: (-1, -1, 16)" in out and "shape: (-1)" in out


def test_bad_input_gives_one_line_errors(run_dir, tmp_path, google_vocab_path, cli):
    empty = tmp_path / "no_run"
    empty.mkdir()
    small_vocab = tmp_path / "vocab.txt"
    small_vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\n")
    cases = [
        ([f"--output_dir={empty}", f"--vocab_file={google_vocab_path}"],
         f"--output_dir={empty}: the directory has no checkpoint"),
        ([f"--output_dir={run_dir}", f"--vocab_file={small_vocab}"],
         "has 6 tokens but the model's vocab_size is 30522"),
        ([f"--output_dir={run_dir}", f"--vocab_file={google_vocab_path}",
          "--max_seq_length=100"], "--max_seq_length=100 exceeds max_position_embeddings=64"),
    ]
    for args, message in cases:
        result = cli.run("bert_tf.export", [*args, "--do_lower_case=true",
                                            f"--export_dir={tmp_path / 'out'}"])
        assert result.returncode == 2, result.stderr
        lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert len(lines) == 1 and message in lines[0], result.stderr
        assert "Traceback" not in result.stderr
        assert not (tmp_path / "out").exists()


def test_in_process_export_keeps_the_absl_log_level(tmp_path):
    # tf.saved_model.save on its own leaves absl's logger at WARNING (asserted first, so this
    # test fails if TensorFlow changes and the workaround can go); save_module, which every
    # SavedModel export ends in (export_saved_model, task_serving), keeps the caller's level,
    # so a notebook's training logs after an export still appear. A one-op module: what is
    # tested is the save, not the serving graph (exported whole by the tests above).
    import tensorflow as tf

    from bert_tf.export.saved_model import save_module

    class Doubler(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
        def double(self, x):
            return {"y": 2.0 * x}

        def signatures(self):
            return {"serving_default": self.double.get_concrete_function()}

    absl_logger = logging.getLogger("absl")
    previous = absl_logger.level
    try:
        absl_logger.setLevel(logging.INFO)
        tf.saved_model.save(tf.Module(), str(tmp_path / "plain"))
        assert absl_logger.level == logging.WARNING
        absl_logger.setLevel(logging.INFO)
        assert save_module(Doubler(), str(tmp_path / "sm")) == str(tmp_path / "sm")
        assert absl_logger.level == logging.INFO
    finally:
        absl_logger.setLevel(previous)
    loaded = tf.saved_model.load(str(tmp_path / "sm"))
    out = loaded.signatures["serving_default"](x=tf.constant([1.5]))
    np.testing.assert_array_equal(out["y"], [3.0])
