"""The command users run against the bare trainer: steady-state examples/s, side by side.

    python benchmarks/bench_cli.py                  # BERT-Small, seq 128, batch 32, 20 preds
    python benchmarks/bench_cli.py --model mini     # quicker

Three contenders, each in a fresh process per round, rounds interleaved so they share the
background load of a shared machine:

  cli      `python -m bert_tf.run_pretraining` with its default loop and input settings, on
           TFRecords that `data_tools.create_pretraining_data` wrote from the bundled corpus.
           Its rate is taken from the wall-clock timestamps of its own progress lines
           (examples between the line after `--skip` steps and the last line, over the time
           between them), so everything the command does between steps is counted.
  trainer  the bare `bert_tf.training` Trainer on one in-memory batch repeated (what
           benchmarks/bench_pretraining.py times): `--steps` steps in one loop call.
  trainer_records
           the same Trainer on the same TFRecords through `pretraining_dataset_fn`, in one loop
           call: separates the input pipeline's cost from the command's.

Prints examples/s per round and the median ratio cli / trainer. Figures are printed, never
asserted.
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
from datetime import datetime

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
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


def run_cli(args, config: str, records: str, work: str) -> float:
    out = tempfile.mkdtemp(dir=work)
    total = args.skip + args.steps
    cmd = [sys.executable, "-m", "bert_tf.run_pretraining", f"--bert_config_file={config}",
           f"--input_file={records}", f"--output_dir={out}", "--do_train=true",
           f"--max_seq_length={args.seq}", f"--max_predictions_per_seq={args.preds}",
           f"--train_batch_size={args.batch}", f"--num_train_steps={total}",
           "--num_warmup_steps=1", f"--save_checkpoints_steps={total}",
           f"--log_every_n_steps={args.log_every}"] + args.cli_flags
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"run_pretraining failed:\n{proc.stderr[-3000:]}")
    year = datetime.now().year
    points = []
    for line in proc.stderr.splitlines():
        m = PROGRESS.match(line)
        if m:
            when = datetime.strptime(f"{year}{m.group(1)}", "%Y%m%d %H:%M:%S.%f")
            points.append((int(m.group(2)), when.timestamp()))
    later = [(s, t) for s, t in points if s >= args.skip]
    if len(later) < 2:
        sys.exit(f"too few progress lines after step {args.skip}: {points}")
    (s0, t0), (s1, t1) = later[0], later[-1]
    return (s1 - s0) * args.batch / (t1 - t0)


def run_trainer(args, config: str, records: str, work: str, real_input: bool) -> float:
    """In a child process (this script with --child): the bare Trainer's loop call."""
    cmd = [sys.executable, __file__, "--child", "records" if real_input else "memory",
           "--config", config, "--records", records, "--work", work] + [
        f"--{k}={getattr(args, k)}" for k in ("seq", "preds", "batch", "steps", "skip")]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"trainer child failed:\n{proc.stderr[-3000:]}")
    return float(proc.stdout.split()[-1])


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
    start = time.perf_counter()
    np.asarray(loop(iterator, tf.constant(args.steps))[0])
    print(args.steps * args.batch / (time.perf_counter() - start))


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
            print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.2f}" for k, v in rates.items())
                  + " examples/s", flush=True)
    ratios = [c / t for c, t in zip(rates["cli"], rates["trainer"])]
    ratios_records = [c / t for c, t in zip(rates["trainer_records"], rates["trainer"])]
    for key, values in rates.items():
        print(f"{key:16s} median {statistics.median(values):7.2f} examples/s "
              f"(best {max(values):.2f})")
    print(f"cli / trainer             {statistics.median(ratios):.3f} (rounds: "
          + ", ".join(f"{x:.3f}" for x in ratios) + ")")
    print(f"trainer_records / trainer {statistics.median(ratios_records):.3f}")


if __name__ == "__main__":
    main()
