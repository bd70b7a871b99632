"""Tests for bert_tf.interop.google_checkpoint: names, layouts, TF1 readability, bad input."""

import json
import os

import _reference_bert as reference_bert
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.core.errors import UserError
from bert_tf.interop import google_checkpoint
from bert_tf.interop import model_files as convert
from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.encoder import BertEncoder
from bert_tf.modeling.weight_map import encoder_weight_map, set_weights

CONFIG = dict(vocab_size=40, hidden_size=8, num_hidden_layers=2, num_attention_heads=2,
              intermediate_size=12, max_position_embeddings=16, type_vocab_size=2,
              hidden_act="gelu")  # Google's "gelu": the tanh approximation


def _google_tensors(rng, cfg=CONFIG):
    """Random tensors under Google's names, written out by hand (independent of the table)."""
    h, ff, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    shapes = {
        "bert/embeddings/word_embeddings": (v, h),
        "bert/embeddings/position_embeddings": (cfg["max_position_embeddings"], h),
        "bert/embeddings/token_type_embeddings": (cfg["type_vocab_size"], h),
        "bert/embeddings/LayerNorm/gamma": (h,),
        "bert/embeddings/LayerNorm/beta": (h,),
        "bert/pooler/dense/kernel": (h, h),
        "bert/pooler/dense/bias": (h,),
        "cls/predictions/transform/dense/kernel": (h, h),
        "cls/predictions/transform/dense/bias": (h,),
        "cls/predictions/transform/LayerNorm/gamma": (h,),
        "cls/predictions/transform/LayerNorm/beta": (h,),
        "cls/predictions/output_bias": (v,),
        "cls/seq_relationship/output_weights": (2, h),
        "cls/seq_relationship/output_bias": (2,),
    }
    for i in range(cfg["num_hidden_layers"]):
        p = f"bert/encoder/layer_{i}"
        for m in ("query", "key", "value"):
            shapes[f"{p}/attention/self/{m}/kernel"] = (h, h)
            shapes[f"{p}/attention/self/{m}/bias"] = (h,)
        shapes[f"{p}/attention/output/dense/kernel"] = (h, h)
        shapes[f"{p}/attention/output/dense/bias"] = (h,)
        shapes[f"{p}/intermediate/dense/kernel"] = (h, ff)
        shapes[f"{p}/intermediate/dense/bias"] = (ff,)
        shapes[f"{p}/output/dense/kernel"] = (ff, h)
        shapes[f"{p}/output/dense/bias"] = (h,)
        for ln in ("attention/output/LayerNorm", "output/LayerNorm"):
            shapes[f"{p}/{ln}/gamma"] = (h,)
            shapes[f"{p}/{ln}/beta"] = (h,)
    return {k: (0.3 * rng.standard_normal(s)).astype(np.float32) for k, s in shapes.items()}


def _write_tf1_release(directory, tensors, cfg=CONFIG, with_slots=True, vocab_size=None):
    """A release directory written with a TF1 graph and Saver, like the original code."""
    os.makedirs(directory, exist_ok=True)
    graph = tf.Graph()
    with graph.as_default():
        for name, value in tensors.items():
            tf.compat.v1.get_variable(name, initializer=tf.constant(value))
            if with_slots:  # Adam slots and the step, which the reader must skip
                tf.compat.v1.get_variable(name + "/adam_m", initializer=tf.zeros_like(value))
                tf.compat.v1.get_variable(name + "/adam_v", initializer=tf.zeros_like(value))
        if with_slots:
            tf.compat.v1.train.get_or_create_global_step()
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            saver.save(sess, os.path.join(directory, "bert_model.ckpt"), write_meta_graph=False)
    with open(os.path.join(directory, "bert_config.json"), "w") as f:
        json.dump(cfg, f)
    vocab_size = vocab_size or cfg["vocab_size"]
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    with open(os.path.join(directory, "vocab.txt"), "w") as f:
        f.write("\n".join(specials + [f"w{i}" for i in range(vocab_size - 5)]) + "\n")


def test_name_table_covers_every_canonical_weight():
    cfg = BertConfig.from_dict(CONFIG)
    table = google_checkpoint.name_table(2)
    assert list(table) == list(convert.expected_shapes(cfg))
    assert len(set(table.values())) == len(table)
    assert table["layer_1/attention/key/bias"] == "bert/encoder/layer_1/attention/self/key/bias"
    assert table["layer_0/attention/layer_norm/gamma"] == (
        "bert/encoder/layer_0/attention/output/LayerNorm/gamma")
    assert table["nsp/kernel"] == "cls/seq_relationship/output_weights"


def test_reads_tf1_release_skipping_optimizer_slots(tmp_path, capsys):
    rng = np.random.default_rng(0)
    tensors = _google_tensors(rng)
    _write_tf1_release(str(tmp_path / "rel"), tensors)
    files = google_checkpoint.read(str(tmp_path / "rel"))
    # Google's "gelu" is the tanh approximation: bert_tf's spelling of that.
    assert files.config.hidden_act == convert.activation_name("gelu_tanh", "bert_tf")
    assert files.vocab_file == str(tmp_path / "rel" / "vocab.txt")
    assert len(files.weights) == len(tensors)  # no adam_m/adam_v/global_step
    assert "ignored" not in capsys.readouterr().err
    w = files.weights
    np.testing.assert_array_equal(w["embeddings/word_embeddings"],
                                  tensors["bert/embeddings/word_embeddings"])
    np.testing.assert_array_equal(w["layer_1/attention/value/kernel"],
                                  tensors["bert/encoder/layer_1/attention/self/value/kernel"])
    np.testing.assert_array_equal(w["layer_0/output/layer_norm/beta"],
                                  tensors["bert/encoder/layer_0/output/LayerNorm/beta"])
    np.testing.assert_array_equal(w["mlm/output_bias"], tensors["cls/predictions/output_bias"])
    np.testing.assert_array_equal(w["nsp/kernel"],
                                  tensors["cls/seq_relationship/output_weights"].T)


def test_loaded_encoder_matches_numpy_reference(tmp_path):
    rng = np.random.default_rng(1)
    tensors = _google_tensors(rng)
    _write_tf1_release(str(tmp_path / "rel"), tensors, with_slots=False)
    files = google_checkpoint.read(str(tmp_path / "rel" / "bert_model.ckpt"))
    encoder = BertEncoder(files.config)
    set_weights(encoder_weight_map(encoder), {k: v for k, v in files.weights.items()
                                               if not k.startswith(("mlm/", "nsp/"))})
    ids = rng.integers(1, 40, (2, 7)).astype(np.int32)
    mask = np.array([[1] * 7, [1] * 4 + [0] * 3], np.int32)
    segments = np.array([[0] * 3 + [1] * 4, [0] * 7], np.int32)
    out = encoder({"input_ids": ids, "input_mask": mask, "segment_ids": segments})

    # The reference reads the Google tensors through its own hand-written mapping.
    def g(name):
        return tensors[name]

    ref_w = {
        "embeddings/word_embeddings": g("bert/embeddings/word_embeddings"),
        "embeddings/position_embeddings": g("bert/embeddings/position_embeddings"),
        "embeddings/token_type_embeddings": g("bert/embeddings/token_type_embeddings"),
        "embeddings/layer_norm/gamma": g("bert/embeddings/LayerNorm/gamma"),
        "embeddings/layer_norm/beta": g("bert/embeddings/LayerNorm/beta"),
        "pooler/kernel": g("bert/pooler/dense/kernel"),
        "pooler/bias": g("bert/pooler/dense/bias"),
    }
    for i in range(2):
        p, q = f"layer_{i}", f"bert/encoder/layer_{i}"
        for m in ("query", "key", "value"):
            for t in ("kernel", "bias"):
                ref_w[f"{p}/attention/{m}/{t}"] = g(f"{q}/attention/self/{m}/{t}")
        for t in ("kernel", "bias"):
            ref_w[f"{p}/attention/output/{t}"] = g(f"{q}/attention/output/dense/{t}")
            ref_w[f"{p}/intermediate/{t}"] = g(f"{q}/intermediate/dense/{t}")
            ref_w[f"{p}/output/{t}"] = g(f"{q}/output/dense/{t}")
        for t in ("gamma", "beta"):
            ref_w[f"{p}/attention/layer_norm/{t}"] = g(f"{q}/attention/output/LayerNorm/{t}")
            ref_w[f"{p}/output/layer_norm/{t}"] = g(f"{q}/output/LayerNorm/{t}")
    seq, pooled = reference_bert.encoder_forward(ref_w, ids, mask, segments, 2, 2,
                                                 hidden_act="gelu_approximate")
    real = mask.astype(bool)
    np.testing.assert_allclose(np.asarray(out["sequence_output"])[real], seq[real], atol=1e-5)
    np.testing.assert_allclose(np.asarray(out["pooled_output"]), pooled, atol=1e-5)


def test_written_checkpoint_is_readable_by_tf1_saver_and_init_from_checkpoint(tmp_path):
    rng = np.random.default_rng(2)
    tensors = _google_tensors(rng)
    _write_tf1_release(str(tmp_path / "rel"), tensors, with_slots=False)
    files = google_checkpoint.read(str(tmp_path / "rel"))
    prefix = google_checkpoint.write(files, str(tmp_path / "out"))
    assert prefix == str(tmp_path / "out" / "bert_model.ckpt")
    assert sorted(os.listdir(tmp_path / "out")) == [
        "bert_config.json", "bert_model.ckpt.data-00000-of-00001", "bert_model.ckpt.index",
        "checkpoint", "vocab.txt"]
    assert tf.train.latest_checkpoint(str(tmp_path / "out")) == prefix
    # tf.train.load_checkpoint: the same names, shapes and values as the original release.
    reader = tf.train.load_checkpoint(prefix)
    assert reader.get_variable_to_shape_map() == {k: list(v.shape) for k, v in tensors.items()}
    for name, value in tensors.items():
        np.testing.assert_array_equal(reader.get_tensor(name), value)
    assert json.load(open(tmp_path / "out" / "bert_config.json"))["hidden_act"] == "gelu"
    # A TF1 graph restores it with a Saver, and with init_from_checkpoint.
    names = ["bert/encoder/layer_1/attention/self/query/kernel",
             "cls/seq_relationship/output_weights"]
    for use_saver in (True, False):
        graph = tf.Graph()
        with graph.as_default():
            variables = [tf.compat.v1.get_variable(n, shape=tensors[n].shape,
                                                   initializer=tf.zeros_initializer())
                         for n in names]
            if use_saver:
                saver = tf.compat.v1.train.Saver(variables)
            else:
                tf.compat.v1.train.init_from_checkpoint(prefix, {"bert/": "bert/", "cls/": "cls/"})
            with tf.compat.v1.Session(graph=graph) as sess:
                if use_saver:
                    saver.restore(sess, prefix)
                else:
                    sess.run(tf.compat.v1.global_variables_initializer())
                for n, value in zip(names, sess.run(variables)):
                    np.testing.assert_array_equal(value, tensors[n])


def test_writes_only_present_weights_and_warns_for_erf_gelu(tmp_path, capsys):
    cfg = BertConfig.from_dict({**CONFIG, "hidden_act": convert.activation_name("gelu_erf",
                                                                                "bert_tf")})
    rng = np.random.default_rng(3)
    weights = {n: rng.standard_normal(s).astype(np.float32)
               for n, s in convert.expected_shapes(cfg).items() if not n.startswith("nsp/")}
    google_checkpoint.write(convert.ModelFiles(cfg, weights, None, "mem"), str(tmp_path / "o"))
    names = dict(tf.train.list_variables(str(tmp_path / "o" / "bert_model.ckpt")))
    assert len(names) == len(weights) and "cls/seq_relationship/output_bias" not in names
    assert "exact (erf) GELU" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "o" / "vocab.txt")


def test_shape_mismatch_names_variable_and_both_shapes(tmp_path):
    tensors = _google_tensors(np.random.default_rng(4))
    tensors["bert/encoder/layer_1/intermediate/dense/kernel"] = np.zeros((8, 10), np.float32)
    _write_tf1_release(str(tmp_path / "rel"), tensors, with_slots=False)
    with pytest.raises(UserError, match=r"variable bert/encoder/layer_1/intermediate/dense/kernel"
                                        r" has shape \[8, 10\] but the bert_config implies "
                                        r"\[8, 12\]"):
        google_checkpoint.read(str(tmp_path / "rel"))


def test_transposed_nsp_mismatch_is_reported_in_file_layout(tmp_path):
    tensors = _google_tensors(np.random.default_rng(5))
    tensors["cls/seq_relationship/output_weights"] = np.zeros((3, 8), np.float32)
    _write_tf1_release(str(tmp_path / "rel"), tensors, with_slots=False)
    with pytest.raises(UserError, match=r"output_weights has shape \[3, 8\] .* \[2, 8\]"):
        google_checkpoint.read(str(tmp_path / "rel"))


def test_vocab_size_mismatch_and_extra_layers_and_missing_config(tmp_path):
    tensors = _google_tensors(np.random.default_rng(6))
    _write_tf1_release(str(tmp_path / "a"), tensors, with_slots=False, vocab_size=39)
    with pytest.raises(UserError, match=r"has 39 tokens but the word embeddings .* have 40 rows"):
        google_checkpoint.read(str(tmp_path / "a"))
    _write_tf1_release(str(tmp_path / "b"), tensors, cfg={**CONFIG, "num_hidden_layers": 1},
                       with_slots=False)
    with pytest.raises(UserError, match="has encoder layers layer_1 but .* num_hidden_layers=1"):
        google_checkpoint.read(str(tmp_path / "b"))
    os.remove(tmp_path / "b" / "bert_config.json")
    with pytest.raises(UserError, match="no bert_config.json beside the checkpoint"):
        google_checkpoint.read(str(tmp_path / "b"))
    with pytest.raises(UserError, match="no checkpoint there"):
        google_checkpoint.read(str(tmp_path / "b" / "nope.ckpt"))


def test_object_based_checkpoint_is_rejected_with_a_hint(tmp_path):
    v = tf.Variable(np.zeros(3, np.float32))
    prefix = tf.train.Checkpoint(v=v).write(str(tmp_path / "tf2" / "ckpt"))
    with open(tmp_path / "tf2" / "bert_config.json", "w") as f:
        json.dump(CONFIG, f)
    with pytest.raises(UserError, match="object-based TF2 checkpoint.*--from_format=bert_tf"):
        google_checkpoint.read(prefix)


def test_unknown_config_key_is_rejected(tmp_path):
    tensors = _google_tensors(np.random.default_rng(7))
    _write_tf1_release(str(tmp_path / "r"), tensors, cfg={**CONFIG, "hiden_size": 8},
                       with_slots=False)
    with pytest.raises(UserError, match="unknown key 'hiden_size'"):
        google_checkpoint.read(str(tmp_path / "r"))
