"""SQuAD reading and windowing: offsets, skipped answers, errors, windows, labels, max context."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import numpy as np
import pytest

from bert_tf.core.errors import UserError
from bert_tf.core.tokenization import FullTokenizer
from bert_tf.finetune.squad import squad_data as sd

# 16 words, one WordPiece each in the uncased vocab.
CONTEXT = "in the spring of that year the old red barn by the river was painted blue"


@pytest.fixture(scope="module")
def tokenizer(google_vocab_path) -> FullTokenizer:
    return FullTokenizer(google_vocab_path, do_lower_case=True)


@pytest.fixture(scope="module")
def tiny_dir(repo_root):
    return repo_root / "data" / "finetune" / "squad_tiny"


def write_squad(tmp_path, qas, context=CONTEXT, name="squad.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps({"version": "1.1", "data": [
        {"title": "t", "paragraphs": [{"context": context, "qas": qas}]}]}), encoding="utf-8")
    return str(path)


def qa(qid, answer=None, start=None, question="when?", **extra):
    item = {"id": qid, "question": question, **extra}
    if answer is not None:
        item["answers"] = [{"text": answer, "answer_start": start}]
    return item


def test_split_context_gives_words_and_their_offsets():
    words, starts = sd.split_context("  Hello\tworld \u202fx\u00a0y\n")
    # The no-break space U+00A0 is not a SQuAD word separator (the tokenizer splits it later).
    assert words == ["Hello", "world", "x\u00a0y"]
    assert starts == [2, 8, 15]
    assert [sd.char_to_word(starts, i) for i in (0, 2, 6, 7, 8, 14, 15)] == [-1, 0, 0, 0, 1, 1, 2]


def test_reads_bundled_v1(tiny_dir):
    examples = sd.read_squad_examples(str(tiny_dir / "tiny-v1.1.json"), is_training=True)
    assert len(examples) == 40
    assert len({id(ex.doc_words) for ex in examples}) == 10  # shared per paragraph
    ex = next(e for e in examples if e.qas_id == "tiny-p02-q1")
    assert ex.question_text == "What is the bakery known for?"
    assert ex.answers == ("its rye bread", "rye bread")
    assert ex.answer_text == "its rye bread" and not ex.is_impossible
    assert ex.doc_words[ex.start_word:ex.end_word + 1] == ("its", "rye", "bread.")
    assert ex.context_text[ex.word_starts[ex.start_word]:].startswith("its rye bread.")
    assert sd.has_answers(examples)


def test_reads_bundled_v2_with_impossible_questions(tiny_dir, tokenizer):
    path = str(tiny_dir / "tiny-v2.0.json")
    examples = sd.read_squad_examples(path, is_training=True)
    assert len(examples) == 52
    impossible = [e for e in examples if e.is_impossible]
    assert len(impossible) == 12
    ex = next(e for e in examples if e.qas_id == "tiny-p01-x1")
    assert (ex.answers, ex.plausible_answers) == ((), ("1,840 metres",))
    assert (ex.answer_text, ex.start_word, ex.end_word) == ("", -1, -1)
    assert sd.file_has_answers(path)
    feats = sd.featurize(examples, tokenizer, is_training=True)
    rows = [i for i, m in enumerate(feats.feature_meta) if m.qas_id == "tiny-p01-x1"]
    assert len(rows) == 1
    assert feats.arrays["start_positions"][rows[0]] == feats.arrays["end_positions"][rows[0]] == 0


def test_bad_answer_start_is_counted_and_skipped(tmp_path, caplog):
    context = "a rye\n bread b"
    path = write_squad(tmp_path, [
        qa("good", "rye\n bread", 2),           # blanks differ from the words: still found
        qa("moved", "bread", 0),                # "a rye" is there
        qa("outside", "b", 40),                 # past the end of the context
        qa("empty", "", 0),
    ], context=context)
    caplog.set_level(logging.WARNING, logger="absl")
    examples = sd.read_squad_examples(path, is_training=True)
    assert [e.qas_id for e in examples] == ["good"]
    assert (examples[0].start_word, examples[0].end_word) == (1, 2)
    warnings = [r.getMessage() for r in caplog.records if "answer_start" in r.getMessage()]
    assert warnings == [f"{path}: skipped 3 answers whose text is not at answer_start"]
    # Evaluation keeps every question (answers are only text there).
    assert len(sd.read_squad_examples(path, is_training=False)) == 4


@pytest.mark.parametrize("content, message", [
    ("{not json", "is not valid JSON"),
    (json.dumps({"version": "1.1"}), "the top level has no 'data'"),
    (json.dumps({"data": [{"paragraphs": [{"qas": []}]}]}),
     "article 0 paragraph 0 has no 'context'"),
    (json.dumps({"data": [{"paragraphs": [{"context": "x", "qas": [{"id": "q7"}]}]}]}),
     "question 'q7' has no 'question'"),
    (json.dumps({"data": [{"paragraphs": [{"context": "x", "qas": [
        {"id": "q8", "question": "?", "answers": [{"text": "x", "answer_start": "0"}]}]}]}]}),
     "question 'q8' answer: 'answer_start' is not a int"),
])
def test_malformed_file_is_one_line_user_error(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(UserError, match="^SQuAD file .*bad.json") as info:
        sd.read_squad_examples(str(path), is_training=True)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_missing_answers_is_an_error_for_training_only(tmp_path):
    path = write_squad(tmp_path, [qa("q1")])
    with pytest.raises(UserError, match="question 'q1' has no 'answers'|has no answer"):
        sd.read_squad_examples(path, is_training=True)
    examples = sd.read_squad_examples(path, is_training=False)
    assert examples[0].answers is None
    assert not sd.file_has_answers(path)
    with pytest.raises(UserError, match="cannot read SQuAD file"):
        sd.read_squad_examples(str(tmp_path / "absent.json"), is_training=False)


def _three_windows(tmp_path, tokenizer, answer):
    path = write_squad(tmp_path, [qa("q", answer, CONTEXT.index(answer))])
    examples = sd.read_squad_examples(path, is_training=True)
    # [CLS] when ? [SEP] + 9 context pieces + [SEP] = 14: windows start at pieces 0, 4, 8.
    return sd.featurize(examples, tokenizer, max_seq_length=14, doc_stride=4,
                        max_query_length=4, is_training=True)


def test_windows_cover_the_context_and_one_window_scores_each_piece(tmp_path, tokenizer):
    feats = _three_windows(tmp_path, tokenizer, "old red barn")
    metas = feats.feature_meta
    assert [(m.window_index, m.window_start) for m in metas] == [(0, 0), (1, 4), (2, 8)]
    words = CONTEXT.split()
    assert metas[0].tokens == ("[CLS]", "when", "?", "[SEP]", *words[0:9], "[SEP]")
    assert metas[2].tokens == ("[CLS]", "when", "?", "[SEP]", *words[8:16], "[SEP]")
    covered = sorted({int(w) for m in metas for w in m.token_to_word if w >= 0})
    assert covered == list(range(16))
    assert list(metas[1].token_to_word) == [-1] * 4 + list(range(4, 13)) + [-1]
    # Hand-computed: score = min(left, right) + 0.01 * length. Piece 6 ties between windows 0
    # and 1 (2.09 each: the first wins); piece 10 has 2 pieces of context on its short side in
    # windows 1 and 2 (2.09 against 2.08).
    scored = {w: [int(m.token_to_word[i]) for i in np.flatnonzero(m.token_is_max_context)]
              for w, m in enumerate(metas)}
    assert scored == {0: list(range(0, 7)), 1: list(range(7, 11)), 2: list(range(11, 16))}
    ids = feats.arrays["input_ids"]
    assert ids.dtype == np.int32 and ids.shape == (3, 14)
    assert list(ids[2]) == tokenizer.convert_tokens_to_ids(metas[2].tokens) + [0]
    assert list(feats.arrays["input_mask"][2]) == [1] * 13 + [0]
    assert list(feats.arrays["segment_ids"][2]) == [0] * 4 + [1] * 9 + [0]
    assert list(feats.arrays["segment_ids"][0]) == [0] * 4 + [1] * 10


def test_answer_in_the_second_window_is_labelled_there_only(tmp_path, tokenizer):
    # "old red barn" = pieces 7..9: window 0 holds 0..8, window 2 holds 8..15.
    feats = _three_windows(tmp_path, tokenizer, "old red barn")
    assert list(feats.arrays["start_positions"]) == [0, 7, 0]
    assert list(feats.arrays["end_positions"]) == [0, 9, 0]
    tokens = feats.feature_meta[1].tokens
    assert tokens[7:10] == ("old", "red", "barn")


def test_answer_crossing_a_window_end_is_labelled_where_it_is_whole(tmp_path, tokenizer):
    # "by the river was" = pieces 10..13: window 1 ends at piece 12, window 2 holds it all.
    feats = _three_windows(tmp_path, tokenizer, "by the river was")
    assert list(feats.arrays["start_positions"]) == [0, 0, 6]
    assert list(feats.arrays["end_positions"]) == [0, 0, 9]
    assert feats.feature_meta[2].tokens[6:10] == ("by", "the", "river", "was")
    assert feats.arrays["start_positions"].dtype == np.int32


def test_answer_span_is_narrowed_to_the_annotated_pieces(tmp_path, tokenizer):
    context = "The bridge was rebuilt in 1895-1896 by the city."
    path = write_squad(tmp_path, [qa("q", "1895", context.index("1895"))], context=context)
    examples = sd.read_squad_examples(path, is_training=True)
    assert examples[0].doc_words[examples[0].start_word] == "1895-1896"
    feats = sd.featurize(examples, tokenizer, max_seq_length=32, max_query_length=8,
                         is_training=True)
    start = int(feats.arrays["start_positions"][0])
    end = int(feats.arrays["end_positions"][0])
    # The word's pieces are 1895 - 1896; only the first spells the answer.
    assert feats.feature_meta[0].tokens[start:end + 1] == ("1895",)
    assert start == 4 + 5


def test_query_truncation_stride_gaps_empty_context_and_bad_lengths(tmp_path, tokenizer):
    path = write_squad(tmp_path, [qa("q", question="in what spring of which year?")])
    examples = sd.read_squad_examples(path, is_training=False)
    # A stride longer than the window still leaves no piece out.
    feats = sd.featurize(examples, tokenizer, max_seq_length=13, doc_stride=50,
                         max_query_length=2)
    assert feats.feature_meta[0].tokens[:4] == ("[CLS]", "in", "what", "[SEP]")
    assert [m.window_start for m in feats.feature_meta] == [0, 8]
    assert not feats.has_labels and "start_positions" not in feats.arrays
    with pytest.raises(ValueError, match="example 'q' has no located answer"):
        sd.featurize(examples, tokenizer, max_seq_length=13, max_query_length=2,
                     is_training=True)
    empty = write_squad(tmp_path, [qa("e")], context="  ", name="empty.json")
    feats = sd.featurize(sd.read_squad_examples(empty, False), tokenizer, max_seq_length=8,
                         max_query_length=4)
    assert feats.feature_meta[0].tokens == ("[CLS]", "when", "?", "[SEP]", "[SEP]")
    with pytest.raises(UserError, match="max_seq_length 10 leaves no room"):
        sd.featurize(examples, tokenizer, max_seq_length=10, max_query_length=7)
    with pytest.raises(UserError, match="doc_stride must be positive"):
        sd.featurize(examples, tokenizer, doc_stride=0)


def test_squad_modules_do_not_import_tensorflow():
    code = ("import sys; import bert_tf.finetune.squad.squad_data,"
            " bert_tf.finetune.squad.squad_postprocess;"
            " print('tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=600)
    assert out.stdout.strip() == "False"
