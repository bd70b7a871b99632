"""Tests for bert_tf.finetune.retrieval.beir_data: BEIR folders (plain and gzip), the split's
checks against corpus and queries, plain training pairs, and one line for each bad input."""

from __future__ import annotations

import gzip
import json

import pytest

from bert_tf.core.errors import UserError
from bert_tf.finetune.retrieval import beir_data as bd

CORPUS = [{"_id": "d1", "title": "Cats", "text": "Cats purr."},
          {"_id": "d2", "title": "", "text": "Dogs bark. "},
          {"_id": 3, "text": "Birds sing."}]  # an integer id, no title
QUERIES = [{"_id": "q1", "text": "what purrs"}, {"_id": "q2", "text": "who barks"},
           {"_id": "q3", "text": "unused"}]
QRELS = ["query-id\tcorpus-id\tscore", "q2\td2\t2", "q2\t3\t0", "q1\td1\t1"]


def jsonl(records):
    return "".join(json.dumps(r) + "\n" for r in records)


def write_folder(root, corpus=CORPUS, queries=QUERIES, qrels=QRELS, split="test",
                 gz=False, bom=False):
    root.mkdir(exist_ok=True)
    (root / "qrels").mkdir(exist_ok=True)
    text = ("\ufeff" if bom else "") + jsonl(corpus)
    if gz:
        (root / "corpus.jsonl.gz").write_bytes(gzip.compress(text.encode("utf-8")))
    else:
        (root / "corpus.jsonl").write_text(text, encoding="utf-8")
    (root / "queries.jsonl").write_text(jsonl(queries), encoding="utf-8")
    (root / "qrels" / f"{split}.tsv").write_text("\r\n".join(qrels) + "\r\n", encoding="utf-8")
    return str(root)


def message(fn, *args):
    with pytest.raises(UserError) as info:
        fn(*args)
    text = str(info.value)
    assert "\n" not in text
    return text


@pytest.mark.parametrize("gz", [False, True])
def test_reads_a_split_as_beir_does(tmp_path, gz):
    split = bd.read_split(write_folder(tmp_path / "beir", gz=gz, bom=True), "test")
    assert list(split.corpus) == ["d1", "d2", "3"]
    assert split.corpus["3"] == bd.Passage("3", "", "Birds sing.")
    # BEIR's encoder text: title + " " + text, stripped.
    assert [p.encoder_text for p in split.corpus.values()] == [
        "Cats Cats purr.", "Dogs bark.", "Birds sing."]
    assert split.queries == {"q2": "who barks", "q1": "what purrs"}  # qrels order, q3 dropped
    assert split.qrels == {"q2": {"d2": 2, "3": 0}, "q1": {"d1": 1}}
    assert [(e.query, e.positive) for e in bd.pairs_from_split(split)] == [
        ("who barks", "Dogs bark."), ("what purrs", "Cats Cats purr.")]


def test_a_renamed_gzip_file_is_read_by_its_magic_bytes(tmp_path):
    path = tmp_path / "queries.jsonl"
    path.write_bytes(gzip.compress(jsonl(QUERIES).encode("utf-8")))
    assert bd.read_queries(str(path)) == {"q1": "what purrs", "q2": "who barks", "q3": "unused"}


def test_another_split_reuses_the_corpus_and_queries(tmp_path):
    root = write_folder(tmp_path / "beir")
    (tmp_path / "beir" / "qrels" / "train.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq3\td1\t1\n", encoding="utf-8")
    test = bd.read_split(root, "test")
    train = bd.read_split(root, "train", corpus=test.corpus, queries={"q3": "unused"})
    assert train.corpus is test.corpus and train.qrels == {"q3": {"d1": 1}}


@pytest.mark.parametrize("change, expected", [
    (dict(qrels=QRELS + ["q9\td1\t1"]), "qrels/test.tsv:5: query 'q9' is not in the queries"),
    (dict(qrels=QRELS + ["q1\td9\t1", "q1\td8\t1"]),
     "qrels/test.tsv:5: passage 'd9' is not in the corpus (2 rows name ids not in the corpus)"),
    (dict(qrels=QRELS + ["q3\td1\t0"]),
     "qrels/test.tsv:5: query 'q3' has no positive (score > 0) in this split"),
    (dict(qrels=QRELS[1:]), "qrels/test.tsv:1: expected the header line "
                            "'query-id\tcorpus-id\tscore', found a row"),
    (dict(qrels=QRELS + ["q1 d2 1"]), "qrels/test.tsv:5: expected 3 tab-separated fields "
                                       "(query-id, corpus-id, score), found 1"),
    (dict(qrels=QRELS + ["q1\td2\thigh"]), "qrels/test.tsv:5: score 'high' (an integer)"),
    (dict(qrels=QRELS + ["q1\td1\t2"]),
     "qrels/test.tsv:5: query 'q1' and passage 'd1' repeat line 4"),
    (dict(qrels=QRELS[:1]), "qrels/test.tsv: no qrels row"),
    (dict(corpus=[]), "corpus.jsonl: empty corpus (no passage)"),
    (dict(corpus=CORPUS + [{"_id": "d1", "text": "again"}]),
     "corpus.jsonl:4: passage id 'd1' repeats line 1"),
    (dict(corpus=CORPUS + [{"title": "no id", "text": "x"}]),
     "corpus.jsonl:4: field '_id' is missing"),
    (dict(corpus=CORPUS + [{"_id": "d4", "text": 7}]),
     "corpus.jsonl:4: field 'text' is not a string: 7"),
    (dict(queries=QUERIES + [["q4", "a list"]]),
     "queries.jsonl:4: expected a JSON object, found list"),
])
def test_bad_input_gets_one_line_naming_file_and_line(tmp_path, change, expected):
    root = write_folder(tmp_path / "beir", **change)
    text = message(bd.read_split, root, "test")
    assert text == f"{root}/{expected}"


def test_bad_files_and_missing_files(tmp_path):
    root = write_folder(tmp_path / "beir")
    assert message(bd.read_split, root, "dev") == (
        f"{root}/qrels/dev.tsv: no such file (qrels splits in {root}: test)")
    (tmp_path / "beir" / "corpus.jsonl.gz").write_bytes(gzip.compress(b"{}"))
    assert message(bd.read_split, root, "test") == (
        f"{root}: both corpus.jsonl and corpus.jsonl.gz exist: keep one")
    (tmp_path / "beir" / "corpus.jsonl.gz").unlink()
    (tmp_path / "beir" / "corpus.jsonl").write_bytes(jsonl(CORPUS).encode() + b'{"_id": "\xff"}\n')
    assert message(bd.read_split, root, "test") == f"{root}/corpus.jsonl:4: not UTF-8"
    (tmp_path / "beir" / "corpus.jsonl").write_text(jsonl(CORPUS) + "{oops\n")
    assert message(bd.read_split, root, "test").startswith(
        f"{root}/corpus.jsonl:4: not valid JSON (")
    (tmp_path / "beir" / "corpus.jsonl").unlink()
    assert message(bd.read_split, root, "test") == (
        f"{root}: no corpus.jsonl or corpus.jsonl.gz (a BEIR folder holds corpus.jsonl, "
        f"queries.jsonl and qrels/<split>.tsv)")
    truncated = tmp_path / "cut.jsonl.gz"
    truncated.write_bytes(gzip.compress(jsonl(CORPUS * 50).encode())[:-12])
    assert message(bd.read_queries, str(truncated)).startswith(f"{truncated}:")


def test_training_pairs_from_tsv_and_jsonl(tmp_path):
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("query\tpositive\tnegative\nq a\tp a\tn a\n\nq b\tp b\tn b\n")
    assert bd.read_training_pairs(str(tsv)) == [
        bd.TrainingExample("q a", "p a", ("n a",), f"{tsv}:2"),
        bd.TrainingExample("q b", "p b", ("n b",), f"{tsv}:4")]
    packed = tmp_path / "pairs.jsonl.gz"
    packed.write_bytes(gzip.compress(jsonl([
        {"query": "q", "positive": "p", "negatives": ["n1", "n2"]},
        {"query": "r", "positive": "s", "negatives": ["m1", "m2"]}]).encode()))
    examples = bd.read_training_pairs(str(packed))
    assert [e.texts for e in examples] == [("q", "p", "n1", "n2"), ("r", "s", "m1", "m2")]
    single = tmp_path / "one.jsonl"
    single.write_text(jsonl([{"query": "q", "positive": "p", "negative": "n"}]))
    assert bd.read_training_pairs(str(single))[0].negatives == ("n",)


@pytest.mark.parametrize("name, content, expected", [
    ("p.tsv", "q\tp\tn\nq2\tp2\n", "p.tsv:2: 0 negatives, but the first example has 1 "
                                   "(every row needs the same number)"),
    ("p.tsv", "q\tp\nlonely\n", "p.tsv:2: expected query <TAB> positive [<TAB> negative ...], "
                                "found 1 field"),
    ("p.tsv", "q\t \n", "p.tsv:1: field 2 is empty"),
    ("p.tsv", "query\tpositive\n", "p.tsv: no training example"),
    ("p.jsonl", '{"query": "q"}\n', "p.jsonl:1: field 'positive' is missing"),
    ("p.jsonl", '{"query": "q", "positive": "p", "negatives": "n"}\n',
     "p.jsonl:1: field 'negatives' must be a list of strings"),
    ("p.csv", "q,p\n", "p.csv: training pairs must be a .tsv or .jsonl file (optionally .gz)"),
])
def test_bad_training_pairs(tmp_path, name, content, expected):
    path = tmp_path / name
    path.write_text(content)
    assert message(bd.read_training_pairs, str(path)) == f"{tmp_path}/{expected}"
