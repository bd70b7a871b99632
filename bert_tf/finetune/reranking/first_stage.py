"""The candidates a reranker scores: BM25's top k or a TREC run file's.

A run file is in TREC's format (`retrieval.trec_run`: run_retrieval's run.trec, trec_eval's,
pyserini's, BEIR's `save_runfile`). A query's candidates are its passages ordered by score,
highest first (equal scores in the file's order), cut at k; the rank field plays no part
(trec_eval ignores it too). As BEIR evaluates (`ir_metrics.drop_identical_ids`), a passage
whose id is the query's own id is never a candidate. Queries of the run that the split does
not hold are skipped (a run may cover every split); a query of the split with no line has
no candidate. Bad input stops with one line naming the file and line: a malformed line
(`trec_run.read_run`), a passage not in the corpus, no line for any query of the split.

BM25 candidates are `retrieval.bm25.BM25Index`'s (bm25s) over the split's corpus, each
passage as `Passage.encoder_text`; a query that shares no word with any passage has none.
"""

from __future__ import annotations

import os
from typing import Dict, List, Mapping

from bert_tf.core.errors import UserError
from bert_tf.finetune.retrieval import trec_run
from bert_tf.finetune.retrieval.beir_data import BeirSplit

BM25 = "bm25"  # --first_stage's value for BM25; anything else is a run file
Candidates = Dict[str, List[str]]  # query id -> passage ids, best first


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
    run, lines = trec_run.read_run_lines(path)
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
