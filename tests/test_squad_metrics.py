"""Tests for bert_tf.finetune.squad.squad_metrics: normalisation, EM/F1 and v2.0 figures by hand."""

from __future__ import annotations

import pytest

from bert_tf.core.errors import UserError
from bert_tf.finetune.squad import squad_metrics as sm


def make_dataset(questions, version=None):
    """questions: [(id, [gold answer texts])] -> a one-paragraph SQuAD JSON dict."""
    qas = [{"id": qid, "question": "?", "answers": [{"text": t, "answer_start": 0} for t in golds]}
           for qid, golds in questions]
    dataset = {"data": [{"title": "T", "paragraphs": [{"context": "...", "qas": qas}]}]}
    if version is not None:
        dataset["version"] = version
    return dataset


@pytest.mark.parametrize("text, normalised", [
    ("The  Cat's hat!", "cats hat"),
    ("  A.N. Other ", "other"),  # "A.N." loses its dots and becomes the article "an"
    ("theater Anne", "theater anne"),  # articles only as whole words
    ("U.S.A.", "usa"),
    ("1,000\tmen\n", "1000 men"),
    ("café—bar", "café—bar"),  # only ASCII punctuation goes
    ("x—the—y", "x— —y"),  # an article becomes a space, so the dashes stay apart
    ("a an the", ""),
])
def test_normalize_answer(text, normalised):
    assert sm.normalize_answer(text) == normalised


def test_exact_match():
    assert sm.exact_match("the Eiffel  Tower", "Eiffel tower.") == 1
    assert sm.exact_match("Eiffel Towers", "Eiffel tower") == 0


def test_token_f1():
    # [big, red, dog] vs [red, dog, barked]: 2 shared, P = R = 2/3.
    assert sm.token_f1("the big red dog", "a red dog barked") == pytest.approx(2 / 3)
    # Bags, not sets: [dog, dog, cat] vs [dog, cat, cat] share one dog and one cat.
    assert sm.token_f1("dog dog cat", "dog cat cat") == pytest.approx(2 / 3)
    # [red, fox, jumped] vs [red, fox]: P = 2/3, R = 1, F1 = 4/5.
    assert sm.token_f1("red fox jumped", "The red fox") == pytest.approx(4 / 5)
    assert sm.token_f1("cat", "dog") == 0.0


def test_token_f1_of_empty_answers_differs_between_versions():
    # Both normalise to nothing: v2.0 calls them equal, v1.1 finds no shared word.
    assert sm.token_f1("the", "A.", squad_v2=True) == 1.0
    assert sm.token_f1("the", "A.", squad_v2=False) == 0.0
    assert sm.token_f1("", "cat") == 0.0 and sm.token_f1("cat", "") == 0.0


def test_v1_scores_with_several_gold_answers_and_a_missing_prediction():
    dataset = make_dataset([
        ("q1", ["Denver Broncos", "The Denver Broncos"]),
        ("q2", ["Santa Clara, California", "Levi's Stadium"]),
        ("q3", ["Carolina"]),
    ], version="1.1")
    # q1: exact and F1 1. q2: [levis, stadium, in, santa, clara] vs [santa, clara,
    # california]: P 2/5, R 2/3, F1 1/2; vs [levis, stadium]: P 2/5, R 1, F1 4/7; max 4/7.
    # q3 has no prediction: 0. EM = 100/3, F1 = 100 (1 + 4/7) / 3 = 1100/21.
    predictions = {"q1": "denver broncos!", "q2": "Levi's Stadium in Santa Clara",
                   "other": "ignored"}
    result = sm.squad_evaluate(dataset, predictions)
    assert result == {"exact_match": pytest.approx(100 / 3), "f1": pytest.approx(1100 / 21)}
    assert sm.evaluate_v1(dataset, predictions) == result


# v2.0 example. a: right; b: partly right (F1 4/5); c: unanswerable, "" predicted (right);
# d: unanswerable, "London" predicted (wrong); e: answerable, "" predicted (wrong).
V2_QUESTIONS = [("a", ["Paris"]), ("b", ["the red fox"]), ("c", []), ("d", []),
                ("e", ["1990", "in 1990"])]
V2_PREDICTIONS = {"a": "Paris", "b": "red fox jumped", "c": "", "d": "London", "e": ""}
V2_NA_PROBS = {"a": 0.1, "b": 0.6, "c": 0.3, "d": 0.8, "e": 0.7}


def test_v2_scores():
    result = sm.evaluate_v2(make_dataset(V2_QUESTIONS, "v2.0"), V2_PREDICTIONS)
    # exact: a, c = 2 of 5; F1: 1 + 4/5 + 1 = 2.8 of 5.
    assert result == {
        "exact": pytest.approx(40.0), "exact_match": pytest.approx(40.0),
        "f1": pytest.approx(56.0), "total": 5,
        "HasAns_exact": pytest.approx(100 / 3), "HasAns_f1": pytest.approx(60.0),
        "HasAns_total": 3,
        "NoAns_exact": pytest.approx(50.0), "NoAns_f1": pytest.approx(50.0), "NoAns_total": 2,
    }


def test_v2_best_thresholds():
    # Questions by no-answer probability: a 0.1, c 0.3, b 0.6, e 0.7, d 0.8. With "" for
    # every question the 2 unanswerable ones are right (score 2). Restoring predictions in
    # that order: exact 2 -> a +1 = 3 -> c +0 -> b +0 -> e +0 -> d -1 = 2: best 3/5 at 0.1.
    # F1: 2 -> a +1 = 3 -> c +0 -> b +0.8 = 3.8 -> e +0 -> d -1: best 3.8/5 at 0.6.
    result = sm.evaluate_v2(make_dataset(V2_QUESTIONS), V2_PREDICTIONS, V2_NA_PROBS)
    assert result["best_exact"] == pytest.approx(60.0)
    assert result["best_exact_thresh"] == 0.1
    assert result["best_f1"] == pytest.approx(76.0)
    assert result["best_f1_thresh"] == 0.6
    # The thresholded figures still use na_prob_thresh = 1.0: nothing changes.
    assert result["exact"] == pytest.approx(40.0) and result["f1"] == pytest.approx(56.0)


def test_v2_na_prob_thresh_blanks_confident_no_answers():
    # Above 0.65: e (answerable, still 0) and d (unanswerable, now right) become "".
    result = sm.evaluate_v2(make_dataset(V2_QUESTIONS), V2_PREDICTIONS, V2_NA_PROBS,
                            na_prob_thresh=0.65)
    assert result["exact"] == pytest.approx(60.0) and result["f1"] == pytest.approx(76.0)
    assert result["NoAns_exact"] == 100.0 and result["HasAns_f1"] == pytest.approx(60.0)


def test_v2_best_threshold_when_blank_everywhere_is_best():
    # Both answerable predictions are wrong: restoring any prediction never helps.
    questions = [("x", ["cat"]), ("y", []), ("z", ["dog"])]
    predictions = {"x": "dog", "y": "", "z": "cat"}
    result = sm.evaluate_v2(make_dataset(questions), predictions, {"x": 0.2, "y": 0.9, "z": 0.5})
    assert (result["best_exact"], result["best_exact_thresh"]) == (pytest.approx(100 / 3), 0.0)
    assert "NoAns_total" in result and result["HasAns_total"] == 2


def test_v2_gold_answers_that_normalise_to_nothing():
    # "The" is dropped as a gold answer: the question counts as answerable (HasAns) but only
    # "" (or anything normalising to nothing) is right.
    questions = [("f", ["The"]), ("g", [])]
    result = sm.evaluate_v2(make_dataset(questions), {"f": "", "g": "an"})
    assert result["HasAns_total"] == 1 and result["HasAns_exact"] == 100.0
    # "an" normalises to "" and so matches the unanswerable gold answer.
    assert result["NoAns_exact"] == 100.0 and result["NoAns_f1"] == 100.0


def test_v2_dropped_gold_answer_is_not_matched_by_blank():
    # Gold ["The", "cat"]: "The" is dropped, so "" no longer matches; "the cat" does.
    questions = [("h", ["The", "cat"]), ("i", ["The", "cat"])]
    result = sm.evaluate_v2(make_dataset(questions), {"h": "", "i": "the cat"})
    assert result["exact"] == 50.0 and result["f1"] == 50.0


def test_v2_best_threshold_counts_any_non_empty_text_as_an_answer():
    # As the official script: in the sweep an unanswerable question loses its point when the
    # raw prediction is non-empty text, even "the", which normalises to nothing and so scores
    # exact 1 in the plain figures. Start: 1 (u); u at 0.2: "the" -> 0; h at 0.5: +1 -> 1,
    # not above the start: best 1/2 at threshold 0.0, below the plain exact of 2/2.
    result = sm.evaluate_v2(make_dataset([("u", []), ("h", ["cat"])]),
                            {"u": "the", "h": "cat"}, {"u": 0.2, "h": 0.5})
    assert result["exact"] == 100.0
    assert (result["best_exact"], result["best_exact_thresh"]) == (50.0, 0.0)
    assert (result["best_f1"], result["best_f1_thresh"]) == (50.0, 0.0)


def test_version_is_read_from_the_dataset():
    questions = [("a", ["Paris"]), ("c", [])]
    predictions = {"a": "paris", "c": ""}
    # No version field but an unanswerable question: v2.0.
    assert sm.squad_evaluate(make_dataset(questions), predictions)["NoAns_total"] == 1
    v2 = sm.squad_evaluate(make_dataset([("a", ["Paris"])], "v2.0"), {"a": "Paris"})
    assert v2["exact"] == 100.0 and "HasAns_exact" in v2
    v1 = sm.squad_evaluate(make_dataset([("a", ["Paris"])], "1.1"), {"a": "Paris"})
    assert v1 == {"exact_match": 100.0, "f1": 100.0}
    forced = sm.squad_evaluate(make_dataset([("a", ["Paris"])], "1.1"), {"a": "x"},
                               version="2.0")
    assert forced["total"] == 1 and forced["f1"] == 0.0


@pytest.mark.parametrize("call, message", [
    (lambda: sm.evaluate_v2(make_dataset(V2_QUESTIONS), {"a": "Paris"}),
     "no prediction for question 'b'"),
    (lambda: sm.evaluate_v2(make_dataset(V2_QUESTIONS), V2_PREDICTIONS, {"a": 0.5}),
     "4 questions have no no-answer probability"),
    (lambda: sm.evaluate_v1(make_dataset([("c", [])]), {"c": ""}), "no gold answer"),
    (lambda: sm.squad_evaluate(make_dataset([("a", ["x"])], "1.1"), {"a": "x"}, {"a": 0.1}),
     "only apply to SQuAD v2.0"),
    (lambda: sm.squad_evaluate(make_dataset([("a", ["x"])]), {"a": "x"}, version="3"),
     "unknown SQuAD version"),
    (lambda: sm.evaluate_v1({"version": "1.1"}, {}), "no 'data' list"),
    (lambda: sm.evaluate_v1({"data": [{"paragraphs": [{"qas": [{"id": "a"}]}]}]}, {}),
     "malformed"),
    (lambda: sm.evaluate_v1({"data": []}, {}), "no questions"),
    (lambda: sm.evaluate_v1(make_dataset([("a", ["x"])]), {"a": 3}), "is int, not text"),
])
def test_bad_input_is_a_user_error(call, message):
    with pytest.raises(UserError, match=message):
        call()
