"""Speed and memory of `python -m data_tools.create_pretraining_data`, optionally side by side
with google-research/bert's original script.

    .venv/bin/python benchmarks/data/bench_create_pretraining_data.py            # 1x corpus
    .venv/bin/python benchmarks/data/bench_create_pretraining_data.py --scale=4  # 4x (9.3 MB)
    .venv/bin/python benchmarks/data/bench_create_pretraining_data.py --scale=4 \\
        --reference_script=/path/to/bert/create_pretraining_data.py

Each run is a fresh process (start-up included), timed end to end. Prints instances/s, MB/s
(of output), wall seconds and peak RSS (main process and largest worker, from the job's own
`resource.getrusage` summary line, plus `RUSAGE_CHILDREN` of this script), and the ratio of
peak RSS on an 8x corpus to the 1x corpus (streaming: should stay near 1). Then the peak RSS
of a job on one line of `--long_line_mb` MB (10: ~2.2M tokens, which the tests' ten-megabyte
line case runs too): hundreds of MB, not the GB that copies of the line's tokens would take.

The reference needs TF1 APIs: its `create_pretraining_data.py` and `tokenization.py` (which
must sit beside it) are copied to a temporary directory with `import tensorflow.compat.v1 as
tf` and `tf.disable_v2_behavior()` shims. The original is not part of this repository.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import resource
import shutil
import sys
import tempfile
from typing import Dict, List, Optional

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # bert_tf, when the package is not installed
sys.path.insert(0, str(REPO / "benchmarks" / "common"))  # machine, measure
sys.path.insert(0, str(REPO / "benchmarks" / "data"))  # the other data benchmarks
import machine  # noqa: E402
import measure  # noqa: E402

SHARED = REPO.parent / "shared" / "data"
DEFAULT_CORPUS = SHARED / "wikitext2" / "wiki.valid+test.bert.txt"
DEFAULT_VOCAB = SHARED / "vocab" / "bert-base-uncased-vocab.txt"


def scaled_corpus(src: pathlib.Path, scale: int, tmp: pathlib.Path) -> pathlib.Path:
    """The corpus concatenated `scale` times (documents stay separated by a blank line)."""
    if scale == 1:
        return src
    text = src.read_bytes()
    if not text.endswith(b"\n\n"):
        text = text.rstrip(b"\n") + b"\n\n"
    out = tmp / f"corpus-x{scale}.txt"
    out.write_bytes(text * scale)
    return out


def long_line_corpus(src: pathlib.Path, megabytes: float, tmp: pathlib.Path) -> pathlib.Path:
    """40 lines of `src`, one line of `megabytes` MB (its first 400 lines' words, repeated)
    as a document of its own, then 40 more lines."""
    lines = [x for x in src.read_text(encoding="utf-8").splitlines() if x.strip()]
    words = " ".join(lines[:400])
    size = int(megabytes * 1e6)
    line = (words + " ") * (size // (len(words) + 1) + 1)
    out = tmp / f"long-line-{megabytes:g}mb.txt"
    out.write_text("\n".join(lines[:40]) + "\n\n" + line[:size] + "\n\n"
                   + "\n".join(lines[40:80]) + "\n", encoding="utf-8")
    return out


def run_timed(cmd: List[str], env: Optional[Dict[str, str]] = None) -> Dict[str, object]:
    """Runs one job in a fresh process; returns wall time, output and child peak RSS."""
    m = measure.run_job(cmd, str(REPO), env)
    return {"wall": m.wall, "child_peak_mb": m.peak_mb, "cpu": m.cpu, "log": m.stderr}


def run_ours(corpus: pathlib.Path, vocab: pathlib.Path, out: pathlib.Path, args,
             extra: Optional[List[str]] = None) -> Dict[str, object]:
    cmd = [sys.executable, "-m", "data_tools.create_pretraining_data",
           f"--input_file={corpus}", f"--output_file={out}", f"--vocab_file={vocab}",
           f"--dupe_factor={args.dupe_factor}", f"--num_workers={args.num_workers}",
           "--log_examples=0", "--progress_seconds=0"] + (extra or [])
    res = run_timed(cmd)
    log = str(res["log"])
    m = re.search(r"wrote (\d+) instances", log)
    res["instances"] = int(m.group(1)) if m else 0
    m = re.search(r"peak RSS: main process (\d+) MB, largest worker (\d+) MB", log)
    if m:
        res["main_peak_mb"], res["worker_peak_mb"] = float(m.group(1)), float(m.group(2))
    m = re.search(r"statistics: (.*)", log)
    res["stats"] = m.group(1) if m else ""
    res["bytes"] = out.stat().st_size
    return res


def prepare_reference(script: pathlib.Path, tmp: pathlib.Path) -> pathlib.Path:
    """A TF2-runnable temporary copy of the original script and its tokenization.py."""
    tok = script.parent / "tokenization.py"
    if not script.is_file() or not tok.is_file():
        sys.exit(f"--reference_script: need {script} and {tok}")
    ref = tmp / "reference"
    ref.mkdir()
    shim = "import tensorflow.compat.v1 as tf\ntf.disable_v2_behavior()\n"
    for src in (script, tok):
        text = src.read_text(encoding="utf-8")
        text = text.replace("import tensorflow as tf\n", shim)
        (ref / src.name).write_text(text, encoding="utf-8")
    return ref / script.name


def run_reference(script: pathlib.Path, corpus: pathlib.Path, vocab: pathlib.Path,
                  out: pathlib.Path, args) -> Dict[str, object]:
    cmd = [sys.executable, str(script), f"--input_file={corpus}", f"--output_file={out}",
           f"--vocab_file={vocab}", f"--dupe_factor={args.dupe_factor}"]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    res = run_timed(cmd, env)
    m = re.search(r"Wrote (\d+) total instances", str(res["log"]))
    res["instances"] = int(m.group(1)) if m else 0
    res["bytes"] = out.stat().st_size
    return res


def reference_stats(path: pathlib.Path, max_seq_length: int = 128) -> str:
    """The statistics line of `chunk_records.InstanceStats` computed from a TFRecord file."""
    import tensorflow as tf

    from bert_tf.core import schema

    spec = schema.parsing_spec(max_seq_length, 20)
    n = tokens = maskable = short = preds = rand = 0
    for batch in tf.data.TFRecordDataset(str(path)).batch(4096).map(
            lambda x: tf.io.parse_example(x, spec)):
        mask = batch["input_mask"].numpy()
        ids = batch["input_ids"].numpy()
        lengths = mask.sum(1)
        n += len(lengths)
        tokens += int(lengths.sum())
        short += int((lengths < max_seq_length // 2).sum())
        # Positions of [CLS]/[SEP] are never masked, so the label ids tell specials apart.
        maskable += int(lengths.sum()) - 2 * len(lengths) - int(
            (batch["segment_ids"].numpy().sum(1) > 0).sum())
        preds += int(batch["masked_lm_weights"].numpy().sum())
        rand += int(batch["next_sentence_labels"].numpy().sum())
        del ids
    return (f"mean length {tokens / n:.1f} tokens, {100 * short / n:.1f}% under "
            f"{max_seq_length // 2}, {preds / n:.1f} predictions per instance "
            f"({preds / max(maskable, 1):.3f} of non-special tokens), IsNext "
            f"{100 * (1 - rand / n):.1f}%")


def describe(name: str, res: Dict[str, object]) -> str:
    wall = float(res["wall"])
    text = (f"{name:<10} {wall:7.2f} s wall  {res['instances']:>8} instances  "
            f"{res['instances'] / wall:9.0f} inst/s  {res['bytes'] / 1e6 / wall:6.1f} MB/s out "
            f"({res['bytes'] / 1e6:.1f} MB)  cpu {res['cpu']:.1f} s  peak RSS: largest "
            f"process {res['child_peak_mb']:.0f} MB")
    if "main_peak_mb" in res:
        text += f" (main {res['main_peak_mb']:.0f} MB, worker {res['worker_peak_mb']:.0f} MB)"
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=pathlib.Path, default=DEFAULT_CORPUS)
    parser.add_argument("--vocab", type=pathlib.Path, default=DEFAULT_VOCAB)
    parser.add_argument("--scale", type=int, default=1, help="concatenate the corpus N times")
    parser.add_argument("--dupe_factor", type=int, default=5)
    parser.add_argument("--num_workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=1, help="runs of ours (best is shown)")
    parser.add_argument("--reference_script", type=pathlib.Path, default=None)
    parser.add_argument("--skip_memory", action="store_true",
                        help="skip the 1x vs 8x peak-RSS comparison and the long line")
    parser.add_argument("--long_line_mb", type=float, default=10.0,
                        help="MB of the one-line document whose peak RSS is printed (0: none)")
    args = parser.parse_args()
    if not args.corpus.is_file():
        args.corpus = REPO / "data" / "corpus" / "wikitext2.bert.txt"
    if not args.vocab.is_file():
        sys.exit(f"vocab not found: {args.vocab}")
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="bench_cpd_"))
    try:
        corpus = scaled_corpus(args.corpus, args.scale, tmp)
        print(machine.describe())
        print(f"corpus {corpus.stat().st_size / 1e6:.1f} MB (x{args.scale}), dupe_factor "
              f"{args.dupe_factor}, {args.num_workers} worker(s), {os.cpu_count()} cores; "
              f"load average {os.getloadavg()[0]:.1f}")
        runs = [run_ours(corpus, args.vocab, tmp / "ours.tfrecord", args)
                for _ in range(args.repeats)]
        ours = min(runs, key=lambda r: float(r["wall"]))
        print(describe("ours", ours))
        print(f"           statistics: {ours['stats']}")
        if args.reference_script:
            script = prepare_reference(args.reference_script.resolve(), tmp)
            ref = run_reference(script, corpus, args.vocab, tmp / "ref.tfrecord", args)
            print(describe("original", ref))
            print(f"           statistics: {reference_stats(tmp / 'ref.tfrecord')}")
            print(f"speed-up: {float(ref['wall']) / float(ours['wall']):.1f}x wall "
                  f"(same machine, same run)")
        if not args.skip_memory:
            one = scaled_corpus(args.corpus, 1, tmp)
            eight = scaled_corpus(args.corpus, 8, tmp)
            r1 = run_ours(one, args.vocab, tmp / "m1.tfrecord", args)
            r8 = run_ours(eight, args.vocab, tmp / "m8.tfrecord", args)
            for key in ("child_peak_mb", "main_peak_mb", "worker_peak_mb"):
                if key in r1 and key in r8:
                    print(f"peak RSS 8x/1x corpus ({key}): {r8[key]:.0f} / {r1[key]:.0f} MB "
                          f"= {float(r8[key]) / float(r1[key]):.2f}")
            if args.long_line_mb > 0:
                long = long_line_corpus(args.corpus, args.long_line_mb, tmp)
                res = run_ours(long, args.vocab, tmp / "long.tfrecord", args)
                print(f"one line of {args.long_line_mb:g} MB: peak RSS main "
                      f"{res.get('main_peak_mb', float('nan')):.0f} MB, largest worker "
                      f"{res.get('worker_peak_mb', float('nan')):.0f} MB, largest process "
                      f"{res['child_peak_mb']:.0f} MB; {res['instances']} instances, "
                      f"{float(res['wall']):.1f} s wall")
            print(f"self (benchmark) RUSAGE_CHILDREN peak: "
                  f"{resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024:.0f} MB")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
