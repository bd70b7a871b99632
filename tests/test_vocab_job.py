"""Tests of data_tools.vocab.vocab_job.run in this process: the file, the summary line, the
settings checked before anything is read."""

import pytest

from bert_tf.core.errors import UserError
from data_tools.vocab import vocab_job
from data_tools.vocab.vocab_learner import VocabConfig
from data_tools.vocab.word_counting import CountConfig


def test_run_writes_exactly_vocab_size_tokens_and_says_what_it_learned(tmp_path, corpus_lines):
    corpus = tmp_path / "in.txt"
    corpus.write_text("\n".join(corpus_lines[:400]) + "\n", encoding="utf-8")
    vocab = tmp_path / "vocab.txt"
    summary = vocab_job.run(str(corpus), str(vocab), VocabConfig(vocab_size=600, num_unused=3))
    tokens = vocab.read_text(encoding="utf-8").splitlines()
    assert len(tokens) == 600 and len(set(tokens)) == 600
    assert tokens[:8] == ["[PAD]", "[unused0]", "[unused1]", "[unused2]", "[UNK]", "[CLS]",
                          "[SEP]", "[MASK]"]
    assert summary.startswith(f"wrote {vocab}: 600 tokens (8 special, 592 learned incl. a ")
    lines = sum(1 for line in corpus_lines[:400] if line.strip())  # blank lines hold no word
    assert f" from {lines} lines (" in summary and " in 1 file(s), 0 warning(s), " in summary


def test_counting_and_learning_must_agree_on_case_and_settings_fail_before_reading(tmp_path):
    vocab = tmp_path / "vocab.txt"
    with pytest.raises(ValueError, match="disagree on do_lower_case"):
        vocab_job.run(str(tmp_path / "missing.txt"), str(vocab), VocabConfig(vocab_size=600),
                      CountConfig(do_lower_case=False))
    with pytest.raises(UserError, match="min_frequency"):
        vocab_job.run(str(tmp_path / "missing.txt"), str(vocab),
                      VocabConfig(vocab_size=600, min_frequency=0))
    assert not vocab.exists()
