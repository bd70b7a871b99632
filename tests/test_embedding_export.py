"""Tests for bert_tf.export.embedding_export and the `embed` signature of
bert_tf.export.serving: an exported tiny model's embed equals the Keras `BertEmbedder` on the
Python tokenizer's ids, for each pooling; the real all-MiniLM-L6-v2 written back as a
sentence-transformers folder by `convert_checkpoint` and exported serves the vectors of the
original folder."""

from __future__ import annotations

import dataclasses
import json

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (the SavedModel's tokenizer ops)
from _pretraining_helpers import VOCAB, minilm_dir, tiny_bert_config

from bert_tf.core.tokenization import FullTokenizer
from bert_tf.export.embedding_export import export_st_folder
from bert_tf.export.serving import BertServingModule
from bert_tf.finetune.retrieval import features
from bert_tf.finetune.retrieval.embedder import BertEmbedder
from bert_tf.text.tf_tokenization import TFBertTokenizer

CLI_ENV = {"TF_CPP_MIN_LOG_LEVEL": "3"}  # the `cli` fixture's server (conftest.py)
MAX_SEQ_LENGTH = 12
WORDS = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran", "far", "away", "##s", "."]
TEXTS = ["The cat sat on the mat.", "a dog", "Dogs ran far far away, the cats sat on "
         "a mat on a mat on a mat.", "cat"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(vocab_file, embedder): a one-layer model with a 128-token vocabulary of WORDS."""
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS
    words += [f"w{i}" for i in range(VOCAB - len(words))]
    vocab = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    vocab.write_text("\n".join(words) + "\n")
    keras.utils.set_random_seed(3)
    embedder = BertEmbedder(tiny_bert_config(), pooling="mean")
    return str(vocab), embedder


def _keras_embeddings(embedder, vocab_file, texts, length=MAX_SEQ_LENGTH):
    """The bi-encoder's own path: FullTokenizer ids padded to `length`, BertEmbedder."""
    arrays = features.encode_texts(texts, FullTokenizer(vocab_file, True), length).arrays
    return keras.ops.convert_to_numpy(embedder(arrays)["embedding"])


@pytest.fixture(scope="module")
def bi_encoder_run(tiny, tmp_path_factory):
    """A run_retrieval output_dir as its training leaves it (cls pooling, normalised): the
    embedder's checkpoint, bert_config.json, vocab.txt, finetune_task.json."""
    vocab, embedder = tiny
    run = tmp_path_factory.mktemp("bi_encoder")
    trained = BertEmbedder(embedder.config, pooling="cls")
    trained.encoder = embedder.encoder
    tf.train.Checkpoint(model=trained).save(str(run / "ckpt"))
    embedder.config.to_json_file(str(run / "bert_config.json"))
    (run / "vocab.txt").write_text(open(vocab).read())
    (run / "finetune_task.json").write_text(json.dumps(
        {"kind": "bi_encoder", "pooling": "cls", "normalize": True, "do_lower_case": True,
         "max_query_length": 8, "max_passage_length": MAX_SEQ_LENGTH,
         "similarity_scale": 20.0}))
    return str(run), trained


@pytest.fixture(scope="module")
def exported_run(bi_encoder_run, tmp_path_factory, cli):
    """(run dir, its embedder, the SavedModel `python -m bert_tf.export` wrote of it): one
    export (tracing four signatures is most of a test's cost) for the two tests below."""
    run, trained = bi_encoder_run
    export_dir = tmp_path_factory.mktemp("export") / "1"
    result = cli.run("bert_tf.export", [f"--output_dir={run}", f"--export_dir={export_dir}"])
    assert result.returncode == 0, result.stderr
    return run, trained, str(export_dir)


def test_exported_embed_equals_the_embedder(exported_run):
    """The CLI's export goes through `export_embedder` (as does export_st_folder, whose mean
    pooling the MiniLM test below checks); this one pools as the run did: cls."""
    run, trained, export_dir = exported_run
    vocab = run + "/vocab.txt"
    loaded = tf.saved_model.load(export_dir)
    assert {"serving_default", "serve_text_pair", "serve_ids", "embed"} <= set(
        loaded.signatures)
    assert "fill_mask" not in loaded.signatures
    out = loaded.signatures["embed"](text=tf.constant(TEXTS))["embedding"].numpy()
    assert out.shape == (4, 32) and out.dtype == np.float32
    np.testing.assert_allclose(out, _keras_embeddings(trained, vocab, TEXTS), atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-6)
    # The third text is longer than MAX_SEQ_LENGTH: cut as the bi-encoder cuts it, so its
    # vector differs from the whole text's.
    whole = _keras_embeddings(trained, vocab, TEXTS[2:3], 40)
    assert np.abs(out[2] - whole[0]).max() > 1e-3


@pytest.mark.parametrize("mode,normalize", [("cls", True), ("max", False)])
def test_embed_pools_as_the_embedder(tiny, mode, normalize):
    vocab, embedder = tiny
    module = BertServingModule(embedder.encoder, TFBertTokenizer(vocab, True), MAX_SEQ_LENGTH,
                               pooling=mode, normalize=normalize)
    assert "embed" in module.signatures()
    out = module.embed(tf.constant(TEXTS))["embedding"].numpy()
    same = BertEmbedder(embedder.config, pooling=mode, normalize=normalize)
    same.encoder = embedder.encoder  # the same weights under another pooling
    np.testing.assert_allclose(out, _keras_embeddings(same, vocab, TEXTS), atol=1e-6)
    norms = np.linalg.norm(out, axis=1)
    if normalize:
        np.testing.assert_allclose(norms, 1.0, rtol=1e-6)
    else:
        assert np.all(np.abs(norms - 1.0) > 1e-3)


def test_no_pooling_no_embed_signature(tiny):
    vocab, embedder = tiny
    module = BertServingModule(embedder.encoder, TFBertTokenizer(vocab, True), MAX_SEQ_LENGTH)
    assert not hasattr(module, "embed")  # signatures() would trace the three others


@pytest.mark.slow  # converts and exports the real 22M-parameter model (~40 CPU s)
def test_minilm_round_trip_through_a_written_folder(tmp_path, cli):
    from bert_tf.finetune import warm_start
    from bert_tf.finetune.retrieval import st_folder

    source = minilm_dir()
    written = tmp_path / "minilm_st"
    result = cli.run("bert_tf.convert_checkpoint", [
        "--from_format=hf", "--to_format=sentence_transformers", f"--input={source}",
        f"--output={written}"], timeout=600)
    assert result.returncode == 0, result.stderr
    assert "mean pooling, normalised, 256 tokens" in result.stdout
    modules = json.loads((written / "modules.json").read_text())
    assert [(m["path"], m["type"].rsplit(".", 1)[-1]) for m in modules] == [
        ("", "Transformer"), ("1_Pooling", "Pooling"), ("2_Normalize", "Normalize")]
    pool = json.loads((written / "1_Pooling" / "config.json").read_text())
    assert pool["word_embedding_dimension"] == 384 and pool["pooling_mode"] == "mean"
    assert [k for k, v in pool.items() if k.startswith("pooling_mode_") and v] == [
        "pooling_mode_mean_tokens"]
    assert json.loads((written / "sentence_bert_config.json").read_text()) == {
        "max_seq_length": 256, "do_lower_case": False}
    tokenizer = json.loads((written / "tokenizer_config.json").read_text())
    assert tokenizer["do_lower_case"] is True  # MiniLM's tokenizer lower-cases
    assert st_folder.read_folder(str(written)) == dataclasses.replace(
        st_folder.read_folder(source), transformer_dir=str(written))

    export_dir = export_st_folder(str(written), str(tmp_path / "export"))
    loaded = tf.saved_model.load(export_dir)
    texts = ["A man is playing a guitar.", "Someone plays an instrument.",
             "The new movie is awesome; the critics loved it!", "Ünïcode façade", "x" * 600]
    served = loaded.signatures["embed"](text=tf.constant(texts))["embedding"].numpy()

    model = warm_start.resolve(source, "", "")
    original = BertEmbedder(model.config, "mean", True)
    ours = features.encode_texts(texts, FullTokenizer(model.vocab_file, True), 256).arrays
    original(ours)
    warm_start.load_encoder_weights(original, model.files)
    expected = keras.ops.convert_to_numpy(original(ours)["embedding"])
    assert served.shape == (5, 384)
    np.testing.assert_allclose(served, expected, atol=1e-5)
    # The vectors are the model's, not a constant: the paraphrases are closer to each other.
    assert served[0] @ served[1] > served[0] @ served[2] + 0.2


def test_a_bi_encoder_run_exports_and_converts_with_its_settings(exported_run, tmp_path,
                                                                 cli):
    from bert_tf.finetune.retrieval import st_folder
    from bert_tf.interop import hf_checkpoint

    run, trained, export_dir = exported_run
    served = tf.saved_model.load(export_dir).signatures["embed"](
        text=tf.constant(TEXTS))["embedding"].numpy()
    np.testing.assert_allclose(served, _keras_embeddings(trained, run + "/vocab.txt", TEXTS),
                               atol=1e-6)

    folder = tmp_path / "st"
    result = cli.run("bert_tf.convert_checkpoint", [
        "--from_format=bert_tf", "--to_format=sentence_transformers", f"--input={run}",
        f"--output={folder}"])
    assert result.returncode == 0, result.stderr
    read = st_folder.read_folder(str(folder))
    assert (read.pooling, read.normalize, read.max_seq_length, read.do_lower_case) == (
        "cls", True, MAX_SEQ_LENGTH, True)
    pool = json.loads((folder / "1_Pooling" / "config.json").read_text())
    assert pool["pooling_mode"] == "cls" and pool["pooling_mode_cls_token"] is True
    assert pool["pooling_mode_mean_tokens"] is False
    weights = hf_checkpoint.read(str(folder)).weights
    assert not any(k.startswith(("mlm/", "nsp/")) for k in weights)
    word = keras.ops.convert_to_numpy(next(
        w for w in trained.encoder.weights if "word_embeddings" in w.path))
    np.testing.assert_array_equal(weights["embeddings/word_embeddings"], word)

    # A pooling other than the trained one is refused in one line.
    result = cli.run("bert_tf.convert_checkpoint", [
        "--from_format=bert_tf", "--to_format=sentence_transformers", f"--input={run}",
        f"--output={tmp_path / 'st2'}", "--pooling=mean"])
    assert result.returncode != 0
    assert "--pooling=mean" in result.stderr and "embeds with cls pooling" in result.stderr
