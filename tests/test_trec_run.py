"""Tests of bert_tf.finetune.retrieval.trec_run: TREC run files read (whitespace fields, each
query's lines in file order, gzip) and written (ranked by score, ties in the run's order,
float32 scores exactly), and their bad lines in one line each."""

import gzip

import numpy as np
import pytest

from bert_tf.core.errors import UserError
from bert_tf.finetune.retrieval import trec_run


def test_read_keeps_file_order_and_whitespace_fields(tmp_path):
    path = tmp_path / "run.trec"
    path.write_text("q1 Q0 d2 1 5.0 bm25\nq1\tQ0\td4\t3\t7.5\tbm25\nq2 Q0 d1 1 -1e3 x\n"
                    "q1 Q0 d1 4 5.0 bm25\n")
    run, lines = trec_run.read_run_lines(str(path))
    assert run == {"q1": {"d2": 5.0, "d4": 7.5, "d1": 5.0}, "q2": {"d1": -1000.0}}
    assert list(run["q1"]) == ["d2", "d4", "d1"]
    assert lines[("q1", "d1")] == 4


def test_gzip(tmp_path):
    path = tmp_path / "run.trec.gz"
    with gzip.open(path, "wt") as f:
        f.write("q2 Q0 d3 1 2.5 x\n")
    assert trec_run.read_run(str(path)) == {"q2": {"d3": 2.5}}


def test_write_ranks_by_score_and_reads_back_exactly(tmp_path):
    path = tmp_path / "out.trec"
    trec_run.write_run(str(path), {"q1": {"d1": 0.5, "d2": 2.0, "d3": 0.5}, "q2": {}}, "mine")
    assert path.read_text() == "q1 Q0 d2 1 2 mine\nq1 Q0 d1 2 0.5 mine\nq1 Q0 d3 3 0.5 mine\n"
    scores = np.random.default_rng(0).standard_normal(50).astype(np.float32)
    run = {"q": {f"d{i}": float(s) for i, s in enumerate(scores)}}
    trec_run.write_run(str(path), run, "x")
    back = trec_run.read_run(str(path))["q"]
    assert {p: np.float32(s) for p, s in back.items()} == {p: np.float32(s)
                                                           for p, s in run["q"].items()}
    assert list(back) == sorted(run["q"], key=lambda p: -run["q"][p])


@pytest.mark.parametrize("lines, message", [
    (["q1 Q0 d1 1 5.0"], ":1: expected 6 fields (query-id Q0 corpus-id rank score run-name), "
                         "found 5"),
    (["q1 Q0 d1 1 high x"], ":1: score 'high' is not a finite number"),
    (["q1 Q0 d1 1 nan x"], ":1: score 'nan' is not a finite number"),
    (["q1 Q0 d1 1 1 x", "q2 Q0 d3 1 1 x", "q1 Q0 d1 2 0.5 x"],
     ":3: query 'q1' lists passage 'd1' again (line 1)"),
])
def test_bad_lines_are_one_line(tmp_path, lines, message):
    path = tmp_path / "run.trec"
    path.write_text("".join(line + "\n" for line in lines))
    with pytest.raises(UserError) as e:
        trec_run.read_run(str(path))
    assert str(e.value) == str(path) + message
