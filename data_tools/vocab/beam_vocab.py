"""`build_vocab`'s word counts as an Apache Beam pipeline (Dataflow, Flink, Spark, Direct).

`python -m data_tools.build_vocab ... --beam_pipeline_options="--runner=..."` counts the
words on the runner's workers and learns the same vocabulary as the local run:

1. The launcher plans the parts of `word_counting.plan_parts` (byte ranges of the files, or a
   seeded sample of blocks): it reads only the files' sizes and first bytes, so its own
   work does not grow with the corpus.
2. Each worker counts its parts' words (`word_counting.count_part`), reading only its ranges.
3. `CombinePerKey(sum)` gives every word's exact total, and `Top.Of` the `max_words` most
   frequent, ties broken by code point order: the local runner's rule, a total order, so
   the result does not depend on how the runner groups or merges. Characters and line
   counts are summed by a global combine.
4. One worker writes the result (a pickle) to a private temporary directory; the launcher
   reads it, removes the directory and learns the vocabulary locally (the trainer's
   input is at most `max_words` words).
"""

from __future__ import annotations

import collections
import dataclasses
import os
import pickle
from typing import Iterable, List, Sequence, Tuple

from bert_tf.core import fileio
from data_tools.runtime import beam_runtime
from data_tools.runtime.beam_runtime import beam
from data_tools.vocab import word_counting
from data_tools.vocab.word_counting import CountConfig, WordCounts


def _count(part: word_counting.FilePart, do_lower_case: bool) -> WordCounts:
    return word_counting.count_part(part, do_lower_case)


def _rank(pair: Tuple[str, int]) -> Tuple[int, str]:
    # Top.Of(reverse=True) keeps the smallest keys: the most frequent, then the smaller word.
    return -pair[1], pair[0]


def _stats_only(counts: WordCounts) -> WordCounts:
    # A copy: Beam may hand the same element to the "Words" branch (inputs are immutable).
    return dataclasses.replace(counts, words=collections.Counter())


def _merge_stats(parts: Iterable[WordCounts]) -> WordCounts:
    total = WordCounts(collections.Counter(), collections.Counter())
    for part in parts:
        total.add_stats(part)
    return total


def _write_result(stats: WordCounts, top: List[Tuple[str, int]], distinct: int,
                  path: str) -> None:
    stats.distinct = distinct
    with fileio.open_file(path, "wb") as f:
        pickle.dump((top, stats), f, protocol=pickle.HIGHEST_PROTOCOL)


def count_corpus(files: Sequence[str], config: CountConfig, options: str, near: str
                 ) -> Tuple[collections.Counter, WordCounts]:
    """Counts the words of `files` on Beam; the same result as `word_counting.count_corpus`.

    Args:
        files: the input files, in order.
        config: how to count (`num_workers` is the runner's business and is ignored).
        options: Beam pipeline options, e.g. "--runner=DataflowRunner --project=...".
        near: a path whose directory holds the temporary directory when `config.temp_dir`
            is empty (the vocabulary file).

    Returns:
        (words, stats) as `word_counting.count_corpus` returns them.

    Raises:
        UserError: bad options or input (before the pipeline where possible), or a failed
            pipeline.
    """
    # A portable runner's workers have a working directory of their own.
    files = [beam_runtime.absolute(f) for f in files]
    near = beam_runtime.absolute(near)
    config = dataclasses.replace(config, temp_dir=beam_runtime.absolute(config.temp_dir))
    opts = beam_runtime.pipeline_options(options, list(files) + [config.temp_dir, near])
    parts = word_counting.plan_parts(files, config)
    staging = beam_runtime.staging_dir(config.temp_dir, near)
    try:
        result = os.path.join(staging, "counts.pickle")
        p = beam.Pipeline(options=opts)
        counts = (p | "Parts" >> beam.Create(parts)
                  | "Spread" >> beam.Reshuffle()
                  | "Count" >> beam.Map(_count, config.do_lower_case))
        words = (counts | "Words" >> beam.FlatMap(lambda c: c.words.items())
                 | "Sum" >> beam.CombinePerKey(sum))
        top = words | "Top" >> beam.combiners.Top.Of(config.max_words, key=_rank,
                                                      reverse=True)
        distinct = words | "Distinct" >> beam.combiners.Count.Globally()
        _ = (counts | "StatsOnly" >> beam.Map(_stats_only)
             | "Stats" >> beam.CombineGlobally(_merge_stats)
             | "Write" >> beam.Map(_write_result, beam.pvalue.AsSingleton(top),
                                   beam.pvalue.AsSingleton(distinct), result))
        beam_runtime.execute(p)
        with fileio.open_file(result, "rb") as f:
            top_words, stats = pickle.load(f)
    finally:
        beam_runtime.remove_tree(staging)
    return collections.Counter(dict(top_words)), stats
