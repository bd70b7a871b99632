"""The create_pretraining_data job at two corpus sizes: does its speed hold as the shuffle
spills more, and how many times does the shuffle write and read each record?

    .venv/bin/python benchmarks/data/bench_shuffle.py              # 4x and 32x, 1 and 2 workers
    .venv/bin/python benchmarks/data/bench_shuffle.py --reference_rev=HEAD~1  # beside a commit

Each job is a fresh process (start-up included), with the default --shuffle_memory_mb=16 (a
smaller one stands for a larger corpus: what matters is records / budget), on the bundled
WikiText concatenated 4 and 32 times. Prints, per run: wall seconds, MB/s of
input text and of output records, peak RSS (main process and largest worker, from the job's
own summary line), and the shuffle's line: buckets, and temporary-file bytes written and read
per record byte (one write and one read is 1.0x / 1.0x, plus 16 bytes of key and length per
record). Then the ratio of MB/s at 32x to 4x for each worker count (the job's speed should
not fall as the corpus grows: goal >= 0.85), and the same ratio in MB per CPU-second
(steadier when other jobs share the cores). With --reference_rev, the same jobs run from
that commit's tree (`git archive`) in the same run, for a side-by-side. The machine may be
shared: the load average is printed before and after.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Dict, List

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks" / "common"))  # machine, measure
sys.path.insert(0, str(REPO / "benchmarks" / "data"))  # bench_create_pretraining_data
import machine  # noqa: E402
import measure  # noqa: E402
from bench_create_pretraining_data import scaled_corpus  # noqa: E402


def run_job(tree: pathlib.Path, corpus: pathlib.Path, vocab: pathlib.Path,
            out: pathlib.Path, workers: int, dupe_factor: int, memory_mb: float
            ) -> Dict[str, object]:
    """One job in a fresh process, from the source tree `tree`; its figures."""
    cmd = [sys.executable, "-m", "data_tools.create_pretraining_data",
           f"--input_file={corpus}", f"--output_file={out}", f"--vocab_file={vocab}",
           f"--dupe_factor={dupe_factor}", f"--num_workers={workers}", "--log_examples=0",
           "--progress_seconds=0", f"--shuffle_memory_mb={memory_mb:g}"]
    env = dict(os.environ, PYTHONPATH=str(tree))
    m = measure.run_job(cmd, str(tree), env)
    log = m.stderr
    res: Dict[str, object] = {"wall": m.wall, "cpu": m.cpu,
                              "in_mb": corpus.stat().st_size / 1e6,
                              "out_mb": out.stat().st_size / 1e6}
    m = re.search(r"peak RSS: main process (\d+) MB, largest worker (\d+) MB", log)
    res["rss"] = f"main {m.group(1)} MB, worker {m.group(2)} MB" if m else "?"
    m = re.search(r"shuffle: (.*MB of records in.*)", log)
    res["shuffle"] = m.group(1) if m else _old_shuffle_line(log)
    res["final_pass"] = _final_pass_seconds(log)
    digest = subprocess.run(["sha256sum", str(out)], capture_output=True, text=True)
    res["sha"] = digest.stdout.split()[0][:12]
    out.unlink()
    return res


def _stamp(line: str) -> float:
    """Seconds of the day of an absl log line (`I1124 05:56:31.153569 ...`)."""
    h, m, sec = line.split()[1].split(":")
    return 3600 * int(h) + 60 * int(m) + float(sec)


def _final_pass_seconds(log: str) -> float:
    """From the line logged as the final pass starts (this tree: "shuffle: final pass";
    older trees: "shuffling: ... spilled") to the job's "wrote" line; 0 if nothing spilled."""
    lines = log.splitlines()
    start = next((ln for ln in lines if "] shuffle: final pass" in ln
                  or "] shuffling: " in ln), None)
    end = next((ln for ln in lines if re.search(r"\] wrote \d+ instances", ln)), None)
    return _stamp(end) - _stamp(start) if start and end else 0.0


def _old_shuffle_line(log: str) -> str:
    m = re.search(r"shuffling: ([\d.]+ MB of records spilled)", log)
    return (m.group(1) + " (re-splits not logged)") if m else "not logged"


def describe(name: str, res: Dict[str, object]) -> str:
    wall = float(res["wall"])
    return (f"{name:<24} {wall:7.2f} s  {float(res['in_mb']) / wall:5.2f} MB/s in  "
            f"{float(res['out_mb']) / wall:6.1f} MB/s out  cpu {float(res['cpu']):6.1f} s  "
            f"peak RSS {res['rss']}  sha {res['sha']}\n{'':<26}final pass "
            f"{float(res['final_pass']):.2f} s; shuffle: {res['shuffle']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=pathlib.Path,
                        default=REPO / "data" / "corpus" / "wikitext2.bert.txt")
    parser.add_argument("--vocab", type=pathlib.Path, default=None)
    parser.add_argument("--scales", default="4,32")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--dupe_factor", type=int, default=5)
    parser.add_argument("--shuffle_memory_mb", type=float, default=16,
                        help="smaller budgets stand for larger corpora (records / budget)")
    parser.add_argument("--reference_rev", default=None,
                        help="also run the jobs from this git revision's tree")
    args = parser.parse_args()
    vocab = args.vocab
    if vocab is None:
        candidates = [REPO.parent.parent / "shared/data/vocab/bert-base-uncased-vocab.txt",
                      REPO / "data" / "vocab" / "bert-base-uncased-vocab.txt"]
        vocab = next((c for c in candidates if c.is_file()), None)
    if vocab is None or not vocab.is_file() or not args.corpus.is_file():
        sys.exit("need --corpus and --vocab (a WordPiece vocab file)")
    scales = [int(s) for s in args.scales.split(",")]
    workers = [int(w) for w in args.workers.split(",")]
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="bench_shuffle_"))
    trees: List[tuple] = [("this tree", REPO)]
    try:
        if args.reference_rev:
            ref = tmp / "reference"
            ref.mkdir()
            archive = subprocess.run(["git", "-C", str(REPO), "archive", args.reference_rev],
                                     capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", str(ref)], input=archive, check=True)
            trees.append((f"at {args.reference_rev}", ref))
        print(machine.describe())
        print(f"load average before: {' '.join(f'{x:.1f}' for x in os.getloadavg())}; "
              f"dupe_factor {args.dupe_factor}, --shuffle_memory_mb {args.shuffle_memory_mb:g}")
        results: Dict[tuple, Dict[str, object]] = {}
        for scale in scales:
            corpus = scaled_corpus(args.corpus, scale, tmp)
            print(f"-- corpus x{scale}: {corpus.stat().st_size / 1e6:.1f} MB")
            for w in workers:
                for name, tree in trees:
                    res = run_job(tree, corpus, vocab, tmp / "out.tfrecord", w,
                                  args.dupe_factor, args.shuffle_memory_mb)
                    results[name, scale, w] = res
                    print(describe(f"{name}, {w} worker(s)", res), flush=True)
            if corpus != args.corpus:
                corpus.unlink()
        lo, hi = min(scales), max(scales)
        for name, _ in trees:
            for w in workers:
                a, b = results[name, lo, w], results[name, hi, w]
                ratio = (float(b["in_mb"]) / float(b["wall"])) / (
                    float(a["in_mb"]) / float(a["wall"]))
                cpu_ratio = (float(b["in_mb"]) / float(b["cpu"])) / (
                    float(a["in_mb"]) / float(a["cpu"]))
                print(f"ratio {hi}x/{lo}x, {name}, {w} worker(s): MB/s {ratio:.2f}, "
                      f"MB per CPU-second {cpu_ratio:.2f}")
        print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
