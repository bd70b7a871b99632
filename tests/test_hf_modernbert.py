"""Tests for bert_tf.interop.hf_modernbert: transformers' ModernBERT in and out.

The reference is tests/data/modernbert_tiny/ (its README: a random 3-layer ModernBERT saved
by transformers, with its outputs on three padded rows; scripts/make_modernbert_golden.py).
"""

import dataclasses
import json
import os
import shutil

import numpy as np
import pytest
from _pretraining_helpers import REPO_ROOT

from bert_tf.core.errors import UserError
from bert_tf.interop import formats, hf_checkpoint, hf_modernbert, safetensors_io
from bert_tf.interop.model_files import ModelFiles
from bert_tf.modeling import weight_map
from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.pretraining_model import BertPretrainingModel

DATA = str(REPO_ROOT / "tests" / "data" / "modernbert_tiny")
TOLERANCE = 1e-4


def _model(config, weights):
    model = BertPretrainingModel(config, use_nsp=False)
    weight_map.set_weights(weight_map.pretraining_weight_map(model), weights, strict=True)
    return model


def _run(model, ids, mask):
    """(last hidden state [batch, seq, hidden], MLM logits at every position)."""
    positions = np.tile(np.arange(ids.shape[1], dtype=np.int32), (ids.shape[0], 1))
    out = model({"input_ids": ids, "input_mask": mask, "segment_ids": np.zeros_like(ids),
                 "masked_lm_positions": positions})
    return out["sequence_output"].numpy(), out["mlm_logits"].numpy()


@pytest.fixture(scope="module")
def loaded():
    files = hf_checkpoint.read(DATA)
    golden = dict(np.load(os.path.join(DATA, "golden.npz")))
    return files, _model(files.config, files.weights), golden


def test_config_from_transformers(loaded):
    config = loaded[0].config
    assert (config.hidden_act, config.position_embedding_type, config.type_vocab_size) == \
        ("geglu", "rope", 0)
    assert (config.rope_theta, config.local_rope_theta) == (160000.0, 10000.0)
    assert (config.global_attn_every_n_layers, config.local_attention_window) == (3, 6)
    assert config.pre_layer_norm and not config.use_bias and config.tie_word_embeddings
    assert config.norm_eps == 1e-5 and config.intermediate_size == 64


def test_outputs_equal_transformers(loaded):
    _, model, golden = loaded
    real = golden["attention_mask"].astype(bool)
    assert not real.all() and golden["input_ids"].shape[1] > 2 * 3  # padding; window matters
    hidden, logits = _run(model, golden["input_ids"], golden["attention_mask"])
    assert np.abs(hidden[real] - golden["last_hidden_state"][real]).max() < TOLERANCE
    assert np.abs(logits[real] - golden["mlm_logits"][real]).max() < TOLERANCE


def test_sliding_window_is_what_makes_them_equal(loaded):
    """With a window wider than the rows, the outputs leave transformers' by far."""
    files, _, golden = loaded
    wide = _model(dataclasses.replace(files.config, local_attention_window=64), files.weights)
    real = golden["attention_mask"].astype(bool)
    hidden, _ = _run(wide, golden["input_ids"], golden["attention_mask"])
    assert np.abs(hidden[real] - golden["last_hidden_state"][real]).max() > 0.05


def test_padding_semantics(loaded):
    """A padded row gives transformers' values without its padding, and with any ids there."""
    _, model, golden = loaded
    ids, mask = golden["input_ids"], golden["attention_mask"]
    n = int(mask[2].sum())
    hidden, logits = _run(model, ids[2:3, :n], mask[2:3, :n])
    assert np.abs(hidden[0] - golden["last_hidden_state"][2, :n]).max() < TOLERANCE
    assert np.abs(logits[0] - golden["mlm_logits"][2, :n]).max() < TOLERANCE
    other = np.where(mask == 1, ids, 17).astype(np.int32)
    real = mask.astype(bool)
    np.testing.assert_allclose(_run(model, other, mask)[0][real],
                               _run(model, ids, mask)[0][real], atol=1e-6)


def _tensors(directory):
    return safetensors_io.load_file(os.path.join(directory, "model.safetensors"))


def test_written_tensors_are_the_originals(loaded, tmp_path):
    """From the Keras model's weights back to transformers' names: the same tensors."""
    files, model, _ = loaded
    weights = weight_map.get_weights(weight_map.pretraining_weight_map(model))
    out = hf_checkpoint.write(ModelFiles(files.config, weights, None, "model"),
                              str(tmp_path / "out"))
    original, written = _tensors(DATA), _tensors(out)
    assert sorted(written) == sorted(original)
    for name, value in original.items():
        np.testing.assert_array_equal(written[name], value, err_msg=name)
    assert hf_checkpoint.read_config(out) == files.config
    with open(os.path.join(out, "config.json")) as f:
        written_config = json.load(f)
    with open(os.path.join(DATA, "config.json")) as f:
        original_config = json.load(f)
    for key in ("layer_types", "rope_parameters", "local_attention", "norm_bias",
                "mlp_bias", "attention_bias", "decoder_bias", "tie_word_embeddings"):
        assert written_config[key] == original_config[key], key


def test_convert_checkpoint_through_bert_tf(tmp_path):
    """hf -> bert_tf checkpoint (an --init_checkpoint) -> hf gives the original tensors."""
    native = formats.convert("hf", "bert_tf", DATA, str(tmp_path / "native"))
    out = formats.convert("bert_tf", "hf", native, str(tmp_path / "hf"))
    original, written = _tensors(DATA), _tensors(out)
    assert sorted(written) == sorted(original)
    for name, value in original.items():
        np.testing.assert_array_equal(written[name], value, err_msg=name)


def test_untied_encoder_only_and_biases(loaded, tmp_path):
    """Untied decoder and biases write and read back; an encoder alone is ModernBertModel's."""
    files, _, _ = loaded
    config = dataclasses.replace(files.config, tie_word_embeddings=False, use_bias=True)
    from bert_tf.interop.model_files import expected_shapes

    rng = np.random.default_rng(0)
    weights = {n: rng.standard_normal(s).astype(np.float32)
               for n, s in expected_shapes(config, use_nsp=False).items()}
    out = hf_checkpoint.write(ModelFiles(config, weights, None, "m"), str(tmp_path / "full"))
    tensors = _tensors(out)
    assert "decoder.weight" in tensors and "model.layers.1.attn.Wqkv.bias" in tensors
    back = hf_checkpoint.read(out)
    assert back.config == config and sorted(back.weights) == sorted(weights)
    for name, value in weights.items():
        np.testing.assert_array_equal(back.weights[name], value, err_msg=name)
    encoder = {n: v for n, v in weights.items() if not n.startswith("mlm/")}
    out = hf_checkpoint.write(ModelFiles(config, encoder, None, "m"), str(tmp_path / "enc"))
    assert "layers.0.attn.Wqkv.weight" in _tensors(out)
    with open(os.path.join(out, "config.json")) as f:
        assert json.load(f)["architectures"] == ["ModernBertModel"]
    assert sorted(hf_checkpoint.read(out).weights) == sorted(encoder)


@pytest.mark.parametrize("change,message", [
    ({"mlp_bias": True}, "biases must be all on or all off"),
    ({"hidden_activation": "silu"}, "hidden_activation='silu' is not supported"),
    ({"layer_types": ["full_attention", "full_attention", "sliding_attention"]},
     "is not every 3-th layer global"),
    ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "rope_scaling is not supported"),
])
def test_unsupported_configs_refused(tmp_path, change, message):
    directory = tmp_path / "m"
    shutil.copytree(DATA, directory)
    with open(directory / "config.json") as f:
        d = json.load(f)
    d.update(change)
    with open(directory / "config.json", "w") as f:
        json.dump(d, f)
    with pytest.raises(UserError) as e:
        hf_checkpoint.read(str(directory))
    assert message in str(e.value) and "\n" not in str(e.value)


def test_only_modernbert_architectures_are_written(tmp_path):
    config = BertConfig.from_json_file(os.path.join(REPO_ROOT, "configs", "cramming_bert.json"))
    with pytest.raises(UserError, match="needs position_embedding_type \"rope\".*"
                                        "position_embedding_type='absolute'"):
        hf_checkpoint.write(ModelFiles(config, {}, None, "m"), str(tmp_path / "out"))
    assert hf_modernbert.config_to_hf(
        BertConfig.from_json_file(os.path.join(REPO_ROOT, "configs", "modernbert_base.json")),
        True)["layer_types"][:4] == ["full_attention", "sliding_attention",
                                     "sliding_attention", "full_attention"]


def test_is_an_init_checkpoint_for_pretraining(cli, tmp_path):
    """run_pretraining --init_checkpoint=<ModernBERT directory>, its config.json the model's:
    every weight restored, MLM-only training and eval run."""
    from _pretraining_helpers import pretraining_flags, synthetic_examples, write_tfrecords

    write_tfrecords(tmp_path / "train-0.tfrecord", synthetic_examples(32, seed=0))
    write_tfrecords(tmp_path / "eval.tfrecord", synthetic_examples(16, seed=1))
    proc = cli.run("bert_tf.run_pretraining", pretraining_flags(
        tmp_path, tmp_path / "out", bert_config_file=None, init_checkpoint=DATA,
        no_nsp="true", num_train_steps=2, save_checkpoints_steps=2, do_eval="true",
        max_eval_steps=2))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"init_checkpoint {DATA} (hf): restored 23 weights" in proc.stderr
    results = (tmp_path / "out" / "eval_results.txt").read_text()
    assert "masked_lm_loss" in results and "nan" not in results


def test_transformers_4_config_reads_the_same():
    """transformers 4.x wrote global_rope_theta/local_rope_theta and no layer_types (as
    answerdotai/ModernBERT-base's config.json): the same architecture."""
    with open(os.path.join(DATA, "config.json")) as f:
        d = json.load(f)
    new = hf_modernbert.config_from_hf(d, "new")
    for key in ("layer_types", "rope_parameters"):
        del d[key]
    d.update(global_rope_theta=160000.0, local_rope_theta=10000.0, reference_compile=None,
             position_embedding_type="absolute", layer_norm_eps=1e-5)
    assert hf_modernbert.config_from_hf(d, "old") == new


def test_fine_tuning_models_take_the_modern_encoder(loaded):
    """A task model of a ModernBERT config holds the modern encoder, loads the directory's
    encoder weights, and its [CLS] readout is transformers' hidden state at [CLS]."""
    from bert_tf.finetune.heads import BertClassifier, BertSpanExtractor
    from bert_tf.finetune.warm_start import load_encoder_weights
    from bert_tf.modeling.modern_encoder import ModernEncoder

    files, _, golden = loaded
    classifier = BertClassifier(files.config, 3, readout="cls")
    assert isinstance(classifier.encoder, ModernEncoder)
    assert isinstance(BertSpanExtractor(files.config).encoder, ModernEncoder)
    load_encoder_weights(classifier, files)
    ids, mask = golden["input_ids"], golden["attention_mask"]
    vector = classifier.encoder.encode_at(
        {"input_ids": ids, "input_mask": mask, "segment_ids": np.zeros_like(ids)},
        np.zeros((3, 1), np.int32))[:, 0].numpy()
    assert np.abs(vector - golden["last_hidden_state"][:, 0]).max() < TOLERANCE
    assert classifier({"input_ids": ids, "input_mask": mask, "segment_ids": np.zeros_like(ids)}
                      )["logits"].shape == (3, 3)


def test_raw_text_through_the_serving_saved_model(loaded, tmp_path):
    """The serving SavedModel of the ModernBERT (with a WordPiece vocabulary whose words
    "w5", "w6", ... are ids 5, 6, ...): raw text in, transformers' hidden states out."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the SavedModel's tokenizer ops)

    from bert_tf.export.saved_model import export_saved_model

    files, model, golden = loaded
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"] +
                               [f"w{i}" for i in range(5, 256)]) + "\n")
    export_saved_model(model, str(vocab), True, str(tmp_path / "sm"), max_seq_length=16,
                       with_fill_mask=False)  # (its head's logits: test_outputs_equal_...)
    serving = tf.saved_model.load(str(tmp_path / "sm"))
    ids, mask = golden["input_ids"], golden["attention_mask"]
    texts = [" ".join(f"W{i}" for i in row[1:int(m.sum()) - 1]) for row, m in zip(ids, mask)]
    out = serving.signatures["serving_default"](text_a=tf.constant(texts))
    np.testing.assert_array_equal(out["input_ids"].numpy(), ids)
    real = mask.astype(bool)
    hidden = out["sequence_output"].numpy()
    assert np.abs(hidden[real] - golden["last_hidden_state"][real]).max() < TOLERANCE
