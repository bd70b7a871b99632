"""Apache Beam's DirectRunner against the local runner on the same jobs: time, MB/s per worker.

create_pretraining_data (dupe_factor 10, 128 tokens, 4 shards) and prepare_corpus (--dedup, 4
shards) run on the bundled corpus repeated --repeat times, with the local runner and with
`--runner=DirectRunner --direct_running_mode=multi_processing`, for each worker count. Every
Beam run is checked byte for byte against the local run. Beside wall-clock MB/s, MB per
CPU-second (this process and its workers) shows the overhead when other jobs share the cores.

    python benchmarks/data/bench_beam.py [--repeat=2] [--workers=1,2]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks", "common"))  # machine, measure
os.environ["PYTHONPATH"] = ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")  # workers

import measure  # noqa: E402
from absl import logging  # noqa: E402
from machine import describe  # noqa: E402

from data_tools.prepare import beam_prepare, prepare_job  # noqa: E402
from data_tools.prepare.prepare_config import PrepareConfig  # noqa: E402
from data_tools.pretraining_data import beam_create, create_job  # noqa: E402
from data_tools.pretraining_data.create_config import CreateConfig  # noqa: E402


def _shards(paths):
    return [open(p, "rb").read() for p in paths]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--corpus", default=os.path.join(ROOT, "data", "corpus",
                                                         "wikitext2.bert.txt"))
    parser.add_argument("--vocab", default=os.path.join(
        ROOT, "..", "shared", "data", "vocab", "bert-base-uncased-vocab.txt"))
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--workers", default="1,2")
    args = parser.parse_args()
    logging.set_verbosity(logging.WARNING)
    workers = [int(w) for w in args.workers.split(",")]
    print(describe())
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "corpus.txt")
        text = open(args.corpus, "rb").read().rstrip(b"\n") + b"\n\n"
        with open(src, "wb") as f:
            f.write(text * args.repeat)
        mb = os.path.getsize(src) / 1e6
        print(f"input: {mb:.1f} MB ({args.repeat} x {os.path.basename(args.corpus)})")

        def jobs(name, n, beam):
            outs = tuple(os.path.join(tmp, name, f"{'beam' if beam else 'local'}{n}-{i}")
                         for i in range(4))
            if name == "create":
                config = CreateConfig(input_files=(src,), output_files=outs,
                                      vocab_file=args.vocab, num_workers=n,
                                      log_examples=0, progress_seconds=0)
                run = ((lambda: beam_create.run(config, options(n))) if beam
                       else (lambda: create_job.run(config)))
            else:
                config = PrepareConfig(input_files=(src,), output_files=outs,
                                       dedup=True, num_workers=n,
                                       progress_seconds=0)
                run = ((lambda: beam_prepare.run(config, options(n))) if beam
                       else (lambda: prepare_job.run(config)))
            return outs, run

        def options(n):
            return (f"--runner=DirectRunner --direct_num_workers={n} "
                    "--direct_running_mode=multi_processing")

        print(f"{'job':<26}{'workers':>8}{'local s':>9}{'Beam s':>9}{'local MB/s/w':>14}"
              f"{'Beam MB/s/w':>13}{'Beam/local':>11}{'MB/CPU-s l/B':>15}  identical")
        for name in ("create", "prepare"):
            for n in workers:
                local_out, local_run = jobs(name, n, False)
                beam_out, beam_run = jobs(name, n, True)
                _, lw, lc = measure.timed(local_run)
                _, bw, bc = measure.timed(beam_run)
                same = _shards(local_out) == _shards(beam_out)
                label = ("create_pretraining_data" if name == "create" else "prepare_corpus")
                print(f"{label:<26}{n:>8}{lw:>9.1f}{bw:>9.1f}{mb / lw / n:>14.2f}"
                      f"{mb / bw / n:>13.2f}{bw / lw:>11.2f}"
                      f"{mb / lc:>8.2f}/{mb / bc:<6.2f}  {same}")


if __name__ == "__main__":
    main()
