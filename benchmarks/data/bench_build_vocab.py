"""Speed and memory of `python -m data_tools.build_vocab`, beside `tokenizers`' own trainer.

    .venv/bin/python benchmarks/data/bench_build_vocab.py                 # WikiText x16 (37 MB)
    .venv/bin/python benchmarks/data/bench_build_vocab.py --scale=64 --sample_mb=8

Every job is a fresh process (start-up included), timed end to end, run back to back:

1. throughput on the corpus repeated --scale times: ours with 1 and with 2 workers, and
   `tokenizers.BertWordPieceTokenizer.train` (Rust, all cores) on the same file with the
   same size, casing, min_frequency and alphabet limit; MB/s of input, wall and CPU
   seconds (CPU: user + system of the job and its workers, which load on a shared machine
   changes far less than wall time), and ours' own split between counting and learning
   (from its summary line); then the learning step alone, in this process, on the same
   counts, and the most 2 workers can gain on 2 cores (1-worker wall / half the 2-worker CPU),
   since that step is not divided among the workers and already uses every core;
2. peak RSS (the largest process of the job) on the corpus x1 and x8, and their ratio; also
   on a "varied" corpus whose k-th copy has the digit k glued to every word, so that the
   distinct words grow with the corpus as in real text (x8: 8 times as many), with the
   default --max_words and with --max_words=16000, about the distinct words of x1 (the x8
   counts are then spilled to disk, and the trainer gets as many words as for x1);
3. with --sample_mb: the same sample drawn from the corpus x(scale) and x(4 scale), whose
   times should be equal (the sample's cost does not grow with the corpus).

The load average is printed before each measurement: the wall-time ratios are meaningful
only when it stayed below the core count. (Linux's autogroup scheduler gives each session an
equal share of a busy machine, so under load a second worker gets no more CPU at all.)
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import sys
import tempfile
from typing import Dict, List

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "benchmarks" / "common"), str(REPO)]  # measure, machine; data_tools
import machine  # noqa: E402
import measure  # noqa: E402

CORPUS = REPO / "data" / "corpus" / "wikitext2.bert.txt"


_REFERENCE = (
    "import sys\n"
    "from tokenizers import BertWordPieceTokenizer\n"
    "tok = BertWordPieceTokenizer(lowercase=True)\n"
    "tok.train(files=[sys.argv[1]], vocab_size=int(sys.argv[2]), min_frequency=2,\n"
    "          limit_alphabet=1000, show_progress=False)\n"
)


def scaled(scale: int, tmp: pathlib.Path) -> pathlib.Path:
    """The bundled WikiText concatenated `scale` times (documents kept apart)."""
    if scale == 1:
        return CORPUS
    out = tmp / f"wikitext-x{scale}.txt"
    if not out.exists():
        text = CORPUS.read_bytes()
        if not text.endswith(b"\n\n"):
            text = text.rstrip(b"\n") + b"\n\n"
        with open(out, "wb") as f:
            for _ in range(scale):
                f.write(text)
    return out


def varied(scale: int, tmp: pathlib.Path) -> pathlib.Path:
    """WikiText `scale` times, copy k with the digit(s) of k glued to every word."""
    out = tmp / f"varied-x{scale}.txt"
    if not out.exists():
        text = CORPUS.read_text(encoding="utf-8")
        if not text.endswith("\n\n"):
            text = text.rstrip("\n") + "\n\n"
        with open(out, "w", encoding="utf-8") as f:
            for k in range(scale):
                f.write(re.sub(r"(\w+)", rf"\g<1>{k}", text))
    return out


def run(cmd: List[str]) -> Dict[str, object]:
    """One job in a fresh process (wrapped, so RUSAGE_CHILDREN covers that job only)."""
    m = measure.run_job(cmd, str(REPO), dict(os.environ, PYTHONPATH=str(REPO)))
    counting = re.search(r"\(counting ([\d.]+) s\)", m.stdout)
    return {"wall": m.wall, "cpu": m.cpu, "rss_mb": m.peak_mb,
            "counting": float(counting.group(1)) if counting else None}


def ours(corpus: pathlib.Path, out: pathlib.Path, vocab_size: int, workers: int,
         extra: List[str] = ()) -> Dict[str, object]:
    return run([sys.executable, "-m", "data_tools.build_vocab", f"--input_file={corpus}",
                f"--vocab_file={out}", f"--vocab_size={vocab_size}",
                f"--num_workers={workers}", *extra])


def learning_alone(scale: int, vocab_size: int) -> Dict[str, float]:
    """Wall and CPU seconds of the learning step alone (`learn_from_counts`: the replay of
    every counted word into `tokenizers`' trainer, then its merges), in this process, on the
    bundled corpus' word counts times `scale`, which are the corpus x(scale)'s counts."""
    from data_tools.vocab import vocab_learner, word_counting

    stats = vocab_learner.LearnStats()
    lines = CORPUS.read_text(encoding="utf-8").splitlines()
    counts = vocab_learner.count_words(lines, True, stats)
    counts = type(counts)({w: n * scale for w, n in counts.items()})
    stats.lines, stats.words = stats.lines * scale, stats.words * scale

    _, wall, cpu = measure.timed(lambda: vocab_learner.learn_from_counts(
        counts, word_counting.char_counts(counts), stats,
        vocab_learner.VocabConfig(vocab_size=vocab_size)))
    return {"wall": wall, "cpu": cpu, "words": stats.words}


def load() -> str:
    return f"load average {os.getloadavg()[0]:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale", type=int, default=16)
    parser.add_argument("--vocab_size", type=int, default=30522)
    parser.add_argument("--sample_mb", type=float, default=0)
    parser.add_argument("--repeats", type=int, default=1,
                        help="run part 1's jobs this many times, interleaved; keep each "
                             "one's fastest run (the least disturbed by other load)")
    parser.add_argument("--throughput_only", action="store_true",
                        help="only part 1 (to repeat it when the machine is quiet)")
    args = parser.parse_args()
    print(machine.describe())
    with tempfile.TemporaryDirectory(prefix="bench-vocab-") as tmp_name:
        tmp = pathlib.Path(tmp_name)
        corpus = scaled(args.scale, tmp)
        mb = corpus.stat().st_size / 1e6
        print(f"corpus: bundled WikiText x{args.scale}, {mb:.1f} MB; vocab_size "
              f"{args.vocab_size}")
        rows: Dict[str, Dict[str, object]] = {}
        jobs = (("ours, 1 worker", lambda: ours(corpus, tmp / "v1.txt", args.vocab_size, 1)),
                ("ours, 2 workers", lambda: ours(corpus, tmp / "v2.txt", args.vocab_size, 2)),
                ("tokenizers BertWordPieceTokenizer.train", lambda: run(
                    [sys.executable, "-c", _REFERENCE, str(corpus), str(args.vocab_size)])))
        for attempt in range(args.repeats):
            for name, job in jobs:
                print(f"  [{load()}] {name} (run {attempt + 1}) ...", flush=True)
                r = job()
                if name not in rows or r["wall"] < rows[name]["wall"]:
                    rows[name] = r
        same = (tmp / "v1.txt").read_bytes() == (tmp / "v2.txt").read_bytes()
        print(f"\n{'job':42s} {'MB/s':>6s} {'wall s':>7s} {'CPU s':>6s} {'count s':>8s} "
              f"{'peak RSS MB':>11s}")
        for name, r in rows.items():
            count = f"{r['counting']:.1f}" if r["counting"] is not None else "-"
            print(f"{name:42s} {mb / r['wall']:6.2f} {r['wall']:7.1f} {r['cpu']:6.1f} "
                  f"{count:>8s} {r['rss_mb']:11.0f}")
        one, two = rows["ours, 1 worker"], rows["ours, 2 workers"]
        ref = rows["tokenizers BertWordPieceTokenizer.train"]
        print(f"2 workers / 1 worker: {one['wall'] / two['wall']:.2f}x MB/s (goal >= 1.7x); "
              f"counting alone {one['counting'] / two['counting']:.2f}x; vocabularies "
              f"{'byte-identical' if same else 'DIFFERENT'}")
        print(f"ours / tokenizers' trainer: {ref['wall'] / one['wall']:.2f}x MB/s with 1 "
              f"worker, {ref['wall'] / two['wall']:.2f}x with 2 (goal >= 1x)")
        # Why 2 workers stay under 1.7x: the learning step is not divided among the workers,
        # and tokenizers already runs it on every core, so even a 1-worker job uses 2 cores
        # part of the time. On 2 cores, 2 workers cannot beat their CPU time / 2.
        print(f"  [{load()}] learning alone ...", flush=True)
        learn = learning_alone(args.scale, args.vocab_size)
        print(f"learning alone (tokenizers' replay of {learn['words']:,} counted words, then "
              f"its merges): wall {learn['wall']:.1f} s, CPU {learn['cpu']:.1f} s; the best "
              f"2 workers can do on 2 cores: 1-worker wall / (2-worker CPU / 2) = "
              f"{one['wall'] / (two['cpu'] / 2):.2f}x")

        if args.throughput_only:
            print(f"\n[{load()}] done")
            return
        print(f"\n  [{load()}] peak RSS at x1 and x8 (2 workers) ...", flush=True)
        rss = {s: ours(scaled(s, tmp), tmp / "r.txt", args.vocab_size, 2)["rss_mb"]
               for s in (1, 8)}
        print(f"peak RSS: x1 {rss[1]:.0f} MB, x8 {rss[8]:.0f} MB, ratio "
              f"{rss[8] / rss[1]:.2f} (goal <= 1.5)")
        for cap in (None, 16_000):
            extra = [f"--max_words={cap}"] if cap else []
            print(f"  [{load()}] varied corpus x1 and x8{', --max_words=%d' % cap if cap else ''}"
                  " ...", flush=True)
            rss = {s: ours(varied(s, tmp), tmp / "r.txt", args.vocab_size, 2, extra)["rss_mb"]
                   for s in (1, 8)}
            print(f"peak RSS, varied corpus (distinct words x8), --max_words="
                  f"{cap or 'default (1M)'}: x1 {rss[1]:.0f} MB, x8 {rss[8]:.0f} MB, ratio "
                  f"{rss[8] / rss[1]:.2f}")

        if args.sample_mb:
            print(f"\n  [{load()}] --sample_mb={args.sample_mb:g} from x{args.scale} and "
                  f"x{4 * args.scale} ...", flush=True)
            big = scaled(4 * args.scale, tmp)
            flag = [f"--sample_mb={args.sample_mb:g}"]
            small_run = ours(corpus, tmp / "s1.txt", args.vocab_size, 2, flag)
            big_run = ours(big, tmp / "s4.txt", args.vocab_size, 2, flag)
            print(f"sample of {args.sample_mb:g} MB, 2 workers: {small_run['wall']:.1f} s from "
                  f"{mb:.0f} MB, {big_run['wall']:.1f} s from {4 * mb:.0f} MB (ratio "
                  f"{big_run['wall'] / small_run['wall']:.2f}; a full count of the latter "
                  f"would take about {4 * two['wall']:.0f} s)")
        print(f"\n[{load()}] done")


if __name__ == "__main__":
    main()
