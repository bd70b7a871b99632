"""The three data jobs at corpus scale, in one run: MB/s and peak RSS per stage on 1 and 2
workers, the Beam launcher's CPU time at 1x and 32x the corpus, and the NSP negatives'
corpus distance and variety beside the original script's.

    .venv/bin/python benchmarks/data/bench_data_at_scale.py                 # 1 GB (the default)
    .venv/bin/python benchmarks/data/bench_data_at_scale.py --target_mb=32  # a quick check
        [--reference_script=/path/to/bert/create_pretraining_data.py] [--dupe_factor=2]

1. **Corpus.** The bundled WikiText's 121 articles as raw documents (paragraphs of 6
   sentences, as `bench_prepare_corpus.py` builds them), repeated, each copy in its own
   seeded order, until the file holds --target_mb MB.
2. **Stages**, each a fresh process (start-up included), timed end to end, 1 worker then 2:
   `prepare_corpus` on the raw corpus (its 2-worker output is the next stages' input),
   `build_vocab` (vocab_size 30,522) on that, and `create_pretraining_data` (--dupe_factor)
   with the vocabulary just learnt. MB/s is input text per wall second; CPU seconds are the
   job's and its workers' (steadier on a shared machine). Peak RSS: the main process
   (VmHWM) and the largest worker (`RUSAGE_CHILDREN`), from the job's own summary line for
   `create_pretraining_data` and from a wrapper around the module for the other two; and
   whether the outputs of 1 and 2 workers are byte-identical (SHA-256).
3. **Beam launcher.** Each job is launched with `--beam_pipeline_options` naming
   `submit_only_runner.SubmitOnlyRunner`, which ends the process once the pipeline is built
   and serialised as a job submission: its CPU time is the launcher's own work (imports,
   checks, planning, the first chunk, graph), none of the workers'. On the bundled corpus x1
   and x32 (2.3 and 74 MB, whatever --target_mb), the least of --launcher_repeats runs; the
   ratio's goal is <= 1.5. --launchers_only runs this part alone (with the bundled
   vocabulary for create_pretraining_data's launcher).
4. **NSP negatives** (`bench_corpus_order.measure`, dupe_factor 5, 2 workers, on the bundled
   corpus in corpus order, sorted by topic and as 4 books): the IsRandom records' mean
   |i - j| / N between A's and B's documents (1/3 for a uniform draw), and distinct B
   openings (B's first 4 token ids) per IsRandom record, with the IsNext records' figure as
   a baseline, beside the original's when --reference_script is given ("original: not run"
   otherwise).

The load average is printed before every run: with other jobs on the cores, wall-time
ratios show shares of a busy machine. A markdown summary ends the output.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import pathlib
import re
import shutil
import sys
import tempfile
import time
from types import SimpleNamespace
from typing import Callable, Dict, List, Optional

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # the negatives' tracing loads TensorFlow
REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks" / "common"))  # machine, measure
sys.path.insert(0, str(REPO / "benchmarks" / "data"))  # the other data benchmarks
import machine  # noqa: E402
from bench_build_vocab import load  # noqa: E402
from bench_create_pretraining_data import (  # noqa: E402
    DEFAULT_VOCAB,
    run_ours,
    run_timed,
    scaled_corpus,
)
from bench_prepare_corpus import articles, shuffled_documents  # noqa: E402

CORPUS = REPO / "data" / "corpus" / "wikitext2.bert.txt"
VOCAB_SIZE = 30522
LAUNCHER_SCALES = (1, 32)
RUNNER = "--runner=submit_only_runner.SubmitOnlyRunner"

# Runs a data job's module as `python -m` would, then writes its peak RSS: the main process
# (VmHWM: Linux keeps ru_maxrss across exec, so RUSAGE_SELF could be the wrapper's) and the
# largest worker (RUSAGE_CHILDREN). Only create_pretraining_data logs this line itself.
_PEAK_RSS = (
    "import resource, runpy, sys\n"
    "module = sys.argv[1]\n"
    "sys.argv = [module] + sys.argv[2:]\n"
    "try:\n"
    "    runpy.run_module(module, run_name='__main__', alter_sys=True)\n"
    "finally:\n"
    "    with open('/proc/self/status') as f:\n"
    "        own = next(int(x.split()[1]) for x in f if x.startswith('VmHWM:'))\n"
    "    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
    "    sys.stderr.write(f'\\npeak RSS: main process {own * 1024 / 1e6:.0f} MB, '\n"
    "                     f'largest worker {kids * 1024 / 1e6:.0f} MB\\n')\n"
)


def build_corpus(target_mb: float, path: pathlib.Path) -> float:
    """Writes the raw corpus of about `target_mb` MB to `path`; returns its size in MB."""
    docs = articles(str(CORPUS), 6)
    one_copy = sum(len(d.encode("utf-8")) + 2 for d in docs)
    repeat = max(1, -(-int(target_mb * 1e6) // one_copy))
    with open(path, "w", encoding="utf-8") as f:
        for doc in shuffled_documents(docs, repeat):
            f.write(doc + "\n\n")
    return path.stat().st_size / 1e6


def sha256(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def peak_rss(log: str) -> Dict[str, float]:
    """The main process' and largest worker's peak RSS (MB) from a job's last such line."""
    found = re.findall(r"peak RSS: main process (\d+) MB, largest worker (\d+) MB", log)
    return ({"main_peak_mb": float(found[-1][0]), "worker_peak_mb": float(found[-1][1])}
            if found else {})


def run_stage(stage: str, workers: int, src: pathlib.Path, out: pathlib.Path,
              args, vocab: Optional[pathlib.Path] = None) -> Dict[str, object]:
    """One job in a fresh process; its wall and CPU seconds, MB/s, peak RSS, output digest."""
    print(f"  [{load()}] {stage}, {workers} worker(s) ...", flush=True)
    if stage == "create_pretraining_data":
        job = SimpleNamespace(dupe_factor=args.dupe_factor, num_workers=workers)
        res = run_ours(src, vocab, out, job)
    else:
        flags = ([f"--output_file={out}", "--progress_seconds=0"] if stage == "prepare_corpus"
                 else [f"--vocab_file={out}", f"--vocab_size={VOCAB_SIZE}"])
        res = run_timed([sys.executable, "-c", _PEAK_RSS, f"data_tools.{stage}",
                         f"--input_file={src}", f"--num_workers={workers}"] + flags)
        res.update(peak_rss(str(res["log"])))
    res.update(stage=stage, workers=workers, in_mb=src.stat().st_size / 1e6,
               out_mb=out.stat().st_size / 1e6, sha=sha256(out), load=os.getloadavg()[0])
    res["mb_s"] = res["in_mb"] / float(res["wall"])
    print(f"    {res['wall']:.1f} s wall, {res['mb_s']:.2f} MB/s, CPU {res['cpu']:.1f} s, "
          f"peak RSS main {res.get('main_peak_mb', 0):.0f} MB, largest worker "
          f"{res.get('worker_peak_mb', 0):.0f} MB (largest process "
          f"{res['child_peak_mb']:.0f} MB); output {res['out_mb']:.1f} MB", flush=True)
    return res


def launcher_cpu(stage: str, src: pathlib.Path, tmp: pathlib.Path,
                 vocab: pathlib.Path) -> float:
    """CPU seconds of the job's Beam launcher until the job is submitted (no worker runs)."""
    out = tmp / f"launch-{stage}.out"
    flags = {"prepare_corpus": [f"--output_file={out}"],
             "build_vocab": [f"--vocab_file={out}", f"--vocab_size={VOCAB_SIZE}"],
             "create_pretraining_data": [f"--output_file={out}", f"--vocab_file={vocab}"]}
    # submit_only_runner.py is in benchmarks/data/.
    env = dict(os.environ,
               PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "benchmarks" / "data")]))
    # Temporary files go beside the output, in `tmp`.
    res = run_timed([sys.executable, "-m", f"data_tools.{stage}", f"--input_file={src}",
                     f"--beam_pipeline_options={RUNNER}"] + flags[stage], env)
    if "submit_only_runner: pipeline" not in str(res["log"]):
        sys.exit(f"{stage}: the launcher ended before submitting its pipeline:\n"
                 f"{str(res['log'])[-2000:]}")
    return float(res["cpu"])


def measure_launchers(tmp: pathlib.Path, vocab: pathlib.Path, repeats: int
                      ) -> Dict[str, object]:
    """Launcher CPU seconds per job and scale (the least of `repeats` runs: the least
    disturbed by other load)."""
    found: Dict[str, object] = {}
    for scale in LAUNCHER_SCALES:
        src = scaled_corpus(CORPUS, scale, tmp)
        found[f"mb{scale}"] = src.stat().st_size / 1e6
        for stage in ("prepare_corpus", "build_vocab", "create_pretraining_data"):
            print(f"  [{load()}] Beam launcher of {stage}, corpus x{scale} ...", flush=True)
            runs = [launcher_cpu(stage, src, tmp, vocab) for _ in range(repeats)]
            found[stage, scale] = min(runs)
            print(f"    CPU {' '.join(f'{c:.2f}' for c in runs)} s", flush=True)
    return found


def measure_negatives(args, vocab: pathlib.Path) -> List[Dict[str, object]]:
    from bench_corpus_order import measure

    job = SimpleNamespace(dupe_factor=5, num_workers=2)
    rows = []
    for row in measure(vocab, CORPUS, job, args.reference_script):
        print(f"  {row['job']:<9} {row['corpus']:<9}: {row['records']} records "
              f"({100 * row['traced']:.1f}% traced), {row['wall']:.1f} s, negatives' mean "
              f"distance {row['distance']:.3f} ({row['distance_traced']} traced), IsRandom "
              f"from A's document {100 * row['same_document']:.1f}%, distinct B openings per "
              f"IsRandom record {row['openings']:.3f} (IsNext {row['next_openings']:.3f})",
              flush=True)
        rows.append(row)
    return rows


def negatives_table(negatives: List[Dict[str, object]],
                    cell: Callable[[Dict[str, object]], str]) -> None:
    """The rows of a negatives table: `cell` of ours and of the original per corpus form."""
    for name in ("articles", "topics", "books"):
        ours = next(r for r in negatives if r["corpus"] == name and r["job"] == "ours")
        ref = [r for r in negatives if r["corpus"] == name and r["job"] == "original"]
        label = {"articles": "WikiText, corpus order", "topics": "sorted by topic",
                 "books": "as 4 books"}[name]
        print(f"| {label} | {cell(ours)} | {cell(ref[0]) if ref else 'original: not run'} |")


def launcher_table(launch: Dict[str, object]) -> None:
    lo, hi = LAUNCHER_SCALES
    print(f"\n| Beam launcher (CPU s) | x{lo} ({launch[f'mb{lo}']:.1f} MB) | x{hi} "
          f"({launch[f'mb{hi}']:.0f} MB) | x{hi} / x{lo} (goal <= 1.5) |")
    print("|---|---:|---:|---:|")
    for stage in ("prepare_corpus", "build_vocab", "create_pretraining_data"):
        a, b = launch[stage, lo], launch[stage, hi]
        print(f"| {stage} | {a:.2f} | {b:.2f} | {b / a:.2f} |")


def summary(stages: List[Dict[str, object]], launch: Dict[str, object],
            negatives: List[Dict[str, object]], args) -> None:
    print("\n## Summary\n")
    print(f"{machine.describe()}; load average {os.getloadavg()[0]:.1f} at the end\n")
    print("| stage | workers | input MB | wall s | MB/s | 2w / 1w | CPU s | peak RSS main / "
          "largest worker MB | 1w = 2w bytes |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in stages:
        one = next(s for s in stages if s["stage"] == r["stage"] and s["workers"] == 1)
        speedup = f"{r['mb_s'] / one['mb_s']:.2f}x" if r["workers"] == 2 else ""
        same = "yes" if r["sha"] == one["sha"] else "NO"
        # One worker runs in the main process: it has no worker process.
        worker = f"{r.get('worker_peak_mb', 0):.0f}" if r["workers"] > 1 else "-"
        print(f"| {r['stage']} | {r['workers']} | {r['in_mb']:.0f} | {r['wall']:.1f} | "
              f"{r['mb_s']:.2f} | {speedup} | {r['cpu']:.1f} | "
              f"{r.get('main_peak_mb', 0):.0f} / {worker} | "
              f"{same if r['workers'] == 2 else ''} |")
    launcher_table(launch)
    print("\n| NSP negatives: mean \\|i - j\\| / N (uniform: 0.333) | ours | original |")
    print("|---|---:|---:|")
    negatives_table(negatives, lambda r: f"{r['distance']:.3f}")
    print("\n| NSP negatives: distinct B openings per IsRandom record (per IsNext record) | "
          "ours | original |")
    print("|---|---:|---:|")
    negatives_table(negatives,
                    lambda r: f"{r['openings']:.3f} ({r['next_openings']:.3f})")
    if not args.reference_script:
        print("\noriginal: not run (give --reference_script)")
    total = sum(float(r["wall"]) for r in stages)
    print(f"\nstages took {total:.0f} s on {stages[0]['in_mb']:.0f} MB of raw text; at these "
          f"MB/s, 1 GB would take about {total * 1000 / float(stages[0]['in_mb']) / 60:.0f} "
          "min (plus the launcher and negatives parts, which do not grow)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target_mb", type=float, default=1024,
                        help="size of the raw corpus built from the bundled WikiText")
    parser.add_argument("--dupe_factor", type=int, default=2,
                        help="of create_pretraining_data (records: ~4 MB per MB of text "
                             "per dupe, written and spilled once, removed after each run)")
    parser.add_argument("--reference_script", type=pathlib.Path, default=None,
                        help="the original create_pretraining_data.py (tokenization.py "
                             "beside it), for the negatives")
    parser.add_argument("--launcher_repeats", type=int, default=3,
                        help="runs of each launcher measurement (the least CPU is kept)")
    parser.add_argument("--launchers_only", action="store_true",
                        help="measure the Beam launchers only (part 3)")
    parser.add_argument("--temp_dir", type=pathlib.Path, default=None,
                        help="where the corpus and outputs go (default: the system's)")
    args = parser.parse_args()
    print(machine.describe())
    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}; "
          f"{len(os.sched_getaffinity(0))} core(s) for this process")
    start = time.monotonic()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="bench_scale_", dir=args.temp_dir))
    # Google's uncased vocabulary, as bench_corpus_order uses (a worktree may not have the
    # shared copy; the repository bundles one).
    bundled = REPO / "data" / "vocab" / "bert-base-uncased-vocab.txt"
    google_vocab = next((v for v in (DEFAULT_VOCAB, bundled) if v.is_file()), None)
    try:
        if args.launchers_only:
            print(f"\n## Beam launchers\n\n{machine.describe()}")
            launcher_table(measure_launchers(tmp, google_vocab, args.launcher_repeats))
            return
        raw = tmp / "raw.txt"
        mb = build_corpus(args.target_mb, raw)
        print(f"corpus: {mb:.1f} MB of raw text (the bundled WikiText repeated, shuffled), "
              f"built in {time.monotonic() - start:.0f} s; dupe_factor {args.dupe_factor}")
        stages = []
        for workers in (1, 2):
            stages.append(run_stage("prepare_corpus", workers, raw, tmp / f"prep{workers}.txt",
                                    args))
        raw.unlink()
        (tmp / "prep1.txt").unlink()
        prepared = tmp / "prep2.txt"
        for workers in (1, 2):
            stages.append(run_stage("build_vocab", workers, prepared,
                                    tmp / f"vocab{workers}.txt", args))
        vocab = tmp / "vocab2.txt"
        for workers in (1, 2):
            out = tmp / f"records{workers}.tfrecord"
            stages.append(run_stage("create_pretraining_data", workers, prepared, out, args,
                                    vocab))
            out.unlink()  # records take ~4x the text per dupe: keep one run's at a time
        prepared.unlink()
        launch = measure_launchers(tmp, vocab, args.launcher_repeats)
        negatives = measure_negatives(args, google_vocab or vocab)
        summary(stages, launch, negatives, args)
        print(f"\nwhole run: {time.monotonic() - start:.0f} s")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
