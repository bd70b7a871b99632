"""A cross-encoder's examples: (query, passage, label) pairs for training and for reranking.

Training pairs come from (query, positive, negatives...) examples, as the bi-encoder reads
them (`retrieval.training_input.read_training_examples`): a BEIR folder's qrels/train.tsv
(each relevant row a positive) with negatives mined by BM25 over its corpus
(`retrieval.hard_negatives`, the ranks, count and sampling of `MiningConfig`), or a file of
(query, positive[, negatives]) rows (run_retrieval's mined hard_negatives.jsonl is one); a
file without negatives gets BM25's from its own positives. Each example gives its positive
with label 1 and each negative with label 0; a (query, passage) pair is kept once (a query
with several positives shares its mined negatives), and a passage that is a positive of
the query anywhere is never its negative. For the listwise loss the same examples become
groups instead (`training_groups`): each positive with the first `num_negatives` of its
negatives, one group per (query, positive).

Rerank pairs are the first stage's candidates of each query (`first_stage.candidates`), in
that order, labelled by the qrels (score > 0 is 1, anything else 0), for the eval loss.
Pure Python apart from the mining.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Sequence, Set, Tuple

from absl import logging

from bert_tf.core.errors import UserError
from bert_tf.finetune.classification.classification_data import Example
from bert_tf.finetune.reranking.first_stage import Candidates
from bert_tf.finetune.retrieval import hard_negatives, training_input
from bert_tf.finetune.retrieval.beir_data import BeirSplit, TrainingExample


def _positives_by_query(examples: Sequence[TrainingExample]) -> Dict[str, Set[str]]:
    positives: Dict[str, Set[str]] = {}
    for e in examples:
        positives.setdefault(e.query, set()).add(e.positive)
    return positives


def pairs_from_examples(examples: Sequence[TrainingExample]) -> List[Example]:
    """(query, passage, label) pairs of `examples` (module docstring), in example order.

    Returns:
        `classification_data.Example`s: text_a the query, text_b the passage, label 1.0 or
        0.0; guid `train-<n>`, where the example's own `where`.
    """
    positives = _positives_by_query(examples)
    pairs: List[Example] = []
    seen: Set[Tuple[str, str]] = set()
    for e in examples:
        for passage, label in [(e.positive, 1.0)] + [(n, 0.0) for n in e.negatives]:
            if (e.query, passage) in seen or (label == 0.0 and passage in positives[e.query]):
                continue
            seen.add((e.query, passage))
            pairs.append(Example(f"train-{len(pairs)}", e.query, passage, label, e.where))
    return pairs


def mined_examples(train_dir: str, train_file: str, mining: hard_negatives.MiningConfig
                   ) -> List[TrainingExample]:
    """The (query, positive, negatives) examples of --train_dir or --train_file, with BM25's
    negatives when the source has none (module docstring).

    Raises:
        UserError: bad input (`beir_data`), neither or both sources, too few candidates to
            mine from (`hard_negatives.mine`).
    """
    if bool(train_dir) == bool(train_file):
        raise UserError("--do_train needs one of --train_dir (a BEIR folder) or --train_file")
    examples, passages = training_input.read_training_examples(train_file, train_dir)
    if not examples[0].negatives:
        pool = hard_negatives.build_pool(examples, passages)
        logging.info("mining %d BM25 negative(s) per query: ranks [%d, %d) of %d passages "
                     "for %d queries", mining.num_negatives, mining.range_min,
                     mining.range_max, len(pool.texts), len(pool.queries))
        examples, dropped = hard_negatives.mine(
            examples, pool, hard_negatives.bm25_rank(pool.texts), mining)
        if dropped:
            logging.warning("%d training examples dropped: fewer than %d negatives in the "
                            "ranks", dropped, mining.num_negatives)
    return examples


def training_pairs(train_dir: str, train_file: str, mining: hard_negatives.MiningConfig
                   ) -> List[Example]:
    """The bce training pairs of --train_dir or --train_file (module docstring).

    Raises:
        As `mined_examples`.
    """
    examples = mined_examples(train_dir, train_file, mining)
    pairs = pairs_from_examples(examples)
    logging.info("%d training pairs (%d positive) from %d examples", len(pairs),
                 sum(p.label == 1.0 for p in pairs), len(examples))
    return pairs


def groups_from_examples(examples: Sequence[TrainingExample], num_negatives: int
                         ) -> Tuple[List[List[Example]], int]:
    """Listwise groups of `examples`: [positive (label 1), its first `num_negatives`
    negatives (label 0)], skipping a negative that is a positive of the query anywhere.

    Returns:
        (the groups, in example order, each of 1 + `num_negatives` pairs; how many examples
        were dropped for having fewer usable negatives).
    """
    positives = _positives_by_query(examples)
    groups: List[List[Example]] = []
    dropped = 0
    for e in examples:
        negatives = [n for n in e.negatives if n not in positives[e.query]][:num_negatives]
        if len(negatives) < num_negatives:
            dropped += 1
            continue
        n = len(groups)
        groups.append([Example(f"train-{n}-0", e.query, e.positive, 1.0, e.where)]
                      + [Example(f"train-{n}-{i + 1}", e.query, passage, 0.0, e.where)
                         for i, passage in enumerate(negatives)])
    return groups, dropped


def training_groups(train_dir: str, train_file: str, mining: hard_negatives.MiningConfig
                    ) -> List[List[Example]]:
    """The listwise training groups of --train_dir or --train_file (module docstring).

    Raises:
        UserError: as `mined_examples`, or no example has `mining.num_negatives` usable
            negatives.
    """
    examples = mined_examples(train_dir, train_file, mining)
    groups, dropped = groups_from_examples(examples, mining.num_negatives)
    if not groups:
        raise UserError(f"no training example has {mining.num_negatives} negative(s) that "
                        "are not positives of its query: lower --num_hard_negatives")
    if dropped:
        logging.warning("%d training examples dropped: fewer than %d usable negatives",
                        dropped, mining.num_negatives)
    logging.info("%d training groups of %d pairs (1 positive, %d negatives)", len(groups),
                 mining.num_negatives + 1, mining.num_negatives)
    return groups


@dataclasses.dataclass(frozen=True)
class RerankPairs:
    """The pairs of a rerank, with where each came from.

    Attributes:
        examples: one per candidate, query then passage, in `candidates`' order.
        keys: (query id, passage id) of each example.
        candidates: the first stage's candidates per query.
    """

    examples: List[Example]
    keys: List[Tuple[str, str]]
    candidates: Candidates


def rerank_pairs(split: BeirSplit, candidates: Candidates) -> RerankPairs:
    """One pair per candidate of each query of `split`, labelled by its qrels.

    Raises:
        UserError: no query has a candidate.
    """
    examples: List[Example] = []
    keys: List[Tuple[str, str]] = []
    for qid, pids in candidates.items():
        judged = split.qrels.get(qid, {})
        for pid in pids:
            label = 1.0 if judged.get(pid, 0) > 0 else 0.0
            examples.append(Example(f"{qid}/{pid}", split.queries[qid],
                                    split.corpus[pid].encoder_text, label,
                                    f"{split.qrels_path}:{qid}/{pid}"))
            keys.append((qid, pid))
    if not examples:
        raise UserError(f"{split.qrels_path}: the first stage found no candidate for any "
                        "query")
    return RerankPairs(examples, keys, candidates)

