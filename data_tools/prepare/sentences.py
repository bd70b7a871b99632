"""Sentence splitting and whitespace normalisation for `data_tools.prepare_corpus`.

Sentences are split by `sentencex` (Wikimedia's rule-based segmenter, ~300 languages through
per-language abbreviation rules and a fallback chain to related languages, then English).
It was chosen by `benchmarks/data/bench_sentence_splitters.py` over blingfire, pysbd, syntok,
NLTK's Punkt and spaCy's sentencizer: the most accurate on the hand-checked cases and the
fastest (docs/results/data-jobs.md, "Sentence splitters").

A document's line breaks (those of `str.splitlines`: \n, \r\n, \r, U+2028, form feed, ...)
are paragraph breaks: each line is split on its own, so no sentence crosses one. Whitespace
inside a sentence (tabs, runs of spaces, no-break and other Unicode spaces) becomes one
space; blank sentences are dropped.
"""

from __future__ import annotations

import re
from typing import List

import sentencex

from bert_tf.core.errors import UserError

DEFAULT_LANGUAGE = "en"
# ISO 639-1/639-3 codes with optional subtags ("en", "pt-br", "zh_Hant"), as sentencex takes.
_LANGUAGE = re.compile(r"[a-z]{2,3}([-_][a-z0-9]{2,8})*")


def check_language(code: str) -> str:
    """The language code, lower-cased, for `split_paragraph`.

    sentencex has rules for about 30 languages (en, de, fr, es, it, pt, nl, ru, uk, pl, ja,
    ...) and maps about 300 others to a related one; codes it does not know fall back to
    English rules. Only the syntax is checked here.

    Raises:
        UserError: not a language code.
    """
    lowered = code.strip().lower()
    if not _LANGUAGE.fullmatch(lowered):
        raise UserError(f"--language={code!r}: expected a language code such as en, de, fr, "
                        "es, ru, zh or ja (ISO 639)")
    return lowered


def normalize(text: str) -> str:
    """`text` with every run of whitespace made one space, and none at either end."""
    # Fast path: no whitespace but single ASCII spaces (isprintable() is False for tabs,
    # no-break and other Unicode spaces, and line breaks).
    if text.isprintable() and "  " not in text and text[:1] != " " and text[-1:] != " ":
        return text
    return " ".join(text.split())


def split_paragraph(paragraph: str, language: str = DEFAULT_LANGUAGE) -> List[str]:
    """The sentences of one paragraph (no line breaks), whitespace-normalised, none blank.

    Args:
        paragraph: text without paragraph breaks.
        language: a code accepted by `check_language`.

    Returns:
        The sentences, in order.
    """
    # Normalised first, so that "Mr.\u00a0Smith" or a tab reads like "Mr. Smith"; the
    # pieces of normalised text then only need their ends stripped.
    out = []
    for sentence in sentencex.segment(language, normalize(paragraph)):
        sentence = sentence.strip()
        if sentence:
            out.append(sentence)
    return out


def split_document(text: str, language: str = DEFAULT_LANGUAGE) -> List[str]:
    """The sentences of a document whose line breaks are paragraph breaks.

    Args:
        text: the document; "\\n", "\\r\\n", "\\r", U+2028, U+2029 and the other breaks of
            `str.splitlines` (form feed, vertical tab, ...) end paragraphs.
        language: a code accepted by `check_language`.

    Returns:
        The sentences of every paragraph in order (empty for a blank document).
    """
    out: List[str] = []
    for paragraph in text.splitlines():
        if paragraph and not paragraph.isspace():
            out.extend(split_paragraph(paragraph, language))
    return out
