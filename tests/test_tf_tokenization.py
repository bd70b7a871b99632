"""Tests for bert_tf.text.tf_tokenization: the in-graph tokenizer equals the Python one."""

from __future__ import annotations

import random
import unicodedata

import numpy as np
import pytest
import tensorflow as tf
from _tokenization_cases import HARD_CASES, SMALL_PIECES, SPECIALS, random_nasty_texts

from bert_tf.core import tokenization
from bert_tf.core.errors import UserError
from bert_tf.text import tf_tokenization


@pytest.fixture(scope="module", params=[True, False], ids=["uncased", "cased"])
def pair(request, google_vocab_path):
    """(TFBertTokenizer, FullTokenizer) on Google's vocab, for one casing."""
    lower = request.param
    return (tf_tokenization.TFBertTokenizer(google_vocab_path, do_lower_case=lower),
            tokenization.FullTokenizer(google_vocab_path, do_lower_case=lower))


@pytest.fixture()
def small_vocab_file(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(SPECIALS + SMALL_PIECES) + "\n", encoding="utf-8")
    return str(path)


def _tf_ids(tok, texts, batch_size=1024):
    out = []
    for i in range(0, len(texts), batch_size):
        out.extend(tok.tokenize(tf.constant(texts[i:i + batch_size])).to_list())
    return out


def test_golden_small_vocab(small_vocab_file):
    tok = tf_tokenization.TFBertTokenizer(small_vocab_file, do_lower_case=True)
    ids = tok.tokenize(tf.constant(["UNwant\u00e9d,running", "", "a" * 201 + " hello"]))
    assert isinstance(ids, tf.RaggedTensor) and ids.dtype == tf.int32
    assert ids.to_list() == [[5, 6, 7, 11, 9, 10], [], [1, 14]]
    tokens = tok.ids_to_tokens(ids[:1])
    assert tokens.to_list() == [[b"un", b"##want", b"##ed", b",", b"runn", b"##ing"]]
    cased = tf_tokenization.TFBertTokenizer(small_vocab_file, do_lower_case=False)
    assert cased.tokenize(tf.constant(["UNwant\u00e9d,running"])).to_list() == [[1, 11, 9, 10]]
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 1, 2, 3, 4)


def test_corpus_equals_python(pair, corpus_lines):
    tf_tok, py_tok = pair
    got = _tf_ids(tf_tok, corpus_lines)
    want = py_tok.encode_batch(corpus_lines)
    assert sum(len(x) for x in want) > 400_000  # Really tokenized the corpus.
    assert [i for i, (a, b) in enumerate(zip(got, want)) if a != b] == []


def test_hard_cases_equal_python(pair):
    tf_tok, py_tok = pair
    texts = HARD_CASES + random_nasty_texts(seed=7, n=2000)
    got = _tf_ids(tf_tok, texts)
    for text, ids in zip(texts, got):
        assert ids == py_tok.encode(text), repr(text)
    # What happens to Python-specific lower() cases: final sigma and U+0130 agree.
    if py_tok.do_lower_case:
        words = tf_tok.split_words(tf.constant(["ΟΔΟΣ ΟΔΟΣ \u0130stanbul"])).to_list()[0]
        assert [w.decode() for w in words] == ["οδος", "οδος", "istanbul"]
        assert words[0].decode()[-1] == "\u03c2"  # Final sigma, as str.lower().


def test_invalid_utf8_dropped_like_python(pair):
    tf_tok, py_tok = pair
    rng = random.Random(3)
    alphabet = [0x61, 0x62, 0x20, 0x2C, 0xC3, 0xA9, 0xE4, 0xB8, 0xAD, 0xFF, 0x80, 0xF0, 0x9F,
                0x98, 0xCE, 0xA3, 0xED, 0xA0]
    data = [bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 30))) for _ in range(2000)]
    got = tf_tok.tokenize(tf.constant(data)).to_list()
    assert got == [py_tok.encode(b) for b in data]
    assert tf_tok.tokenize(tf.constant([b"caf\xc3\xa9\xff!"])).to_list() == [
        py_tok.convert_tokens_to_ids(py_tok.tokenize("caf\u00e9!"))]


@pytest.mark.parametrize("lower", [True, False])
def test_every_unicode_32_character_splits_like_python(google_vocab_path, lower):
    """Each character assigned by Unicode 3.2, between two letters, in both tokenizers.

    Characters assigned later can differ when TensorFlow's ICU and Python's unicodedata are
    on different Unicode versions (with Python 3.11 and TF 2.21: 60 code points of Unicode
    13-14 that TF does not lower-case, e.g. U+2C2F); see the module docstring.
    """
    cps = [c for c in range(0x110000) if not 0xD800 <= c < 0xE000
           and unicodedata.ucd_3_2_0.category(chr(c)) != "Cn"]
    assert len(cps) > 90_000
    texts = ["x" + chr(c) + "Y" for c in cps]
    tf_tok = tf_tokenization.TFBertTokenizer(google_vocab_path, do_lower_case=lower)
    basic = tokenization.BasicTokenizer(do_lower_case=lower)
    got = tf_tok.split_words(tf.constant(texts)).to_list()
    bad = [hex(c) for c, text, words in zip(cps, texts, got)
           if [w.decode() for w in words] != basic.tokenize(text)]
    assert bad == []


def test_inside_tf_function_with_variable_batch(pair):
    tf_tok, py_tok = pair

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def lengths(texts):
        ids = tf_tok.tokenize(texts)
        return ids.row_lengths(), ids.flat_values

    texts = ["The lobster , H. americanus .", "\u00c9t\u00e9 \u4e2d\u6587!", ""]
    for n in (1, 3):
        row_lengths, flat = lengths(tf.constant(texts[:n]))
        want = [py_tok.encode(t) for t in texts[:n]]
        assert row_lengths.numpy().tolist() == [len(w) for w in want]
        assert flat.numpy().tolist() == [i for w in want for i in w]
    # Works on tf.data too.
    ds = tf.data.Dataset.from_tensor_slices(texts).batch(2).map(tf_tok.tokenize)
    assert [x for b in ds for x in b.to_list()] == [py_tok.encode(t) for t in texts]


# Google's uncased vocab, golden tokens written out (each line of the vocab is one token, its
# line number the id): accents stripped, CJK split per character, punctuation split, Greek
# lower-cased, unknown characters and words over 200 characters -> [UNK], zero-width and
# control characters deleted, no-break and ideographic spaces split words, no NFKC (full-width
# letters stay unknown), and the 200-character limit is inclusive.
GOLDEN = [
    ("H\u00e9llo, W\u00f6rld! \u00c7a va? Na\u00efve caf\u00e9",
     "hello , world ! ca va ? naive cafe"),
    ("The unaffable \u039f\u0394\u039f\u03a3 runs.",
     "the una ##ffa ##ble \u03bf ##\u03b4 ##\u03bf\u03c2 runs ."),
    ("\u5317\u4eac\u5927\u5b66 is in \u4e2d\u56fd\u3002",
     "\u5317 \u4eac \u5927 \u5b66 is in \u4e2d \u56fd \u3002"),
    ("don't stop\u2014it's 3.14%! (see: #42) $5",
     "don ' t stop \u2014 it ' s 3 . 14 % ! ( see : # 42 ) $ 5"),
    ("\u2603 \U0001F642 zxqvjkwp " + "a" * 201 + " " + "b" * 200,
     "[UNK] [UNK] z ##x ##q ##v ##jk ##w ##p [UNK] bb" + " ##bb" * 99),
    ("tab\there\u00a0nbsp\u200bzero\u3000ideo", "tab here n ##bs ##p ##zer ##o id ##eo"),
    ("", ""),
    ("\uff26\uff55\uff4c\uff4c \uff21\uff22\uff23 and \ufb01 ligature",
     "[UNK] [UNK] and \ufb01 liga ##ture"),
]
PAIR_SEQ = 16


class _PairEncoder(tf.Module):
    """What a serving model exports: text in, packed and truncated BERT inputs out."""

    def __init__(self, tokenizer: tf_tokenization.TFBertTokenizer):
        super().__init__()
        self.tokenizer = tokenizer

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)] * 2)
    def encode_pair(self, a, b):
        tok = self.tokenizer
        return tok.pack([tok.tokenize(a), tok.tokenize(b)], max_seq_length=PAIR_SEQ)


def _graph_op_types(concrete) -> set:
    """Op types of a concrete function's graph, nested functions included."""
    graph_def = concrete.graph.as_graph_def()
    types = {node.op for node in graph_def.node}
    for function in graph_def.library.function:
        types |= {node.op for node in function.node_def}
    return types


def test_golden_sentences_in_graph_and_after_saved_model(google_vocab_path, tmp_path):
    with open(google_vocab_path, encoding="utf-8") as f:
        vocab = {line.rstrip("\n"): i for i, line in enumerate(f)}
    texts = [text for text, _ in GOLDEN]
    want = [[vocab[t] for t in tokens.split()] for _, tokens in GOLDEN]
    assert want[1][:4] == [1996, 14477, 20961, 3468] and want[4][:2] == [100, 100]
    py_tok = tokenization.FullTokenizer(google_vocab_path, do_lower_case=True)
    assert py_tok.encode_batch(texts) == want  # the Python tokenizer agrees with the golden
    b_texts = texts[3:] + texts[:3]
    want_pairs = [_reference_pack(a, b, PAIR_SEQ) for a, b in zip(want, want[3:] + want[:3])]
    # Longest-first truncation, by hand: 9 + 21 tokens into a budget of 13 -> 7 + 6.
    assert want_pairs[0][0] == [101, 7592, 1010, 2088, 999, 6187, 12436, 1029, 102,
                                2123, 1005, 1056, 2644, 1517, 2009, 102]

    def check(tokenize, encode_pair):
        assert tokenize(tf.constant(texts)).to_list() == want
        packed = encode_pair(tf.constant(texts), tf.constant(b_texts))
        for name, k in (("input_ids", 0), ("input_mask", 1), ("segment_ids", 2)):
            assert packed[name].numpy().tolist() == [p[k] for p in want_pairs], name

    module = _PairEncoder(tf_tokenization.TFBertTokenizer(google_vocab_path, do_lower_case=True))
    check(module.tokenizer.tokenize, module.encode_pair)
    # Graph ops only: nothing calls back into Python (a SavedModel could not run it).
    op_types = _graph_op_types(module.encode_pair.get_concrete_function())
    assert not op_types & {"PyFunc", "PyFuncStateless", "EagerPyFunc"}, op_types
    assert "FastWordpieceTokenizeWithOffsets" in op_types, sorted(op_types)

    path = str(tmp_path / "pair_encoder")
    tf.saved_model.save(module, path, signatures={
        "serving_default": module.encode_pair.get_concrete_function()})
    del module
    loaded = tf.saved_model.load(path)
    check(loaded.tokenizer.tokenize, loaded.encode_pair)
    served = loaded.signatures["serving_default"](a=tf.constant(texts), b=tf.constant(b_texts))
    assert served["input_ids"].numpy().tolist() == [p[0] for p in want_pairs]


def test_saved_model_round_trip(small_vocab_file, tmp_path):
    tok = tf_tokenization.TFBertTokenizer(small_vocab_file, do_lower_case=True)
    texts = tf.constant(["UNwant\u00e9d,running", "How are you? \u535a\u63a8"])
    before = tok.tokenize(texts).to_list()
    path = str(tmp_path / "tokenizer")
    tf.saved_model.save(tok, path)
    del tok
    loaded = tf.saved_model.load(path)
    assert loaded.tokenize(texts).to_list() == before == [
        [5, 6, 7, 11, 9, 10], [15, 16, 17, 13, 22, 23]]
    assert loaded.tokenize(tf.constant(["hello"])).to_list() == [[14]]
    assert loaded.ids_to_tokens(tf.ragged.constant([[5, 6]], dtype=tf.int32)).to_list() == [
        [b"un", b"##want"]]


def _reference_pack(a, b, max_seq_length, cls_id=101, sep_id=102):
    """Plain-Python packing with the original longest-first pair truncation."""
    a, b = list(a), list(b) if b is not None else None
    budget = max_seq_length - (3 if b is not None else 2)
    while len(a) + (len(b) if b is not None else 0) > budget:
        if b is None or len(a) > len(b):
            a.pop()
        else:
            b.pop()
    ids = [cls_id] + a + [sep_id]
    seg = [0] * len(ids)
    if b is not None:
        ids += b + [sep_id]
        seg += [1] * (len(b) + 1)
    pad = max_seq_length - len(ids)
    return ids + [0] * pad, [1] * len(ids) + [0] * pad, seg + [0] * pad


@pytest.mark.parametrize("two", [True, False])
def test_pack_inputs_matches_reference_truncation(two):
    rng = np.random.default_rng(0)
    max_seq_length = 12
    a = [list(rng.integers(1000, 2000, rng.integers(0, 15))) for _ in range(200)]
    b = [list(rng.integers(2000, 3000, rng.integers(0, 15))) for _ in range(200)]
    segments = [tf.ragged.constant(a, dtype=tf.int32, ragged_rank=1)]
    if two:
        segments.append(tf.ragged.constant(b, dtype=tf.int32, ragged_rank=1))
    packed = tf_tokenization.pack_inputs(segments, max_seq_length, cls_id=101, sep_id=102)
    for k in ("input_ids", "input_mask", "segment_ids"):
        assert packed[k].dtype == tf.int32 and packed[k].shape == (200, max_seq_length)
    for i in range(200):
        ids, mask, seg = _reference_pack(a[i], b[i] if two else None, max_seq_length)
        assert packed["input_ids"][i].numpy().tolist() == ids
        assert packed["input_mask"][i].numpy().tolist() == mask
        assert packed["segment_ids"][i].numpy().tolist() == seg


def test_pack_hand_example(small_vocab_file):
    tok = tf_tokenization.TFBertTokenizer(small_vocab_file)
    a = tok.tokenize(tf.constant(["unwanted running"]))  # 5 tokens
    b = tok.tokenize(tf.constant(["how are you"]))        # 3 tokens
    packed = tok.pack([a, b], max_seq_length=8)  # budget 5: a keeps 3, b keeps 2 (a longer)
    assert packed["input_ids"].numpy().tolist() == [[2, 5, 6, 7, 3, 15, 16, 3]]
    assert packed["segment_ids"].numpy().tolist() == [[0, 0, 0, 0, 0, 1, 1, 1]]
    assert packed["input_mask"].numpy().tolist() == [[1] * 8]
    with pytest.raises(UserError, match="too small"):
        tok.pack([a, b], max_seq_length=4)
    with pytest.raises(UserError, match="1 or 2 segments"):
        tok.pack([a, b, a], max_seq_length=40)


def test_bad_vocab(tmp_path):
    path = tmp_path / "v.txt"
    path.write_text("\n".join(SPECIALS[:2] + ["", "x"] + SPECIALS[2:]) + "\n",
                    encoding="utf-8")
    with pytest.raises(UserError, match=r"v\.txt has an empty line \(line 3\)"):
        tf_tokenization.TFBertTokenizer(str(path))
    with pytest.raises(UserError, match="vocab file not found"):
        tf_tokenization.TFBertTokenizer(str(tmp_path / "missing.txt"))
