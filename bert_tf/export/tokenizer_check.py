"""How many lines keras-hub's own `BertTokenizer` gives other ids than pretraining did.

A portable keras-hub preset (`export_keras_hub_preset(..., preset_tokenizer="portable")`)
ships keras-hub's `BertTokenizer`, which loads without bert_tf but does not reproduce the
original algorithm everywhere: lower-casing is NFKC case folding ('µ' -> 'μ', 'ﬁ' -> 'fi',
full-width 'Ａ' -> 'a', 'ß' -> 'ss'), words over 100 bytes become [UNK], and Cc/Cf
characters split words instead of being deleted. This module counts, on text, the lines
whose ids differ, so that the export can say in one line what portability costs:

    check = count_mismatches(lines, "vocab.txt", do_lower_case=True)
    print(report_line(check, lines, "lines of my_domain.txt"))

The text is the user's (`read_check_lines`: the first `MAX_CHECK_LINES` non-empty lines or
`MAX_CHECK_BYTES` of a file, so the check stays a few seconds on any corpus), or, when they
name none, the vocabulary itself (`vocabulary_check_lines`): it is the one sample of the
pretraining corpus every export has, and a token keras-hub reads otherwise is a string the
corpus held often enough to learn. It is a lower bound: the vocabulary holds no long words,
no upper case (uncased) and no characters pretraining deleted.
"""

from __future__ import annotations

import dataclasses
import re
from typing import List, Optional, Sequence, Tuple

from bert_tf.core import fileio
from bert_tf.core.errors import UserError

MAX_CHECK_LINES = 10_000
MAX_CHECK_BYTES = 10_000_000
# Batch of the tf.data pass over the lines (memory, not results, depends on it).
_BATCH = 512
# [PAD], [unused17], ...: never produced from text by either tokenizer.
_BRACKETED = re.compile(r"^\[[^\]]*\]$")


@dataclasses.dataclass(frozen=True)
class TokenizerCheck:
    """The result of `count_mismatches`.

    Attributes:
        checked: the number of lines compared.
        differing: indices (into the lines) of those on which keras-hub's tokenizer, on its
            Python path (eager calls) or its TensorFlow path (tf.data), gives other ids
            than `FullTokenizer`.
        example: for the first differing line, the first tokens that differ: (pretraining's,
            keras-hub's); "" where one sequence has ended. None if no line differs.
    """

    checked: int
    differing: Tuple[int, ...]
    example: Optional[Tuple[str, str]] = None


@dataclasses.dataclass(frozen=True)
class CheckText:
    """Lines to check and where they come from.

    Attributes:
        lines: the texts, without line ends.
        line_numbers: 1-based line number in the file of each text (for the report).
        truncated: the file has more text than was read.
    """

    lines: Tuple[str, ...]
    line_numbers: Tuple[int, ...]
    truncated: bool = False


def portable_tokenizer(vocabulary: Sequence[str], do_lower_case: bool, **kwargs):
    """keras-hub's `BertTokenizer`, configured as close to the original as it goes.

    Args:
        vocabulary: the tokens in id order.
        do_lower_case: the model's casing: keras-hub's `lowercase` and `strip_accents`
            (the original strips accents exactly when it lower-cases).
        **kwargs: other `BertTokenizer` arguments (`sequence_length`, `dtype`, ...).

    Returns:
        A `keras_hub.models.BertTokenizer`: the tokenizer of a portable preset.
    """
    import keras_hub

    return keras_hub.models.BertTokenizer(vocabulary=list(vocabulary), lowercase=do_lower_case,
                                          strip_accents=do_lower_case, **kwargs)


def read_check_lines(path: str, max_lines: int = MAX_CHECK_LINES,
                     max_bytes: int = MAX_CHECK_BYTES) -> CheckText:
    """The first non-empty lines of a UTF-8 text file, decoded as pretraining decodes.

    Invalid bytes are dropped (as `tokenization.convert_to_unicode` does) and a leading
    BOM is removed; the file is read only up to the caps, so a corpus of any size costs the
    same.

    Args:
        path: a text file (local or gs://), one text per line.
        max_lines: read at most this many non-empty lines.
        max_bytes: ... and at most about this many bytes.

    Returns:
        The lines, their 1-based line numbers, and whether the file goes on.

    Raises:
        UserError: the file cannot be read, or has no text.
    """
    lines: List[str] = []
    numbers: List[int] = []
    size = 0
    truncated = False
    try:
        with fileio.open_file(path, "rb") as f:
            for number, raw in enumerate(f, start=1):
                if len(lines) >= max_lines or size >= max_bytes:
                    truncated = True
                    break
                size += len(raw)
                text = raw.decode("utf-8", "ignore").rstrip("\r\n")
                if number == 1:
                    text = text.lstrip("\ufeff")
                if text.strip():
                    lines.append(text)
                    numbers.append(number)
    except (OSError, ValueError) as e:  # tf.errors.NotFoundError is an OSError
        raise UserError(f"tokenizer check file {path}: cannot read it ({e})") from e
    if not lines:
        raise UserError(f"tokenizer check file {path} has no text")
    return CheckText(tuple(lines), tuple(numbers), truncated)


def vocabulary_check_lines(vocabulary: Sequence[str]) -> CheckText:
    """The vocabulary's tokens as texts: "##" removed, bracketed specials and repeats left out.

    Args:
        vocabulary: the tokens in id order.

    Returns:
        One text per distinct token string; `line_numbers` are the tokens' 1-based lines in
        the vocabulary file.
    """
    seen = set()
    lines: List[str] = []
    numbers: List[int] = []
    for index, token in enumerate(vocabulary):
        text = token[2:] if token.startswith("##") and len(token) > 2 else token
        if _BRACKETED.match(text) or text in seen or not text.strip():
            continue
        seen.add(text)
        lines.append(text)
        numbers.append(index + 1)
    return CheckText(tuple(lines), tuple(numbers))


def count_mismatches(lines: Sequence[str], vocab_file: str, do_lower_case: bool
                     ) -> TokenizerCheck:
    """Tokenizes `lines` with `portable_tokenizer` and `FullTokenizer`; finds those that differ.

    keras-hub's tokenizer runs on both its paths, an eager call (pure Python) and a tf.data
    map (TensorFlow Text): a line differs if either path differs from pretraining's ids.

    Args:
        lines: texts (one example each); pass at most a few `MAX_CHECK_LINES`, the cost is
            linear.
        vocab_file: the model's vocabulary.
        do_lower_case: the model's casing.

    Returns:
        The count, the differing lines and an example.

    Raises:
        UserError: a bad vocabulary.
    """
    import tensorflow as tf

    from bert_tf.core.tokenization import FullTokenizer, vocab_list

    ours = FullTokenizer(vocab_file, do_lower_case)
    vocabulary = vocab_list(ours.vocab)
    theirs = portable_tokenizer(vocabulary, do_lower_case)
    lines = list(lines)
    expected = ours.encode_batch(lines)
    differing = []
    first: Optional[Tuple[List[int], List[int]]] = None
    graph_batches = tf.data.Dataset.from_tensor_slices(tf.constant(lines, tf.string)) \
        .batch(_BATCH).map(theirs) if lines else []
    start = 0
    for graph in graph_batches:
        graph = graph.to_list()
        eager = theirs(lines[start:start + len(graph)])
        for offset, (g, e) in enumerate(zip(graph, eager)):
            want = expected[start + offset]
            e = [int(i) for i in e]
            if g != want or e != want:
                differing.append(start + offset)
                if first is None:
                    first = (want, e if e != want else g)
        start += len(graph)
    example = None
    if first is not None:
        want, got = first
        at = next(i for i in range(max(len(want), len(got)))
                  if i >= len(want) or i >= len(got) or want[i] != got[i])
        example = (vocabulary[want[at]] if at < len(want) else "",
                   vocabulary[got[at]] if at < len(got) else "")
    return TokenizerCheck(len(lines), tuple(differing), example)


def report_line(check: TokenizerCheck, text: CheckText, what: str) -> str:
    """The export's one line about `check`.

    Args:
        check: `count_mismatches` on `text.lines`.
        text: the lines checked.
        what: what they are, e.g. "lines of domain.txt" or "tokens of the vocabulary".

    Returns:
        One line, without a newline: the count, an example and the way to identical ids.
    """
    scope = f"{'the first ' if text.truncated else ''}{len(text.lines):,} {what}"
    if not check.differing:
        return (f"keras-hub's tokenizer gives the pretraining ids on all of {scope} (other "
                "text can still differ: NFKC-folded characters, words over 100 bytes; check "
                "yours with --tokenizer_check_file)")
    ours, theirs = (repr(token) if token else "nothing" for token in check.example)
    example = (f"line {text.line_numbers[check.differing[0]]}: keras-hub {theirs} where "
               f"pretraining has {ours}")
    return (f"keras-hub's tokenizer gives other ids than pretraining on "
            f"{len(check.differing):,} of {scope} (e.g. {example}); export with "
            "--preset_tokenizer=exact for identical ids (needs "
            "`import bert_tf.export.preset_tokenizer` before loading)")
