"""Tests for bert_tf.finetune.tagging.tagging_data: CoNLL reading, first-piece labels, windows with
the max-context rule, predictions back to words, write_conll, and the bundled conll_tiny."""

from __future__ import annotations

import collections
import os

import numpy as np
import pytest

from bert_tf.core.errors import UserError
from bert_tf.core.tokenization import FullTokenizer
from bert_tf.finetune.tagging import tagging_data as td


@pytest.fixture(scope="module")
def tokenizer(google_vocab_path):
    return FullTokenizer(google_vocab_path, do_lower_case=True)


def write(tmp_path, text, name="data.conll"):
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8"))
    return str(path)


def summary(sentences):
    return [(s.words, s.tags, s.line) for s in sentences]


def test_read_conll2003_layout_with_docstart(tmp_path):
    path = write(tmp_path, "-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\n"
                           "German  JJ\tB-NP B-MISC\n\nPeter NNP B-NP B-PER\n-DOCSTART- -X- O\n"
                           "Blackburn NNP B-NP B-PER\n\n\n")
    assert summary(td.read_conll(path)) == [
        (["EU", "rejects", "German"], ["B-ORG", "O", "B-MISC"], 3),
        (["Peter"], ["B-PER"], 7),
        (["Blackburn"], ["B-PER"], 9)]


def test_read_wnut17_layout(tmp_path):
    # WNUT-17: token<TAB>tag, CRLF here, some sentences ended by a line holding only a tab;
    # a token may contain a non-ASCII space, which is not a column separator.
    path = write(tmp_path, "@paulwalk\tO\r\nIt\tO\r\n\t\r\nview\tB-location\r\n"
                           "a\u00a0b\tI-location\r\n\r\n")
    sentences = td.read_conll(path)
    assert summary(sentences) == [(["@paulwalk", "It"], ["O", "O"], 1),
                                  (["view", "a\u00a0b"], ["B-location", "I-location"], 4)]
    assert sentences[1].path == path


def test_read_conll_errors_and_untagged_files(tmp_path):
    path = write(tmp_path, "EU B-ORG\nrejects\n")
    with pytest.raises(UserError) as e:
        td.read_conll(path)
    assert str(e.value) == f"{path}:2: expected a token and a tag, found one column 'rejects'"
    with pytest.raises(UserError) as e:
        td.read_conll(path, require_tags=False)
    assert str(e.value) == (f"{path}:2: no tag here but one on line 1; either every token "
                            f"line has a tag or none does")
    untagged = write(tmp_path, "EU\nrejects\n\n-DOCSTART-\nok\n", "test.txt")
    assert summary(td.read_conll(untagged, require_tags=False)) == [
        (["EU", "rejects"], None, 1), (["ok"], None, 5)]
    with pytest.raises(UserError, match="missing.conll: no such file$"):
        td.read_conll(str(tmp_path / "missing.conll"))


def test_build_tag_list_puts_outside_first():
    sentences = [td.Sentence(["a", "b"], ["I-PER", "O"]), td.Sentence(["c"], ["B-LOC"]),
                 td.Sentence(["d"], None)]
    assert td.build_tag_list(sentences) == ["O", "B-LOC", "I-PER"]
    assert td.build_tag_list([td.Sentence(["x"], ["B-X"])]) == ["B-X"]


def test_first_piece_labels_golden(tokenizer):
    # "\u200b" (zero-width space) gives no WordPiece: it is fed as one [UNK].
    sentence = td.Sentence(["John", "Unaffable", "\u200b", "Hamburg"],
                           ["B-PER", "O", "O", "B-LOC"])
    features = td.featurize([sentence], ["O", "B-LOC", "B-PER"], tokenizer, 10)
    a = features.arrays
    # [CLS] john una ##ffa ##ble [UNK] hamburg [SEP] (ids = vocab line - 1)
    np.testing.assert_array_equal(a["input_ids"], [[101, 2198, 14477, 20961, 3468, 100, 8719,
                                                    102, 0, 0]])
    np.testing.assert_array_equal(a["input_mask"], [[1] * 8 + [0] * 2])
    np.testing.assert_array_equal(a["segment_ids"], [[0] * 10])
    np.testing.assert_array_equal(a["label_ids"], [[0, 2, 0, 0, 0, 0, 1, 0, 0, 0]])
    np.testing.assert_array_equal(a["label_weights"], [[0, 1, 1, 0, 0, 1, 1, 0, 0, 0]])
    np.testing.assert_array_equal(a["word_index"], [[-1, 0, 1, -1, -1, 2, 3, -1, -1, -1]])
    np.testing.assert_array_equal(a["example_index"], [0])
    assert {k: v.dtype for k, v in a.items()} == {
        "input_ids": np.int32, "input_mask": np.int32, "segment_ids": np.int32,
        "label_ids": np.int32, "label_weights": np.float32, "word_index": np.int32,
        "example_index": np.int32}
    assert (features.num_words, features.num_empty_words, features.num_split_sentences) == (
        [4], 1, 0)
    unlabelled = td.featurize([td.Sentence(sentence.words, None)], ["O"], tokenizer, 10)
    assert sorted(unlabelled.arrays) == ["example_index", "input_ids", "input_mask",
                                         "segment_ids", "word_index"]
    assert not unlabelled.has_labels


def test_window_starts():
    assert td.window_starts(5, 14, 7) == [0]
    assert td.window_starts(14, 14, 7) == [0]
    assert td.window_starts(15, 14, 7) == [0, 1]
    assert td.window_starts(10, 4, 2) == [0, 2, 4, 6]
    assert td.window_starts(70, 14, 7) == [0, 7, 14, 21, 28, 35, 42, 49, 56]
    assert td.window_starts(70, 14, 14) == [0, 14, 28, 42, 56]


CYCLE = ["the", "cat", "unaffable", "sat", "."]  # 1, 1, 3, 1, 1 pieces
TAGS = ["O", "B-PER", "I-PER", "B-LOC"]


def long_sentences():
    words = [CYCLE[i % 5] for i in range(50)]
    return [td.Sentence(["short", "one"], ["O", "B-LOC"]),
            td.Sentence(words, [TAGS[i % 4] for i in range(50)])]


FIRST_PIECE = np.cumsum([0] + [3 if CYCLE[i % 5] == "unaffable" else 1 for i in range(50)])


def check_windows(features, starts, window):
    """Rows 1.. are the windows of the 50-word sentence starting at `starts`: every word is
    scored exactly once, in the window where it has the most context (earliest on a tie),
    and every first piece of every window is trained on with its tag. Returns
    {word: the window that scores it}."""
    a = features.arrays
    scored = collections.defaultdict(list)
    for w, start in enumerate(starts):
        row = w + 1
        for position in np.nonzero(a["word_index"][row] >= 0)[0]:
            word = int(a["word_index"][row, position])
            assert FIRST_PIECE[word] == start + position - 1
            scored[word].append(w)
        in_window = [i for i in range(50) if start <= FIRST_PIECE[i] < start + window]
        weighted = np.nonzero(a["label_weights"][row])[0]
        assert weighted.tolist() == [FIRST_PIECE[i] - start + 1 for i in in_window]
        assert a["label_ids"][row, weighted].tolist() == [i % 4 for i in in_window]
    assert sorted(scored) == list(range(50))
    assert all(len(windows) == 1 for windows in scored.values())
    ties = 0
    for word, (chosen,) in scored.items():
        p = FIRST_PIECE[word]
        context = {w: min(p - s, s + window - 1 - p) for w, s in enumerate(starts)
                   if s <= p < s + window}
        best = [w for w, c in context.items() if c == max(context.values())]
        ties += len(best) > 1
        assert chosen == best[0], word
    return {word: windows[0] for word, windows in scored.items()}, ties


def test_long_sentence_windows_score_every_word_once_with_max_context(tokenizer):
    features = td.featurize(long_sentences(), TAGS, tokenizer, 16)  # windows of 14 pieces
    # 70 pieces -> window starts 0, 7, ..., 49 and 56: 9 windows, plus 1 for the short one.
    assert len(features) == 10 and features.num_split_sentences == 1
    np.testing.assert_array_equal(features.arrays["example_index"], [0] + [1] * 9)
    assert (features.arrays["input_mask"][1:].sum(axis=1) == 16).all()
    scored, _ = check_windows(features, [0, 7, 14, 21, 28, 35, 42, 49, 56], 14)
    # Word 21 (first piece 29): 8 pieces before and 5 after in window 3 (pieces 21..34),
    # 1 before in window 4 (28..41): scored in window 3. Word 0 only is in window 0.
    assert (scored[21], scored[0], scored[49]) == (3, 0, 8)
    # stride 5: starts 0, 5, ..., 55, 56; word 10 (piece 14) ties between windows 1 and 2
    # (min(9, 4) == min(4, 9)): the earlier one scores it.
    features = td.featurize(long_sentences(), TAGS, tokenizer, 16, stride=5)
    scored, ties = check_windows(features, list(range(0, 56, 5)) + [56], 14)
    assert scored[10] == 1 and ties > 0


def test_predictions_to_tags_round_trip(tokenizer):
    sentences = long_sentences()
    features = td.featurize(sentences, TAGS, tokenizer, 16, stride=5)
    gold = [s.tags for s in sentences]
    logits = np.eye(len(TAGS), dtype=np.float32)[features.arrays["label_ids"]]
    assert td.predictions_to_tags(features, logits, TAGS) == gold
    assert td.predictions_to_tags(features, features.arrays["label_ids"], TAGS, [2, 50]) == gold
    wrong = np.zeros_like(features.arrays["label_ids"])
    assert td.predictions_to_tags(features, wrong, TAGS) == [["O"] * 2, ["O"] * 50]
    with pytest.raises(ValueError, match="predictions of shape"):
        td.predictions_to_tags(features, logits[:-1], TAGS)
    with pytest.raises(ValueError, match="word 2 of sentence 0 has no prediction"):
        td.predictions_to_tags(features, logits, TAGS, [3, 50])


def test_featurize_errors(tmp_path, tokenizer):
    path = write(tmp_path, "Paris B-LOC\nis O\nnice B-XYZ\n")
    with pytest.raises(UserError) as e:
        td.featurize(td.read_conll(path), ["O", "B-LOC"], tokenizer, 16)
    assert str(e.value) == f"{path}:3: tag 'B-XYZ' is not one of the training tags (O, B-LOC)"
    with pytest.raises(UserError, match="stride=15"):
        td.featurize([], ["O"], tokenizer, 16, stride=15)


def test_write_conll_round_trip(tmp_path):
    path = str(tmp_path / "predictions.txt")
    words = [["Anna", "Berg"], ["in", "Lyon", "."]]
    td.write_conll(path, words, [["B-PER", "O"], ["O", "B-LOC", "O"]],
                   gold_tags=[["B-PER", "I-PER"], ["O", "B-LOC", "O"]])
    with open(path, encoding="utf-8") as f:
        assert f.read() == ("Anna\tB-PER\tB-PER\nBerg\tI-PER\tO\n\n"
                            "in\tO\tO\nLyon\tB-LOC\tB-LOC\n.\tO\tO\n\n")
    assert summary(td.read_conll(path)) == [(["Anna", "Berg"], ["B-PER", "O"], 1),
                                            (["in", "Lyon", "."], ["O", "B-LOC", "O"], 4)]
    assert os.listdir(tmp_path) == ["predictions.txt"]  # no temporary file left
    td.write_conll(path, words[:1], [["O", "O"]])
    with open(path, encoding="utf-8") as f:
        assert f.read() == "Anna\tO\nBerg\tO\n\n"
    with pytest.raises(ValueError, match="sentence 0: word counts differ"):
        td.write_conll(path, words[:1], [["O"]])


def test_bundled_conll_tiny(repo_root, tokenizer):
    directory = repo_root / "data" / "finetune" / "conll_tiny"
    expected = {  # As in data/finetune/conll_tiny/README.md.
        "train": (61, 791, {"PER": 24, "LOC": 43, "ORG": 28, "MISC": 13}, 3),
        "dev": (20, 295, {"PER": 8, "LOC": 18, "ORG": 10, "MISC": 4}, 2),
        "test": (10, 140, None, 1)}
    train = td.read_conll(str(directory / "train.txt"))
    tags = td.build_tag_list(train)
    assert tags == ["O", "B-LOC", "B-MISC", "B-ORG", "B-PER", "I-LOC", "I-MISC", "I-ORG",
                    "I-PER"]
    for split, (num_sentences, num_tokens, entities, num_long) in expected.items():
        sentences = td.read_conll(str(directory / f"{split}.txt"), require_tags=split != "test")
        assert len(sentences) == num_sentences
        assert sum(len(s.words) for s in sentences) == num_tokens
        if entities is None:
            assert all(s.tags is None for s in sentences)
        else:
            assert collections.Counter(t[2:] for s in sentences for t in s.tags
                                       if t.startswith("B-")) == entities
        features = td.featurize(sentences, tags, tokenizer, 66)  # windows of 64 pieces
        assert features.num_split_sentences == num_long
        if entities is not None:
            assert td.predictions_to_tags(features, features.arrays["label_ids"], tags) == [
                s.tags for s in sentences]
