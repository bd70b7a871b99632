"""Tests for bert_tf.export.serving: every signature against the Python path and the Keras model."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.core.tokenization import FullTokenizer
from bert_tf.export.serving import BertServingModule
from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.pretraining_model import BertPretrainingModel
from bert_tf.text.tf_tokenization import TFBertTokenizer

MAX_SEQ_LENGTH = 24
CLS, SEP, MASK = 101, 102, 103


@pytest.fixture(scope="module")
def setup(google_vocab_path):
    keras.utils.set_random_seed(7)
    config = BertConfig(vocab_size=30522, hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=32, max_position_embeddings=64,
                        type_vocab_size=2, hidden_act="gelu_approximate")
    model = BertPretrainingModel(config, use_nsp=False)
    module = BertServingModule(model.encoder, TFBertTokenizer(google_vocab_path, True),
                               MAX_SEQ_LENGTH, mlm_head=model.mlm_head, top_k=5)
    return model, module, FullTokenizer(google_vocab_path, do_lower_case=True)


def _truncate_pair(a, b, budget):
    """The original _truncate_seq_pair: pop from the end of the longer, B on ties."""
    a, b = list(a), list(b)
    while len(a) + len(b) > budget:
        (a if len(a) > len(b) else b).pop()
    return a, b


def _python_pack(tokenizer, texts_a, texts_b=None):
    rows, segs = [], []
    for i, text in enumerate(texts_a):
        a = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(text))
        if texts_b is None:
            a = a[:MAX_SEQ_LENGTH - 2]
            rows.append([CLS] + a + [SEP])
            segs.append([0] * (len(a) + 2))
        else:
            b = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(texts_b[i]))
            a, b = _truncate_pair(a, b, MAX_SEQ_LENGTH - 3)
            rows.append([CLS] + a + [SEP] + b + [SEP])
            segs.append([0] * (len(a) + 2) + [1] * (len(b) + 1))
    longest = max(len(r) for r in rows)
    ids = np.array([r + [0] * (longest - len(r)) for r in rows], np.int32)
    segments = np.array([s + [0] * (longest - len(s)) for s in segs], np.int32)
    return ids, (ids > 0).astype(np.int32), segments


def _keras(model, ids, mask, segments):
    out = model.encoder({"input_ids": ids, "input_mask": mask, "segment_ids": segments})
    return np.asarray(out["sequence_output"]), np.asarray(out["pooled_output"])


def test_text_signature_matches_python_tokenizer_and_keras(setup):
    model, module, tokenizer = setup
    texts = ["Hello, world!", "Café au lait is not naïve; it's délicieux.",
             "A sentence long enough to be truncated at twenty four tokens by the packer, for "
             "sure: it goes on and on, well past the limit."]
    out = module.serve_text(tf.constant(texts))
    ids, mask, segments = _python_pack(tokenizer, texts)
    assert ids.shape == (3, MAX_SEQ_LENGTH)  # The longest row was truncated to the maximum.
    np.testing.assert_array_equal(out["input_ids"], ids)
    np.testing.assert_array_equal(out["input_mask"], mask)
    np.testing.assert_array_equal(out["segment_ids"], segments)
    seq, pooled = _keras(model, ids, mask, segments)
    np.testing.assert_allclose(out["sequence_output"], seq, atol=1e-5)
    np.testing.assert_allclose(out["pooled_output"], pooled, atol=1e-5)
    # Short batches are padded to their own longest row only.
    short = module.serve_text(tf.constant(["hi", "hello there"]))
    assert short["input_ids"].shape == (2, 4)
    np.testing.assert_array_equal(short["input_ids"], [[CLS, 7632, SEP, 0],
                                                       [CLS, 7592, 2045, SEP]])


def test_text_pair_signature_truncates_longest_first(setup):
    model, module, tokenizer = setup
    a = ["who wrote the book?", "one two three four five six seven eight nine ten eleven "
         "twelve thirteen fourteen fifteen"]
    b = ["it was written by her in nineteen ninety.", "short answer"]
    out = module.serve_text_pair(tf.constant(a), tf.constant(b))
    ids, mask, segments = _python_pack(tokenizer, a, b)
    np.testing.assert_array_equal(out["input_ids"], ids)
    np.testing.assert_array_equal(out["segment_ids"], segments)
    assert segments[0].tolist().count(1) == len(tokenizer.tokenize(b[0])) + 1
    seq, pooled = _keras(model, ids, mask, segments)
    np.testing.assert_allclose(out["pooled_output"], pooled, atol=1e-5)
    np.testing.assert_allclose(out["sequence_output"], seq, atol=1e-5)


def test_ids_signature_with_tf_hub_names_any_shape(setup):
    model, module, _ = setup
    rng = np.random.default_rng(0)
    for batch, seq_len in ((1, 5), (3, 17)):
        ids = rng.integers(0, 30522, (batch, seq_len)).astype(np.int32)
        mask = np.ones_like(ids)
        mask[0, seq_len - 2:] = 0
        segments = (np.arange(seq_len) > seq_len // 2).astype(np.int32)[None].repeat(batch, 0)
        out = module.serve_ids(input_word_ids=ids, input_mask=mask, input_type_ids=segments)
        assert sorted(out) == ["pooled_output", "sequence_output"]
        seq, pooled = _keras(model, ids, mask, segments)
        np.testing.assert_allclose(out["sequence_output"], seq, atol=1e-5)
        np.testing.assert_allclose(out["pooled_output"], pooled, atol=1e-5)


def test_fill_mask_keeps_the_literal_and_matches_the_mlm_head(setup):
    model, module, tokenizer = setup
    texts = ["The [MASK] sat on the [MASK].", "no mask here", "[MASK]",
             "paris is the [MASK] of france"]
    out = {k: v.numpy() for k, v in module.fill_mask(tf.constant(texts)).items()}

    # Python path: split on the literal, tokenize the pieces, put [MASK] ids between them.
    rows = []
    for text in texts:
        pieces = [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(p))
                  for p in text.split("[MASK]")]
        ids = pieces[0]
        for piece in pieces[1:]:
            ids = ids + [MASK] + piece
        rows.append([CLS] + ids + [SEP])
    assert rows[0][:4] == [CLS, 1996, MASK, 2938]  # "the [MASK] sat": the literal survived
    positions = [[i for i, t in enumerate(r) if t == MASK] for r in rows]
    np.testing.assert_array_equal(out["mask_positions"], [[2, 6], [-1, -1], [1, -1], [4, -1]])
    assert positions == [[2, 6], [], [1], [4]]

    longest = max(len(r) for r in rows)
    ids = np.array([r + [0] * (longest - len(r)) for r in rows], np.int32)
    padded_positions = np.array([p + [0] * (2 - len(p)) for p in positions], np.int32)
    logits = np.asarray(model({"input_ids": ids, "input_mask": (ids > 0).astype(np.int32),
                               "segment_ids": np.zeros_like(ids),
                               "masked_lm_positions": padded_positions})["mlm_logits"],
                        np.float64)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    for i, p in enumerate(positions):
        for j in range(2):
            if j >= len(p):
                assert (out["top_k_ids"][i, j] == -1).all()
                assert (out["top_k_scores"][i, j] == 0).all()
                assert (out["top_k_tokens"][i, j] == b"").all()
                continue
            want = np.argsort(-probs[i, j], kind="stable")[:5]
            np.testing.assert_array_equal(out["top_k_ids"][i, j], want)
            np.testing.assert_allclose(out["top_k_scores"][i, j], probs[i, j, want], atol=1e-6)
            assert [t.decode() for t in out["top_k_tokens"][i, j]] == \
                tokenizer.convert_ids_to_tokens(want)


def test_fill_mask_beyond_max_seq_length_is_truncated(setup):
    _, module, _ = setup
    text = " ".join(["word"] * 30) + " [MASK] and [MASK]"
    out = module.fill_mask(tf.constant([text, "a [MASK] b"]))
    np.testing.assert_array_equal(out["mask_positions"].numpy(), [[-1], [2]])


def test_signatures_listed_and_saveable_without_mlm_head(setup, tmp_path):
    model, module, _ = setup
    assert sorted(module.signatures()) == ["fill_mask", "serve_ids", "serve_text_pair",
                                           "serving_default"]
    without = BertServingModule(model.encoder, module.tokenizer, 16)
    assert not hasattr(without, "fill_mask")
    tf.saved_model.save(without, str(tmp_path / "sm"), signatures=without.signatures())
    loaded = tf.saved_model.load(str(tmp_path / "sm"))
    assert sorted(loaded.signatures) == ["serve_ids", "serve_text_pair", "serving_default"]
    out = loaded.signatures["serving_default"](text_a=tf.constant(["hello there"]))
    np.testing.assert_array_equal(out["input_ids"], [[CLS, 7592, 2045, SEP]])


def test_saving_traces_each_function_once_and_the_encoder_once(setup, tmp_path):
    """tf.saved_model.save traces in its own context: a signature traced beforehand would be
    traced (and stored) twice. Every signature calls the one traced `encode_ids`."""
    model, module, _ = setup
    fresh = BertServingModule(model.encoder, module.tokenizer, 16, mlm_head=model.mlm_head,
                              pooling="mean")
    tf.saved_model.save(fresh, str(tmp_path / "sm"), signatures=fresh.signatures())
    for name in ("serve_text", "serve_text_pair", "serve_ids", "fill_mask", "embed",
                 "encode_ids"):
        assert getattr(fresh, name).experimental_get_tracing_count() == 1, name
    loaded = tf.saved_model.load(str(tmp_path / "sm"))
    ids = {"input_ids": tf.constant([[CLS, 7592, 2045, SEP]]),
           "input_mask": tf.ones([1, 4], tf.int32), "segment_ids": tf.zeros([1, 4], tf.int32)}
    by_ids = loaded.signatures["serve_ids"](input_word_ids=ids["input_ids"],
                                            input_mask=ids["input_mask"],
                                            input_type_ids=ids["segment_ids"])
    shared = loaded.encode_ids(ids)
    np.testing.assert_allclose(shared["sequence_output"], by_ids["sequence_output"], atol=1e-6)
    np.testing.assert_allclose(shared["pooled_output"], by_ids["pooled_output"], atol=1e-6)
