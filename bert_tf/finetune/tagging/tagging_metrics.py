"""Entity-level precision, recall and F1 for sequence tagging (NER, chunking), CoNLL style.

Tags are "O" or "<prefix>-<type>" with prefix B (begin), I (inside), E (end) or S (single),
e.g. "B-PER", "I-LOC". An entity (chunk) is a maximal run of words read as conlleval and
seqeval's default (non-strict) mode read it, whatever the scheme the data uses:

- a chunk opens at B- or S-, and at an I- or E- that does not continue a B-/I- chunk of its
  type (so "I-PER" after "O", after "I-LOC" or after "E-PER" opens a new PER chunk);
- a chunk closes after E- or S-, before O, B- or S-, and before any tag of another type.

So IOB1 ("I-" everywhere, "B-" only between two adjacent chunks of one type), IOB2/BIO ("B-"
on every first word), IOE1/IOE2 and IOBES all decode correctly without naming the scheme,
and a badly formed prediction (an "I-" with no "B-") still yields the chunk a reader would
see. Chunks of different sentences never merge.

A predicted entity is correct when a gold entity has the same type, start and end. Micro
averages pool all types: P = correct / predicted, R = correct / gold, F1 = 2 P R / (P + R),
with 0 for a 0/0 ratio (as seqeval reports it). Accuracy is per word over all sentences.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Sequence, Tuple

from bert_tf.core.errors import UserError

PREFIXES = ("B", "I", "E", "S")
OUTSIDE = "O"

# (type, start_word, end_word_exclusive)
Span = Tuple[str, int, int]


def split_tag(tag: str) -> Tuple[str, str]:
    """A tag's prefix and entity type: "B-PER" -> ("B", "PER"), "O" -> ("O", "").

    The type is everything after the first dash: "I-MISC-X" -> ("I", "MISC-X"). A bare
    prefix has no type: "B" -> ("B", ""), as conlleval and seqeval read untyped tag sets
    (NCBI-disease and BC5CDR in BioBERT's files tag B / I / O).

    Raises:
        UserError: a tag that is neither "O", a known prefix, nor a prefix, a dash and a
            type.
    """
    if tag == OUTSIDE:
        return OUTSIDE, ""
    if tag in PREFIXES:
        return tag, ""
    prefix, dash, kind = tag.partition("-")
    if prefix not in PREFIXES or not dash or not kind:
        raise UserError(f"tag {tag!r} is neither 'O' nor one of {'/'.join(PREFIXES)} "
                        "followed by '-' and an entity type")
    return prefix, kind


def _closes(prev: Tuple[str, str], cur: Tuple[str, str]) -> bool:
    """Whether the chunk holding the previous word ends before the current word."""
    prev_prefix, prev_type = prev
    if prev_prefix == OUTSIDE:
        return False
    if prev_prefix in ("E", "S"):
        return True
    # After B- or I- the chunk goes on only into an I- or E- of its own type.
    return not (cur[0] in ("I", "E") and cur[1] == prev_type)


def _opens(prev: Tuple[str, str], cur: Tuple[str, str]) -> bool:
    """Whether a new chunk begins at the current word."""
    prefix, kind = cur
    if prefix == OUTSIDE:
        return False
    if prefix in ("B", "S"):
        return True
    # I- and E- continue a B-/I- chunk of their type; anywhere else they begin one.
    return not (prev[0] in ("B", "I") and prev[1] == kind)


def tags_to_spans(tags: Sequence[str]) -> List[Span]:
    """The entities of one sentence's tags.

    Args:
        tags: one tag per word, e.g. ["B-PER", "I-PER", "O", "I-LOC"].

    Returns:
        [(type, start_word, end_word_exclusive)] in order of start, e.g.
        [("PER", 0, 2), ("LOC", 3, 4)].

    Raises:
        UserError: a malformed tag.
    """
    spans: List[Span] = []
    prev = (OUTSIDE, "")
    start = 0
    # A trailing "O" closes the last chunk.
    for position, tag in enumerate([*tags, OUTSIDE]):
        cur = split_tag(tag)
        if _closes(prev, cur):
            spans.append((prev[1], start, position))
        if _opens(prev, cur):
            start = position
        prev = cur
    return spans


@dataclasses.dataclass(frozen=True)
class ChunkScores:
    """Entity counts and the figures computed from them (ratios 0 when undefined)."""

    num_gold: int
    num_predicted: int
    num_correct: int

    @property
    def precision(self) -> float:
        return self.num_correct / self.num_predicted if self.num_predicted else 0.0

    @property
    def recall(self) -> float:
        return self.num_correct / self.num_gold if self.num_gold else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0


def _check_shapes(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> int:
    """The number of words; raises UserError when the two do not line up."""
    if isinstance(gold, str) or isinstance(predicted, str):
        raise UserError("tagging metrics take a list of sentences, each a list of tags")
    if len(gold) != len(predicted):
        raise UserError(f"{len(gold)} gold sentences but {len(predicted)} predicted ones")
    words = 0
    for index, (g, p) in enumerate(zip(gold, predicted)):
        if isinstance(g, str) or isinstance(p, str):
            raise UserError(f"sentence {index} is a string, not a list of tags")
        if len(g) != len(p):
            raise UserError(f"sentence {index} has {len(g)} gold tags but {len(p)} predicted")
        words += len(g)
    if words == 0:
        raise UserError("no words to evaluate")
    return words


def entity_scores(
    gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]
) -> Tuple[ChunkScores, Dict[str, ChunkScores]]:
    """Micro-averaged and per-type entity counts over a corpus.

    Args:
        gold: [num_sentences][num_words] gold tags.
        predicted: the predicted tags, the same shape.

    Returns:
        (all types pooled, {entity type: its scores}) with a type listed when it occurs in
        the gold or the predicted tags; types sorted by name.

    Raises:
        UserError: mismatched shapes or a malformed tag.
    """
    _check_shapes(gold, predicted)
    gold_entities = {(i, *span) for i, tags in enumerate(gold) for span in tags_to_spans(tags)}
    predicted_entities = {(i, *span) for i, tags in enumerate(predicted)
                          for span in tags_to_spans(tags)}
    correct = gold_entities & predicted_entities

    def count(entities: set) -> Dict[str, int]:
        counts: Dict[str, int] = {}
        for entity in entities:
            counts[entity[1]] = counts.get(entity[1], 0) + 1
        return counts

    gold_counts, predicted_counts, correct_counts = (
        count(gold_entities), count(predicted_entities), count(correct))
    per_type = {kind: ChunkScores(gold_counts.get(kind, 0), predicted_counts.get(kind, 0),
                                  correct_counts.get(kind, 0))
                for kind in sorted(set(gold_counts) | set(predicted_counts))}
    pooled = ChunkScores(len(gold_entities), len(predicted_entities), len(correct))
    return pooled, per_type


def word_accuracy(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> float:
    """Fraction of words, over all sentences, whose predicted tag equals the gold tag."""
    words = _check_shapes(gold, predicted)
    right = sum(g == p for g_tags, p_tags in zip(gold, predicted)
                for g, p in zip(g_tags, p_tags))
    return right / words


def tagging_metrics(
    gold: Sequence[Sequence[str]],
    predicted: Sequence[Sequence[str]],
    *,
    per_type: bool = False,
) -> Dict[str, float]:
    """The figures a tagging evaluation writes (the caller adds the loss).

    Args:
        gold: [num_sentences][num_words] gold tags.
        predicted: the predicted tags, the same shape.
        per_type: also add "eval_<type>_precision", "_recall", "_f1" and "_support" (the
            number of gold entities) for each entity type.

    Returns:
        {"eval_precision", "eval_recall", "eval_f1"} (entities, micro-averaged over types)
        and "eval_accuracy" (words), as Python floats.

    Raises:
        UserError: mismatched shapes, no words, or a malformed tag.
    """
    pooled, types = entity_scores(gold, predicted)
    result = {"eval_precision": pooled.precision, "eval_recall": pooled.recall,
              "eval_f1": pooled.f1, "eval_accuracy": word_accuracy(gold, predicted)}
    if per_type:
        for kind, scores in types.items():
            result[f"eval_{kind}_precision"] = scores.precision
            result[f"eval_{kind}_recall"] = scores.recall
            result[f"eval_{kind}_f1"] = scores.f1
            result[f"eval_{kind}_support"] = float(scores.num_gold)
    return result
