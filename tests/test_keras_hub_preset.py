"""Tests for bert_tf.export.keras_hub_preset: keras-hub loads our encoder and fine-tunes it."""

import os
import re
import subprocess
import sys

import keras
import keras_hub
import numpy as np
import pytest

from bert_tf.errors import UserError
from bert_tf.export import keras_hub_preset
from bert_tf.interop import model_files as convert
from bert_tf.interop.native import write_native
from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.encoder import BertEncoder
from bert_tf.modeling.weight_map import encoder_weight_map, get_weights
from bert_tf.text.tokenization import FullTokenizer


def _encoder(activation_meaning: str, seed: int = 0) -> BertEncoder:
    keras.utils.set_random_seed(seed)
    return BertEncoder(BertConfig(
        vocab_size=30522, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=64, type_vocab_size=2,
        hidden_act=convert.activation_name(activation_meaning, "bert_tf"),
        # A larger init makes the GELU difference visible in the erf test.
        initializer_range=0.5 if activation_meaning == "gelu_erf" else 0.02))


def _inputs(seed=1):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 30522, (3, 11)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[2, 7:] = 0
    segments = np.zeros_like(ids)
    segments[:, 6:] = 1
    return ids, mask, segments


@pytest.fixture(scope="module")
def preset(tmp_path_factory, google_vocab_path):
    encoder = _encoder("gelu_tanh")
    path = str(tmp_path_factory.mktemp("presets") / "tiny_bert")
    keras_hub_preset.export_keras_hub_preset(encoder, google_vocab_path, True, path,
                                             max_seq_length=32)
    return encoder, path


def test_backbone_from_preset_has_our_outputs(preset):
    encoder, path = preset
    assert {"config.json", "model.weights.h5", "tokenizer.json", "preprocessor.json",
            "assets"} <= set(os.listdir(path))
    backbone = keras_hub.models.BertBackbone.from_preset(path)
    assert (backbone.num_layers, backbone.hidden_dim, backbone.num_heads,
            backbone.intermediate_dim, backbone.max_sequence_length) == (2, 16, 2, 32, 64)
    ids, mask, segments = _inputs()
    ours = encoder({"input_ids": ids, "input_mask": mask, "segment_ids": segments})
    theirs = backbone({"token_ids": ids, "padding_mask": mask, "segment_ids": segments})
    real = mask.astype(bool)
    np.testing.assert_allclose(np.asarray(theirs["sequence_output"])[real],
                               np.asarray(ours["sequence_output"])[real], atol=1e-5)
    np.testing.assert_allclose(theirs["pooled_output"], ours["pooled_output"], atol=1e-5)


def test_preset_tokenizer_agrees_with_ours(preset, google_vocab_path):
    _, path = preset
    tokenizer = keras_hub.models.BertTokenizer.from_preset(path)
    ours = FullTokenizer(google_vocab_path, do_lower_case=True)
    for text in ["Hello, World!", "Café au lait, naïve résumé.", "unaffordable tokenization"]:
        expected = ours.convert_tokens_to_ids(ours.tokenize(text))
        assert np.asarray(tokenizer(text)).tolist() == expected, text


def test_fine_tuning_in_three_lines(preset):
    encoder, path = preset
    keras.utils.set_random_seed(0)
    texts = ["great movie, loved it", "terrible, boring film", "what a delight",
             "awful acting"]
    labels = np.array([1, 0, 1, 0])
    # The three lines:
    classifier = keras_hub.models.BertTextClassifier.from_preset(path, num_classes=2)
    before = classifier.backbone.token_embedding.embeddings.numpy().copy()
    history = classifier.fit(x=texts, y=labels, batch_size=4, epochs=1, verbose=0)

    # It started from our pretrained encoder ...
    np.testing.assert_array_equal(before, encoder.token_embedding.embeddings.numpy())
    # ... took one optimizer step on the toy batch, and predicts two classes.
    loss = history.history["loss"]
    assert len(loss) == 1 and np.isfinite(loss[0]) and 0.3 < loss[0] < 1.5
    after = classifier.backbone.token_embedding.embeddings.numpy()
    assert not np.array_equal(before, after)
    assert classifier.preprocessor.sequence_length == 32
    assert classifier.predict(texts, verbose=0).shape == (4, 2)


def test_erf_gelu_encoder_is_exported_with_a_measured_warning(tmp_path, google_vocab_path,
                                                                capsys):
    encoder = _encoder("gelu_erf")
    path = str(tmp_path / "erf")
    keras_hub_preset.export_keras_hub_preset(encoder, google_vocab_path, True, path)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(lines) == 1 and "exact (erf) GELU" in lines[0]
    reported = float(re.search(r"differ by up to ([0-9.e+-]+)", lines[0]).group(1))
    backbone = keras_hub.models.BertBackbone.from_preset(path)
    measured = keras_hub_preset.probe_difference(encoder, backbone)
    assert reported == pytest.approx(measured, rel=1e-2)
    # Real but small: the tanh approximation is within ~1e-3 of the erf GELU per unit.
    assert 1e-6 < measured < 0.1


def test_bad_input(tmp_path, google_vocab_path, preset):
    encoder, path = preset
    small = tmp_path / "vocab.txt"
    small.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n")
    with pytest.raises(UserError, match="has 5 tokens but the model's vocab_size is 30522"):
        keras_hub_preset.export_keras_hub_preset(encoder, str(small), True, str(tmp_path / "a"))
    with pytest.raises(UserError, match="already exists"):
        keras_hub_preset.export_keras_hub_preset(encoder, google_vocab_path, True, path)
    assert not (tmp_path / "a").exists()


def test_command_line_writes_a_loadable_preset(tmp_path, google_vocab_path):
    """`python -m bert_tf.export --format=keras_hub` on a run directory, end to end."""
    encoder = _encoder("gelu_tanh", seed=5)
    weights = get_weights(encoder_weight_map(encoder))  # an encoder-only run: no heads
    write_native(convert.ModelFiles(encoder.config, weights, None, "test"), str(tmp_path / "run"))
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run(
        [sys.executable, "-m", "bert_tf.export", f"--output_dir={tmp_path / 'run'}",
         f"--vocab_file={google_vocab_path}", "--do_lower_case=true", "--format=keras_hub",
         f"--export_dir={tmp_path / 'preset'}"],
        cwd=repo, capture_output=True, text=True, timeout=600,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": repo})
    assert result.returncode == 0, result.stderr
    backbone = keras_hub.models.BertBackbone.from_preset(str(tmp_path / "preset"))
    ids, mask, segments = _inputs(seed=2)
    ours = encoder({"input_ids": ids, "input_mask": mask, "segment_ids": segments})
    theirs = backbone({"token_ids": ids, "padding_mask": mask, "segment_ids": segments})
    np.testing.assert_allclose(theirs["pooled_output"], ours["pooled_output"], atol=1e-5)
    preprocessor = keras_hub.models.BertTextClassifierPreprocessor.from_preset(
        str(tmp_path / "preset"))
    assert preprocessor.sequence_length == 64  # min(128, max_position_embeddings)
