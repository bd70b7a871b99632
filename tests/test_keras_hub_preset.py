"""Tests for bert_tf.export.keras_hub_preset: keras-hub loads our encoder and fine-tunes it.

The default preset is portable (keras-hub's own BertTokenizer: it loads in a process that
never imports bert_tf); the exact one (--preset_tokenizer=exact, OriginalBertTokenizer) gives
the pretraining ids.
"""

import contextlib
import io
import json
import os
import re
import subprocess
import sys

import keras
import keras_hub
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.core.errors import UserError
from bert_tf.core.tokenization import FullTokenizer
from bert_tf.export import keras_hub_preset
from bert_tf.export.preset_tokenizer import OriginalBertTokenizer  # as exact presets need
from bert_tf.export.tokenizer_check import MAX_CHECK_LINES
from bert_tf.interop import model_files as convert
from bert_tf.interop.native import write_native
from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.encoder import BertEncoder
from bert_tf.modeling.weight_map import encoder_weight_map, get_weights

CLI_ENV = {"TF_CPP_MIN_LOG_LEVEL": "3"}  # the `cli` fixture's server (conftest.py)

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
# strip_accents=True), the portable preset's tokenizer, gives other ids.
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


def _export(encoder, vocab_file, lower, path, **kwargs) -> str:
    """Exports; returns what the export printed to stderr."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        keras_hub_preset.export_keras_hub_preset(encoder, vocab_file, lower, path,
                                                 max_seq_length=32, **kwargs)
    return err.getvalue()


@pytest.fixture(scope="module")
def preset(tmp_path_factory, google_vocab_path):
    """(encoder, directory, stderr) of the default (portable) uncased preset."""
    encoder = _encoder("gelu_tanh")
    path = str(tmp_path_factory.mktemp("presets") / "tiny_bert")
    err = _export(encoder, google_vocab_path, True, path)
    return encoder, path, err


@pytest.fixture(scope="module")
def exact_preset(tmp_path_factory, google_vocab_path):
    """(encoder, directory) of an exact uncased preset."""
    encoder = _encoder("gelu_tanh")
    path = str(tmp_path_factory.mktemp("presets") / "tiny_bert_exact")
    _export(encoder, google_vocab_path, True, path, preset_tokenizer="exact")
    return encoder, path


@pytest.fixture(scope="module")
def exact_cased_preset(tmp_path_factory, google_vocab_path):
    """An exact preset exported with do_lower_case=False (the uncased vocab is fine for this)."""
    path = str(tmp_path_factory.mktemp("presets") / "tiny_bert_cased")
    _export(_encoder("gelu_tanh"), google_vocab_path, False, path, preset_tokenizer="exact")
    return path


@pytest.fixture(scope="module")
def exact_classifiers():
    """BertTextClassifier.from_preset of each exact preset, built once for the module (two
    tests read its preprocessor; a build costs about 0.7 CPU s)."""
    return {}


@pytest.fixture(params=[True, False], ids=["uncased", "cased"])
def exact_preset_and_case(request, exact_classifiers):
    """(exact preset directory, do_lower_case, the classifier loaded from it) for both
    settings."""
    lower = request.param
    path = (request.getfixturevalue("exact_preset")[1] if lower
            else request.getfixturevalue("exact_cased_preset"))
    if path not in exact_classifiers:
        exact_classifiers[path] = keras_hub.models.BertTextClassifier.from_preset(
            path, num_classes=2)
    return path, lower, exact_classifiers[path]


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
    encoder, path, _ = preset
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


def test_exact_preset_tokenizer_agrees_with_ours(exact_preset_and_case, google_vocab_path):
    path, lower, classifier = exact_preset_and_case
    tokenizer = keras_hub.models.BertTokenizer.from_preset(path)
    assert isinstance(tokenizer, OriginalBertTokenizer) and tokenizer.lowercase == lower
    ours = FullTokenizer(google_vocab_path, do_lower_case=lower)
    expected = [ours.convert_tokens_to_ids(ours.tokenize(text)) for text in HARD_STRINGS]
    for text, ids in zip(HARD_STRINGS, expected):
        assert np.asarray(tokenizer(text)).tolist() == ids, text
    eager, graph = _ids_both_paths(tokenizer, HARD_STRINGS)
    assert eager == expected and graph == expected

    # The route users take: the classifier's preprocessor (of
    # BertTextClassifier.from_preset(path)), [CLS] ids [SEP] padded to 32.
    packed = [[ours.vocab["[CLS]"]] + ids[:30] + [ours.vocab["[SEP]"]] for ids in expected]
    packed = [row + [0] * (32 - len(row)) for row in packed]
    eager, graph = _ids_both_paths(classifier.preprocessor, HARD_STRINGS)
    assert eager == packed and graph == packed


def test_portable_preset_tokenizer_is_keras_hubs_and_differs_on_hard_strings(
        preset, google_vocab_path):
    """The portable preset's tokenizer is keras-hub's own class, configured as the model was
    trained; why the exact one exists: if keras-hub ever matches the original, this fails
    and OriginalBertTokenizer may go."""
    tokenizer = keras_hub.models.BertTokenizer.from_preset(preset[1])
    assert type(tokenizer) is keras_hub.models.BertTokenizer
    assert tokenizer.lowercase and tokenizer.strip_accents
    with open(os.path.join(preset[1], "tokenizer.json"), encoding="utf-8") as f:
        saved = json.load(f)
    assert saved["module"].startswith("keras_hub.") and saved["class_name"] == "BertTokenizer"
    ours = FullTokenizer(google_vocab_path, do_lower_case=True)
    assert tokenizer.vocabulary == list(ours.vocab)
    differs = [i for i, text in enumerate(HARD_STRINGS)
               if np.asarray(tokenizer(text)).tolist() != ours.encode(text)]
    assert differs == STOCK_UNCASED_DIFFERS
    assert np.asarray(tokenizer("5 µg/ml")).tolist() == ours.encode("5 μg/ml")  # Greek mu


def test_portable_export_reports_the_vocabulary_check(preset):
    """Without a check file the export measures on the vocabulary's own tokens, in one line
    (Google's vocabulary: 30,522 tokens, 999 bracketed, 2,709 '##x' repeating an 'x')."""
    lines = preset[2].splitlines()
    assert len(lines) == 1, lines
    found = re.fullmatch(
        r"warning: keras-hub's tokenizer gives other ids than pretraining on ([0-9,]+) of "
        r"26,814 distinct tokens of the vocabulary \(no tokenizer check file given\) \(e\.g\. "
        r"line ([0-9]+): keras-hub '(.*)' where pretraining has '(.*)'\); export with "
        r"--preset_tokenizer=exact for identical ids \(needs "
        r"`import bert_tf\.export\.preset_tokenizer` before loading\)", lines[0])
    assert found, lines[0]
    # Among them at least the tokens of STOCK_UNCASED_DIFFERS' characters ('µ', '²', 'ß',
    # 'ς', ...); far fewer than the vocabulary.
    assert 20 <= int(found.group(1).replace(",", "")) < 1000
    with open(os.path.join(preset[1], "assets", "tokenizer", "vocabulary.txt"),
              encoding="utf-8") as f:
        vocabulary = f.read().split("\n")
    assert vocabulary[int(found.group(2)) - 1] == found.group(4)


def test_exact_preset_tokenizer_matches_ours_on_the_corpus(exact_preset_and_case,
                                                           corpus_lines, google_vocab_path):
    """Every line of the bundled corpus gets the pretraining ids, on both keras-hub paths
    (keras-hub's own tokenizer differs on some lines, uncased)."""
    _, lower, classifier = exact_preset_and_case  # BertTextClassifier.from_preset
    lines = [line for line in corpus_lines if line.strip()]
    assert len(lines) == 17541
    expected = FullTokenizer(google_vocab_path, do_lower_case=lower).encode_batch(lines)
    eager, graph = _ids_both_paths(classifier.preprocessor.tokenizer, lines)
    assert sum(a != b for a, b in zip(eager, expected)) == 0
    assert sum(a != b for a, b in zip(graph, expected)) == 0


def test_exact_preset_tokenizer_output_formats_match_keras_hub(exact_preset):
    """Scalars, batches of rank 2, ragged batches, sequence_length and string output (rank 1:
    above) come out as from keras-hub's BertTokenizer on each of its two paths (on text that
    both tokenizers split the same way)."""
    ours = keras_hub.models.BertTokenizer.from_preset(exact_preset[1])
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


def test_loading_an_exact_preset_without_the_tokenizer_class_fails_loudly(exact_preset):
    registry = keras.saving.get_custom_objects()
    name = "bert_tf>OriginalBertTokenizer"
    cls = registry.pop(name)
    try:
        with pytest.raises(TypeError, match="OriginalBertTokenizer"):
            keras_hub.models.BertTextClassifier.from_preset(exact_preset[1], num_classes=2)
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
    encoder, path, _ = preset
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
    # exact: no tokenizer check, whose line is not the subject here.
    keras_hub_preset.export_keras_hub_preset(encoder, google_vocab_path, True, path,
                                             preset_tokenizer="exact")
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
    encoder, path, _ = preset
    small = tmp_path / "vocab.txt"
    small.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n")
    new = str(tmp_path / "a")
    with pytest.raises(UserError, match="has 5 tokens but the model's vocab_size is 30522"):
        keras_hub_preset.export_keras_hub_preset(encoder, str(small), True, new)
    with pytest.raises(UserError, match="already exists"):
        keras_hub_preset.export_keras_hub_preset(encoder, google_vocab_path, True, path)
    with pytest.raises(UserError, match="preset tokenizer 'stock': choose one of portable, "
                                        "exact"):
        keras_hub_preset.export_keras_hub_preset(encoder, google_vocab_path, True, new,
                                                 preset_tokenizer="stock")
    with pytest.raises(UserError, match="the check measures the portable tokenizer"):
        keras_hub_preset.export_keras_hub_preset(encoder, google_vocab_path, True, new,
                                                 preset_tokenizer="exact",
                                                 tokenizer_check_file=str(small))
    with pytest.raises(UserError, match="missing.txt: cannot read it"):
        keras_hub_preset.export_keras_hub_preset(encoder, google_vocab_path, True, new,
                                                 tokenizer_check_file=str(tmp_path / "missing.txt"))
    assert not (tmp_path / "a").exists()


# Run in a fresh interpreter in which importing bert_tf raises, as on a machine where only
# keras-hub is installed: loads the portable preset the ways a new user would.
_WITHOUT_BERT_TF = r"""
import importlib.abc, json, sys

class NoBertTf(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "bert_tf" or name.startswith("bert_tf."):
            raise ImportError(f"{name} imported: the preset must load with keras-hub alone")

sys.meta_path.insert(0, NoBertTf())
import keras_hub, numpy as np

preset, work = sys.argv[1], sys.argv[2]
inputs = np.load(f"{work}/inputs.npz")
backbone = keras_hub.models.BertBackbone.from_preset(preset)
outputs = backbone({"token_ids": inputs["ids"], "padding_mask": inputs["mask"],
                    "segment_ids": inputs["segments"]})
np.savez(f"{work}/outputs.npz", sequence=np.asarray(outputs["sequence_output"]),
         pooled=np.asarray(outputs["pooled_output"]))
with open(f"{work}/texts.json", encoding="utf-8") as f:
    texts = json.load(f)
tokenizer = keras_hub.models.BertTokenizer.from_preset(preset)
preprocessor = keras_hub.models.BertTextClassifierPreprocessor.from_preset(preset)
with open(f"{work}/ids.json", "w", encoding="utf-8") as f:
    json.dump({"ids": [np.asarray(tokenizer(t)).tolist() for t in texts],
               "packed": np.asarray(preprocessor(texts)["token_ids"]).tolist(),
               "tokenizer": type(tokenizer).__module__ + "." + type(tokenizer).__name__,
               "bert_tf_modules": sorted(m for m in sys.modules if m.startswith("bert_tf"))}, f)
"""


def test_portable_preset_loads_with_keras_hub_alone(preset, tmp_path, google_vocab_path):
    """BertBackbone.from_preset, BertTokenizer.from_preset and the classifier preprocessor in
    a process that never imports bert_tf: the backbone computes our encoder's outputs, the
    tokenizer gives keras-hub's ids (the pretraining ids wherever keras-hub has them)."""
    encoder, path, _ = preset
    ids, mask, segments = _inputs(seed=3)
    np.savez(tmp_path / "inputs.npz", ids=ids, mask=mask, segments=segments)
    (tmp_path / "texts.json").write_text(json.dumps(HARD_STRINGS), encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-c", _WITHOUT_BERT_TF, path, str(tmp_path)],
        cwd=str(tmp_path), capture_output=True, text=True, timeout=600,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": ""})
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = json.loads((tmp_path / "ids.json").read_text(encoding="utf-8"))
    assert loaded["bert_tf_modules"] == []
    assert loaded["tokenizer"] == "keras_hub.src.models.bert.bert_tokenizer.BertTokenizer"

    ours = encoder({"input_ids": ids, "input_mask": mask, "segment_ids": segments})
    theirs = np.load(tmp_path / "outputs.npz")
    real = mask.astype(bool)
    np.testing.assert_allclose(theirs["sequence"][real],
                               np.asarray(ours["sequence_output"])[real], atol=1e-5)
    np.testing.assert_allclose(theirs["pooled"], ours["pooled_output"], atol=1e-5)

    full = FullTokenizer(google_vocab_path, do_lower_case=True)
    stock = keras_hub.models.BertTokenizer(vocabulary=list(full.vocab), lowercase=True,
                                           strip_accents=True)
    assert loaded["ids"] == [np.asarray(stock(text)).tolist() for text in HARD_STRINGS]
    same = [i for i in range(len(HARD_STRINGS)) if i not in STOCK_UNCASED_DIFFERS]
    for i in same:
        expected = full.encode(HARD_STRINGS[i])
        assert loaded["ids"][i] == expected, HARD_STRINGS[i]
        packed = [full.vocab["[CLS]"]] + expected[:30] + [full.vocab["[SEP]"]]
        assert loaded["packed"][i] == packed + [0] * (32 - len(packed))


def test_command_line_writes_a_loadable_preset(tmp_path, google_vocab_path, cli):
    """`python -m bert_tf.export --format=keras_hub` on a run directory, end to end, with a
    tokenizer check file longer than the check reads."""
    encoder = _encoder("gelu_tanh", seed=5)
    weights = get_weights(encoder_weight_map(encoder))  # an encoder-only run: no heads
    write_native(convert.ModelFiles(encoder.config, weights, None, "test"), str(tmp_path / "run"))
    check_file = tmp_path / "domain.txt"
    # Lines 2 ('ﬁ' ligature) and 4 (a 120-byte word) differ; the final 'ﬁ' is past the cap.
    check_file.write_text("\n".join(["the cat sat.", "ﬁnance", "", "a" * 120]
                                    + ["ok"] * MAX_CHECK_LINES + ["ﬁ"]) + "\n",
                          encoding="utf-8")
    result = cli.run("bert_tf.export", [
        f"--output_dir={tmp_path / 'run'}", f"--vocab_file={google_vocab_path}",
        "--do_lower_case=true", "--format=keras_hub", f"--export_dir={tmp_path / 'preset'}",
        f"--tokenizer_check_file={check_file}"])
    assert result.returncode == 0, result.stderr
    reports = [line for line in result.stderr.splitlines() if "keras-hub's tokenizer" in line]
    assert reports == [
        f"warning: keras-hub's tokenizer gives other ids than pretraining on 2 of the first "
        f"10,000 lines of {check_file} (e.g. line 2: keras-hub 'finance' where pretraining "
        "has 'ﬁ'); export with --preset_tokenizer=exact for identical ids (needs "
        "`import bert_tf.export.preset_tokenizer` before loading)"]
    backbone = keras_hub.models.BertBackbone.from_preset(str(tmp_path / "preset"))
    ids, mask, segments = _inputs(seed=2)
    ours = encoder({"input_ids": ids, "input_mask": mask, "segment_ids": segments})
    theirs = backbone({"token_ids": ids, "padding_mask": mask, "segment_ids": segments})
    np.testing.assert_allclose(theirs["pooled_output"], ours["pooled_output"], atol=1e-5)
    preprocessor = keras_hub.models.BertTextClassifierPreprocessor.from_preset(
        str(tmp_path / "preset"))
    assert preprocessor.sequence_length == 64  # min(128, max_position_embeddings)
    assert type(preprocessor.tokenizer) is keras_hub.models.BertTokenizer


@pytest.mark.parametrize("args, message", [
    (["--preset_tokenizer=exact"], "--preset_tokenizer applies to --format=keras_hub only"),
    (["--format=keras_hub", "--preset_tokenizer=exact", "--tokenizer_check_file=x.txt"],
     "--tokenizer_check_file measures the portable tokenizer"),
], ids=["saved_model", "exact_with_check_file"])
def test_command_line_refuses_tokenizer_flags_that_do_not_apply(tmp_path, args, message, cli):
    result = cli.run("bert_tf.export", [f"--output_dir={tmp_path}", "--vocab_file=vocab.txt",
                                        "--do_lower_case=true",
                                        f"--export_dir={tmp_path / 'out'}"] + args)
    assert result.returncode != 0
    assert message in result.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "out").exists()
