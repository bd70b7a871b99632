"""Tests for data_tools.prepare.sentences: paragraphs, whitespace, languages, CJK."""

import pytest

from bert_tf.core.errors import UserError
from data_tools.prepare import sentences


def test_newlines_are_paragraph_breaks_no_sentence_crosses_one():
    text = ("Mr. Smith went to Washington. He arrived at 4 A. M. on Monday.\n"
            "This sentence is cut\r\nin two by a line break.\n\n  \n"
            "Last paragraph\u2028Separated")
    assert sentences.split_document(text) == [
        "Mr. Smith went to Washington.", "He arrived at 4 A. M. on Monday.",
        "This sentence is cut", "in two by a line break.", "Last paragraph", "Separated"]


def test_whitespace_is_normalised():
    text = "  A\ttab,\u00a0a no-break space\u3000and  runs   of spaces.\x0bNext one here.  "
    assert sentences.split_document(text) == [
        "A tab, a no-break space and runs of spaces.", "Next one here."]
    assert sentences.split_document(" \t\n\n \u3000 \n") == []
    assert sentences.normalize("  a \t b\u2009c ") == "a b c"


@pytest.mark.parametrize("text, expected", [
    ("The value of pi is about 3.14159. It is irrational.",
     ["The value of pi is about 3.14159.", "It is irrational."]),
    ("Prices rose, e.g. bread and milk. Nobody was surprised.",
     ["Prices rose, e.g. bread and milk.", "Nobody was surprised."]),
    ('"Why not?" he asked. Visit https://example.com/a.html today. Wait... what?',
     ['"Why not?" he asked.', "Visit https://example.com/a.html today.", "Wait... what?"]),
])
def test_english_abbreviations_numbers_quotes_urls(text, expected):
    assert sentences.split_document(text) == expected


def test_language_selects_the_rules():
    german = "Am 3. Oktober ist Feiertag. Dann sind die Geschäfte zu."
    assert sentences.split_document(german, "de") == [
        "Am 3. Oktober ist Feiertag.", "Dann sind die Geschäfte zu."]
    assert sentences.split_document(german, "en")[0] == "Am 3."  # no German ordinals
    russian = "Это произошло в 1990 г. в Москве. Никто не знал."
    assert sentences.split_document(russian, "ru") == [
        "Это произошло в 1990 г. в Москве.", "Никто не знал."]
    assert len(sentences.split_document(russian, "en")) == 3


def test_cjk_sentence_ends():
    assert sentences.split_document("我今天很高兴。你呢？这是第三句！", "zh") == [
        "我今天很高兴。", "你呢？", "这是第三句！"]
    assert sentences.split_document("今日は晴れです。明日は雨でしょう。", "ja") == [
        "今日は晴れです。", "明日は雨でしょう。"]


@pytest.mark.parametrize("code, expected", [("en", "en"), (" DE ", "de"), ("pt-BR", "pt-br"),
                                            ("zh_Hant", "zh_hant"), ("gsw", "gsw")])
def test_check_language_accepts_codes(code, expected):
    assert sentences.check_language(code) == expected


@pytest.mark.parametrize("code", ["English", "", "e", "de--at", "12"])
def test_check_language_rejects_what_is_not_a_code(code):
    with pytest.raises(UserError, match=r"^--language="):
        sentences.check_language(code)
