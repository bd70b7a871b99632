"""Tests for bert_tf.interop.hf_checkpoint: names, layouts, a real model, bad input."""

import json
import os
import sys

import _reference_bert as reference_bert
import numpy as np
import pytest
from _pretraining_helpers import minilm_dir

from bert_tf.core.errors import UserError
from bert_tf.core.tokenization import FullTokenizer
from bert_tf.interop import hf_checkpoint, safetensors_io
from bert_tf.interop import model_files as convert
from bert_tf.modeling import activations
from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.encoder import BertEncoder
from bert_tf.modeling.weight_map import encoder_weight_map, set_weights

HF_CONFIG = {
    "architectures": ["BertForPreTraining"], "model_type": "bert", "vocab_size": 30,
    "hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2,
    "intermediate_size": 12, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1, "max_position_embeddings": 16, "type_vocab_size": 2,
    "initializer_range": 0.02, "layer_norm_eps": 1e-12, "pad_token_id": 0,
    "position_embedding_type": "absolute", "transformers_version": "4.40.0", "use_cache": True,
}


def _hf_tensors(rng, prefix="bert.", old_layer_norm=False, heads=True):
    """Random tensors under HF names, written by hand ([out, in] linear weights)."""
    h, ff, v = 8, 12, 30
    ln_w, ln_b = ("gamma", "beta") if old_layer_norm else ("weight", "bias")
    s = {
        "embeddings.word_embeddings.weight": (v, h),
        "embeddings.position_embeddings.weight": (16, h),
        "embeddings.token_type_embeddings.weight": (2, h),
        f"embeddings.LayerNorm.{ln_w}": (h,), f"embeddings.LayerNorm.{ln_b}": (h,),
        "pooler.dense.weight": (h, h), "pooler.dense.bias": (h,),
    }
    for i in range(2):
        p = f"encoder.layer.{i}"
        for m in ("attention.self.query", "attention.self.key", "attention.self.value",
                  "attention.output.dense"):
            s[f"{p}.{m}.weight"], s[f"{p}.{m}.bias"] = (h, h), (h,)
        s[f"{p}.intermediate.dense.weight"], s[f"{p}.intermediate.dense.bias"] = (ff, h), (ff,)
        s[f"{p}.output.dense.weight"], s[f"{p}.output.dense.bias"] = (h, ff), (h,)
        for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
            s[f"{p}.{ln}.{ln_w}"], s[f"{p}.{ln}.{ln_b}"] = (h,), (h,)
    t = {prefix + k: (0.3 * rng.standard_normal(shape)).astype(np.float32)
         for k, shape in s.items()}
    t[prefix + "embeddings.position_ids"] = np.arange(16, dtype=np.int64)[None]
    if heads:
        for k, shape in {
            "cls.predictions.transform.dense.weight": (h, h),
            "cls.predictions.transform.dense.bias": (h,),
            "cls.predictions.transform.LayerNorm.weight": (h,),
            "cls.predictions.transform.LayerNorm.bias": (h,),
            "cls.predictions.bias": (v,),
            "cls.seq_relationship.weight": (2, h),
            "cls.seq_relationship.bias": (2,),
        }.items():
            t[k] = (0.3 * rng.standard_normal(shape)).astype(np.float32)
        t["cls.predictions.decoder.weight"] = t[prefix + "embeddings.word_embeddings.weight"]
    return t


def _write_hf_dir(directory, tensors, config=HF_CONFIG, vocab_size=30):
    os.makedirs(directory, exist_ok=True)
    safetensors_io.save_file(tensors, os.path.join(directory, "model.safetensors"),
                             metadata={"format": "pt"})
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f)
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(vocab_size)]
    with open(os.path.join(directory, "vocab.txt"), "w") as f:
        f.write("\n".join(words[:vocab_size]) + "\n")


def test_activation_table_matches_bert_tf_functions():
    """The table's bert_tf column must name the function it claims (reconciles config.py)."""
    x = np.linspace(-4, 4, 81).astype(np.float32)
    expected = {"gelu_erf": reference_bert.gelu_exact(x), "gelu_tanh": reference_bert.gelu_tanh(x),
                "relu": np.maximum(x, 0), "tanh": np.tanh(x)}
    for meaning, columns in convert.ACTIVATION_NAMES.items():
        got = np.asarray(activations.get_activation(columns["bert_tf"])(x))
        np.testing.assert_allclose(got, expected[meaning], atol=1e-6, err_msg=meaning)
    # The two GELUs really differ, so the check above can tell them apart.
    assert np.abs(expected["gelu_erf"] - expected["gelu_tanh"]).max() > 1e-4
    assert convert.activation_meaning("gelu", "hf") == "gelu_erf"
    assert convert.activation_meaning("gelu_pytorch_tanh", "hf") == "gelu_tanh"
    assert convert.activation_meaning("gelu", "google") == "gelu_tanh"
    with pytest.raises(UserError, match="'swish'"):
        convert.activation_meaning("swish", "hf")


def test_name_table_golden_names():
    table = hf_checkpoint.name_table(2)
    cfg = BertConfig.from_dict({k: HF_CONFIG[k] for k in ("vocab_size", "hidden_size",
                                "num_hidden_layers", "num_attention_heads", "intermediate_size",
                                "max_position_embeddings", "type_vocab_size")})
    assert sorted(table) == sorted(convert.expected_shapes(cfg))
    assert len(set(table.values())) == len(table)
    assert table["layer_1/attention/query/kernel"] == "encoder.layer.1.attention.self.query.weight"
    assert table["layer_0/attention/output/bias"] == "encoder.layer.0.attention.output.dense.bias"
    assert table["layer_0/output/layer_norm/gamma"] == "encoder.layer.0.output.LayerNorm.weight"
    assert table["mlm/output_bias"] == "cls.predictions.bias"
    assert table["nsp/kernel"] == "cls.seq_relationship.weight"


@pytest.mark.parametrize("prefix, old_ln", [("bert.", False), ("", True)])
def test_reads_hf_directory_with_and_without_prefix(tmp_path, prefix, old_ln):
    t = _hf_tensors(np.random.default_rng(0), prefix=prefix, old_layer_norm=old_ln)
    _write_hf_dir(str(tmp_path), t)
    files = hf_checkpoint.read(str(tmp_path))
    assert files.config.hidden_act == convert.activation_name("gelu_erf", "bert_tf")
    assert files.config.vocab_size == 30 and files.config.intermediate_size == 12
    assert len(files.weights) == len(convert.expected_shapes(files.config))
    w = files.weights
    ln = "gamma" if old_ln else "weight"
    np.testing.assert_array_equal(w["layer_1/attention/key/kernel"],
                                  t[prefix + "encoder.layer.1.attention.self.key.weight"].T)
    np.testing.assert_array_equal(w["layer_0/intermediate/kernel"],
                                  t[prefix + "encoder.layer.0.intermediate.dense.weight"].T)
    np.testing.assert_array_equal(w["layer_1/attention/layer_norm/gamma"],
                                  t[prefix + f"encoder.layer.1.attention.output.LayerNorm.{ln}"])
    np.testing.assert_array_equal(w["mlm/transform/kernel"],
                                  t["cls.predictions.transform.dense.weight"].T)
    np.testing.assert_array_equal(w["mlm/output_bias"], t["cls.predictions.bias"])
    np.testing.assert_array_equal(w["nsp/kernel"], t["cls.seq_relationship.weight"].T)


def test_write_then_read_is_identity_and_uses_hf_names(tmp_path):
    t = _hf_tensors(np.random.default_rng(1))
    _write_hf_dir(str(tmp_path / "in"), t)
    files = hf_checkpoint.read(str(tmp_path / "in"))
    hf_checkpoint.write(files, str(tmp_path / "out"))
    assert sorted(os.listdir(tmp_path / "out")) == [
        "config.json", "model.safetensors", "special_tokens_map.json", "tokenizer.json",
        "tokenizer_config.json", "vocab.txt"]
    written = safetensors_io.load_file(str(tmp_path / "out" / "model.safetensors"))
    # Everything but the buffer and the tied decoder weight, under the same names.
    expected = {k for k in t if not k.endswith(("position_ids", "decoder.weight"))}
    assert set(written) == expected
    for k in expected:
        np.testing.assert_array_equal(written[k], t[k])
    config = json.load(open(tmp_path / "out" / "config.json"))
    assert config["architectures"] == ["BertForPreTraining"] and config["hidden_act"] == "gelu"
    assert {k: config[k] for k in HF_CONFIG if k not in ("transformers_version", "use_cache")} \
        == {k: v for k, v in HF_CONFIG.items() if k not in ("transformers_version", "use_cache")}
    again = hf_checkpoint.read(str(tmp_path / "out"))
    assert again.config == files.config
    for k in files.weights:
        np.testing.assert_array_equal(again.weights[k], files.weights[k])


@pytest.mark.parametrize("last_token, given, lower, tokens", [
    ("w24", None, True, ["[UNK]", "w1"]),  # an uncased vocabulary: inferred, lower-case
    ("Word", None, False, ["Word", "[UNK]"]),  # a cased one (an upper-case token): keep case
    ("w24", False, False, ["[UNK]", "[UNK]"]),  # --do_lower_case overrides the inference
])
def test_written_tokenizer_keeps_the_model_s_casing(tmp_path, last_token, given, lower,
                                                    tokens):
    from tokenizers import Tokenizer

    _write_hf_dir(str(tmp_path / "in"), _hf_tensors(np.random.default_rng(4)))
    vocab = tmp_path / "in" / "vocab.txt"
    vocab.write_text(vocab.read_text().replace("w24\n", last_token + "\n"))
    files = hf_checkpoint.read(str(tmp_path / "in"))
    hf_checkpoint.write(files, str(tmp_path / "out"), do_lower_case=given)
    config = json.load(open(tmp_path / "out" / "tokenizer_config.json"))
    assert (config["do_lower_case"], config["model_max_length"]) == (lower, 16)
    fast = Tokenizer.from_file(str(tmp_path / "out" / "tokenizer.json"))
    assert fast.encode("Word W1").tokens == ["[CLS]", *tokens, "[SEP]"]


def test_reads_sharded_safetensors(tmp_path):
    t = _hf_tensors(np.random.default_rng(5))
    _write_hf_dir(str(tmp_path), t)
    os.remove(tmp_path / "model.safetensors")
    names = sorted(t)
    shards = {"model-00001-of-00002.safetensors": names[:20],
              "model-00002-of-00002.safetensors": names[20:]}
    for shard, keys in shards.items():
        safetensors_io.save_file({k: t[k] for k in keys}, str(tmp_path / shard))
    index = {"metadata": {}, "weight_map": {k: s for s, keys in shards.items() for k in keys}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    files = hf_checkpoint.read(str(tmp_path))
    assert len(files.weights) == len(convert.expected_shapes(files.config))
    np.testing.assert_array_equal(files.weights["nsp/bias"], t["cls.seq_relationship.bias"])


def test_model_without_heads_is_written_as_bert_model(tmp_path, capsys):
    t = _hf_tensors(np.random.default_rng(2), prefix="", heads=False)
    _write_hf_dir(str(tmp_path / "in"), t)
    files = hf_checkpoint.read(str(tmp_path / "in"))
    missing = convert.report_missing(files, "not written")
    assert missing == ["mlm/transform/kernel", "mlm/transform/bias",
                       "mlm/transform/layer_norm/gamma", "mlm/transform/layer_norm/beta",
                       "mlm/output_bias", "nsp/kernel", "nsp/bias"]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "lacks 7 weight(s) (MLM head, NSP head)" in err
    hf_checkpoint.write(files, str(tmp_path / "out"))
    assert json.load(open(tmp_path / "out" / "config.json"))["architectures"] == ["BertModel"]
    names = set(safetensors_io.load_file(str(tmp_path / "out" / "model.safetensors")))
    assert "embeddings.word_embeddings.weight" in names and not any("cls." in n for n in names)


@pytest.mark.parametrize("change, message", [
    ({"hiden_size": 8}, "unknown key 'hiden_size'"),
    ({"model_type": "roberta"}, "model_type is 'roberta'"),
    ({"layer_norm_eps": 1e-5}, "layer_norm_eps=1e-05 is not supported"),
    ({"position_embedding_type": "relative_key"}, "relative_key"),
    ({"hidden_act": "silu"}, "hidden_act 'silu'"),
])
def test_bad_configs(tmp_path, change, message):
    _write_hf_dir(str(tmp_path), _hf_tensors(np.random.default_rng(3)), {**HF_CONFIG, **change})
    with pytest.raises(UserError, match=message):
        hf_checkpoint.read(str(tmp_path))


def test_bad_weights(tmp_path):
    t = _hf_tensors(np.random.default_rng(4))
    t["bert.encoder.layer.0.attention.self.query.weight"] = np.zeros((8, 6), np.float32)
    _write_hf_dir(str(tmp_path / "a"), t)
    with pytest.raises(UserError, match=r"variable bert.encoder.layer.0.attention.self.query.weight"
                                        r" has shape \[8, 6\] but config.json implies \[8, 8\]"):
        hf_checkpoint.read(str(tmp_path / "a"))
    t = _hf_tensors(np.random.default_rng(4))
    t["cls.predictions.decoder.weight"] = t["cls.predictions.decoder.weight"] + 1
    _write_hf_dir(str(tmp_path / "b"), t)
    with pytest.raises(UserError, match="decoder.weight differs from the word embeddings"):
        hf_checkpoint.read(str(tmp_path / "b"))
    _write_hf_dir(str(tmp_path / "c"), _hf_tensors(np.random.default_rng(4)), vocab_size=29)
    with pytest.raises(UserError, match="has 29 tokens but the word embeddings"):
        hf_checkpoint.read(str(tmp_path / "c"))


def test_pytorch_bin_without_torch_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` fails, installed or not
    os.makedirs(tmp_path / "pt")
    with open(tmp_path / "pt" / "config.json", "w") as f:
        json.dump(HF_CONFIG, f)
    open(tmp_path / "pt" / "pytorch_model.bin", "wb").write(b"\0" * 8)
    with pytest.raises(UserError, match="needs torch to read: pip install torch, or convert"):
        hf_checkpoint.read(str(tmp_path / "pt"))


def test_real_minilm_matches_numpy_reference_from_raw_tensors():
    directory = minilm_dir()
    files = hf_checkpoint.read(directory)
    assert (files.config.num_hidden_layers, files.config.hidden_size,
            files.config.num_attention_heads, files.config.vocab_size) == (6, 384, 12, 30522)
    assert convert.missing_weights(files.weights, files.config)[0] == "mlm/transform/kernel"
    encoder = BertEncoder(files.config)
    set_weights(encoder_weight_map(encoder), files.weights)

    tokenizer = FullTokenizer(os.path.join(directory, "vocab.txt"), do_lower_case=True)
    sentences = ["The quick brown fox jumps over the lazy dog.",
                 "Tokenization splits unaffordable words into pieces!",
                 "BERT encoders are pretrained on Wikipedia."]
    rows = [[101] + tokenizer.convert_tokens_to_ids(tokenizer.tokenize(s)) + [102]
            for s in sentences]
    seq_len = max(len(r) for r in rows)
    ids = np.array([r + [0] * (seq_len - len(r)) for r in rows], np.int32)
    mask = (ids > 0).astype(np.int32)
    segments = np.zeros_like(ids)
    out = encoder({"input_ids": ids, "input_mask": mask, "segment_ids": segments})

    # The reference is fed straight from the safetensors tensors by HF names.
    raw = safetensors_io.load_file(os.path.join(directory, "model.safetensors"))
    ref = {
        "embeddings/word_embeddings": raw["embeddings.word_embeddings.weight"],
        "embeddings/position_embeddings": raw["embeddings.position_embeddings.weight"],
        "embeddings/token_type_embeddings": raw["embeddings.token_type_embeddings.weight"],
        "embeddings/layer_norm/gamma": raw["embeddings.LayerNorm.weight"],
        "embeddings/layer_norm/beta": raw["embeddings.LayerNorm.bias"],
        "pooler/kernel": raw["pooler.dense.weight"].T, "pooler/bias": raw["pooler.dense.bias"],
    }
    for i in range(6):
        p, q = f"layer_{i}", f"encoder.layer.{i}"
        for ours, theirs in (("attention/query", "attention.self.query"),
                             ("attention/key", "attention.self.key"),
                             ("attention/value", "attention.self.value"),
                             ("attention/output", "attention.output.dense"),
                             ("intermediate", "intermediate.dense"), ("output", "output.dense")):
            ref[f"{p}/{ours}/kernel"] = raw[f"{q}.{theirs}.weight"].T
            ref[f"{p}/{ours}/bias"] = raw[f"{q}.{theirs}.bias"]
        for ours, theirs in (("attention/layer_norm", "attention.output.LayerNorm"),
                             ("output/layer_norm", "output.LayerNorm")):
            ref[f"{p}/{ours}/gamma"] = raw[f"{q}.{theirs}.weight"]
            ref[f"{p}/{ours}/beta"] = raw[f"{q}.{theirs}.bias"]
    # HF "gelu" is the erf GELU: the reference's exact form.
    seq, pooled = reference_bert.encoder_forward(ref, ids, mask, segments, 6, 12,
                                                 hidden_act="gelu_exact")
    real = mask.astype(bool)
    np.testing.assert_allclose(np.asarray(out["sequence_output"])[real], seq[real], atol=1e-4)
    np.testing.assert_allclose(np.asarray(out["pooled_output"]), pooled, atol=1e-4)
    # Real text gave real tokens: no [UNK], and the outputs are not degenerate.
    assert 100 not in ids and np.abs(seq[real]).max() > 1.0
