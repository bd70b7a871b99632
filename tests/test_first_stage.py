"""Tests of bert_tf.finetune.reranking.first_stage: a run file's candidates (order by score,
ties in file order, the query's own id left out, cut at k), its passages not in the corpus
and a run of no query of the split in one line each, and BM25's candidates as an
independent BM25Index ranking gives them. (Reading the file: tests/test_trec_run.py.)"""

import pytest

from bert_tf.core.errors import UserError
from bert_tf.finetune.reranking import first_stage
from bert_tf.finetune.retrieval.beir_data import BeirSplit, Passage
from bert_tf.finetune.retrieval.bm25 import BM25Index

CORPUS = {pid: Passage(pid, "", text) for pid, text in [
    ("d1", "cats eat fish"), ("d2", "dogs chase cats"), ("d3", "the sun is hot"),
    ("q1", "cats and fish again"), ("d4", "fish swim in rivers")]}
SPLIT = BeirSplit(corpus=CORPUS, queries={"q1": "what do cats eat", "q2": "hot sun"},
                  qrels={"q1": {"d1": 1}, "q2": {"d3": 1}}, qrels_path="/beir/qrels/test.tsv")


def _write(tmp_path, lines, name="run.trec"):
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


def test_run_candidates_order_ties_own_id_and_cut(tmp_path):
    path = _write(tmp_path, [
        "q1 Q0 d2 1 5.0 bm25",
        "q1 Q0 q1 2 9.0 bm25",       # the query's own id: never a candidate
        "q1\tQ0\td4\t3\t7.5\tbm25",   # tabs are whitespace too
        "q1 Q0 d1 4 5.0 bm25",       # ties d2: file order
        "q9 Q0 d1 1 1.0 bm25",       # not a query of the split: skipped
        "q1 Q0 d3 5 -1e3 bm25"])
    assert first_stage.run_candidates(path, SPLIT, 3) == {"q1": ["d4", "d2", "d1"], "q2": []}
    assert first_stage.candidates(path, SPLIT, 10)["q1"] == ["d4", "d2", "d1", "d3"]


@pytest.mark.parametrize("lines, message", [
    (["q1 Q0 d1 1 5.0"], ":1: expected 6 fields (query-id Q0 corpus-id rank score run-name), "
                         "found 5"),
    (["q1 Q0 d1 1 1 x", "q1 Q0 gone 2 1 x", "q2 Q0 lost 1 1 x"],
     ":2: passage 'gone' (of query 'q1') is not in the corpus of /beir (2 lines name "
     "passages not in it)"),
    (["q7 Q0 d1 1 1 x"], ": no line for any query of /beir/qrels/test.tsv (is it a run of this "
                         "split?)"),
])
def test_bad_run_files_are_one_line(tmp_path, lines, message):
    path = _write(tmp_path, lines)
    with pytest.raises(UserError) as e:
        first_stage.run_candidates(path, SPLIT, 5)
    assert str(e.value) == path + message


def test_missing_run_file_and_bad_k(tmp_path):
    with pytest.raises(UserError, match="nope.trec: no such file"):
        first_stage.candidates(str(tmp_path / "nope.trec"), SPLIT, 5)
    with pytest.raises(UserError, match="--rerank_top_k must be >= 1, got 0"):
        first_stage.candidates("bm25", SPLIT, 0)


def test_bm25_candidates_are_bm25_index_ranking_without_the_own_id():
    ids = list(CORPUS)
    index = BM25Index([CORPUS[p].encoder_text for p in ids])
    rows, _ = index.top_k(["what do cats eat"], len(ids))
    expected = [ids[int(i)] for i in rows[0] if i >= 0 and ids[int(i)] != "q1"]
    # "what" and "do" are stop words: d1 shares "cats" and "eat", d2 "cats" only; q1 (which
    # shares "cats" too) is the query's own id.
    assert expected == ["d1", "d2"]
    got = first_stage.candidates("bm25", SPLIT, 2)
    assert got["q1"] == expected[:2]
    assert got["q2"] == ["d3"]  # the only passage sharing a word with "hot sun"
    assert first_stage.bm25_candidates(SPLIT, 10)["q1"] == expected
