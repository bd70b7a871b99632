"""The candidates a reranker scores (BM25's top k or a run file's), and TREC run files.

A run file is in TREC's format (trec_eval's, pyserini's, BEIR's `save_runfile`), one line per
retrieved passage, fields separated by whitespace:

    query-id Q0 corpus-id rank score run-name

A query's candidates are its passages ordered by score, highest first (equal scores in the
file's order), cut at k; the rank field plays no part (trec_eval ignores it too). As BEIR
evaluates (`ir_metrics.drop_identical_ids`), a passage whose id is the query's own id is
never a candidate. Queries of the run that the split does not hold are skipped (a run may
cover every split); a query of the split with no line has no candidate. Bad input stops with
one line naming the file and line: not 6 fields, a score that is not a number, a passage
twice for one query, a passage not in the corpus, no line for any query of the split. The
file is read as `beir_data.read_lines` reads (local or remote, gzip, strict UTF-8).

BM25 candidates are `retrieval.bm25.BM25Index`'s (bm25s) over the split's corpus, each
passage as `Passage.encoder_text`; a query that shares no word with any passage has none.
"""

from __future__ import annotations

import math
import os
from typing import Dict, List, Mapping, Tuple

from bert_tf.core import fileio
from bert_tf.core.errors import UserError
from bert_tf.finetune.retrieval import beir_data
from bert_tf.finetune.retrieval.beir_data import BeirSplit

BM25 = "bm25"  # --first_stage's value for BM25; anything else is a run file
Candidates = Dict[str, List[str]]  # query id -> passage ids, best first
Run = Mapping[str, Mapping[str, float]]  # query id -> {passage id: score}


def read_run(path: str) -> Dict[str, Dict[str, float]]:
    """{query id: {passage id: score}} of a TREC run file, each query's lines in file order.

    Raises:
        UserError: a line without 6 fields, a score that is not a finite number, a passage
            listed twice for one query.
    """
    return _read_run(path)[0]


def _read_run(path: str) -> Tuple[Dict[str, Dict[str, float]], Dict[Tuple[str, str], int]]:
    """`read_run`'s run, and the line of each (query id, passage id)."""
    run: Dict[str, Dict[str, float]] = {}
    seen: Dict[Tuple[str, str], int] = {}
    for n, line in beir_data.read_lines(path):
        fields = line.split()
        if len(fields) != 6:
            raise UserError(f"{path}:{n}: expected 6 fields (query-id Q0 corpus-id rank score "
                            f"run-name), found {len(fields)}")
        qid, _, pid, _, score_text, _ = fields
        try:
            score = float(score_text)
        except ValueError:
            score = math.nan
        if not math.isfinite(score):
            raise UserError(f"{path}:{n}: score {score_text!r} is not a finite number")
        if (qid, pid) in seen:
            raise UserError(f"{path}:{n}: query {qid!r} lists passage {pid!r} again (line "
                            f"{seen[qid, pid]})")
        seen[qid, pid] = n
        run.setdefault(qid, {})[pid] = score
    return run, seen


def top_candidates(hits: Mapping[str, float], query_id: str, k: int) -> List[str]:
    """The k best passage ids of one query's `hits`: score descending, ties in hits' order,
    the query's own id left out."""
    ranked = sorted((pid for pid in hits if pid != query_id), key=lambda pid: -hits[pid])
    return ranked[:k]


def run_candidates(path: str, split: BeirSplit, k: int) -> Candidates:
    """The top k candidates of every query of `split` in the run file `path`.

    Raises:
        UserError: see the module docstring.
    """
    run, lines = _read_run(path)
    unknown = sorted(lines[qid, pid] for qid in split.queries for pid in run.get(qid, ())
                     if pid not in split.corpus)
    if unknown:
        qid, pid = next(key for key, n in lines.items() if n == unknown[0])
        more = f" ({len(unknown)} lines name passages not in it)" if len(unknown) > 1 else ""
        folder = os.path.dirname(os.path.dirname(split.qrels_path))  # <folder>/qrels/x.tsv
        raise UserError(f"{path}:{unknown[0]}: passage {pid!r} (of query {qid!r}) is not in "
                        f"the corpus of {folder}{more}")
    if not any(qid in run for qid in split.queries):
        raise UserError(f"{path}: no line for any query of {split.qrels_path} (is it a run of "
                        f"this split?)")
    return {qid: top_candidates(run.get(qid, {}), qid, k) for qid in split.queries}


def bm25_candidates(split: BeirSplit, k: int) -> Candidates:
    """BM25's top k passages of every query of `split` over its corpus (module docstring)."""
    from bert_tf.finetune.retrieval.bm25 import NO_HIT, BM25Index

    ids = list(split.corpus)
    index = BM25Index([split.corpus[pid].encoder_text for pid in ids])
    query_ids = list(split.queries)
    # One more than k: the query's own id, dropped below, may be among them.
    rows, scores = index.top_k([split.queries[qid] for qid in query_ids], k + 1)
    return {qid: top_candidates({ids[int(i)]: float(s) for i, s in zip(row, row_scores)
                                 if i != NO_HIT}, qid, k)
            for qid, row, row_scores in zip(query_ids, rows, scores)}


def candidates(first_stage: str, split: BeirSplit, k: int) -> Candidates:
    """`bm25_candidates` for first_stage "bm25", else `run_candidates` of that file.

    Raises:
        UserError: k < 1, or a bad run file.
    """
    if k < 1:
        raise UserError(f"--rerank_top_k must be >= 1, got {k}")
    if first_stage == BM25:
        return bm25_candidates(split, k)
    return run_candidates(first_stage, split, k)


def write_run(path: str, run: Run, name: str) -> None:
    """Writes `run` as a TREC run file, each query's passages by score descending (ties in
    the run's order), ranks from 1, atomically."""
    lines = []
    for qid, hits in run.items():
        ranked = sorted(hits, key=lambda pid: -hits[pid])
        lines += [f"{qid} Q0 {pid} {rank} {hits[pid]:.6f} {name}\n"
                  for rank, pid in enumerate(ranked, 1)]
    with fileio.atomic_output(path, "wb") as f:
        f.write("".join(lines).encode("utf-8"))
