"""Tests for bert_tf.export.keras_hub_preset: keras-hub loads our encoder and fine-tunes it."""

import os
import re
import subprocess
import sys

import keras
import keras_hub
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.errors import UserError
from bert_tf.export import keras_hub_preset
from bert_tf.export.preset_tokenizer import OriginalBertTokenizer  # as users must: registers it
from bert_tf.interop import model_files as convert
from bert_tf.interop.native import write_native
from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.encoder import BertEncoder
from bert_tf.modeling.weight_map import encoder_weight_map, get_weights
from bert_tf.text.tokenization import FullTokenizer

# Strings where keras-hub's own BertTokenizer (NFKC case folding, split at Cc/Cf, 100-byte
# words) and the original algorithm disagree, and a few where they agree.
HARD_STRINGS = [
    "5 µg/ml", "m²", "ﬁnance", "Ⅻ", "①", "ＡＢＣ", "ﬀ", "Café Déjà vu", "北京大学の学生です",
    ("internationalization" * 8)[:150], "İstanbul", "Straße ß", "ΟΔΥΣΣΕΥΣ",
    "e\u0301a\u0308 n\u0303o\u0338", "🙂 👍🏽 👨\u200d👩\u200d👧",
    # The original deletes Cc/Cf and U+FFFD and splits at Zs; keras-hub does not.
    "x\u00a0y", "co\u00adoperate", "zero\u200bwidth", "a\ufffdb", "½ ㎏ \u212a ﬃ ǅ",
    "日本\u3000語", "b" * 201,
    "Hello, World!", "Café au lait, naïve résumé.", "unaffordable tokenization",
]
# Those of HARD_STRINGS on which keras-hub's BertTokenizer(lowercase=True,
# strip_accents=True), the tokenizer exported before OriginalBertTokenizer, gives other ids.
STOCK_UNCASED_DIFFERS = [0, 1, 2, 3, 4, 5, 6, 9, 11, 12, 14, 15, 16, 17, 18, 19, 20]


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


@pytest.fixture(scope="module")
def cased_preset(tmp_path_factory, google_vocab_path):
    """A preset exported with do_lower_case=False (the uncased vocab is fine for this)."""
    path = str(tmp_path_factory.mktemp("presets") / "tiny_bert_cased")
    keras_hub_preset.export_keras_hub_preset(_encoder("gelu_tanh"), google_vocab_path, False,
                                             path, max_seq_length=32)
    return path


@pytest.fixture(params=[True, False], ids=["uncased", "cased"])
def preset_and_case(request):
    """(preset directory, do_lower_case) for both settings."""
    lower = request.param
    fixture = "preset" if lower else "cased_preset"
    value = request.getfixturevalue(fixture)
    return (value[1] if lower else value), lower


def _ids_both_paths(layer, texts):
    """`layer(texts)` on keras-hub's Python path (an eager call) and its TensorFlow path
    (tf.data), each in one batch; a dict's "token_ids" if the layer is a preprocessor."""
    eager = layer(texts)
    graph = next(iter(tf.data.Dataset.from_tensor_slices(texts).batch(len(texts)).map(layer)))
    if isinstance(eager, dict):
        eager, graph = eager["token_ids"], graph["token_ids"]
    graph = graph.to_list() if isinstance(graph, tf.RaggedTensor) else graph.numpy().tolist()
    return [[int(i) for i in row] for row in eager], graph


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


def test_preset_tokenizer_agrees_with_ours(preset_and_case, google_vocab_path):
    path, lower = preset_and_case
    tokenizer = keras_hub.models.BertTokenizer.from_preset(path)
    assert isinstance(tokenizer, OriginalBertTokenizer) and tokenizer.lowercase == lower
    ours = FullTokenizer(google_vocab_path, do_lower_case=lower)
    expected = [ours.convert_tokens_to_ids(ours.tokenize(text)) for text in HARD_STRINGS]
    for text, ids in zip(HARD_STRINGS, expected):
        assert np.asarray(tokenizer(text)).tolist() == ids, text
    eager, graph = _ids_both_paths(tokenizer, HARD_STRINGS)
    assert eager == expected and graph == expected

    # The route users take: the classifier's preprocessor, [CLS] ids [SEP] padded to 32.
    classifier = keras_hub.models.BertTextClassifier.from_preset(path, num_classes=2)
    packed = [[ours.vocab["[CLS]"]] + ids[:30] + [ours.vocab["[SEP]"]] for ids in expected]
    packed = [row + [0] * (32 - len(row)) for row in packed]
    eager, graph = _ids_both_paths(classifier.preprocessor, HARD_STRINGS)
    assert eager == packed and graph == packed


def test_stock_keras_hub_tokenizer_differs_on_hard_strings(google_vocab_path):
    """Why the preset ships OriginalBertTokenizer: if keras-hub ever matches the original,
    this fails and the subclass may go."""
    ours = FullTokenizer(google_vocab_path, do_lower_case=True)
    stock = keras_hub.models.BertTokenizer(vocabulary=list(ours.vocab), lowercase=True,
                                           strip_accents=True)
    differs = [i for i, text in enumerate(HARD_STRINGS)
               if np.asarray(stock(text)).tolist() != ours.encode(text)]
    assert differs == STOCK_UNCASED_DIFFERS
    assert np.asarray(stock("5 µg/ml")).tolist() == ours.encode("5 μg/ml")  # Greek mu


def test_preset_tokenizer_matches_ours_on_the_corpus(preset_and_case, corpus_lines,
                                                     google_vocab_path):
    """Every line of the bundled corpus gets the pretraining ids, on both keras-hub paths
    (keras-hub's own tokenizer differs on 64 lines, uncased)."""
    path, lower = preset_and_case
    lines = [line for line in corpus_lines if line.strip()]
    assert len(lines) == 17541
    expected = FullTokenizer(google_vocab_path, do_lower_case=lower).encode_batch(lines)
    tokenizer = keras_hub.models.BertTextClassifier.from_preset(
        path, num_classes=2).preprocessor.tokenizer
    eager, graph = _ids_both_paths(tokenizer, lines)
    assert sum(a != b for a, b in zip(eager, expected)) == 0
    assert sum(a != b for a, b in zip(graph, expected)) == 0


def test_preset_tokenizer_output_formats_match_keras_hub(preset):
    """Scalars, batches of rank 2, ragged batches, sequence_length and string output (rank 1:
    above) come out as from keras-hub's BertTokenizer on each of its two paths (on text that
    both tokenizers split the same way)."""
    ours = keras_hub.models.BertTokenizer.from_preset(preset[1])
    stock = keras_hub.models.BertTokenizer(vocabulary=ours.vocabulary, lowercase=True,
                                           strip_accents=True)
    batch = [["Hello, World!", "a b"], ["unaffordable", ""]]
    for kwargs in [{}, {"sequence_length": 5, "dtype": "string"}]:
        layers = []
        for layer in (ours, stock):
            layer = type(layer).from_config({**layer.get_config(), **kwargs})
            layer.set_vocabulary(ours.vocabulary)
            layers.append(layer)
        for inputs in ["Hello, World!", batch, tf.ragged.constant([["x y"], []])]:
            eager = [_to_list(layer(inputs)) for layer in layers]
            graph = [_to_list(tf.function(layer)(tf.constant(inputs) if isinstance(
                inputs, (str, list)) else inputs)) for layer in layers]
            assert eager[0] == eager[1] and graph[0] == graph[1], (kwargs, inputs)
            assert isinstance(layers[0](inputs), type(layers[1](inputs)))


def _to_list(x):
    if isinstance(x, tf.RaggedTensor):
        return x.to_list()
    if hasattr(x, "numpy"):
        x = x.numpy()
    x = np.asarray(x, dtype=object).tolist() if not isinstance(x, list) else x
    return [_to_list(i) for i in x] if isinstance(x, list) else (
        x.decode() if isinstance(x, bytes) else x)


def test_loading_the_preset_without_the_tokenizer_class_fails_loudly(preset):
    registry = keras.saving.get_custom_objects()
    name = "bert_tf>OriginalBertTokenizer"
    cls = registry.pop(name)
    try:
        with pytest.raises(TypeError, match="OriginalBertTokenizer"):
            keras_hub.models.BertTextClassifier.from_preset(preset[1], num_classes=2)
    finally:
        registry[name] = cls


def test_original_tokenizer_rejects_other_algorithms(google_vocab_path):
    vocab = list(FullTokenizer(google_vocab_path).vocab)
    with pytest.raises(ValueError, match="strip_accents"):
        OriginalBertTokenizer(vocabulary=vocab, lowercase=True, strip_accents=False)
    with pytest.raises(ValueError, match="split=True"):
        OriginalBertTokenizer(vocabulary=vocab, split=False)
    with pytest.raises(ValueError, match="suffix_indicator='##'"):
        OriginalBertTokenizer(vocabulary=vocab, suffix_indicator="@@")


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
