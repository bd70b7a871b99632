"""Tests for bert_tf.core.tokenization: golden cases, vocab errors, fast path, HF oracle."""

from __future__ import annotations

import pickle
import subprocess
import sys

import numpy as np
import pytest
import tokenizers
from _tokenization_cases import HARD_CASES, SMALL_PIECES, SPECIALS, random_nasty_texts

from bert_tf.core import tokenization
from bert_tf.core.errors import UserError


@pytest.fixture()
def small_vocab_file(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(SPECIALS + SMALL_PIECES) + "\n", encoding="utf-8")
    return str(path)


def hf_oracle(vocab_file: str, lower: bool):
    """Hugging Face `tokenizers` configured as the reference BERT tokenizer."""
    from tokenizers import normalizers, pre_tokenizers
    from tokenizers.models import WordPiece

    # The reference's max_input_chars_per_word is 200 (HF defaults to 100).
    tok = tokenizers.Tokenizer(
        WordPiece.from_file(vocab_file, unk_token="[UNK]", max_input_chars_per_word=200))
    tok.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=lower, lowercase=lower)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return tok


# --- Golden, hand-worked cases ---------------------------------------------------------

def test_full_tokenizer_golden_uncased(small_vocab_file):
    tok = tokenization.FullTokenizer(small_vocab_file, do_lower_case=True)
    # lower + NFD + drop Mn: "unwanted,running"; punctuation split; "unwanted" -> un ##want ##ed.
    tokens = tok.tokenize("UNwant\u00e9d,running")
    assert tokens == ["un", "##want", "##ed", ",", "runn", "##ing"]
    assert tok.convert_tokens_to_ids(tokens) == [5, 6, 7, 11, 9, 10]
    assert tok.encode("UNwant\u00e9d,running") == [5, 6, 7, 11, 9, 10]
    assert tok.convert_ids_to_tokens([5, 6, 7]) == ["un", "##want", "##ed"]


def test_full_tokenizer_golden_cased(small_vocab_file):
    tok = tokenization.FullTokenizer(small_vocab_file, do_lower_case=False)
    # No lower-casing: "UNwant\u00e9d" has no prefix in the vocab -> one [UNK] for the word.
    assert tok.tokenize("UNwant\u00e9d,running") == ["[UNK]", ",", "runn", "##ing"]
    assert tok.encode("UNwant\u00e9d,running") == [1, 11, 9, 10]


def test_basic_tokenizer_golden():
    lower = tokenization.BasicTokenizer(do_lower_case=True)
    cased = tokenization.BasicTokenizer(do_lower_case=False)
    text = " \tHeLLo!how  \n Are yoU?  "
    assert lower.tokenize(text) == ["hello", "!", "how", "are", "you", "?"]
    assert cased.tokenize(text) == ["HeLLo", "!", "how", "Are", "yoU", "?"]
    assert lower.tokenize("H\u00e9llo") == ["hello"]
    assert cased.tokenize("H\u00e9llo") == ["H\u00e9llo"]
    # CJK ideographs become words of their own; kana/hangul do not.
    assert lower.tokenize("ah\u535a\u63a8zz") == ["ah", "\u535a", "\u63a8", "zz"]
    assert cased.tokenize("\u3042\u3044\uac00") == ["\u3042\u3044\uac00"]
    # Uncased NFD decomposes the hangul syllable into conjoining jamo (Lo, so they stay).
    assert lower.tokenize("\u3042\u3044\uac00") == ["\u3042\u3044\u1100\u1161"]
    # NUL, U+FFFD, Cf (ZWSP) and Cc (\x1c, DEL) are deleted, joining the letters.
    assert lower.tokenize("a\x00b\ufffdc\u200bd\x1ce\x7ff") == ["abcdef"]
    # U+2028 is neither Cc/Cf nor Zs, so it survives the clean-up, then str.split() splits.
    assert lower.tokenize("a\u2028b") == ["a", "b"]
    # Zs (NBSP, U+3000) is whitespace.
    assert lower.tokenize("a\u00a0b\u3000c") == ["a", "b", "c"]
    # Punctuation: ASCII ranges (incl. $ and `), any P* category; not other symbols (Sc).
    assert lower.tokenize("$5 a\u00bfb a\u20acb") == ["$", "5", "a", "\u00bf", "b", "a\u20acb"]
    # Context-sensitive lower(): a word-final capital sigma becomes the final form.
    assert lower.tokenize("ΟΔΟΣ, ΟΣΟ") == ["οδος", ",", "οσο"]
    assert lower.tokenize("ΟΔΟΣ")[0][-1] == "\u03c2"
    # U+0130 lowers to "i" + U+0307, and the combining dot is stripped.
    assert lower.tokenize("\u0130stanbul") == ["istanbul"]
    assert cased.tokenize("\u0130stanbul") == ["\u0130stanbul"]
    # Soft hyphen and BOM are Cf.
    assert lower.tokenize("\ufeffsoft\u00adhyphen") == ["softhyphen"]


def test_wordpiece_golden(small_vocab_file):
    vocab = tokenization.load_vocab(small_vocab_file)
    wp = tokenization.WordpieceTokenizer(vocab)
    assert wp.tokenize("unwanted running") == ["un", "##want", "##ed", "runn", "##ing"]
    # A word that cannot be covered entirely is one [UNK], not a partial split.
    assert wp.tokenize("unwantedx") == ["[UNK]"]
    assert wp.tokenize("") == []
    # 200 characters is the limit; one more gives [UNK].
    assert wp.tokenize("a" * 200) == ["a"] + ["##a"] * 199
    assert wp.tokenize("a" * 201) == ["[UNK]"]
    # Longest match first: "aab" -> "a", "##a", "##b" (no "aa" in vocab).
    assert wp.tokenize("aab bba") == ["a", "##a", "##b", "b", "##b", "##a"]
    wp10 = tokenization.WordpieceTokenizer(vocab, max_input_chars_per_word=3)
    assert wp10.tokenize("aaaa aaa") == ["[UNK]", "a", "##a", "##a"]


def test_convert_to_unicode():
    assert tokenization.convert_to_unicode("h\u00e9") == "h\u00e9"
    assert tokenization.convert_to_unicode("h\u00e9".encode("utf-8")) == "h\u00e9"
    assert tokenization.convert_to_unicode(b"a\xffb") == "ab"
    with pytest.raises(TypeError):
        tokenization.convert_to_unicode(3)


def test_is_continuation(small_vocab_file):
    tok = tokenization.FullTokenizer(small_vocab_file)
    assert tok.is_continuation.dtype == np.bool_
    assert tok.is_continuation.shape == (len(SPECIALS) + len(SMALL_PIECES),)
    expected = [t.startswith("##") for t in SPECIALS + SMALL_PIECES]
    assert tok.is_continuation.tolist() == expected
    ids = tok.encode("unwanted running, hello")
    assert tokenization.is_word_start(ids, tok.is_continuation).tolist() == [
        True, False, False, True, False, True, True]


# --- Vocab loading ---------------------------------------------------------------------

def test_load_vocab_ids_are_line_numbers(small_vocab_file, google_vocab_path):
    vocab = tokenization.load_vocab(small_vocab_file)
    assert list(vocab.items())[:6] == [("[PAD]", 0), ("[UNK]", 1), ("[CLS]", 2), ("[SEP]", 3),
                                       ("[MASK]", 4), ("un", 5)]
    google = tokenization.load_vocab(google_vocab_path)
    assert len(google) == 30522
    assert [google[t] for t in SPECIALS] == [0, 100, 101, 102, 103]
    assert google["##s"] == 2015 and google["the"] == 1996


def test_load_vocab_errors(tmp_path):
    def write(name, data: bytes):
        p = tmp_path / name
        p.write_bytes(data)
        return str(p)

    ok = "\n".join(SPECIALS) + "\n"
    with pytest.raises(UserError, match=r"vocab file not found: .*nope\.txt"):
        tokenization.load_vocab(str(tmp_path / "nope.txt"))
    bad = write("latin1.txt", (ok + "caf").encode() + b"\xe9\n")
    with pytest.raises(UserError, match=r"latin1\.txt is not UTF-8 \(line 6\)"):
        tokenization.load_vocab(bad)
    with pytest.raises(UserError, match=r"empty\.txt is empty"):
        tokenization.load_vocab(write("empty.txt", b""))
    dup = write("dup.txt", (ok + "x\ny\nx\n").encode())
    with pytest.raises(UserError, match=r"duplicate token 'x' at lines 6 and 8"):
        tokenization.load_vocab(dup)
    nomask = write("nomask.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\nx\n".encode())
    with pytest.raises(UserError, match=r"lacks special token\(s\) \[MASK\]$"):
        tokenization.load_vocab(nomask)
    # Callers choose the required set.
    assert tokenization.load_vocab(nomask, required_tokens=["[UNK]"])["x"] == 4
    # Trailing whitespace and a leading BOM are not part of tokens.
    bom = write("bom.txt", ("\ufeff" + "[PAD]  \r\n" + "\n".join(SPECIALS[1:])).encode())
    assert tokenization.load_vocab(bom)["[PAD]"] == 0
    nounk = write("nounk.txt", "[PAD]\nx\n".encode())
    unk_only = write("unk.txt", "[PAD]\n[UNK]\n".encode())
    with pytest.raises(UserError, match=r"nounk\.txt lacks special token\(s\) \[UNK\]$"):
        tokenization.FullTokenizer(nounk, required_tokens=[])
    assert tokenization.FullTokenizer(unk_only, required_tokens=[]).unk_id == 1


def test_errors_are_one_line_for_the_cli(tmp_path):
    """A missing vocab reported through cli_main: one line on stderr, exit code 2."""
    code = ("from absl import app\n"
            "from bert_tf.core import tokenization\n"
            "from bert_tf.core.errors import cli_main\n"
            "app.run(cli_main(lambda argv: "
            f"tokenization.FullTokenizer({str(tmp_path)!r} + '/v')))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"error: vocab file not found: {tmp_path}/v"]


# --- Fast path == reference path -------------------------------------------------------

@pytest.mark.parametrize("lower", [True, False])
def test_fast_path_equals_reference_on_adversarial_text(small_vocab_file, google_vocab_path,
                                                        lower):
    texts = HARD_CASES + random_nasty_texts(seed=1234, n=3000) + [
        " ".join(HARD_CASES) * 20]  # A very long line.
    for vocab_file in (small_vocab_file, google_vocab_path):
        tok = tokenization.FullTokenizer(vocab_file, do_lower_case=lower)
        reference = [tok.convert_tokens_to_ids(tok.tokenize(t)) for t in texts]
        assert tok.encode_batch(texts) == reference
        # Second pass hits the memo.
        assert tok.encode_batch(texts) == reference
        # Bytes input behaves like the decoded string.
        assert tok.encode(HARD_CASES[0].encode("utf-8")) == reference[0]
    basic = tokenization.BasicTokenizer(do_lower_case=lower)
    cached = tokenization.CachedBasicTokenizer(do_lower_case=lower, max_cache_entries=1000)
    words = [basic.tokenize(t) for t in texts]
    assert [cached.tokenize(t) for t in texts] == words
    assert [cached.tokenize(t) for t in texts] == words


def test_pickle_drops_the_memo(small_vocab_file):
    tok = tokenization.FullTokenizer(small_vocab_file)
    ids = tok.encode("unwanted, running")
    assert tok._chunk_cache and tok._chunk_splitter._cache == {}
    tok._chunk_splitter.tokenize("hello")
    copy = pickle.loads(pickle.dumps(tok))
    assert copy._chunk_cache == {} and copy._word_cache == {}
    assert copy._chunk_splitter._cache == {}
    assert copy.encode("unwanted, running") == ids == [5, 6, 7, 11, 9, 10]
    assert copy.is_continuation.tolist() == tok.is_continuation.tolist()


def test_fast_path_cache_is_bounded(small_vocab_file):
    tok = tokenization.FullTokenizer(small_vocab_file, max_cache_entries=10)
    texts = [f"hello{i} un{i}wanted, how are you" for i in range(100)]
    reference = [tok.convert_tokens_to_ids(tok.tokenize(t)) for t in texts]
    assert tok.encode_batch(texts) == reference
    assert len(tok._chunk_cache) <= 10 + 6  # Cleared before each text once past the bound.


# --- Google vocab on the bundled corpus: reference == fast == Hugging Face ---------------

@pytest.mark.parametrize("lower", [True, False])
def test_corpus_matches_hf_oracle(google_vocab_path, corpus_lines, lower):
    tok = tokenization.FullTokenizer(google_vocab_path, do_lower_case=lower)
    oracle = hf_oracle(google_vocab_path, lower)
    expected = [e.ids for e in oracle.encode_batch(corpus_lines, add_special_tokens=False)]
    reference = [tok.convert_tokens_to_ids(tok.tokenize(line)) for line in corpus_lines]
    fast = tok.encode_batch(corpus_lines)
    assert len(corpus_lines) == 17662  # 17,541 sentences + 121 article separators.
    mismatches = [i for i, (a, b) in enumerate(zip(reference, expected)) if a != b]
    assert mismatches == []
    assert fast == reference
    # A spot check with known ids of the Google vocab: "the" = 1996.
    assert tok.encode("The")[0] == (1996 if lower else 100)


@pytest.mark.parametrize("lower", [True, False])
def test_hard_cases_match_hf_oracle(google_vocab_path, lower):
    tok = tokenization.FullTokenizer(google_vocab_path, do_lower_case=lower)
    oracle = hf_oracle(google_vocab_path, lower)
    for text in HARD_CASES:
        reference = tok.convert_tokens_to_ids(tok.tokenize(text))
        expected = oracle.encode(text, add_special_tokens=False).ids
        if lower and "\u03a3" in text:
            # HF lower-cases character by character, so a final capital sigma becomes the
            # medial form; Python's str.lower() (the reference) gives the final form.
            assert reference != expected
            assert tok.tokenize(text)[:3] == ["ο", "##δ", "##ος"]
            continue
        assert reference == expected, repr(text)
