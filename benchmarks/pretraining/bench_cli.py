"""The command users run against the bare trainer: steady-state examples/s, side by side.

    python benchmarks/pretraining/bench_cli.py  # BERT-Small, seq 128, batch 32, 20 preds
    python benchmarks/pretraining/bench_cli.py --model mini  # quicker

Three contenders, each in a fresh process per round, rounds interleaved so they share the
background load of a shared machine:

  cli      `python -m bert_tf.run_pretraining` with its default loop and input settings, on
           TFRecords that `data_tools.create_pretraining_data` wrote from the bundled corpus.
           Timed between its progress lines (from the line after `--skip` steps to the
           last), as they arrive, so everything the command does between steps counts.
  trainer  the bare `bert_tf.training` Trainer on one in-memory batch repeated (what
           benchmarks/pretraining/bench_pretraining.py times): `--steps` steps in one loop call.
  trainer_records
           the same Trainer on the same TFRecords through `pretraining_dataset_fn`, in one loop
           call: separates the input pipeline's cost from the command's.

Prints examples per wall-clock second and per CPU second (user + system time of the whole
process, all threads: on a shared machine the CPU figure moves far less with the load than
the wall one) per round, and the median ratios to the bare trainer. Figures are printed,
never asserted.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks", "common"))  # machine, measure
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from machine import describe  # noqa: E402

SIZES = {"tiny": "bert_config_tiny.json", "mini": "bert_config_mini.json",
         "small": "bert_config_small.json", "base": "bert_config_base.json"}
CORPUS = os.path.join(ROOT, "data", "corpus", "wikitext2.bert.txt")
VOCABS = [os.path.join(ROOT, "data", "vocab", "bert-base-uncased-vocab.txt"),
          os.path.join(ROOT, "..", "shared", "data", "vocab", "bert-base-uncased-vocab.txt")]
# absl's line prefix: I1123 08:27:00.123456 ... then the progress line.
PROGRESS = re.compile(r"^[IWE](\d{4} \d\d:\d\d:\d\d\.\d{6}) .*\] step (\d+)/\d+ \|")


def make_records(work: str, seq: int, preds: int) -> str:
    vocab = next(p for p in VOCABS if os.path.exists(p))
    pattern = os.path.join(work, "data", "train-{shard}.tfrecord")
    subprocess.run(
        [sys.executable, "-m", "data_tools.create_pretraining_data", f"--input_file={CORPUS}",
         f"--output_file={pattern}", "--num_output_shards=4", f"--vocab_file={vocab}",
         "--do_lower_case=true", f"--max_seq_length={seq}", f"--max_predictions_per_seq={preds}",
         "--dupe_factor=1", "--random_seed=1"], cwd=ROOT, check=True, capture_output=True)
    return os.path.join(work, "data", "train-*.tfrecord")


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process, all its threads (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_cli(args, config: str, records: str, work: str) -> tuple:
    """(examples per wall second, examples per CPU second) of the command's steady state.

    Timed between its progress lines after `--skip` steps: wall time from the moment each
    line arrives, CPU time of the whole process (all threads) read at the same moment.
    """
    out = tempfile.mkdtemp(dir=work)
    total = args.skip + args.steps
    cmd = [sys.executable, "-m", "bert_tf.run_pretraining", f"--bert_config_file={config}",
           f"--input_file={records}", f"--output_dir={out}", "--do_train=true",
           f"--max_seq_length={args.seq}", f"--max_predictions_per_seq={args.preds}",
           f"--train_batch_size={args.batch}", f"--num_train_steps={total}",
           "--num_warmup_steps=1", f"--save_checkpoints_steps={total}",
           f"--log_every_n_steps={args.log_every}"] + args.cli_flags
    proc = subprocess.Popen(cmd, cwd=ROOT, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            text=True)
    points, tail = [], []
    for line in proc.stderr:
        tail = (tail + [line])[-50:]
        m = PROGRESS.match(line)
        if m:
            points.append((int(m.group(2)), time.monotonic(), _cpu_seconds(proc.pid)))
    if proc.wait() != 0:
        sys.exit("run_pretraining failed:\n" + "".join(tail))
    later = [p for p in points if p[0] >= args.skip]
    if len(later) < 2:
        sys.exit(f"too few progress lines after step {args.skip}: {points}")
    (s0, t0, c0), (s1, t1, c1) = later[0], later[-1]
    examples = (s1 - s0) * args.batch
    return examples / (t1 - t0), examples / (c1 - c0)


def run_trainer(args, config: str, records: str, work: str, real_input: bool) -> float:
    """In a child process (this script with --child): the bare Trainer's loop call."""
    cmd = [sys.executable, __file__, "--child", "records" if real_input else "memory",
           "--config", config, "--records", records, "--work", work] + [
        f"--{k}={getattr(args, k)}" for k in ("seq", "preds", "batch", "steps", "skip")]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"trainer child failed:\n{proc.stderr[-3000:]}")
    wall, cpu = proc.stdout.split()[-2:]
    return float(wall), float(cpu)


def child(args) -> None:
    import numpy as np
    import tensorflow as tf

    from bert_tf.data.input_config import InputConfig
    from bert_tf.modeling.config import BertConfig
    from bert_tf.modeling.pretraining_model import BertPretrainingModel
    from bert_tf.training import optimization, trainer

    bert_config = BertConfig.from_json_file(args.config)
    cfg = trainer.TrainerConfig(output_dir=tempfile.mkdtemp(dir=args.work),
                                train_batch_size=args.batch, num_train_steps=10**6,
                                steps_per_loop=args.steps)
    t = trainer.Trainer(
        cfg, tf.distribute.get_strategy(),
        model_fn=lambda: BertPretrainingModel(bert_config),
        optimizer_fn=lambda: optimization.create_optimizer(optimization.OptimizerConfig(
            learning_rate=1e-4, num_train_steps=10**6, num_warmup_steps=1)))
    if args.child == "records":
        dataset_fn = trainer.pretraining_dataset_fn(InputConfig(
            input_patterns=args.records, batch_size=args.batch, max_seq_length=args.seq,
            max_predictions_per_seq=args.preds, vocab_size=bert_config.vocab_size,
            is_training=True))
    else:
        from bench_pretraining import synthetic_batch

        data = synthetic_batch(args.batch, args.seq, args.preds, bert_config.vocab_size)
        dataset_fn = lambda context, batch: tf.data.Dataset.from_tensors(data).repeat()  # noqa
    iterator = iter(t.distribute_dataset(dataset_fn, args.batch))
    loop = t.steps.train_loop
    np.asarray(loop(iterator, tf.constant(args.skip))[0])  # compile + warm up
    start, cpu = time.perf_counter(), time.process_time()
    np.asarray(loop(iterator, tf.constant(args.steps))[0])
    examples = args.steps * args.batch
    print(examples / (time.perf_counter() - start), examples / (time.process_time() - cpu))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(SIZES), default="small")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--preds", type=int, default=20)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per round")
    parser.add_argument("--skip", type=int, default=3, help="untimed steps first")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--log_every", type=int, default=5,
                        help="the command's --log_every_n_steps (its progress lines time it)")
    parser.add_argument("--cli_flags", nargs="*", default=[],
                        help="extra run_pretraining flags, e.g. --steps_per_loop=10")
    parser.add_argument("--child", choices=["memory", "records"])
    parser.add_argument("--config")
    parser.add_argument("--records")
    parser.add_argument("--work")
    args = parser.parse_args()
    if args.child:
        child(args)
        return

    print(describe())
    print(f"BERT-{args.model}, seq {args.seq}, batch {args.batch}, {args.preds} predictions; "
          f"{args.steps} timed steps after {args.skip}; cli flags {args.cli_flags or 'default'}")
    config = os.path.join(ROOT, "configs", SIZES[args.model])
    with tempfile.TemporaryDirectory() as work:
        records = make_records(work, args.seq, args.preds)
        rates = {"cli": [], "trainer": [], "trainer_records": []}
        for r in range(args.rounds):
            rates["trainer"].append(run_trainer(args, config, records, work, False))
            rates["cli"].append(run_cli(args, config, records, work))
            rates["trainer_records"].append(run_trainer(args, config, records, work, True))
            print(f"round {r + 1}: " + ", ".join(
                f"{k} {v[-1][0]:.2f} (per CPU-s {v[-1][1]:.2f})" for k, v in rates.items())
                + " examples/s", flush=True)
    for i, what in ((0, "wall"), (1, "CPU")):
        print(f"-- examples per {what} second (median of rounds; best)")
        for key, values in rates.items():
            column = [v[i] for v in values]
            print(f"{key:16s} {statistics.median(column):7.2f}  (best {max(column):.2f})")
        for key in ("cli", "trainer_records"):
            ratios = [a[i] / b[i] for a, b in zip(rates[key], rates["trainer"])]
            print(f"{key} / trainer: {statistics.median(ratios):.3f} (rounds: "
                  + ", ".join(f"{x:.3f}" for x in ratios) + ")")


if __name__ == "__main__":
    main()
