"""SQuAD v1.1 / v2.0 for extractive question answering: read the JSON, cut it into windows.

Pure Python and NumPy (no TensorFlow), so data preparation starts fast.

* `read_squad_examples` turns a SQuAD file into `SquadExample`s: the context split into
  whitespace words (with each word's character offset), and for training the answer's first
  and last word. A training answer whose text is not at its `answer_start` is counted and
  skipped, with one warning for the whole file.
* `featurize` tokenizes with WordPiece and lays each question and context out as
  `[CLS] question [SEP] context-window [SEP]`, sliding windows over the context's pieces
  `doc_stride` pieces apart so that no piece is ever dropped. Each piece is *scored* in only
  one window, the one where it has the most context on both sides (`token_is_max_context`).
"""

from __future__ import annotations

import bisect
import dataclasses
import json
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
from absl import logging

from bert_tf.core import fileio
from bert_tf.core.errors import UserError, reason
from bert_tf.core.tokenization import CLS, SEP, FullTokenizer

# The characters that separate SQuAD context words: the four ASCII blanks and the narrow
# no-break space, which SQuAD's annotators' texts use between numbers and units.
CONTEXT_SPACES = frozenset(" \t\r\n\u202f")


@dataclasses.dataclass(frozen=True)
class SquadExample:
    """One question about one context.

    Attributes:
        qas_id: the question's `id`.
        question_text: the question.
        context_text: the paragraph, unchanged.
        doc_words: the context's whitespace-separated words (shared by a paragraph's questions).
        word_starts: character offset in `context_text` of each word of `doc_words`.
        answers: every gold answer text (empty for an impossible question), or None when the
            file gives no `answers` (an unlabelled test set).
        plausible_answers: SQuAD 2.0's plausible (but wrong) answer texts, if any.
        is_impossible: SQuAD 2.0 question with no answer in the context.
        answer_text: the training answer (the first one), "" when there is none.
        start_word: index in `doc_words` of the training answer's first word, -1 if none.
        end_word: index of its last word (inclusive), -1 if none.
    """

    qas_id: str
    question_text: str
    context_text: str
    doc_words: Tuple[str, ...]
    word_starts: Tuple[int, ...]
    answers: Optional[Tuple[str, ...]]
    plausible_answers: Tuple[str, ...] = ()
    is_impossible: bool = False
    answer_text: str = ""
    start_word: int = -1
    end_word: int = -1


@dataclasses.dataclass(frozen=True, eq=False)  # holds arrays: compare by identity
class FeatureMeta:
    """Host-side record of one window, for mapping logits back to the context.

    Attributes:
        example_index: index of the example in the list given to `featurize`.
        qas_id: that example's question id.
        window_index: 0 for the example's first window, 1 for the next, ...
        window_start: index (among the context's pieces) of the window's first piece.
        tokens: the window's tokens, `[CLS] question [SEP] context [SEP]`, without padding.
        token_to_word: int32 [len(tokens)]: index in `doc_words` of the word each context
            token comes from; -1 for [CLS], question and [SEP] tokens.
        token_is_max_context: bool [len(tokens)]: True where this window is the one in which
            the context token has the most context (each piece is True in exactly one window).
    """

    example_index: int
    qas_id: str
    window_index: int
    window_start: int
    tokens: Tuple[str, ...]
    token_to_word: np.ndarray
    token_is_max_context: np.ndarray


@dataclasses.dataclass
class SquadFeatures:
    """The model inputs of all windows, and what post-processing needs to read them.

    Attributes:
        arrays: "input_ids", "input_mask", "segment_ids": int32 [n, max_seq_length]; with
            labels also "start_positions", "end_positions": int32 [n] (0, the [CLS] position,
            when the window does not hold the whole answer or there is none).
        feature_meta: one `FeatureMeta` per row of the arrays.
        has_labels: whether the start/end positions are present.
    """

    arrays: Dict[str, np.ndarray]
    feature_meta: List[FeatureMeta]
    has_labels: bool

    def __len__(self) -> int:
        return len(self.feature_meta)


def split_context(text: str) -> Tuple[List[str], List[int]]:
    """Splits a context into whitespace words.

    Returns:
        (words, starts): the words, and the character offset in `text` of each one.
    """
    words: List[str] = []
    starts: List[int] = []
    begin = -1
    for i, char in enumerate(text):
        if char in CONTEXT_SPACES:
            if begin >= 0:
                words.append(text[begin:i])
                starts.append(begin)
                begin = -1
        elif begin < 0:
            begin = i
    if begin >= 0:
        words.append(text[begin:])
        starts.append(begin)
    return words, starts


def char_to_word(word_starts: Sequence[int], char_index: int) -> int:
    """Index of the word holding character `char_index`; a blank belongs to the word before
    it (-1 before the first word)."""
    return bisect.bisect_right(word_starts, char_index) - 1


def _field(obj: Any, key: str, kind: type, path: str, where: str) -> Any:
    """obj[key], checked to be a `kind`; a one-line UserError naming the file otherwise."""
    if not isinstance(obj, dict):
        raise UserError(f"SQuAD file {path}: {where} is not a JSON object")
    if key not in obj:
        raise UserError(f"SQuAD file {path}: {where} has no {key!r}")
    value = obj[key]
    # bool is an int in Python; an answer_start of `true` is still malformed.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise UserError(f"SQuAD file {path}: {where}: {key!r} is not a {kind.__name__}")
    return value


def _load_articles(path: str) -> List[Any]:
    try:
        with fileio.open_file(path, "rb") as f:
            raw = f.read()
    except Exception as e:  # OSError locally, tf.errors.* for gs:// paths
        raise UserError(f"cannot read SQuAD file {path}: {reason(e)}") from None
    try:
        data = json.loads(raw.decode("utf-8-sig"))
    except (UnicodeDecodeError, ValueError) as e:
        raise UserError(f"SQuAD file {path} is not valid JSON: {reason(e)}") from None
    return _field(data, "data", list, path, "the top level")


def read_squad_examples(path: str, is_training: bool) -> List[SquadExample]:
    """Reads a SQuAD v1.1 or v2.0 JSON file.

    Args:
        path: local or gs:// path of the file.
        is_training: locate the first answer of each question in the context (`start_word`,
            `end_word`); an answerable question must then have an answer. Without it, answers
            are only kept as text for evaluation (and may be absent).

    Returns:
        The examples in file order. In training, those whose answer text is not found at
        `answer_start` are left out (and counted in one warning).

    Raises:
        UserError: the file is missing, not JSON, or lacks a key SQuAD requires.
    """
    examples: List[SquadExample] = []
    skipped = 0
    for a, article in enumerate(_load_articles(path)):
        paragraphs = _field(article, "paragraphs", list, path, f"article {a}")
        for p, paragraph in enumerate(paragraphs):
            where = f"article {a} paragraph {p}"
            context = _field(paragraph, "context", str, path, where)
            words, starts = split_context(context)
            doc_words, word_starts = tuple(words), tuple(starts)  # shared by the questions
            for q, qa in enumerate(_field(paragraph, "qas", list, path, where)):
                example = _read_question(qa, path, f"{where} question {q}", context, doc_words,
                                         word_starts, is_training)
                if example is None:
                    skipped += 1
                else:
                    examples.append(example)
    if skipped:
        logging.warning("%s: skipped %d answers whose text is not at answer_start", path,
                        skipped)
    return examples


def _read_question(qa: Any, path: str, where: str, context: str, doc_words: Tuple[str, ...],
                   word_starts: Tuple[int, ...], is_training: bool) -> Optional[SquadExample]:
    """One question; None when its training answer is not where `answer_start` says."""
    qas_id = _field(qa, "id", str, path, where)
    where = f"question {qas_id!r}"
    question = _field(qa, "question", str, path, where)
    is_impossible = bool(qa.get("is_impossible", False))
    answers = None
    first = None
    if "answers" in qa:
        raw = _field(qa, "answers", list, path, where)
        answers = tuple(_field(x, "text", str, path, f"{where} answer") for x in raw)
        first = raw[0] if raw else None
    plausible = tuple(_field(x, "text", str, path, f"{where} plausible answer")
                      for x in qa.get("plausible_answers", []) or [])
    common = dict(qas_id=qas_id, question_text=question, context_text=context,
                  doc_words=doc_words, word_starts=word_starts,
                  answers=() if is_impossible else answers, plausible_answers=plausible,
                  is_impossible=is_impossible)
    if not is_training or is_impossible:
        return SquadExample(**common)
    if first is None:
        raise UserError(f"SQuAD file {path}: {where} has no answer and is not is_impossible")
    text = _field(first, "text", str, path, f"{where} answer")
    offset = _field(first, "answer_start", int, path, f"{where} answer")
    if not text or not 0 <= offset or offset + len(text) > len(context):
        return None
    start_word = char_to_word(word_starts, offset)
    end_word = char_to_word(word_starts, offset + len(text) - 1)
    # The annotated text must be inside the words it points at (blanks normalised), else the
    # offset is wrong and training on those words would teach the wrong span.
    span = " ".join(doc_words[max(start_word, 0):end_word + 1])
    if start_word < 0 or " ".join(text.split()) not in span:
        return None
    return SquadExample(**common, answer_text=text, start_word=start_word, end_word=end_word)


def has_answers(examples: Sequence[SquadExample]) -> bool:
    """True when every question has gold answers (or is marked impossible): EM/F1 can be
    computed. False for an empty list."""
    return bool(examples) and all(
        ex.answers is not None and (ex.is_impossible or len(ex.answers) > 0) for ex in examples)


def file_has_answers(path: str) -> bool:
    """`has_answers` of the questions of a SQuAD file (e.g. the predict file)."""
    return has_answers(read_squad_examples(path, is_training=False))


def doc_windows(num_pieces: int, max_pieces: int, doc_stride: int) -> List[Tuple[int, int]]:
    """(start, length) of each window; the last one reaches the end of the context.

    A step is never longer than the window, so no piece falls between two windows.
    """
    windows = []
    start = 0
    while True:
        length = min(num_pieces - start, max_pieces)
        windows.append((start, length))
        if start + length >= num_pieces:
            return windows
        start += min(length, doc_stride)


def max_context_window(num_pieces: int, windows: List[Tuple[int, int]]) -> np.ndarray:
    """int [num_pieces]: the window where each piece has the most context.

    Score of a piece in a window: min(pieces left of it, pieces right of it) + 0.01 * window
    length; the first window wins a tie. (Only the last window can be shorter, so the length
    term never overrules the first-wins tie-break; it is kept as the usual definition.)
    """
    best = np.zeros(num_pieces, dtype=np.int64)
    best_score = np.full(num_pieces, -np.inf)
    for w, (start, length) in enumerate(windows):
        pos = np.arange(start, start + length)
        score = np.minimum(pos - start, start + length - 1 - pos) + 0.01 * length
        better = score > best_score[pos]
        best[pos[better]] = w
        best_score[pos[better]] = score[better]
    return best


def _tokenize_context(tokenizer: FullTokenizer, words: Sequence[str]):
    """(pieces, piece ids, piece -> word, word -> its first piece) of a context."""
    pieces: List[str] = []
    ids: List[int] = []
    piece_word: List[int] = []
    word_first: List[int] = []
    for w, word in enumerate(words):
        word_first.append(len(ids))
        word_ids = tokenizer.encode(word)  # same ids as tokenize(), memoized
        ids.extend(word_ids)
        pieces.extend(tokenizer.inv_vocab[i] for i in word_ids)
        piece_word.extend([w] * len(word_ids))
    return pieces, ids, piece_word, word_first


def _improve_span(pieces: Sequence[str], start: int, end: int, tokenizer: FullTokenizer,
                  answer_text: str) -> Tuple[int, int]:
    """Narrows [start, end] to the pieces that spell the annotated answer.

    The answer's words are whole context words, but the annotation may cover only part of a
    word ("1895" in "1895-1896"): the sub-span whose pieces equal the answer's own pieces is
    the better label (earliest start, then the longest such span); none found keeps it.
    """
    target = " ".join(tokenizer.tokenize(answer_text))
    for new_start in range(start, end + 1):
        for new_end in range(end, new_start - 1, -1):
            if " ".join(pieces[new_start:new_end + 1]) == target:
                return new_start, new_end
    return start, end


def featurize(examples: Sequence[SquadExample], tokenizer: FullTokenizer, *,
              max_seq_length: int = 384, doc_stride: int = 128, max_query_length: int = 64,
              is_training: bool = False) -> SquadFeatures:
    """Cuts every example into windows of WordPieces.

    Args:
        examples: from `read_squad_examples` (with `is_training` as here for labels).
        tokenizer: the model's WordPiece tokenizer.
        max_seq_length: length of every row, [CLS] and two [SEP] included.
        doc_stride: pieces between the starts of consecutive windows.
        max_query_length: questions are cut to this many pieces.
        is_training: also give "start_positions"/"end_positions".

    Returns:
        `SquadFeatures`, one row per window, examples in order (each has at least one).

    Raises:
        UserError: the lengths leave no room for context, or the stride is not positive.
    """
    if doc_stride < 1:
        raise UserError(f"doc_stride must be positive, got {doc_stride}")
    if max_seq_length - max_query_length - 3 < 1:
        raise UserError(f"max_seq_length {max_seq_length} leaves no room for context after "
                        f"max_query_length {max_query_length} and [CLS] [SEP] [SEP]")
    cls_id, sep_id = tokenizer.vocab[CLS], tokenizer.vocab[SEP]
    rows: List[List[int]] = []
    segment_lengths: List[int] = []
    starts: List[int] = []
    ends: List[int] = []
    metas: List[FeatureMeta] = []
    cached_words: Optional[Tuple[str, ...]] = None
    for e, ex in enumerate(examples):
        if ex.doc_words is not cached_words:  # a paragraph's questions share its words
            cached_words = ex.doc_words
            pieces, piece_ids, piece_word, word_first = _tokenize_context(tokenizer,
                                                                          ex.doc_words)
        query = tokenizer.tokenize(ex.question_text)[:max_query_length]
        query_ids = tokenizer.convert_tokens_to_ids(query)
        offset = len(query) + 2  # position of the first context token: [CLS] query [SEP]
        windows = doc_windows(len(pieces), max_seq_length - len(query) - 3, doc_stride)
        best_window = max_context_window(len(pieces), windows)
        answer = None
        if is_training and not ex.is_impossible and ex.start_word < 0:
            raise ValueError(f"example {ex.qas_id!r} has no located answer: read it with "
                             "read_squad_examples(..., is_training=True)")
        if is_training and not ex.is_impossible:
            first = word_first[ex.start_word]
            last = (word_first[ex.end_word + 1] - 1 if ex.end_word + 1 < len(word_first)
                    else len(pieces) - 1)
            if first <= last:  # else the answer's words have no pieces (only control chars)
                answer = _improve_span(pieces, first, last, tokenizer, ex.answer_text)
        for w, (start, length) in enumerate(windows):
            stop = start + length
            rows.append([cls_id, *query_ids, sep_id, *piece_ids[start:stop], sep_id])
            segment_lengths.append(offset)
            to_word = np.full(offset + length + 1, -1, dtype=np.int32)
            to_word[offset:offset + length] = piece_word[start:stop]
            max_context = np.zeros(offset + length + 1, dtype=bool)
            max_context[offset:offset + length] = best_window[start:stop] == w
            metas.append(FeatureMeta(
                example_index=e, qas_id=ex.qas_id, window_index=w, window_start=start,
                tokens=(CLS, *query, SEP, *pieces[start:stop], SEP),
                token_to_word=to_word, token_is_max_context=max_context))
            if is_training:
                # Only a window holding the whole answer is taught its span; the others (and
                # impossible questions) point at [CLS].
                inside = answer is not None and start <= answer[0] and answer[1] < stop
                starts.append(answer[0] - start + offset if inside else 0)
                ends.append(answer[1] - start + offset if inside else 0)
    arrays = _pad(rows, segment_lengths, max_seq_length)
    if is_training:
        arrays["start_positions"] = np.asarray(starts, dtype=np.int32)
        arrays["end_positions"] = np.asarray(ends, dtype=np.int32)
    return SquadFeatures(arrays=arrays, feature_meta=metas, has_labels=is_training)


def _pad(rows: List[List[int]], first_segment: List[int], max_seq_length: int
         ) -> Dict[str, np.ndarray]:
    """input_ids / input_mask / segment_ids, int32 [n, max_seq_length], zero-padded."""
    n = len(rows)
    input_ids = np.zeros((n, max_seq_length), dtype=np.int32)
    input_mask = np.zeros((n, max_seq_length), dtype=np.int32)
    segment_ids = np.zeros((n, max_seq_length), dtype=np.int32)
    for i, (row, first) in enumerate(zip(rows, first_segment)):
        input_ids[i, :len(row)] = row
        input_mask[i, :len(row)] = 1
        segment_ids[i, first:len(row)] = 1  # the context and its closing [SEP]
    return {"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids}
