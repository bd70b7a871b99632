"""Mined hard negatives for the bi-encoder (run_retrieval --hard_negatives_from=bm25|model).

As sentence-transformers' `mine_hard_negatives` (its names: num_negatives, range_min,
range_max, sampling_strategy): every distinct query of the training examples ranks the
candidate passages, by BM25 (`bm25.BM25Index`) or by the model before training (the
embeddings of `corpus_eval`, exact search by `search.top_k`); its positives are taken out of
that ranking; ranks [range_min, range_max) of what is left are the candidates, and the
first `num_negatives` of them ("top") or `num_negatives` drawn from them ("random", seeded)
become the negatives of every example of that query, in rank order. range_min > 0 skips the
passages closest to the query, which are often unlabelled positives.

The candidates are the distinct passage texts: with --train_dir the BEIR folder's corpus
(`Passage.encoder_text`), with --train_file the file's positives. A positive of a query is
every passage text paired with that query text as a positive (in the qrels with a score
> 0, or on a line of the file), compared as strings, so neither a positive nor a copy of it
under another id is ever its negative. An example whose query keeps fewer than
`num_negatives` candidates is dropped (as sentence-transformers drops it), and counted.

Mining is deterministic: rankings break ties by corpus order, and "random" draws from
(seed, query number). Pure NumPy apart from the model's embeddings.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np

from bert_tf.core import fileio
from bert_tf.core.errors import UserError
from bert_tf.finetune.retrieval.beir_data import TrainingExample

MINED_FILE = "hard_negatives.jsonl"  # in the output_dir: what the run trains on
SOURCES = ("bm25", "model")
SAMPLING = ("top", "random")
NO_HIT = -1  # as search.NO_HIT and bm25.NO_HIT

Rank = Callable[[List[str], int], np.ndarray]  # (queries, k) -> int64 [queries, k] rows


@dataclasses.dataclass(frozen=True)
class MiningConfig:
    """How negatives are mined (module docstring).

    Attributes:
        source: "bm25" or "model".
        num_negatives: negatives per example (>= 1).
        range_min, range_max: the ranks (0-based, positives left out) the negatives come
            from: [range_min, range_max).
        sampling: "top" (the best-ranked candidates) or "random" (drawn with `seed`).
        seed: the run's --seed.
    """

    source: str
    num_negatives: int = 1
    range_min: int = 0
    range_max: int = 100
    sampling: str = "top"
    seed: int = 12345

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise UserError(f"--hard_negatives_from must be one of {', '.join(SOURCES)}, got "
                            f"{self.source!r}")
        if self.sampling not in SAMPLING:
            raise UserError(f"--hard_negative_sampling must be one of {', '.join(SAMPLING)}, "
                            f"got {self.sampling!r}")
        if self.num_negatives < 1:
            raise UserError(f"--num_hard_negatives must be >= 1, got {self.num_negatives}")
        if self.range_min < 0 or self.range_max <= self.range_min:
            raise UserError(f"--hard_negative_range_min={self.range_min} and "
                            f"--hard_negative_range_max={self.range_max}: need 0 <= min < max")
        if self.num_negatives > self.range_max - self.range_min:
            raise UserError(f"--num_hard_negatives={self.num_negatives} does not fit in ranks "
                            f"[{self.range_min}, {self.range_max}): widen the range")

    def settings(self) -> Dict[str, object]:
        """What finetune_task.json records (a resumed run must mine the same way)."""
        return {"from": self.source, "num_negatives": self.num_negatives,
                "range_min": self.range_min, "range_max": self.range_max,
                "sampling": self.sampling, "seed": self.seed}


@dataclasses.dataclass(frozen=True)
class Pool:
    """The candidate passages and, per distinct query, the rows of its positives.

    Attributes:
        texts: distinct passage texts, in corpus (or file) order.
        queries: distinct query texts, in the examples' order.
        positives: per query, the rows of `texts` it may not take as a negative.
    """

    texts: List[str]
    queries: List[str]
    positives: List[Set[int]]


def build_pool(examples: Sequence[TrainingExample],
               passages: Optional[Sequence[str]] = None) -> Pool:
    """The pool of `examples`' queries over `passages` (default: the examples' positives).

    Args:
        examples: (query, positive) training examples: one per positive of a query
            (`beir_data.pairs_from_split` gives one per relevant qrels row).
        passages: the candidate texts (a corpus), repeated texts kept once.
    """
    texts = list(dict.fromkeys(passages if passages is not None
                               else [e.positive for e in examples]))
    row_of = {t: i for i, t in enumerate(texts)}
    positive_texts: Dict[str, Set[str]] = {}
    for e in examples:
        positive_texts.setdefault(e.query, set()).add(e.positive)
    queries = list(positive_texts)
    positives = [{row_of[t] for t in positive_texts[q] if t in row_of} for q in queries]
    return Pool(texts, queries, positives)


def select(ranked: np.ndarray, positives: Sequence[Set[int]], config: MiningConfig
           ) -> List[Optional[Tuple[int, ...]]]:
    """Per query, the rows of its negatives in rank order, or None when too few are left.

    Args:
        ranked: int64 [queries, k]: each query's candidates, best first (NO_HIT: none),
            k >= range_max + the query's positives.
        positives: per query, rows never taken.
        config: the range, count and sampling.
    """
    chosen: List[Optional[Tuple[int, ...]]] = []
    for q, (row, taken) in enumerate(zip(np.asarray(ranked), positives)):
        candidates = [int(i) for i in row if i != NO_HIT and int(i) not in taken]
        candidates = candidates[config.range_min:config.range_max]
        if len(candidates) < config.num_negatives:
            chosen.append(None)
        elif config.sampling == "top":
            chosen.append(tuple(candidates[:config.num_negatives]))
        else:  # "random": one generator per query, so a query's draw is its own
            rng = np.random.default_rng([config.seed, q])
            picks = np.sort(rng.choice(len(candidates), config.num_negatives, replace=False))
            chosen.append(tuple(candidates[int(p)] for p in picks))
    return chosen


def mine(examples: Sequence[TrainingExample], pool: Pool, rank: Rank, config: MiningConfig
         ) -> Tuple[List[TrainingExample], int]:
    """`examples` with mined negatives (module docstring).

    Args:
        rank: ranks the pool's texts for a list of queries (`bm25_rank`, `model_rank`).

    Returns:
        (the examples that kept enough candidates, with their negatives; how many were
        dropped).

    Raises:
        UserError: no example kept enough candidates.
    """
    most = max((len(p) for p in pool.positives), default=0)
    depth = min(len(pool.texts), config.range_max + most)
    chosen = select(rank(pool.queries, depth), pool.positives, config)
    by_query = dict(zip(pool.queries, chosen))
    kept = [dataclasses.replace(e, negatives=tuple(pool.texts[i] for i in by_query[e.query]))
            for e in examples if by_query[e.query] is not None]
    if not kept:
        raise UserError(f"no training example has {config.num_negatives} hard negative(s) "
                        f"in ranks [{config.range_min}, {config.range_max}) of "
                        f"--hard_negatives_from={config.source} ({len(pool.texts)} passages): "
                        "lower --hard_negative_range_min or --num_hard_negatives")
    return kept, len(examples) - len(kept)


def bm25_rank(texts: Sequence[str]) -> Rank:
    """Ranks `texts` by BM25 (only texts sharing a word with the query are ranked)."""
    from bert_tf.finetune.retrieval.bm25 import BM25Index

    index = BM25Index(texts)
    return lambda queries, k: index.top_k(queries, k)[0]


def model_rank(model, texts: Sequence[str], tokenizer, max_query_length: int,
               max_passage_length: int, batch_size: int) -> Rank:
    """Ranks `texts` by the dot product of `model`'s embeddings (exact search)."""
    from bert_tf.finetune.retrieval import corpus_eval, search

    embed = corpus_eval.embed_function(model)
    corpus = corpus_eval.embed_texts(embed, list(texts), tokenizer, max_passage_length,
                                     batch_size, "max_passage_length")

    def rank(queries: List[str], k: int) -> np.ndarray:
        vectors = corpus_eval.embed_texts(embed, queries, tokenizer, max_query_length,
                                          batch_size, "max_query_length")
        return search.top_k(vectors, corpus, k)[0]

    return rank


def write_examples(path: str, examples: Sequence[TrainingExample]) -> None:
    """Writes `examples` as the .jsonl training pairs `beir_data.read_training_pairs` reads
    ({"query", "positive", "negatives"} per line), atomically."""
    with fileio.atomic_output(path, "wb") as f:
        for e in examples:
            line = {"query": e.query, "positive": e.positive, "negatives": list(e.negatives)}
            f.write((json.dumps(line, ensure_ascii=False) + "\n").encode("utf-8"))
