"""TREC run files: what a retrieval run returned, one line per (query, passage).

    query-id Q0 corpus-id rank score run-name

Fields are separated by whitespace; the format trec_eval, pyserini and BEIR's `save_runfile`
use. run_retrieval's --do_eval writes its run as `run.trec`, run_rerank writes
`reranked_run.trec`, and run_rerank's --first_stage reads any such file. Files are read as
`beir_data.read_lines` reads (local or remote, gzip, strict UTF-8); a malformed line stops
with one line naming the file and line.
"""

from __future__ import annotations

import math
from typing import Dict, Mapping, Tuple

from bert_tf.core import fileio
from bert_tf.core.errors import UserError
from bert_tf.finetune.retrieval import beir_data

Run = Mapping[str, Mapping[str, float]]  # query id -> {passage id: score}


def read_run(path: str) -> Dict[str, Dict[str, float]]:
    """{query id: {passage id: score}} of a TREC run file, each query's lines in file order.

    Raises:
        UserError: a line without 6 fields, a score that is not a finite number, a passage
            listed twice for one query.
    """
    return read_run_lines(path)[0]


def read_run_lines(path: str) -> Tuple[Dict[str, Dict[str, float]], Dict[Tuple[str, str], int]]:
    """`read_run`'s run, and the line of each (query id, passage id), for messages."""
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


def write_run(path: str, run: Run, name: str) -> None:
    """Writes `run` as a TREC run file, each query's passages by score descending (ties in
    the run's order), ranks from 1, scores to 9 significant digits (a float32 exactly),
    atomically."""
    lines = []
    for qid, hits in run.items():
        ranked = sorted(hits, key=lambda pid: -hits[pid])
        lines += [f"{qid} Q0 {pid} {rank} {hits[pid]:.9g} {name}\n"
                  for rank, pid in enumerate(ranked, 1)]
    with fileio.atomic_output(path, "wb") as f:
        f.write("".join(lines).encode("utf-8"))
