"""Tests for bert_tf.finetune.classification.classification_data: GLUE layouts, generic
readers, errors, featurize golden ids and pair truncation, and the bundled snli_tiny /
vader_tiny sets."""

from __future__ import annotations

import collections
import itertools

import numpy as np
import pytest

from bert_tf.core.errors import UserError
from bert_tf.core.tokenization import FullTokenizer
from bert_tf.finetune.classification import classification_data as cd


@pytest.fixture(scope="module")
def tokenizer(google_vocab_path):
    return FullTokenizer(google_vocab_path, do_lower_case=True)


def write(directory, name, lines, bom=False):
    """Writes `lines` (already tab-joined) with "\\n" endings, like the GLUE files."""
    text = ("\ufeff" if bom else "") + "".join(line + "\n" for line in lines)
    (directory / name).write_bytes(text.encode("utf-8"))
    return str(directory / name)


def tsv(*fields):
    return "\t".join(fields)


# Three rows per file in each task's real GLUE layout: (files, expected
# {split: [(guid, text_a, text_b, label)]}, label list).
GLUE_CASES = {
    "cola": ({
        "train.tsv": [tsv("gj04", "1", "", "Our friends won't buy this."),
                      tsv("gj04", "0", "*", "Himself saw him."),
                      tsv("cj99", "1", "", "The more you eat, the fatter you get.")],
        "dev.tsv": [tsv("clc95", "0", "*", "Who did you see him?")],
        "test.tsv": [tsv("index", "sentence"), tsv("0", "Bill whistled past the house.")],
    }, {
        "train": [("train-0", "Our friends won't buy this.", None, "1"),
                  ("train-1", "Himself saw him.", None, "0"),
                  ("train-2", "The more you eat, the fatter you get.", None, "1")],
        "dev": [("dev-0", "Who did you see him?", None, "0")],
        "test": [("0", "Bill whistled past the house.", None, None)],
    }, ["0", "1"]),
    "sst2": ({
        "train.tsv": [tsv("sentence", "label"), tsv("hide new secretions ", "0"),
                      tsv("a charming journey . ", "1")],
        "dev.tsv": [tsv("sentence", "label"), tsv("unflinchingly bleak ", "0")],
        "test.tsv": [tsv("index", "sentence"), tsv("0", "uneasy mishmash .")],
    }, {
        "train": [("train-0", "hide new secretions ", None, "0"),
                  ("train-1", "a charming journey . ", None, "1")],
        "dev": [("dev-0", "unflinchingly bleak ", None, "0")],
        "test": [("0", "uneasy mishmash .", None, None)],
    }, ["0", "1"]),
    "mrpc": ({
        "train.tsv": [tsv("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"),
                      tsv("1", "702876", "702977", "Amrozi accused .", "Amrozi said .")],
        "dev.tsv": [tsv("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"),
                    tsv("0", "1", "2", "He ate .", "She ran .")],
        "test.tsv": [tsv("index", "#1 ID", "#2 ID", "#1 String", "#2 String"),
                     tsv("7", "1089874", "1089925", "PCCW 's chief .", "Current chief .")],
    }, {
        "train": [("train-0", "Amrozi accused .", "Amrozi said .", "1")],
        "dev": [("dev-0", "He ate .", "She ran .", "0")],
        "test": [("7", "PCCW 's chief .", "Current chief .", None)],
    }, ["0", "1"]),
    "stsb": ({
        "train.tsv": [tsv("index", "genre", "filename", "year", "old_index", "source1",
                          "source2", "sentence1", "sentence2", "score"),
                      tsv("0", "main-captions", "MSRvid", "2012test", "0001", "none", "none",
                          "A plane is taking off.", "An air plane is taking off.", "5.000"),
                      tsv("1", "main-captions", "MSRvid", "2012test", "0004", "none", "none",
                          "A man plays a flute.", "A man plays.", "3.800")],
        "dev.tsv": [tsv("index", "genre", "filename", "year", "old_index", "source1",
                        "source2", "sentence1", "sentence2", "score"),
                    tsv("0", "g", "f", "y", "o", "s", "s", "A.", "B.", "0.5")],
        "test.tsv": [tsv("index", "genre", "filename", "year", "old_index", "source1",
                         "source2", "sentence1", "sentence2"),
                     tsv("0", "g", "f", "y", "o", "s", "s", "A girl.", "A boy.")],
    }, {
        "train": [("0", "A plane is taking off.", "An air plane is taking off.", 5.0),
                  ("1", "A man plays a flute.", "A man plays.", 3.8)],
        "dev": [("0", "A.", "B.", 0.5)],
        "test": [("0", "A girl.", "A boy.", None)],
    }, None),
    "qqp": ({
        "train.tsv": [tsv("id", "qid1", "qid2", "question1", "question2", "is_duplicate"),
                      tsv("133273", "213221", "213222", "How is life?", "How are you?", "0")],
        "dev.tsv": [tsv("id", "qid1", "qid2", "question1", "question2", "is_duplicate"),
                    tsv("5", "1", "2", "Why?", "Why not?", "1")],
        "test.tsv": [tsv("id", "question1", "question2"), tsv("0", "Who?", "Whom?")],
    }, {
        "train": [("133273", "How is life?", "How are you?", "0")],
        "dev": [("5", "Why?", "Why not?", "1")],
        "test": [("0", "Who?", "Whom?", None)],
    }, ["0", "1"]),
    "mnli": ({
        # train has 12 columns (label1, gold_label), dev 16 (label1..label5, gold_label).
        "train.tsv": [tsv("index", "promptID", "pairID", "genre", "sentence1_binary_parse",
                          "sentence2_binary_parse", "sentence1_parse", "sentence2_parse",
                          "sentence1", "sentence2", "label1", "gold_label"),
                      tsv("0", "31193", "31193n", "government", "( x )", "( y )", "(X)", "(Y)",
                          "Conceptually cream skimming.", "Product and geography.", "neutral",
                          "neutral")],
        "dev_matched.tsv": [tsv("index", "promptID", "pairID", "genre", "s1b", "s2b", "s1p",
                                "s2p", "sentence1", "sentence2", "label1", "label2", "label3",
                                "label4", "label5", "gold_label"),
                            tsv("0", "1", "1e", "fiction", "b", "b", "p", "p", "He ran.",
                                "He moved.", "entailment", "entailment", "neutral",
                                "entailment", "entailment", "entailment")],
        "dev_mismatched.tsv": [tsv("index", "sentence1", "sentence2", "gold_label"),
                               tsv("3", "It rained.", "It was dry.", "contradiction")],
        "test_matched.tsv": [tsv("index", "promptID", "pairID", "genre", "s1b", "s2b", "s1p",
                                 "s2p", "sentence1", "sentence2"),
                             tsv("9", "1", "1", "g", "b", "b", "p", "p", "Hi.", "Hello.")],
    }, {
        "train": [("0", "Conceptually cream skimming.", "Product and geography.", "neutral")],
        "dev": [("0", "He ran.", "He moved.", "entailment")],
        "dev_mismatched": [("3", "It rained.", "It was dry.", "contradiction")],
        "test": [("9", "Hi.", "Hello.", None)],
    }, ["contradiction", "entailment", "neutral"]),
    "qnli": ({
        "train.tsv": [tsv("index", "question", "sentence", "label"),
                      tsv("0", "When?", "In 1990.", "entailment")],
        "dev.tsv": [tsv("index", "question", "sentence", "label"),
                    tsv("0", "Who?", "Nobody knows.", "not_entailment")],
        "test.tsv": [tsv("index", "question", "sentence"), tsv("0", "Where?", "Here.")],
    }, {
        "train": [("0", "When?", "In 1990.", "entailment")],
        "dev": [("0", "Who?", "Nobody knows.", "not_entailment")],
        "test": [("0", "Where?", "Here.", None)],
    }, ["entailment", "not_entailment"]),
    "rte": ({
        "train.tsv": [tsv("index", "sentence1", "sentence2", "label"),
                      tsv("0", "No weapons found.", "Weapons found.", "not_entailment")],
        "dev.tsv": [tsv("index", "sentence1", "sentence2", "label"),
                    tsv("1", "Dana Reeve died.", "Dana Reeve is dead.", "entailment")],
        "test.tsv": [tsv("index", "sentence1", "sentence2"), tsv("0", "A.", "B.")],
    }, {
        "train": [("0", "No weapons found.", "Weapons found.", "not_entailment")],
        "dev": [("1", "Dana Reeve died.", "Dana Reeve is dead.", "entailment")],
        "test": [("0", "A.", "B.", None)],
    }, ["entailment", "not_entailment"]),
    "wnli": ({
        "train.tsv": [tsv("index", "sentence1", "sentence2", "label"),
                      tsv("0", "I stuck a pin.", "The pin stuck.", "1")],
        "dev.tsv": [tsv("index", "sentence1", "sentence2", "label"),
                    tsv("0", "It fell.", "The cup fell.", "0")],
        "test.tsv": [tsv("index", "sentence1", "sentence2"), tsv("0", "X.", "Y.")],
    }, {
        "train": [("0", "I stuck a pin.", "The pin stuck.", "1")],
        "dev": [("0", "It fell.", "The cup fell.", "0")],
        "test": [("0", "X.", "Y.", None)],
    }, ["0", "1"]),
}


@pytest.mark.parametrize("task_name", sorted(GLUE_CASES))
def test_glue_layouts(tmp_path, task_name):
    files, expected, labels = GLUE_CASES[task_name]
    for name, lines in files.items():
        write(tmp_path, name, lines, bom=task_name == "mrpc" and name != "test.tsv")
    task = cd.get_task(task_name.upper())
    assert task.is_regression == (labels is None)
    for split, rows in expected.items():
        data = cd.read_split(task, str(tmp_path), split)
        got = [(e.guid, e.text_a, e.text_b, e.label) for e in data.examples]
        assert got == rows
        assert data.has_labels == (split != "test")
    train = cd.read_split(task, str(tmp_path), "train")
    assert cd.build_label_list(task, train) == labels
    assert train.examples[0].where == f"{tmp_path}/train.tsv:{1 if task_name == 'cola' else 2}"


def test_mnli_split_files_and_unknown_split(tmp_path):
    task = cd.get_task("mnli")
    assert task.files["dev"] == "dev_matched.tsv"
    assert task.files["test_mismatched"] == "test_mismatched.tsv"
    with pytest.raises(UserError, match="task sst2 has no split 'dev_mismatched'"):
        cd.read_split(cd.get_task("sst2"), str(tmp_path), "dev_mismatched")


def test_generic_tsv_csv_jsonl(tmp_path):
    write(tmp_path, "train.tsv", [tsv("id", "premise", "hypothesis", "y"),
                                  tsv("a", "It rains.", "It is wet.", "yes"),
                                  tsv("b", "Cats.", "Dogs.", "no"), "",
                                  tsv("c", "Sun.", "Warm.", "maybe")])
    (tmp_path / "train.csv").write_text(
        'y,premise,hypothesis\nno,"Hello, world","multi\nline"\nyes,"say ""hi""",x\n',
        encoding="utf-8")
    write(tmp_path, "train.jsonl", ['{"premise": "A", "hypothesis": "B", "y": "yes"}',
                                    '{"premise": "C", "hypothesis": "D", "y": 3, "z": 1}'])
    results = {}
    for fmt in ("tsv", "csv", "jsonl"):
        task = cd.get_task(fmt, "premise", "hypothesis", "y")
        assert task.files == {s: f"{s}.{fmt}" for s in ("train", "dev", "test")}
        data = cd.read_split(task, str(tmp_path), "train")
        results[fmt] = ([(e.guid, e.text_a, e.text_b, e.label, e.where.rsplit(":", 1)[1])
                         for e in data.examples], cd.build_label_list(task, data))
    assert results["tsv"] == ([("train-0", "It rains.", "It is wet.", "yes", "2"),
                               ("train-1", "Cats.", "Dogs.", "no", "3"),
                               ("train-2", "Sun.", "Warm.", "maybe", "5")],
                              ["maybe", "no", "yes"])
    # A quoted CSV field may span lines: the next record's line is where it starts.
    assert results["csv"] == ([("train-0", "Hello, world", "multi\nline", "no", "2"),
                               ("train-1", 'say "hi"', "x", "yes", "4")], ["no", "yes"])
    assert results["jsonl"] == ([("train-0", "A", "B", "yes", "1"),
                                 ("train-1", "C", "D", "3", "2")], ["3", "yes"])


def test_generic_single_text_regression_and_unlabelled_test(tmp_path):
    write(tmp_path, "train.tsv", [tsv("label", "text"), tsv("-1.5", "bad"), tsv("2", "good")])
    write(tmp_path, "test.tsv", [tsv("text"), tsv("meh")])
    task = cd.get_task("tsv", "text", None, "label", regression=True)
    train = cd.read_split(task, str(tmp_path), "train")
    assert [(e.text_a, e.text_b, e.label) for e in train.examples] == [
        ("bad", None, -1.5), ("good", None, 2.0)]
    assert cd.build_label_list(task, train) is None
    test = cd.read_split(task, str(tmp_path), "test")
    assert not test.has_labels and test.examples[0].label is None
    cd.require_labels(train)
    with pytest.raises(UserError) as e:
        cd.require_labels(test)
    assert str(e.value) == f"--do_eval needs labels, but {tmp_path}/test.tsv has none"


def error_of(fn, *args):
    with pytest.raises(UserError) as e:
        fn(*args)
    message = str(e.value)
    assert "\n" not in message
    return message


def test_bad_input_errors_name_file_and_line(tmp_path):
    d = str(tmp_path)
    tsv_task = cd.get_task("tsv", "text", None, "label")
    write(tmp_path, "train.tsv", [tsv("text", "label"), tsv("ok", "a"), tsv("x", "b", "extra")])
    assert error_of(cd.read_split, tsv_task, d, "train") == (
        f"{d}/train.tsv:3: expected 2 tab-separated fields (as the header), found 3")
    write(tmp_path, "train.tsv", [tsv("sentence", "label"), tsv("ok", "a")])
    assert error_of(cd.read_split, tsv_task, d, "train") == (
        f"{d}/train.tsv:1: no column 'text' in the header (columns: sentence, label)")
    assert error_of(cd.read_split, tsv_task, d, "dev") == f"{d}/dev.tsv: no such file"
    write(tmp_path, "train.tsv", [tsv("text"), tsv("ok")])
    assert error_of(cd.read_split, tsv_task, d, "train") == (
        f"{d}/train.tsv: training file has no labels (column 'label')")
    write(tmp_path, "train.tsv", [tsv("text", "label"), tsv("ok", "a"), tsv("no", "")])
    assert error_of(cd.read_split, tsv_task, d, "train") == (
        f"{d}/train.tsv:3: no label, but other rows of the file have one")
    write(tmp_path, "train.tsv", [tsv("text", "label"), tsv("ok", "high")])
    assert error_of(cd.read_split, cd.get_task("tsv", "text", None, "label", True), d,
                    "train") == f"{d}/train.tsv:2: regression label 'high' is not a number"
    write(tmp_path, "train.tsv", [tsv("gj04", "1", "", "Fine."), tsv("gj04", "1", "Bad.")])
    assert error_of(cd.read_split, cd.get_task("cola"), d, "train") == (
        f"{d}/train.tsv:2: expected 4 tab-separated fields, found 3")
    jsonl_task = cd.get_task("jsonl", "text", None, "label")
    write(tmp_path, "train.jsonl", ['{"text": "a", "label": "x"}', "", '{"text": "a",'])
    assert error_of(cd.read_split, jsonl_task, d, "train").startswith(
        f"{d}/train.jsonl:3: not valid JSON (")
    write(tmp_path, "train.jsonl", ['{"label": "x"}'])
    assert error_of(cd.read_split, jsonl_task, d, "train") == (
        f"{d}/train.jsonl:1: field 'text' is missing")
    (tmp_path / "train.csv").write_text('text,label\nok,a\n"open,a\nx,b\n', encoding="utf-8")
    assert error_of(cd.read_split, cd.get_task("csv", "text", None, "label"), d, "train") == (
        f"{d}/train.csv:3: unexpected end of data")
    (tmp_path / "train.csv").write_bytes(b"text,label\n\xff,a\n")
    assert error_of(cd.read_split, cd.get_task("csv", "text", None, "label"), d, "train") == (
        f"{d}/train.csv:2: not UTF-8")
    assert error_of(cd.get_task, "imdb").startswith("unknown task 'imdb'; choose one of cola")
    assert error_of(cd.get_task, "csv", "text") == (
        "--task_name=csv needs --text_column and --label_column")


def test_dev_label_not_in_training_labels(tmp_path, tokenizer):
    write(tmp_path, "dev.tsv", [tsv("text", "label"), tsv("fine", "pos"), tsv("odd", "meh")])
    dev = cd.read_split(cd.get_task("tsv", "text", None, "label"), str(tmp_path), "dev")
    assert error_of(cd.featurize, dev.examples, ["neg", "pos"], tokenizer, 16) == (
        f"{tmp_path}/dev.tsv:3: label 'meh' is not one of the training labels (neg, pos)")


def test_featurize_golden_pair(tokenizer):
    examples = [cd.Example("g", "The cat sat.", "Unaffable dogs!", "b")]
    features = cd.featurize(examples, ["a", "b"], tokenizer, 14)
    a = features.arrays
    # [CLS] the cat sat . [SEP] una ##ffa ##ble dogs ! [SEP] (ids = vocab line - 1)
    np.testing.assert_array_equal(a["input_ids"], [[101, 1996, 4937, 2938, 1012, 102, 14477,
                                                    20961, 3468, 6077, 999, 102, 0, 0]])
    np.testing.assert_array_equal(a["segment_ids"], [[0] * 6 + [1] * 6 + [0] * 2])
    np.testing.assert_array_equal(a["input_mask"], [[1] * 12 + [0] * 2])
    np.testing.assert_array_equal(a["label_ids"], [1])
    assert {k: (v.dtype, v.shape) for k, v in a.items()} == {
        "input_ids": (np.int32, (1, 14)), "input_mask": (np.int32, (1, 14)),
        "segment_ids": (np.int32, (1, 14)), "label_ids": (np.int32, (1,))}
    assert (features.num_truncated, features.guids, features.has_labels) == (0, ["g"], True)


def test_featurize_truncation_and_unlabelled(tokenizer):
    examples = [cd.Example("p", "The cat sat.", "Unaffable dogs!", None),  # 4 + 5 pieces
                cd.Example("s", "The cat sat.", None, None),
                cd.Example("t", "cat", "dogs", None)]
    features = cd.featurize(examples, ["a", "b"], tokenizer, 9)
    # Budget 6: B (longer) loses "!" and "dogs" -> 4/3, then A loses "." -> 3/3.
    np.testing.assert_array_equal(features.arrays["input_ids"], [
        [101, 1996, 4937, 2938, 102, 14477, 20961, 3468, 102],
        [101, 1996, 4937, 2938, 1012, 102, 0, 0, 0],
        [101, 4937, 102, 6077, 102, 0, 0, 0, 0]])
    np.testing.assert_array_equal(features.arrays["segment_ids"][0], [0] * 5 + [1] * 4)
    assert features.num_truncated == 1 and not features.has_labels
    assert "label_ids" not in features.arrays
    single = cd.featurize(examples[1:2], None, tokenizer, 4)
    np.testing.assert_array_equal(single.arrays["input_ids"], [[101, 1996, 4937, 102]])
    assert single.num_truncated == 1
    regression = cd.featurize([cd.Example("r", "cat", None, 2.5)], None, tokenizer, 4)
    assert regression.arrays["label_ids"].dtype == np.float32
    np.testing.assert_array_equal(regression.arrays["label_ids"], [2.5])


def reference_truncation(len_a, len_b, budget):
    """The original procedure: drop the last token of the longer side (B on a tie)."""
    while len_a + len_b > budget:
        if len_a > len_b:
            len_a -= 1
        else:
            len_b -= 1
    return len_a, len_b


def test_truncated_lengths_equals_the_token_at_a_time_procedure():
    for len_a, len_b, budget in itertools.product(range(14), range(14), range(1, 14)):
        assert cd.truncated_lengths(len_a, len_b, budget) == reference_truncation(
            len_a, len_b, budget), (len_a, len_b, budget)


def test_featurize_ids_equal_the_reference_tokenizer_path(tokenizer):
    texts = ["Héllo  wörld\u00a0x", "a\u200bb CJK中文 ok", "don't stop!!", "   ", "e\u0301t\u00e9"]
    examples = [cd.Example(str(i), t, texts[-1 - i], None) for i, t in enumerate(texts)]
    features = cd.featurize(examples, None, tokenizer, 32)
    cls_id, sep_id = tokenizer.vocab["[CLS]"], tokenizer.vocab["[SEP]"]
    for row, example in enumerate(examples):
        a = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(example.text_a))
        b = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(example.text_b))
        expected = [cls_id, *a, sep_id, *b, sep_id]
        assert features.arrays["input_ids"][row, :len(expected)].tolist() == expected
        assert features.arrays["input_mask"][row].sum() == len(expected)


def test_featurize_rejects_too_short_sequences(tokenizer):
    assert error_of(cd.featurize, [cd.Example("g", "a", "b", None)], None, tokenizer, 2) == (
        "max_seq_length=2 leaves no room for text")


def test_bundled_snli_tiny(repo_root, tokenizer):
    task = cd.get_task("jsonl", "sentence1", "sentence2", "gold_label")
    directory = str(repo_root / "data" / "finetune" / "snli_tiny")
    splits = {s: cd.read_split(task, directory, s) for s in ("train", "dev", "test")}
    counts = {s: collections.Counter(e.label for e in d.examples) for s, d in splits.items()}
    assert counts == {  # As in data/finetune/snli_tiny/README.md.
        "train": {"contradiction": 78, "entailment": 62, "neutral": 60},
        "dev": {"contradiction": 36, "entailment": 30, "neutral": 34},
        "test": {"contradiction": 18, "entailment": 14, "neutral": 18}}
    labels = cd.build_label_list(task, splits["train"])
    assert labels == ["contradiction", "entailment", "neutral"]
    features = cd.featurize(splits["dev"].examples, labels, tokenizer, 64)
    assert features.arrays["input_ids"].shape == (100, 64)
    assert features.num_truncated == 0


def test_bundled_vader_tiny(repo_root):
    base = repo_root / "data" / "finetune" / "vader_tiny"
    binary = cd.get_task("tsv", "sentence", None, "label")
    regression = cd.get_task("tsv", "sentence", None, "label", regression=True)
    for split, size in (("train", 300), ("dev", 100), ("test", 50)):
        data = cd.read_split(binary, str(base / "binary"), split)
        assert collections.Counter(e.label for e in data.examples) == {
            "pos": size // 2, "neg": size // 2}
        values = [e.label for e in cd.read_split(regression, str(base / "regression"),
                                                   split).examples]
        assert len(values) == size and all(-4 <= v <= 4 for v in values)
    train = cd.read_split(binary, str(base / "binary"), "train")
    assert cd.build_label_list(binary, train) == ["neg", "pos"]
