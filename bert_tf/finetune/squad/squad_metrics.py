"""SQuAD v1.1 and v2.0 scores, defined as the official evaluation scripts define them.

Both answers are normalised before comparing: lower case, ASCII punctuation removed, the
words "a", "an" and "the" removed, runs of whitespace made one space. Then per question

    exact = 1 if normalised prediction == normalised gold answer else 0
    F1    = 2 P R / (P + R) over the bags of normalised words (P = shared / predicted words,
            R = shared / gold words; 0 when nothing is shared)

each maxed over the question's gold answers, and the dataset figures are 100 * mean. The two
versions differ where the official scripts do:

- v1.1 scores a question without a prediction 0 (we log how many); v2.0 needs a prediction
  for every question (its script fails otherwise; we raise a UserError).
- v2.0: gold answers that normalise to nothing are dropped and a question left without any
  has the one gold answer "" (unanswerable); "" scores exact 1 and F1 1 against it and
  anything else 0. For two answers that both normalise to nothing v2.0's F1 is 1, v1.1's 0.
- v2.0 also reports the figures over answerable ("HasAns_") and unanswerable ("NoAns_")
  questions, with a prediction replaced by "" where its no-answer probability exceeds
  `na_prob_thresh`, and, given no-answer probabilities, the best exact and F1 over all
  thresholds (`best_null_threshold`).
"""

from __future__ import annotations

import collections
import re
import string
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

from absl import logging

from bert_tf.core.errors import UserError

_PUNCTUATION = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(?:a|an|the)\b")


def normalize_answer(text: str) -> str:
    """Lower case, no ASCII punctuation, no articles, single spaces: " The U.S.A.!" -> "usa"."""
    text = text.lower().translate(_PUNCTUATION)
    # An article becomes a space, not nothing, so the words around it stay apart.
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, gold: str) -> int:
    """1 when the two answers are equal after normalisation, else 0."""
    return int(normalize_answer(prediction) == normalize_answer(gold))


def token_f1(prediction: str, gold: str, *, squad_v2: bool = True) -> float:
    """F1 of the bags of normalised words of two answers.

    Args:
        prediction: the predicted answer text.
        gold: one gold answer text ("" for an unanswerable v2.0 question).
        squad_v2: v2.0's rule that two answers without words agree (F1 1); v1.1 gives 0.

    Returns:
        A float in [0, 1].
    """
    predicted_words = normalize_answer(prediction).split()
    gold_words = normalize_answer(gold).split()
    if squad_v2 and (not predicted_words or not gold_words):
        return float(predicted_words == gold_words)
    shared = sum((collections.Counter(predicted_words)
                  & collections.Counter(gold_words)).values())
    if shared == 0:
        return 0.0
    precision = shared / len(predicted_words)
    recall = shared / len(gold_words)
    return 2 * precision * recall / (precision + recall)


def _questions(dataset: Any) -> Iterator[Tuple[str, List[str]]]:
    """(question id, raw gold answer texts) for each question of a SQuAD JSON dict."""
    articles = dataset.get("data") if isinstance(dataset, Mapping) else dataset
    if not isinstance(articles, list):
        raise UserError("the SQuAD dataset has no 'data' list of articles")
    try:
        for article in articles:
            for paragraph in article["paragraphs"]:
                for qa in paragraph["qas"]:
                    yield str(qa["id"]), [str(a["text"]) for a in qa["answers"]]
    except (KeyError, TypeError) as e:
        raise UserError(f"the SQuAD dataset is malformed: missing or wrong field {e}") from None


def _check_text(qid: str, prediction: Any) -> str:
    if not isinstance(prediction, str):
        raise UserError(f"the prediction for question {qid!r} is {type(prediction).__name__},"
                        " not text")
    return prediction


def evaluate_v1(dataset: Mapping[str, Any], predictions: Mapping[str, str]) -> Dict[str, float]:
    """SQuAD v1.1 scores.

    Args:
        dataset: the SQuAD JSON (a dict with "data": articles -> paragraphs -> qas).
        predictions: {question id: predicted answer text}; ids not in the dataset are
            ignored, questions without a prediction score 0.

    Returns:
        {"exact_match": percent, "f1": percent}.

    Raises:
        UserError: a malformed dataset, a question without gold answers, or a prediction
            that is not text.
    """
    total = missing = 0
    exact_sum = f1_sum = 0.0
    for qid, golds in _questions(dataset):
        total += 1
        if not golds:
            raise UserError(f"question {qid!r} has no gold answer; evaluate it as SQuAD v2.0")
        if qid not in predictions:
            missing += 1
            continue
        prediction = _check_text(qid, predictions[qid])
        exact_sum += max(exact_match(prediction, g) for g in golds)
        f1_sum += max(token_f1(prediction, g, squad_v2=False) for g in golds)
    if total == 0:
        raise UserError("the SQuAD dataset has no questions")
    if missing:
        logging.warning("%d of %d questions have no prediction; they score 0", missing, total)
    return {"exact_match": 100.0 * exact_sum / total, "f1": 100.0 * f1_sum / total}


def _percentages(exact: Mapping[str, float], f1: Mapping[str, float],
                 qids: List[str]) -> Tuple[float, float, int]:
    return (100.0 * sum(exact[q] for q in qids) / len(qids),
            100.0 * sum(f1[q] for q in qids) / len(qids), len(qids))


def best_null_threshold(
    predictions: Mapping[str, str],
    scores: Mapping[str, float],
    na_probs: Mapping[str, float],
    has_answer: Mapping[str, bool],
) -> Tuple[float, float]:
    """The best score over no-answer thresholds, as the official v2.0 script finds it.

    Predicting "" wherever the no-answer probability exceeds a threshold t, the score is a
    step function of t. Below every probability all questions get "": the unanswerable ones
    score 1. Raising t past a question's probability restores its prediction: an answerable
    question then scores its raw score, an unanswerable one loses its point when the raw
    prediction is not the empty string. Questions are taken in order of probability (ties
    in the order of `na_probs`) and the running total's first maximum wins.

    Args:
        predictions: {question id: predicted text}.
        scores: {question id: raw score in [0, 1]} (exact or F1), one per question.
        na_probs: {question id: no-answer probability}.
        has_answer: {question id: whether the question has a gold answer}.

    Returns:
        (best score in percent of len(scores), the threshold giving it; 0.0 when predicting
        "" everywhere is best).
    """
    current = best = float(sum(1 for qid in scores if not has_answer[qid]))
    threshold = 0.0
    # sorted() is stable: equal probabilities keep the order of na_probs, as the script does.
    for qid in sorted(na_probs, key=lambda q: na_probs[q]):
        if qid not in scores:
            continue
        if has_answer[qid]:
            current += scores[qid]
        elif predictions[qid]:
            current -= 1
        if current > best:
            best, threshold = current, na_probs[qid]
    return 100.0 * best / len(scores), float(threshold)


def evaluate_v2(
    dataset: Mapping[str, Any],
    predictions: Mapping[str, str],
    na_probs: Optional[Mapping[str, float]] = None,
    *,
    na_prob_thresh: float = 1.0,
) -> Dict[str, float]:
    """SQuAD v2.0 scores.

    Args:
        dataset: the SQuAD JSON (a dict with "data": articles -> paragraphs -> qas);
            a question with an empty "answers" list is unanswerable.
        predictions: {question id: predicted text, "" for no answer}, one per question.
        na_probs: optional {question id: probability that there is no answer}, one per
            question; adds the "best_" figures.
        na_prob_thresh: predictions whose no-answer probability exceeds this count as "" in
            "exact", "f1" and the "HasAns_"/"NoAns_" figures.

    Returns:
        "exact" (also as "exact_match", v1.1's name), "f1" in percent and "total"; the same
        as "HasAns_exact", "HasAns_f1", "HasAns_total" when some questions have answers and
        "NoAns_..." when some have none; with `na_probs` also "best_exact",
        "best_exact_thresh", "best_f1", "best_f1_thresh".

    Raises:
        UserError: a malformed dataset, a question without a prediction (or without a
            no-answer probability when `na_probs` is given), or a prediction not text.
    """
    exact: Dict[str, float] = {}
    f1: Dict[str, float] = {}
    has_answer: Dict[str, bool] = {}
    for qid, answers in _questions(dataset):
        if qid not in predictions:
            raise UserError(f"no prediction for question {qid!r}")
        prediction = _check_text(qid, predictions[qid])
        has_answer[qid] = bool(answers)
        golds = [a for a in answers if normalize_answer(a)] or [""]
        exact[qid] = float(max(exact_match(prediction, g) for g in golds))
        f1[qid] = max(token_f1(prediction, g) for g in golds)
    if not exact:
        raise UserError("the SQuAD dataset has no questions")
    if na_probs is not None:
        lacking = [qid for qid in exact if qid not in na_probs]
        if lacking:
            raise UserError(f"{len(lacking)} questions have no no-answer probability, e.g. "
                            f"{lacking[0]!r}")
    probs = na_probs if na_probs is not None else {}

    def thresholded(raw: Dict[str, float]) -> Dict[str, float]:
        # Past the threshold the prediction is "": right exactly when there is no answer.
        return {qid: float(not has_answer[qid]) if probs.get(qid, 0.0) > na_prob_thresh
                else score for qid, score in raw.items()}

    exact_t, f1_t = thresholded(exact), thresholded(f1)
    qids = list(exact)
    result: Dict[str, float] = {}
    result["exact"], result["f1"], result["total"] = _percentages(exact_t, f1_t, qids)
    result["exact_match"] = result["exact"]
    for prefix, subset in (("HasAns", [q for q in qids if has_answer[q]]),
                           ("NoAns", [q for q in qids if not has_answer[q]])):
        if subset:
            (result[f"{prefix}_exact"], result[f"{prefix}_f1"],
             result[f"{prefix}_total"]) = _percentages(exact_t, f1_t, subset)
    if na_probs is not None:
        result["best_exact"], result["best_exact_thresh"] = best_null_threshold(
            predictions, exact, na_probs, has_answer)
        result["best_f1"], result["best_f1_thresh"] = best_null_threshold(
            predictions, f1, na_probs, has_answer)
    return result


def squad_evaluate(
    dataset: Mapping[str, Any],
    predictions: Mapping[str, str],
    na_probs: Optional[Mapping[str, float]] = None,
    *,
    version: Optional[str] = None,
) -> Dict[str, float]:
    """SQuAD scores for either version (see `evaluate_v1` and `evaluate_v2`).

    Args:
        dataset: the SQuAD JSON dict.
        predictions: {question id: predicted text}.
        na_probs: v2.0 only: {question id: no-answer probability}.
        version: "1.1" or "2.0"; default the dataset's "version" field ("v2.0" means 2.0,
            anything else 1.1), or 2.0 when the dataset has no such field but has a
            question without answers.

    Returns:
        The dict of `evaluate_v1` or `evaluate_v2`.
    """
    if version is None:
        declared = dataset.get("version") if isinstance(dataset, Mapping) else None
        if declared is not None:
            version = "2.0" if str(declared).lstrip("v").startswith("2") else "1.1"
        else:
            version = "2.0" if any(not golds for _, golds in _questions(dataset)) else "1.1"
    version = version.lstrip("v")
    if version == "1.1":
        if na_probs is not None:
            raise UserError("no-answer probabilities only apply to SQuAD v2.0")
        return evaluate_v1(dataset, predictions)
    if version == "2.0":
        return evaluate_v2(dataset, predictions, na_probs)
    raise UserError(f"unknown SQuAD version {version!r}; expected 1.1 or 2.0")
