"""Reciprocal rank fusion (Cormack, Clarke and Buettcher, SIGIR 2009) of retrieval runs.

    rrf(q, p) = sum over runs r that hold p of  1 / (k + rank_r(q, p))

with rank_r 1-based, each run's passages ranked by its score (ties by passage id), and k = 60,
the paper's constant. Only ranks enter, so runs on any scales (BM25 scores, cosines, a
cross-encoder's logits) fuse without tuning a weight. run_rerank fuses the first stage's
order with the reranker's (`--fusion=rrf`).

Two runs tie often (ranks 1 and 3 sum as 3 and 1 do), and a tie would fall to passage ids in
trec_eval's order, so the fused run is returned as a strict order: sorted by rrf (rounded to
12 decimals, so sums equal up to rounding tie), then by the rank in the FIRST run given,
then by id; each passage's score is the count of passages ranked below it, plus one.
"""

from __future__ import annotations

from typing import Dict, Sequence

from bert_tf.finetune.retrieval.trec_run import Run

DEFAULT_K = 60.0


def ranks(hits: Dict[str, float]) -> Dict[str, int]:
    """{passage id: 1-based rank} of one query's hits, best score first, ties by id."""
    order = sorted(hits, key=lambda pid: (-hits[pid], pid))
    return {pid: r + 1 for r, pid in enumerate(order)}


def rrf_scores(runs: Sequence[Run], k: float = DEFAULT_K) -> Dict[str, Dict[str, float]]:
    """The raw rrf sums of `runs` for every query and passage of any run.

    Raises:
        ValueError: no run, or k <= 0.
    """
    if not runs:
        raise ValueError("reciprocal rank fusion needs at least one run")
    if k <= 0:
        raise ValueError(f"the RRF constant k must be > 0, got {k}")
    fused: Dict[str, Dict[str, float]] = {}
    for run in runs:
        for qid, hits in run.items():
            scores = fused.setdefault(qid, {})
            for pid, rank in ranks(dict(hits)).items():
                scores[pid] = scores.get(pid, 0.0) + 1.0 / (k + rank)
    return fused


def reciprocal_rank_fusion(runs: Sequence[Run], k: float = DEFAULT_K
                           ) -> Dict[str, Dict[str, float]]:
    """The fused run of `runs` as a strict order (module docstring).

    Returns:
        {query id: {passage id: score}}, scores n, n - 1, ..., 1 for a query's n passages,
        best first (in that dict order).

    Raises:
        ValueError: no run, or k <= 0.
    """
    fused = rrf_scores(runs, k)
    first = {qid: ranks(dict(hits)) for qid, hits in runs[0].items()}
    out: Dict[str, Dict[str, float]] = {}
    for qid, scores in fused.items():
        lead = first.get(qid, {})
        unranked = len(lead) + 1  # a passage the first run lacks comes after its own
        order = sorted(scores, key=lambda pid: (-round(scores[pid], 12),
                                                lead.get(pid, unranked), pid))
        out[qid] = {pid: float(len(order) - i) for i, pid in enumerate(order)}
    return out
