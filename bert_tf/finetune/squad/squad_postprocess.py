"""SQuAD post-processing: from per-window start/end logits to answer texts in the context.

Pure Python and NumPy (no TensorFlow).

For each question, every window proposes its `n_best_size` best start and end tokens; a pair
is a candidate span when both lie in the context, the start is scored in this window (it has
its maximum context here, see `squad_data`), end >= start and the span is at most
`max_answer_length` pieces. Candidates are ranked by start + end logit. The best pieces are
turned back into text ("denver broncos ,") and aligned character by character with the
original words ("Denver Broncos,") to recover casing, accents and punctuation; when the
alignment fails the de-tokenized text is used as it is.

SQuAD 2.0: the null (no answer) score is the smallest [CLS] start + end logit over the
question's windows; the answer is "" when it beats the best span by more than
`null_score_diff_threshold`.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import itertools
import json
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from bert_tf.core import fileio
from bert_tf.core.tokenization import CONTINUATION_PREFIX, CachedBasicTokenizer
from bert_tf.finetune.squad.squad_data import FeatureMeta, SquadExample

# Score given to "no span at all" (an empty context), so that v2.0's null always wins.
_NO_SPAN_SCORE = -1e4


@dataclasses.dataclass(frozen=True)
class AnswerSpan:
    """The chosen answer of one question, as the serving export reports it.

    Attributes:
        answer: the answer text ("" for SQuAD 2.0's no-answer).
        start: character offset of the answer in the context, -1 for no answer.
        end: offset one past its last character (`context[start:end]` is the answer, with
            the context's own blanks between words), -1 for no answer.
        score: start + end logit of the span (the null score for no answer).
    """

    answer: str
    start: int
    end: int
    score: float

    def as_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class SquadPredictions:
    """Everything post-processing produces.

    Attributes:
        predictions: qas id -> answer text (predictions.json).
        nbest: qas id -> up to n_best_size entries {"text", "probability", "start_logit",
            "end_logit"}, best first, probabilities a softmax over their scores
            (nbest_predictions.json).
        null_odds: SQuAD 2.0 only, qas id -> null score - best span score (null_odds.json);
            None for v1.1.
        answers: qas id -> `AnswerSpan`, with character offsets in the context.
    """

    predictions: Dict[str, str]
    nbest: Dict[str, List[Dict[str, Any]]]
    null_odds: Optional[Dict[str, float]]
    answers: Dict[str, AnswerSpan]


@dataclasses.dataclass
class _Entry:
    text: str
    start_logit: float
    end_logit: float
    start: int  # character offsets in the context, -1 for the null entry
    end: int


def _join_pieces(pieces: Sequence[str]) -> Tuple[str, List[int], List[int]]:
    """De-tokenizes WordPieces: a `##` piece is glued to the one before, others are spaced.

    Returns:
        (text, starts, ends): the text, and each piece's [start, end) character offsets in it.
    """
    parts: List[str] = []
    starts: List[int] = []
    ends: List[int] = []
    length = 0
    for i, piece in enumerate(pieces):
        if piece.startswith(CONTINUATION_PREFIX):
            piece = piece[len(CONTINUATION_PREFIX):]
        elif i > 0:
            parts.append(" ")
            length += 1
        starts.append(length)
        parts.append(piece)
        length += len(piece)
        ends.append(length)
    return "".join(parts), starts, ends


# The basic tokenizer memoized per word: n-best texts cover the same words over and over.
_BASIC = {True: CachedBasicTokenizer(do_lower_case=True),
          False: CachedBasicTokenizer(do_lower_case=False)}


@functools.lru_cache(maxsize=1 << 16)
def _widths(word: str, do_lower_case: bool) -> Tuple[int, ...]:
    """How many non-blank characters the basic tokenizer makes of each character of `word`
    (0 for one it drops, 2 for "İ" lower-cased, ...). Memoized: n-best texts share words."""
    return tuple(sum(len(t) for t in _BASIC[do_lower_case].tokenize(c)) for c in word)


def _owners(orig_text: str, do_lower_case: bool) -> List[int]:
    """owner[k] = index in `orig_text` of the character that produced the k-th non-blank
    character of its basic tokenization."""
    owner: List[int] = []
    base = 0
    for word in orig_text.split(" "):  # a space produces nothing
        for i, width in enumerate(_widths(word, do_lower_case)):
            if width:
                owner.extend([base + i] * width)
        base += len(word) + 1
    return owner


def align_to_original(pred_text: str, orig_text: str, do_lower_case: bool,
                      hint: int = 0) -> Tuple[str, Optional[Tuple[int, int]]]:
    """Finds the part of `orig_text` that the de-tokenized `pred_text` came from.

    Both texts are compared without blanks: `orig_text` is basic-tokenized (lower-cased,
    accents stripped, punctuation split off), `pred_text` located in that, and each of the
    tokenized text's non-blank characters is traced back to the original character that
    produced it.

    Args:
        pred_text: de-tokenized pieces, e.g. "denver broncos ,".
        orig_text: the original words they lie in, e.g. "Denver Broncos, ...".
        do_lower_case: the tokenizer's setting.
        hint: where `pred_text` should start in the tokenized `orig_text`, used when it is
            there (it may occur more than once, as "10" in "10-10"), else the first occurrence.

    Returns:
        (text, (start, end)): the original text and its [start, end) offsets in `orig_text`;
        (pred_text, None) when the alignment fails (e.g. an [UNK] piece).
    """
    tok_text = " ".join(_BASIC[do_lower_case].tokenize(orig_text))
    pos = hint if tok_text.startswith(pred_text, hint) else tok_text.find(pred_text)
    if pos < 0 or not pred_text.strip():
        return pred_text, None
    ns_start = len(tok_text[:pos].replace(" ", ""))
    ns_end = ns_start + len(pred_text.replace(" ", "")) - 1  # inclusive
    owner = _owners(orig_text, do_lower_case)
    if len(owner) != len(tok_text.replace(" ", "")):
        return pred_text, None
    start, end = owner[ns_start], owner[ns_end] + 1
    return orig_text[start:end], (start, end)


def context_pieces(features: Sequence[int], feature_meta: Sequence[FeatureMeta]
                    ) -> Tuple[List[str], np.ndarray]:
    """The example's context pieces and their words, pieced together from all its windows."""
    tokens: Dict[int, str] = {}
    words: Dict[int, int] = {}
    for f in features:
        meta = feature_meta[f]
        for k, p in enumerate(np.flatnonzero(meta.token_to_word >= 0)):
            tokens[meta.window_start + k] = meta.tokens[p]
            words[meta.window_start + k] = int(meta.token_to_word[p])
    n = max(tokens) + 1 if tokens else 0
    return ([tokens.get(g, "") for g in range(n)],
            np.array([words.get(g, -1) for g in range(n)], np.int64))


def span_text(example: SquadExample, meta: FeatureMeta, s: int, e: int,
               do_lower_case: bool, context: Tuple[List[str], np.ndarray]
               ) -> Tuple[str, int, int]:
    """Original text and context character offsets of window tokens s..e (inclusive).

    `context` is `context_pieces` of the example: a window may begin inside a word whose
    first pieces are only in an earlier window.
    """
    pieces, piece_words = context
    first_context = int(np.flatnonzero(meta.token_to_word >= 0)[0])
    gs = meta.window_start + s - first_context
    ge = meta.window_start + e - first_context
    first_word, last_word = int(piece_words[gs]), int(piece_words[ge])
    # Start the de-tokenized text at the word's first piece, so the offset of piece gs in it
    # tells which occurrence of the prediction is meant.
    first = gs
    while first > 0 and piece_words[first - 1] == first_word:
        first -= 1
    text, starts, ends = _join_pieces(pieces[first:ge + 1])
    pred_text = " ".join(text[starts[gs - first]:ends[ge - first]].split())
    words = example.doc_words[first_word:last_word + 1]
    orig_text = " ".join(words)
    final, span = align_to_original(pred_text, orig_text, do_lower_case,
                                    hint=starts[gs - first])
    word_starts = example.word_starts
    if span is None:  # the whole words, as the best guess
        return final, word_starts[first_word], word_starts[last_word] + len(words[-1])
    # orig_text joins the words with one space; map its offsets to the context's own.
    bases = list(itertools.accumulate((len(w) + 1 for w in words[:-1]), initial=0))
    k0 = bisect.bisect_right(bases, span[0]) - 1
    k1 = bisect.bisect_right(bases, span[1] - 1) - 1
    start = word_starts[first_word + k0] + span[0] - bases[k0]
    end = word_starts[first_word + k1] + span[1] - bases[k1]
    return final, start, end


def _best_indexes(logits: np.ndarray, allowed: np.ndarray, n: int) -> np.ndarray:
    """Positions of the n largest logits among the allowed ones, best first (ties: first)."""
    candidates = np.flatnonzero(allowed)
    order = np.argsort(-logits[candidates], kind="stable")
    return candidates[order[:n]]


def _softmax(scores: Sequence[float]) -> np.ndarray:
    x = np.asarray(scores, dtype=np.float64)
    x = np.exp(x - x.max())
    return x / x.sum()


def postprocess(examples: Sequence[SquadExample], feature_meta: Sequence[FeatureMeta],
                start_logits: np.ndarray, end_logits: np.ndarray, *, do_lower_case: bool,
                n_best_size: int = 20, max_answer_length: int = 30,
                version_2_with_negative: bool = False,
                null_score_diff_threshold: float = 0.0) -> SquadPredictions:
    """Picks each question's answer from the logits of its windows.

    Args:
        examples: the examples given to `squad_data.featurize`.
        feature_meta: its `SquadFeatures.feature_meta`.
        start_logits: float [n_features, max_seq_length].
        end_logits: float [n_features, max_seq_length].
        do_lower_case: the tokenizer's setting (to align with the original text).
        n_best_size: start and end candidates per window, and entries kept in the n-best.
        max_answer_length: longest answer, in WordPieces.
        version_2_with_negative: SQuAD 2.0: allow "no answer".
        null_score_diff_threshold: answer "" when null score - best span score exceeds it.

    Returns:
        `SquadPredictions`.
    """
    start_logits = np.asarray(start_logits, dtype=np.float64)
    end_logits = np.asarray(end_logits, dtype=np.float64)
    if start_logits.shape != end_logits.shape or len(start_logits) != len(feature_meta):
        raise ValueError(f"logits {start_logits.shape} / {end_logits.shape} do not match "
                         f"{len(feature_meta)} features")
    by_example: Dict[int, List[int]] = {}
    for f, meta in enumerate(feature_meta):
        by_example.setdefault(meta.example_index, []).append(f)
    out = SquadPredictions({}, {}, {} if version_2_with_negative else None, {})
    for e, example in enumerate(examples):
        _one_example(example, by_example.get(e, []), feature_meta, start_logits, end_logits,
                     out, do_lower_case, n_best_size, max_answer_length,
                     version_2_with_negative, null_score_diff_threshold)
    return out


def _one_example(example, features, feature_meta, start_logits, end_logits,
                 out: SquadPredictions, do_lower_case, n_best_size, max_answer_length,
                 version_2, threshold) -> None:
    # (score, feature, start token, end token); feature -1 is the null answer.
    candidates: List[Tuple[float, int, int, int]] = []
    null = (np.inf, 0.0, 0.0)  # (score, start logit, end logit) of the lowest [CLS] score
    for f in features:
        meta, sl, el = feature_meta[f], start_logits[f], end_logits[f]
        n = len(meta.tokens)
        if sl[0] + el[0] < null[0]:
            null = (sl[0] + el[0], sl[0], el[0])
        in_context = meta.token_to_word >= 0
        for s in _best_indexes(sl[:n], in_context & meta.token_is_max_context, n_best_size):
            for e in _best_indexes(el[:n], in_context, n_best_size):
                if s <= e < s + max_answer_length:
                    candidates.append((sl[s] + el[e], f, int(s), int(e)))
    if version_2 and features:
        candidates.append((null[0], -1, 0, 0))
    candidates.sort(key=lambda c: -c[0])  # stable: earlier windows win ties

    entries: List[_Entry] = []
    seen = set()
    context = context_pieces(features, feature_meta) if candidates else ([], np.zeros(0))
    for _, f, s, e in candidates:
        if len(entries) >= n_best_size:
            break
        if f < 0:
            entry = _Entry("", null[1], null[2], -1, -1)
        else:
            text, start, end = span_text(example, feature_meta[f], s, e, do_lower_case,
                                          context)
            entry = _Entry(text, start_logits[f, s], end_logits[f, e], start, end)
        if entry.text in seen:
            continue
        seen.add(entry.text)
        entries.append(entry)
    if version_2 and features and "" not in seen:
        entries.append(_Entry("", null[1], null[2], -1, -1))
    if not entries:  # no window, or no context at all
        entries.append(_Entry("", 0.0, 0.0, -1, -1))

    probs = _softmax([x.start_logit + x.end_logit for x in entries])
    qid = example.qas_id
    out.nbest[qid] = [{"text": x.text, "probability": float(p),
                       "start_logit": float(x.start_logit), "end_logit": float(x.end_logit)}
                      for x, p in zip(entries, probs)]
    best = next((x for x in entries if x.text), None)
    best_score = best.start_logit + best.end_logit if best else _NO_SPAN_SCORE
    if version_2 and features:
        diff = float(null[0] - best_score)
        out.null_odds[qid] = diff
        if diff > threshold or best is None:
            out.predictions[qid] = ""
            out.answers[qid] = AnswerSpan("", -1, -1, float(null[0]))
            return
    chosen = best if version_2 else entries[0]
    if chosen is None:
        chosen = entries[0]
    out.predictions[qid] = chosen.text
    out.answers[qid] = AnswerSpan(chosen.text, chosen.start, chosen.end,
                                  float(chosen.start_logit + chosen.end_logit))


def _write_json(path: str, value: Any) -> None:
    with fileio.atomic_output(path, "wb") as f:
        f.write((json.dumps(value, indent=4, ensure_ascii=False) + "\n").encode("utf-8"))


def write_predictions(result: SquadPredictions, output_dir: str) -> List[str]:
    """Writes predictions.json, nbest_predictions.json and (SQuAD 2.0) null_odds.json.

    Each file is written under a temporary name and renamed when complete.

    Returns:
        The paths written.
    """
    fileio.makedirs(output_dir)
    outputs = [("predictions.json", result.predictions),
               ("nbest_predictions.json", result.nbest)]
    if result.null_odds is not None:
        outputs.append(("null_odds.json", result.null_odds))
    paths = []
    for name, value in outputs:
        path = os.path.join(output_dir, name)
        _write_json(path, value)
        paths.append(path)
    return paths
