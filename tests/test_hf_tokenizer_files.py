"""The tokenizer files of Hugging Face exports (bert_tf.interop.hf_tokenizer_files): the fast
tokenizer gives FullTokenizer's ids, and the files say what transformers needs to load it."""

import json
import os

import pytest
from _tokenization_cases import HARD_CASES, random_nasty_texts
from tokenizers import Tokenizer

from bert_tf.core.tokenization import FullTokenizer
from bert_tf.interop import hf_tokenizer_files


@pytest.fixture(scope="module")
def cased_vocab(google_vocab_path, tmp_path_factory):
    """Google's uncased vocabulary plus cased whole words and an accented piece."""
    path = tmp_path_factory.mktemp("cased") / "vocab.txt"
    with open(google_vocab_path, encoding="utf-8") as f:
        words = f.read().split("\n")[:-1]
    path.write_text("\n".join(words + ["The", "COVID", "Adalimumab", "\u03a3", "##\u00c9"])
                    + "\n", encoding="utf-8")
    return os.fspath(path)


def _full_ids(tokenizer, text):
    return [tokenizer.vocab["[CLS]"]] + tokenizer.encode(text) + [tokenizer.vocab["[SEP]"]]


@pytest.mark.parametrize("lower", [True, False])
def test_fast_tokenizer_gives_full_tokenizer_ids(google_vocab_path, cased_vocab, lower):
    vocab = google_vocab_path if lower else cased_vocab
    full = FullTokenizer(vocab, lower)
    fast = hf_tokenizer_files.build_fast_tokenizer(vocab, lower)
    texts = HARD_CASES + random_nasty_texts(7, 2000)
    differ = [t for t in texts if fast.encode(t).ids != _full_ids(full, t)]
    assert differ == []
    # The cases where a tokenizer built with the library's defaults would differ.
    if lower:
        # Python's lower() gives the final sigma: ς at the end of a word, σ inside.
        assert fast.encode("ΟΔΟΣ ΣΑ").tokens == ["[CLS]", "ο", "##δ", "##ος", "σ", "##α",
                                                   "[SEP]"]
    else:
        assert fast.encode("The COVID Adalimumab").tokens == [
            "[CLS]", "The", "COVID", "Adalimumab", "[SEP]"]
    # A word of 199 characters is split into pieces (the original's limit is 200, not 100).
    assert fast.encode("b" * 199).tokens[1:3] == ["bb", "##bb"]
    assert fast.encode("b" * 201).tokens == ["[CLS]", "[UNK]", "[SEP]"]
    # Pairs: [CLS] a [SEP] b [SEP], type ids 0 then 1.
    pair = fast.encode("hello world", "again")
    assert pair.ids == _full_ids(full, "hello world") + full.encode("again") + [
        full.vocab["[SEP]"]]
    assert pair.type_ids == [0] * 4 + [1] * 2


def test_written_files_load_as_transformers_reads_them(cased_vocab, tmp_path):
    hf_tokenizer_files.write_tokenizer_files(cased_vocab, False, 128, os.fspath(tmp_path))
    assert sorted(os.listdir(tmp_path)) == sorted(hf_tokenizer_files.TOKENIZER_FILES)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert (config["do_lower_case"], config["model_max_length"]) == (False, 128)
    assert config["model_input_names"] == ["input_ids", "token_type_ids", "attention_mask"]
    assert {k: config[k] for k in hf_tokenizer_files.SPECIAL_TOKENS} == \
        hf_tokenizer_files.SPECIAL_TOKENS
    assert json.loads((tmp_path / "special_tokens_map.json").read_text()) == \
        hf_tokenizer_files.SPECIAL_TOKENS
    loaded = Tokenizer.from_file(os.fspath(tmp_path / "tokenizer.json"))
    full = FullTokenizer(cased_vocab, False)
    for text in ["The COVID patients got Adalimumab.", "ΟΔΟΣ \u00c9t\u00e9"] + HARD_CASES:
        assert loaded.encode(text).ids == _full_ids(full, text)
