"""Tests for bert_tf.interop.hf_tokenizer_kind: a checkpoint whose tokenizer is not WordPiece
is refused, in one line, by the commands that tokenize or train on token ids."""

import json
import shutil

import pytest
from _pretraining_helpers import REPO_ROOT

from bert_tf.core.errors import UserError
from bert_tf.finetune import warm_start
from bert_tf.interop import continued_pretraining, formats, hf_tokenizer_kind
from bert_tf.modeling.config import BertConfig

DATA = REPO_ROOT / "tests" / "data" / "modernbert_tiny"
WANT = "has a BPE tokenizer (tokenizer.json, no vocab.txt); bert_tf supports WordPiece " \
       "vocabularies (vocab.txt) only"


@pytest.fixture
def bpe_model(tmp_path):
    """The tiny ModernBERT with a byte-level BPE tokenizer.json (ModernBERT's kind)."""
    directory = tmp_path / "bpe"
    shutil.copytree(DATA, directory)
    with open(directory / "tokenizer.json", "w") as f:
        json.dump({"version": "1.0", "model": {"type": "BPE", "vocab": {}, "merges": []}}, f)
    return str(directory)


def test_kinds(tmp_path, bpe_model):
    assert hf_tokenizer_kind.tokenizer_kind(bpe_model) == "BPE"
    assert hf_tokenizer_kind.non_wordpiece(bpe_model) == "BPE"
    assert hf_tokenizer_kind.tokenizer_kind(str(DATA)) is None  # no tokenizer.json
    (tmp_path / "bpe" / "vocab.txt").write_text("[PAD]\n")
    assert hf_tokenizer_kind.non_wordpiece(bpe_model) is None  # a vocab.txt is used
    wp = tmp_path / "wp"
    wp.mkdir()
    (wp / "tokenizer.json").write_text(json.dumps({"model": {"type": "WordPiece"}}))
    assert hf_tokenizer_kind.non_wordpiece(str(wp)) is None


def test_fine_tuning_refuses(bpe_model):
    with pytest.raises(UserError) as e:
        warm_start.resolve(bpe_model, "", "")
    assert str(e.value) == f"--init_checkpoint={bpe_model} {WANT}"


def test_pretraining_refuses(bpe_model):
    config = formats.read_config("hf", bpe_model)
    with pytest.raises(UserError) as e:
        continued_pretraining.plan(bpe_model, "", config, "", 0)
    assert str(e.value) == f"--init_checkpoint={bpe_model} {WANT}"


def test_conversion_converts_the_weights_and_says_so(bpe_model, tmp_path, capsys):
    out = formats.convert("hf", "hf", bpe_model, str(tmp_path / "out"))
    assert "has a BPE tokenizer (tokenizer.json), which bert_tf does not use" in \
        capsys.readouterr().err
    assert formats.read_config("hf", out) == BertConfig.from_dict(
        formats.read_config("hf", bpe_model).to_dict())
