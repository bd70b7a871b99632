"""Retrieval metrics exactly as BEIR computes them. Pure Python (no TensorFlow, no NumPy).

BEIR's `EvaluateRetrieval.evaluate` hands nDCG, MAP and recall to pytrec_eval (trec_eval's
`ndcg_cut`, `map_cut` and `recall` measures) and computes MRR itself
(`custom_metrics.mrr`). Their conventions, reproduced here:

* Identical ids: by default BEIR first drops, from each query's run, a passage whose id
  equals the query's id (`ignore_identical_ids`; some datasets, such as ArguAna and Quora,
  hold the query itself in the corpus). MRR then sees the run without them too.
* Ranking (trec_eval): by score, highest first; equal scores in DESCENDING order of the
  passage id (byte order: trec_eval compares C strings). The run's own order plays no part.
* Ranking (MRR): by score, highest first, equal scores in the order the run lists them
  (Python's stable sort of the run's dict).
* Relevance: a qrels score >= 1 is relevant (trec_eval's relevance level 1; for MRR, > 0).
  Passages not in a query's qrels count as not relevant; negative scores as unjudged.
* nDCG@k: gain = the qrels score itself (trec_eval's linear gain, not 2^rel - 1), discount
  log2(rank + 1) with ranks from 1; the ideal ranking orders the query's judged passages by
  score, cut at k as well. A query with no relevant passage scores 0.
* MAP@k: the sum over relevant passages in the top k of the precision at their rank,
  divided by the number of relevant passages in the qrels (not by min(k, relevant)).
* Recall@k: relevant passages in the top k / relevant passages in the qrels (0 when none).
* Averages: nDCG, MAP and recall average over the queries present in both the qrels and
  the run (pytrec_eval skips the others); a query with qrels but no relevant passage counts,
  with 0. MRR@k sums 1/rank of the first relevant passage in the top k over the run's
  queries, and divides by the number of queries in the qrels (BEIR's `len(qrels)`).

BEIR rounds each figure to 5 decimals for its report; these functions return them unrounded.
"""

from __future__ import annotations

import math
from typing import Dict, List, Mapping, Sequence

Qrels = Mapping[str, Mapping[str, int]]
Run = Mapping[str, Mapping[str, float]]

# The figures `--do_eval` reports, with BEIR's cutoffs.
METRICS = ("ndcg_at_10", "recall_at_100", "mrr_at_10", "map_at_100")


def drop_identical_ids(run: Run) -> Dict[str, Dict[str, float]]:
    """A copy of `run` without the passages whose id is the query's own id."""
    return {qid: {pid: score for pid, score in hits.items() if pid != qid}
            for qid, hits in run.items()}


def trec_ranking(hits: Mapping[str, float]) -> List[str]:
    """Passage ids in trec_eval's order: score descending, then id descending."""
    by_id = sorted(hits, reverse=True)
    return sorted(by_id, key=lambda pid: hits[pid], reverse=True)  # stable: ids stay descending


def run_order_ranking(hits: Mapping[str, float]) -> List[str]:
    """Passage ids as BEIR's MRR ranks them: score descending, ties in run order."""
    return sorted(hits, key=lambda pid: hits[pid], reverse=True)


def ndcg_at(ranked: Sequence[str], judged: Mapping[str, int], k: int) -> float:
    """nDCG@k of one query (module docstring); `ranked` in trec_eval's order."""
    dcg = sum(judged.get(pid, 0) / math.log2(i + 2)
              for i, pid in enumerate(ranked[:k]) if judged.get(pid, 0) > 0)
    ideal_gains = sorted((g for g in judged.values() if g > 0), reverse=True)[:k]
    ideal = sum(g / math.log2(i + 2) for i, g in enumerate(ideal_gains))
    return dcg / ideal if ideal > 0 else 0.0


def average_precision_at(ranked: Sequence[str], judged: Mapping[str, int], k: int) -> float:
    """trec_eval's map_cut at k for one query."""
    num_relevant = sum(1 for g in judged.values() if g >= 1)
    if num_relevant == 0:
        return 0.0
    found, total = 0, 0.0
    for i, pid in enumerate(ranked[:k]):
        if judged.get(pid, 0) >= 1:
            found += 1
            total += found / (i + 1)
    return total / num_relevant


def recall_at(ranked: Sequence[str], judged: Mapping[str, int], k: int) -> float:
    """trec_eval's recall at k for one query."""
    num_relevant = sum(1 for g in judged.values() if g >= 1)
    if num_relevant == 0:
        return 0.0
    return sum(1 for pid in ranked[:k] if judged.get(pid, 0) >= 1) / num_relevant


def reciprocal_rank_at(ranked: Sequence[str], judged: Mapping[str, int], k: int) -> float:
    """1 / rank of the first passage with score > 0 in the top k, else 0."""
    for i, pid in enumerate(ranked[:k]):
        if judged.get(pid, 0) > 0:
            return 1.0 / (i + 1)
    return 0.0


def per_query(qrels: Qrels, run: Run, ignore_identical_ids: bool = True
              ) -> Dict[str, Dict[str, float]]:
    """{query id: {metric: value}} for the queries in both `qrels` and `run` (METRICS' keys;
    mrr_at_10 is BEIR's reciprocal rank of the query, before its own averaging)."""
    if ignore_identical_ids:
        run = drop_identical_ids(run)
    scores = {}
    for qid, hits in run.items():
        if qid not in qrels:
            continue  # pytrec_eval skips it; BEIR's mrr would fail on it
        judged = qrels[qid]
        ranked = trec_ranking(hits)
        scores[qid] = {
            "ndcg_at_10": ndcg_at(ranked, judged, 10),
            "recall_at_100": recall_at(ranked, judged, 100),
            "mrr_at_10": reciprocal_rank_at(run_order_ranking(hits), judged, 10),
            "map_at_100": average_precision_at(ranked, judged, 100),
        }
    return scores


def evaluate(qrels: Qrels, run: Run, ignore_identical_ids: bool = True) -> Dict[str, float]:
    """BEIR's nDCG@10, Recall@100, MRR@10 and MAP@100 of `run` against `qrels`.

    Args:
        qrels: {query id: {passage id: relevance}} (BEIR's qrels).
        run: {query id: {passage id: score}}: the retrieved passages of each query (at least
            the top 100 for Recall@100 and MAP@100); dict order matters only for MRR ties.
        ignore_identical_ids: drop a passage whose id is the query's id (BEIR's default).

    Returns:
        {"ndcg_at_10", "recall_at_100", "mrr_at_10", "map_at_100"}: floats in [0, 1],
        averaged as the module docstring says.

    Raises:
        ValueError: no query of the run is in the qrels.
    """
    scores = per_query(qrels, run, ignore_identical_ids)
    if not scores:
        raise ValueError("no query of the run is in the qrels")
    out = {name: math.fsum(s[name] for s in scores.values()) / len(scores)
           for name in METRICS if name != "mrr_at_10"}
    out["mrr_at_10"] = math.fsum(s["mrr_at_10"] for s in scores.values()) / len(qrels)
    return {name: out[name] for name in METRICS}


def run_from_top_k(query_ids: Sequence[str], corpus_ids: Sequence[str],
                   indices: Sequence[Sequence[int]], scores: Sequence[Sequence[float]]
                   ) -> Dict[str, Dict[str, float]]:
    """A BEIR run from top-k arrays (`search.top_k`): rows of corpus indices, -1 = no hit.

    Hits keep their ranked order, so MRR's ties fall in corpus order as the search broke them.
    """
    run: Dict[str, Dict[str, float]] = {}
    for qid, row, row_scores in zip(query_ids, indices, scores):
        run[qid] = {corpus_ids[int(i)]: float(s) for i, s in zip(row, row_scores) if i >= 0}
    return run

