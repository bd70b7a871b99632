"""Tests for bert_tf.export.tokenizer_check: counting the lines keras-hub tokenizes otherwise."""

import pytest

from bert_tf.core.errors import UserError
from bert_tf.core.tokenization import FullTokenizer
from bert_tf.export import tokenizer_check

# Lines built to differ, or not, between keras-hub's BertTokenizer and pretraining's
# FullTokenizer (Google's uncased vocabulary), and why:
LINES = [
    "the cat sat on the mat.",  # 0: plain ASCII: the same.
    "ﬁnance report",  # 1: NFKC folds the 'ﬁ' ligature to 'fi' (uncased only).
    "ＡＢＣ news",  # 2: NFKC folds full-width letters to ASCII (uncased only).
    "plain words here",  # 3: the same.
    "a" * 120,  # 4: a 120-byte word: keras-hub's [UNK], pretraining's 'aaa', '##aa', ...
    "b" * 100,  # 5: 100 bytes is still within keras-hub's limit: the same.
    "5 µg/ml of Straße",  # 6: micro sign -> Greek mu, 'ß' -> 'ss' (uncased only).
]
DIFFER_UNCASED = [1, 2, 4, 6]
DIFFER_CASED = [4]  # keras-hub applies no NFKC when it does not lower-case.


@pytest.mark.parametrize("lower, differing, example", [
    (True, DIFFER_UNCASED, ("ﬁ", "finance")),  # pretraining: 'ﬁ', '##nan', '##ce'
    (False, DIFFER_CASED, ("aaa", "[UNK]")),
], ids=["uncased", "cased"])
def test_count_mismatches_on_lines_built_to_differ(google_vocab_path, lower, differing,
                                                    example):
    ours = FullTokenizer(google_vocab_path, do_lower_case=lower)
    assert ours.tokenize("a" * 120)[:2] == ["aaa", "##aa"]  # not [UNK]: the 200-char limit
    check = tokenizer_check.count_mismatches(LINES, google_vocab_path, lower)
    assert check == tokenizer_check.TokenizerCheck(len(LINES), tuple(differing), example)


def test_no_mismatch_no_example(google_vocab_path):
    check = tokenizer_check.count_mismatches([LINES[0], LINES[3]], google_vocab_path, True)
    assert check == tokenizer_check.TokenizerCheck(2, (), None)


def test_report_line_names_the_file_line_and_the_way_out(tmp_path, google_vocab_path):
    path = tmp_path / "domain.txt"
    # A BOM, blank lines (not counted, but line numbers are the file's), a CRLF line end and
    # an invalid byte (dropped, as pretraining drops it).
    path.write_bytes(b"\xef\xbb\xbf" + LINES[0].encode() + b"\n\n  \n"
                     + "\n".join(LINES[1:]).encode() + b"\r\n\xff\n")
    text = tokenizer_check.read_check_lines(str(path))
    assert text.lines == tuple(LINES) and not text.truncated
    assert text.line_numbers == (1, 4, 5, 6, 7, 8, 9)
    check = tokenizer_check.count_mismatches(text.lines, google_vocab_path, True)
    line = tokenizer_check.report_line(check, text, f"lines of {path}")
    assert line == (
        f"keras-hub's tokenizer gives other ids than pretraining on 4 of 7 lines of {path} "
        "(e.g. line 4: keras-hub 'finance' where pretraining has 'ﬁ'); export with "
        "--preset_tokenizer=exact for identical ids (needs "
        "`import bert_tf.export.preset_tokenizer` before loading)")

    capped = tokenizer_check.read_check_lines(str(path), max_lines=2)
    assert capped.lines == tuple(LINES[:2]) and capped.truncated
    check = tokenizer_check.count_mismatches(capped.lines, google_vocab_path, False)
    assert tokenizer_check.report_line(check, capped, "lines of x").startswith(
        "keras-hub's tokenizer gives the pretraining ids on all of the first 2 lines of x (")
    by_bytes = tokenizer_check.read_check_lines(str(path), max_bytes=len(LINES[0]) + 4)
    assert by_bytes.lines == (LINES[0],) and by_bytes.truncated


def test_vocabulary_lines(google_vocab_path):
    vocabulary = ["[PAD]", "[unused0]", "[UNK]", "the", "##the", "##s", "µ", "##", "ß"]
    text = tokenizer_check.vocabulary_check_lines(vocabulary)
    assert text.lines == ("the", "s", "µ", "##", "ß")
    assert text.line_numbers == (4, 6, 7, 8, 9)
    # On Google's vocabulary (which has all of these tokens): 'µ' and 'ß' are folded.
    check = tokenizer_check.count_mismatches(text.lines, google_vocab_path, True)
    assert check.differing == (2, 4) and check.example == ("µ", "μ")
    line = tokenizer_check.report_line(check, text, "tokens")
    assert "on 2 of 5 tokens (e.g. line 7: keras-hub 'μ' where pretraining has 'µ')" in line


def test_bad_check_files(tmp_path):
    with pytest.raises(UserError, match="cannot read it"):
        tokenizer_check.read_check_lines(str(tmp_path / "missing.txt"))
    (tmp_path / "blank.txt").write_text("\ufeff\n  \n\t\n", encoding="utf-8")
    with pytest.raises(UserError, match="blank.txt has no text"):
        tokenizer_check.read_check_lines(str(tmp_path / "blank.txt"))
