"""SQuAD post-processing on hand-made logits: windows, max context, original text, v2.0 null."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from bert_tf.core.tokenization import FullTokenizer
from bert_tf.finetune.squad import squad_data as sd
from bert_tf.finetune.squad import squad_postprocess as sp

# 16 words, one WordPiece each; with max_seq_length 14 and stride 4 the windows hold pieces
# 0..8, 4..12 and 8..15, and score pieces 0..6, 7..10 and 11..15 (see test_squad_data).
CONTEXT = "in  the spring of that year the old red barn by the river was painted blue"
OFFSET = 4  # [CLS] when ? [SEP]


@pytest.fixture(scope="module")
def tokenizer(google_vocab_path) -> FullTokenizer:
    return FullTokenizer(google_vocab_path, do_lower_case=True)


def example(context: str, qid: str = "q", question: str = "when?") -> sd.SquadExample:
    words, starts = sd.split_context(context)
    return sd.SquadExample(qid, question, context, tuple(words), tuple(starts), answers=None)


def windows(tokenizer, examples, seq=14):
    feats = sd.featurize(examples, tokenizer, max_seq_length=seq, doc_stride=4,
                         max_query_length=4)
    zeros = np.zeros(feats.arrays["input_ids"].shape, dtype=np.float32)
    return feats.feature_meta, zeros.copy(), zeros.copy()


def run(examples, metas, start, end, **kw):
    return sp.postprocess(examples, metas, start, end, do_lower_case=True, **kw)


def test_answer_in_the_second_window_is_found_with_its_offsets(tokenizer):
    ex = example(CONTEXT)
    metas, start, end = windows(tokenizer, [ex])
    # Window 1 starts at piece 4: "old" (piece 7) is at 4 + 3, "barn" (piece 9) at 4 + 5.
    start[1, OFFSET + 3] = 5.0
    end[1, OFFSET + 5] = 4.0
    result = run([ex], metas, start, end)
    assert result.predictions == {"q": "old red barn"}
    best = result.nbest["q"][0]
    assert (best["text"], best["start_logit"], best["end_logit"]) == ("old red barn", 5.0, 4.0)
    answer = result.answers["q"]
    assert (answer.start, answer.end) == (CONTEXT.index("old"), CONTEXT.index(" by"))
    assert CONTEXT[answer.start:answer.end] == "old red barn" and answer.score == 9.0
    assert result.null_odds is None


def test_a_start_is_only_scored_in_its_max_context_window(tokenizer):
    ex = example(CONTEXT)
    metas, start, end = windows(tokenizer, [ex])
    # "old red" (pieces 7, 8) is in windows 0 and 1; piece 7 has its max context in window 1.
    start[0, OFFSET + 7], end[0, OFFSET + 8] = 8.0, 8.0   # window 0: would score 16
    start[1, OFFSET + 3], end[1, OFFSET + 4] = 6.0, 6.0   # window 1: scores 12
    result = run([ex], metas, start, end)
    best = result.nbest["q"][0]
    assert (best["text"], best["start_logit"], best["end_logit"]) == ("old red", 6.0, 6.0)
    # Window 0's end logit still pairs with its own scored starts (0 + 8 = 8 < 12).
    assert result.nbest["q"][1]["end_logit"] == 8.0


def test_an_answer_crossing_a_window_end_comes_from_the_window_holding_it(tokenizer):
    ex = example(CONTEXT)
    metas, start, end = windows(tokenizer, [ex])
    # "the river was painted" = pieces 11..14: window 1 ends at piece 12 and does not score
    # piece 11 (its max context is window 2, which holds the whole span).
    start[1, OFFSET + 7], end[1, OFFSET + 8] = 9.0, 9.0   # "the river" in window 1
    start[2, OFFSET + 3], end[2, OFFSET + 6] = 6.0, 6.0   # the whole span in window 2
    result = run([ex], metas, start, end)
    assert result.predictions["q"] == "the river was painted"
    assert result.nbest["q"][0]["start_logit"] == 6.0
    answer = result.answers["q"]
    assert (answer.start, answer.end) == (CONTEXT.index("the river"), CONTEXT.index(" blue"))


def test_a_window_starting_inside_a_repeating_word_gives_the_right_occurrence(tokenizer):
    # One whitespace word of 15 pieces (10 - 10 - ... - 10); window 1 starts at piece 4, inside
    # the word, which begins in window 0.
    context = "10-10-10-10-10-10-10-10"
    ex = example(context)
    metas, start, end = windows(tokenizer, [ex])
    assert metas[1].window_start == 4
    # Piece 8 (window 1's fifth) has its most context in window 1: the fifth "10", at
    # characters 12-14 (not the first "10", at 0).
    start[1, OFFSET + 4], end[1, OFFSET + 4] = 9.0, 9.0
    answer = run([ex], metas, start, end).answers["q"]
    assert (answer.answer, answer.start, answer.end) == ("10", 12, 14)


@pytest.mark.parametrize("context, first, last, expected, char_start", [
    # pieces: in 2016 the denver broncos , coached by gary ku ##bia ##k , won the title .
    ("In 2016 the Denver Broncos, coached by Gary Kubiak, won the title.", 3, 5,
     "Denver Broncos,", 12),
    ("In 2016 the Denver Broncos, coached by Gary Kubiak, won the title.", 8, 11,
     "Gary Kubiak", 39),
    # pieces: tomas qui ##nte ##ro ( japan ) ...
    ("Tomás Quintero (Japan) scored.", 0, 3, "Tomás Quintero", 0),
    ("Tomás Quintero (Japan) scored.", 5, 5, "Japan", 16),
    # pieces: the score was 10 - 10 ...: the second "10", not the first.
    ("The score was 10-10 at half time.", 5, 5, "10", 17),
    ("The score was 10-10 at half time.", 3, 5, "10-10", 14),
])
def test_original_casing_accents_and_punctuation_are_restored(tokenizer, context, first, last,
                                                               expected, char_start):
    ex = example(context, question="who won?")
    metas, start, end = windows(tokenizer, [ex], seq=64)
    start[0, 5 + first] = 3.0  # [CLS] who won ? [SEP]
    end[0, 5 + last] = 3.0
    result = run([ex], metas, start, end)
    answer = result.answers["q"]
    assert result.predictions["q"] == answer.answer == expected
    assert (answer.start, answer.end) == (char_start, char_start + len(expected))
    assert context[answer.start:answer.end] == expected


def test_alignment_falls_back_to_the_detokenized_text():
    assert sp.align_to_original("[UNK] x", "\u2603 x", True) == ("[UNK] x", None)
    assert sp.align_to_original("denver", "Dénver", True) == ("Dénver", (0, 6))
    assert sp.align_to_original("denver", "Denver", False) == ("denver", None)  # cased
    # The hint is an offset in the tokenized text "10 - 10".
    assert sp.align_to_original("10", "10-10", True, hint=5) == ("10", (3, 5))
    assert sp.align_to_original("10", "10-10", True, hint=1) == ("10", (0, 2))


def test_nbest_probabilities_are_a_softmax_over_the_scores(tokenizer):
    ex = example("alpha beta gamma delta")
    metas, start, end = windows(tokenizer, [ex], seq=16)
    start[0, OFFSET + 1] = 3.0
    end[0, OFFSET + 1] = 3.0
    end[0, OFFSET + 2] = 3.0 - math.log(3.0)
    end[0, OFFSET + 3] = -1.0
    # Best two starts: beta (3) then alpha (0); ends: beta, gamma. Spans: beta 6,
    # beta gamma 6 - ln 3, alpha beta 3, alpha beta gamma 3 - ln 3.
    nbest = run([ex], metas, start, end, n_best_size=2).nbest["q"]
    assert [e["text"] for e in nbest] == ["beta", "beta gamma"]
    assert [e["probability"] for e in nbest] == pytest.approx([0.75, 0.25])
    nbest = run([ex], metas, start, end).nbest["q"]
    # ... then beta gamma delta 2 before alpha beta gamma 1.9.
    assert [e["text"] for e in nbest][:5] == ["beta", "beta gamma", "alpha beta",
                                             "beta gamma delta", "alpha beta gamma"]
    assert len(nbest) == 10  # every distinct span of the 4 words
    assert sum(e["probability"] for e in nbest) == pytest.approx(1.0)
    assert nbest[0]["probability"] == pytest.approx(math.exp(6) / sum(
        math.exp(e["start_logit"] + e["end_logit"]) for e in nbest))


def test_max_answer_length_limits_the_span(tokenizer):
    ex = example("alpha beta gamma delta")
    metas, start, end = windows(tokenizer, [ex], seq=16)
    start[0, OFFSET], end[0, OFFSET + 3] = 5.0, 5.0
    assert run([ex], metas, start, end).predictions["q"] == "alpha beta gamma delta"
    assert run([ex], metas, start, end, max_answer_length=3).predictions["q"] == "alpha"


def test_v2_null_answer_threshold_and_odds(tokenizer):
    examples = [example(CONTEXT, "a"), example(CONTEXT, "b")]
    metas, start, end = windows(tokenizer, examples)
    assert [m.example_index for m in metas] == [0, 0, 0, 1, 1, 1]
    # [CLS] scores per window 4, 3, 6: the null score is the smallest, 3 (window 1).
    for f, cls in zip(range(6), (2.0, 1.5, 3.0) * 2):
        start[f, 0] = end[f, 0] = cls
    start[1, OFFSET + 3], end[1, OFFSET + 5] = 2.5, 2.5  # a: "old red barn" scores 5
    start[4, OFFSET + 3], end[4, OFFSET + 5] = 1.0, 1.0  # b: it scores 2
    result = run(examples, metas, start, end, version_2_with_negative=True)
    assert result.null_odds == {"a": -2.0, "b": 1.0}
    assert result.predictions == {"a": "old red barn", "b": ""}
    assert result.answers["b"] == sp.AnswerSpan("", -1, -1, 3.0)
    null = next(e for e in result.nbest["a"] if e["text"] == "")
    assert (null["start_logit"], null["end_logit"]) == (1.5, 1.5)
    assert sum(e["probability"] for e in result.nbest["a"]) == pytest.approx(1.0)
    strict = run(examples, metas, start, end, version_2_with_negative=True,
                 null_score_diff_threshold=-2.5)
    assert strict.predictions == {"a": "", "b": ""}
    lenient = run(examples, metas, start, end, version_2_with_negative=True,
                  null_score_diff_threshold=1.0)
    assert lenient.predictions == {"a": "old red barn", "b": "old red barn"}
    # SQuAD 1.1 never answers "".
    assert run(examples, metas, start, end).predictions["b"] == "old red barn"


def test_writes_the_three_json_files(tmp_path, tokenizer):
    ex = example(CONTEXT)
    metas, start, end = windows(tokenizer, [ex])
    start[0, 0] = end[0, 0] = 1.0
    start[1, OFFSET + 3], end[1, OFFSET + 5] = 2.5, 2.5
    v1 = run([ex], metas, start, end)
    out = tmp_path / "v1"
    paths = sp.write_predictions(v1, str(out))
    assert sorted(p.name for p in out.iterdir()) == ["nbest_predictions.json",
                                                    "predictions.json"]
    assert len(paths) == 2
    assert json.loads((out / "predictions.json").read_text()) == {"q": "old red barn"}
    nbest = json.loads((out / "nbest_predictions.json").read_text())
    assert set(nbest["q"][0]) == {"text", "probability", "start_logit", "end_logit"}
    assert nbest == v1.nbest
    v2 = run([ex], metas, start, end, version_2_with_negative=True)
    sp.write_predictions(v2, str(tmp_path / "v2"))
    # The null score is min(2, 0, 0) over the windows; the best span scores 5.
    assert json.loads((tmp_path / "v2" / "null_odds.json").read_text()) == {"q": -5.0}


def test_mismatched_logits_are_rejected(tokenizer):
    ex = example(CONTEXT)
    metas, start, end = windows(tokenizer, [ex])
    with pytest.raises(ValueError, match="do not match 3 features"):
        run([ex], metas, start[:2], end[:2])


@pytest.mark.parametrize("name, v2", [("tiny-v1.1.json", False), ("tiny-v2.0.json", True)])
def test_gold_logits_give_back_the_gold_answers(repo_root, tokenizer, name, v2):
    """End to end: windows, labels, max context and alignment on the bundled data (with a
    context longer than one 384-token window)."""
    path = str(repo_root / "data" / "finetune" / "squad_tiny" / name)
    examples = sd.read_squad_examples(path, is_training=True)
    feats = sd.featurize(examples, tokenizer, is_training=True)
    assert max(m.window_index for m in feats.feature_meta) == 2  # the long paragraph
    rows = np.arange(len(feats))
    start = np.zeros(feats.arrays["input_ids"].shape)
    end = np.zeros(feats.arrays["input_ids"].shape)
    start[rows, feats.arrays["start_positions"]] = 1.0
    end[rows, feats.arrays["end_positions"]] = 1.0
    result = sp.postprocess(examples, feats.feature_meta, start, end, do_lower_case=True,
                            version_2_with_negative=v2)
    assert result.predictions == {ex.qas_id: ex.answer_text for ex in examples}
    for ex in examples:
        answer = result.answers[ex.qas_id]
        if ex.answer_text:
            assert ex.context_text[answer.start:answer.end] == ex.answer_text
        else:
            assert (answer.start, answer.end) == (-1, -1)
