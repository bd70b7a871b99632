"""Sentence splitters side by side: accuracy on hand-checked cases, agreement, speed.

The candidates for `data_tools.prepare_corpus`: blingfire, pysbd, sentencex, syntok, NLTK's
Punkt (untrained: its trained models are a separate download, unavailable offline) and
spaCy's rule-based sentencizer (on `spacy.blank(language)`, whose tokenizer knows the
language's abbreviations). A candidate that is not installed is skipped.

- accuracy: hand-checked paragraphs of `benchmarks/data/sentence_cases.py` whose sentences come
  out exactly as expected (all, English, de/fr/es/ru, zh/ja), with each library's language
  rules where it has them.
- wiki agreement: the bundled corpus (one sentence per line) with each article's sentences
  joined into paragraphs of --paragraph sentences; the share of reference sentences that
  come out exactly. The reference split is itself automatic and the text tokenized
  ("word ."), so this is a second, rougher check.
- MB/s: splitting those paragraphs (UTF-8 bytes of input per second, best of --repeat).

    python benchmarks/data/bench_sentence_splitters.py [--corpus=...] [--repeat=2] [--paragraph=6]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Callable, Dict, List

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # sentence_cases
sys.path.insert(0, os.path.join(ROOT, "benchmarks", "common"))  # machine, measure

from machine import describe  # noqa: E402
from sentence_cases import CASES  # noqa: E402

Splitter = Callable[[str], List[str]]


def _blingfire() -> Callable[[str], Splitter]:
    import blingfire

    return lambda lang: (lambda text: blingfire.text_to_sentences(text).split("\n"))


def _pysbd() -> Callable[[str], Splitter]:
    import pysbd

    cache: Dict[str, object] = {}

    def make(lang: str) -> Splitter:
        if lang not in cache:
            code = lang if lang in pysbd.languages.LANGUAGE_CODES else "en"
            cache[lang] = pysbd.Segmenter(language=code, clean=False)
        return cache[lang].segment
    return make


def _sentencex() -> Callable[[str], Splitter]:
    import sentencex

    return lambda lang: (lambda text: list(sentencex.segment(lang, text)))


def _syntok() -> Callable[[str], Splitter]:
    from syntok import segmenter

    def split(text: str) -> List[str]:
        # Slices of the input (token values are normalised: "can't" -> "ca", "not").
        return [text[sentence[0].offset:sentence[-1].offset + len(sentence[-1].value)]
                for paragraph in segmenter.process(text) for sentence in paragraph]
    return lambda lang: split


def _punkt() -> Callable[[str], Splitter]:
    from nltk.tokenize.punkt import PunktSentenceTokenizer

    tokenizer = PunktSentenceTokenizer()  # no trained parameters (they need a download)
    return lambda lang: tokenizer.tokenize


def _spacy() -> Callable[[str], Splitter]:
    import spacy

    cache: Dict[str, object] = {}

    def make(lang: str) -> Splitter:
        if lang not in cache:
            try:
                nlp = spacy.blank(lang)
            except Exception:  # a language without a spaCy tokenizer (or its extra deps)
                nlp = spacy.blank("xx")
            nlp.add_pipe("sentencizer")
            cache[lang] = nlp
        nlp = cache[lang]
        return lambda text: [s.text for s in nlp(text).sents]
    return make


CANDIDATES = {"blingfire": _blingfire, "pysbd": _pysbd, "sentencex": _sentencex,
              "syntok": _syntok, "nltk punkt": _punkt, "spacy sentencizer": _spacy}
GROUPS = {"en": ("en",), "de/fr/es/ru": ("de", "fr", "es", "ru"), "zh/ja": ("zh", "ja")}


def _clean(sentences: List[str]) -> List[str]:
    return [" ".join(s.split()) for s in sentences if s.strip()]


def accuracy(make: Callable[[str], Splitter], failures: List[str]) -> Dict[str, float]:
    """Percent of cases split exactly right, overall and per language group."""
    right: Dict[str, List[bool]] = {"all": [], **{g: [] for g in GROUPS}}
    for lang, text, expected in CASES:
        got = _clean(make(lang)(text))
        ok = got == _clean(expected)
        if not ok:
            failures.append(f"  [{lang}] {got}")
        right["all"].append(ok)
        right[next(g for g, langs in GROUPS.items() if lang in langs)].append(ok)
    return {k: 100.0 * sum(v) / len(v) for k, v in right.items()}


def wiki_paragraphs(path: str, per_paragraph: int) -> "tuple[List[str], List[str]]":
    """(paragraphs of `per_paragraph` consecutive sentences of one article, the sentences)."""
    paragraphs, sentences, article = [], [], []
    with open(path, encoding="utf-8") as f:
        for line in list(f) + [""]:
            line = " ".join(line.split())
            if line:
                article.append(line)
                continue
            for i in range(0, len(article), per_paragraph):
                paragraphs.append(" ".join(article[i:i + per_paragraph]))
            sentences.extend(article)
            article = []
    return paragraphs, sentences


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--corpus", default=os.path.join(ROOT, "data", "corpus",
                                                         "wikitext2.bert.txt"))
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--paragraph", type=int, default=6)
    parser.add_argument("--show_failures", action="store_true")
    args = parser.parse_args()
    print(describe())
    paragraphs, reference = wiki_paragraphs(args.corpus, args.paragraph)
    mb = sum(len(p.encode("utf-8")) for p in paragraphs) / 1e6
    print(f"{len(CASES)} hand-checked cases; {len(paragraphs)} paragraphs, {mb:.2f} MB, "
          f"{len(reference)} reference sentences")
    header = (f"{'splitter':<18} {'all %':>6} {'en %':>6} {'de/fr/es/ru %':>14} {'zh/ja %':>8} "
              f"{'wiki agree %':>13} {'MB/s':>7}")
    print(header)
    for name, factory in CANDIDATES.items():
        try:
            make = factory()
        except ImportError as e:
            print(f"{name:<18} not installed ({e})")
            continue
        failures: List[str] = []
        acc = accuracy(make, failures)
        split = make("en")
        best, out = float("inf"), []
        for _ in range(args.repeat):
            start = time.perf_counter()
            out = [s for p in paragraphs for s in _clean(split(p))]
            best = min(best, time.perf_counter() - start)
        remaining: Dict[str, int] = {}
        for s in reference:
            remaining[s] = remaining.get(s, 0) + 1
        agree = 0
        for s in out:
            if remaining.get(s, 0) > 0:
                remaining[s] -= 1
                agree += 1
        print(f"{name:<18} {acc['all']:6.1f} {acc['en']:6.1f} {acc['de/fr/es/ru']:14.1f} "
              f"{acc['zh/ja']:8.1f} {100.0 * agree / len(reference):13.1f} "
              f"{mb / best:7.2f}", flush=True)
        if args.show_failures:
            print("\n".join(failures))


if __name__ == "__main__":
    main()
