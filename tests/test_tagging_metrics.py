"""Tests for bert_tf.finetune.tagging.tagging_metrics: chunk decoding and hand-counted CoNLL
scores."""

from __future__ import annotations

import pytest

from bert_tf.core.errors import UserError
from bert_tf.finetune.tagging import tagging_metrics as tm


@pytest.mark.parametrize("tags, spans", [
    ([], []),
    (["O", "O"], []),
    # BIO.
    (["B-PER", "I-PER", "O", "B-LOC"], [("PER", 0, 2), ("LOC", 3, 4)]),
    # An I- after O begins an entity (IOB1, or a sloppy BIO prediction).
    (["O", "I-PER", "I-PER", "O"], [("PER", 1, 3)]),
    (["I-PER"], [("PER", 0, 1)]),
    # A B- after an I- of another type begins a new entity.
    (["I-LOC", "B-PER", "I-PER"], [("LOC", 0, 1), ("PER", 1, 3)]),
    # IOB1: B- separates two adjacent entities of one type.
    (["I-PER", "I-PER", "B-PER", "I-PER"], [("PER", 0, 2), ("PER", 2, 4)]),
    # A type switch inside a run of I- tags splits it.
    (["B-PER", "I-LOC", "I-LOC", "I-PER"], [("PER", 0, 1), ("LOC", 1, 3), ("PER", 3, 4)]),
    (["B-PER", "B-PER"], [("PER", 0, 1), ("PER", 1, 2)]),
    # IOBES: S- is one word, E- closes, an E- right after an E- is a one-word entity.
    (["S-PER", "B-LOC", "I-LOC", "E-LOC", "E-LOC", "O"],
     [("PER", 0, 1), ("LOC", 1, 4), ("LOC", 4, 5)]),
    # IOE1: E- separates two adjacent entities of one type.
    (["I-ORG", "E-ORG", "I-ORG", "O"], [("ORG", 0, 2), ("ORG", 2, 3)]),
    # The type is everything after the first dash.
    (["B-MISC-X", "I-MISC-X", "I-MISC"], [("MISC-X", 0, 2), ("MISC", 2, 3)]),
])
def test_tags_to_spans(tags, spans):
    assert tm.tags_to_spans(tags) == spans


def test_untyped_tags_score_as_one_type():
    # BioBERT's NCBI-disease files: B / I / O. Gold: (0-2), (3-4); predicted: (0-2), (3-5).
    gold = [["B", "I", "O", "B", "O"]]
    predicted = [["B", "I", "O", "B", "I"]]
    assert tm.tags_to_spans(gold[0]) == [("", 0, 2), ("", 3, 4)]
    result = tm.tagging_metrics(gold, predicted)
    assert result["eval_precision"] == pytest.approx(0.5)
    assert result["eval_recall"] == pytest.approx(0.5)
    assert result["eval_f1"] == pytest.approx(0.5)
    typed = [[t if t == "O" else f"{t}-Disease" for t in s] for s in (gold[0], predicted[0])]
    assert tm.tagging_metrics([typed[0]], [typed[1]]) == result


@pytest.mark.parametrize("bad", ["X-PER", "B-", "PER", "o", "L-PER", ""])
def test_malformed_tag_is_a_user_error(bad):
    with pytest.raises(UserError, match="neither 'O'"):
        tm.tags_to_spans(["O", bad])


# Three BIO sentences. Gold entities: PER(s0 0-2), LOC(s0 3-4), ORG(s1 1-4), LOC(s2 0-1),
# PER(s2 2-3) = 5. Predicted: PER(s0 0-2) right, ORG(s0 3-4) wrong type, ORG(s1 1-3) wrong
# end (an I- after O still begins it), LOC(s2 0-1) right, LOC(s2 1-2) spurious, PER(s2 2-3)
# right = 6, 3 of them right.
BIO_GOLD = [["B-PER", "I-PER", "O", "B-LOC", "O"],
            ["O", "B-ORG", "I-ORG", "I-ORG"],
            ["B-LOC", "O", "B-PER"]]
BIO_PRED = [["B-PER", "I-PER", "O", "B-ORG", "O"],
            ["O", "I-ORG", "I-ORG", "O"],
            ["B-LOC", "B-LOC", "B-PER"]]


def test_bio_scores():
    # P = 3/6, R = 3/5, F1 = 2 (1/2)(3/5) / (1/2 + 3/5) = 6/11.
    # Words: 4 of 5, 2 of 4 and 2 of 3 tags equal -> 8/12.
    result = tm.tagging_metrics(BIO_GOLD, BIO_PRED)
    assert result == {"eval_precision": pytest.approx(1 / 2), "eval_recall": pytest.approx(3 / 5),
                      "eval_f1": pytest.approx(6 / 11), "eval_accuracy": pytest.approx(2 / 3)}


def test_bio_per_type():
    pooled, per_type = tm.entity_scores(BIO_GOLD, BIO_PRED)
    assert (pooled.num_gold, pooled.num_predicted, pooled.num_correct) == (5, 6, 3)
    assert list(per_type) == ["LOC", "ORG", "PER"]
    assert per_type["PER"] == tm.ChunkScores(num_gold=2, num_predicted=2, num_correct=2)
    assert per_type["LOC"] == tm.ChunkScores(num_gold=2, num_predicted=2, num_correct=1)
    assert per_type["ORG"] == tm.ChunkScores(num_gold=1, num_predicted=2, num_correct=0)
    assert (per_type["LOC"].precision, per_type["LOC"].recall, per_type["LOC"].f1) == (
        0.5, 0.5, 0.5)
    assert (per_type["ORG"].precision, per_type["ORG"].f1) == (0.0, 0.0)
    result = tm.tagging_metrics(BIO_GOLD, BIO_PRED, per_type=True)
    assert result["eval_PER_f1"] == 1.0 and result["eval_LOC_recall"] == 0.5
    assert result["eval_ORG_support"] == 1.0 and result["eval_ORG_precision"] == 0.0
    assert len(result) == 4 + 3 * 4


def test_iob1_scores():
    # Gold: PER 0-2, PER 2-3 (B- between adjacent PERs), LOC 4-5, ORG 5-6; MISC 1-2 = 5.
    # Predicted: PER 0-2, PER 2-3, LOC 4-5 right, LOC 5-6 wrong; MISC 0-1 wrong (I- after
    # nothing begins it), MISC 1-2 right (B- after an I- of its type) = 6, 4 right.
    gold = [["I-PER", "I-PER", "B-PER", "O", "I-LOC", "I-ORG"], ["O", "I-MISC"]]
    pred = [["I-PER", "I-PER", "B-PER", "O", "I-LOC", "B-LOC"], ["I-MISC", "B-MISC"]]
    # P = 4/6, R = 4/5, F1 = 2 (2/3)(4/5) / (2/3 + 4/5) = 8/11. The right MISC entity is
    # tagged I- in gold and B- in the prediction: a word error but an entity match, so
    # word accuracy is 5/8 (sentence 0: 5 of 6, sentence 1: 0 of 2).
    assert tm.tagging_metrics(gold, pred) == {
        "eval_precision": pytest.approx(2 / 3), "eval_recall": pytest.approx(4 / 5),
        "eval_f1": pytest.approx(8 / 11), "eval_accuracy": pytest.approx(5 / 8)}


def test_entities_do_not_run_across_sentences():
    # Gold: PER ending sentence 0 and PER starting sentence 1 are two entities (one if the
    # sentences were joined). Predicted: the first only. P = 1, R = 1/2, F1 = 2/3.
    result = tm.tagging_metrics([["O", "B-PER"], ["I-PER", "O"]], [["O", "B-PER"], ["O", "O"]])
    assert (result["eval_precision"], result["eval_recall"]) == (1.0, 0.5)
    assert result["eval_f1"] == pytest.approx(2 / 3)
    assert result["eval_accuracy"] == pytest.approx(3 / 4)


def test_no_entities_anywhere_scores_zero():
    result = tm.tagging_metrics([["O", "O"]], [["O", "O"]])
    assert result == {"eval_precision": 0.0, "eval_recall": 0.0, "eval_f1": 0.0,
                      "eval_accuracy": 1.0}
    # All predicted, none right.
    result = tm.tagging_metrics([["B-PER", "O"]], [["O", "B-PER"]])
    assert (result["eval_precision"], result["eval_recall"], result["eval_f1"]) == (0, 0, 0)


def test_word_accuracy():
    assert tm.word_accuracy(BIO_GOLD, BIO_PRED) == pytest.approx(8 / 12)


@pytest.mark.parametrize("gold, pred, message", [
    ([["O"]], [["O"], ["O"]], "1 gold sentences but 2 predicted"),
    ([["O", "O"]], [["O"]], "sentence 0 has 2 gold tags but 1 predicted"),
    ([[]], [[]], "no words"),
    (["O O"], ["O O"], "sentence 0 is a string"),
    ([["O", "B-PER"]], [["O", "B_PER"]], "'B_PER'"),
])
def test_bad_input_is_a_user_error(gold, pred, message):
    with pytest.raises(UserError, match=message):
        tm.tagging_metrics(gold, pred)
