"""Does pretraining help? The README main job's model fine-tuned vs the same model from scratch.

    bash scripts/run_main.sh                      # writes out/pretrain and out/vocab.txt
    python benchmarks/common/finetune_subsets.py --output_dir /tmp/ft_bench
    .venv/bin/python benchmarks/finetuning/bench_pretraining_helps.py --main_out=out \\
        --data_dir=/tmp/ft_bench/sst2_8k --seeds=1,2,3

Fine-tunes the main job's L-4/H-128 BERT (1,000 steps on 2 MB of WikiText, 8k vocab) on an
SST-2 subset (the README's figures: the 8,000 sentences of sst2_8k, seq 64, lr 3e-4, 3
epochs, batch 32: the defaults) with `bert_tf.run_classifier`, and the same architecture
and vocabulary from random weights with the same recipe, for each seed; prints dev accuracy
per run and the mean and standard deviation of each arm, with the CPU model.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import subprocess
import sys
import tempfile

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks" / "common"))  # machine
import machine  # noqa: E402


def run(main_out: pathlib.Path, data_dir: str, seed: int, pretrained: bool, args) -> float:
    out = tempfile.mkdtemp(prefix=f"helps_{'pre' if pretrained else 'rand'}_{seed}_")
    cmd = [sys.executable, "-m", "bert_tf.run_classifier", "--task_name=sst2",
           f"--data_dir={data_dir}", f"--vocab_file={main_out / 'vocab.txt'}",
           f"--bert_config_file={main_out / 'pretrain' / 'bert_config.json'}",
           f"--output_dir={out}", "--do_train", "--do_eval", f"--seed={seed}",
           f"--max_seq_length={args.max_seq_length}", f"--learning_rate={args.learning_rate}",
           f"--num_train_epochs={args.epochs}", f"--train_batch_size={args.batch_size}",
           "--eval_batch_size=64", "--log_every_n_steps=1000"]
    if pretrained:
        cmd.append(f"--init_checkpoint={main_out / 'pretrain'}")
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO,
                       env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    if p.returncode:
        sys.exit(p.stderr[-3000:])
    return float(re.search(r"eval_accuracy = ([0-9.]+)", p.stdout).group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--main_out", type=pathlib.Path, default=REPO / "out")
    parser.add_argument("--data_dir", required=True, help="GLUE SST-2 layout (train/dev.tsv)")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--max_seq_length", type=int, default=64)
    parser.add_argument("--learning_rate", type=float, default=3e-4)
    parser.add_argument("--epochs", type=float, default=3)
    parser.add_argument("--batch_size", type=int, default=32)
    args = parser.parse_args()
    print(machine.describe())
    print(f"SST-2 subset {args.data_dir}: seq {args.max_seq_length}, lr {args.learning_rate}, "
          f"{args.epochs} epochs, batch {args.batch_size}")
    seeds = [int(s) for s in args.seeds.split(",")]
    arms = {}
    for pretrained in (True, False):
        name = "pretrained (main job)" if pretrained else "random init"
        accs = [run(args.main_out, args.data_dir, s, pretrained, args) for s in seeds]
        arms[name] = accs
        print(f"{name:<22} " + " ".join(f"{a:.4f}" for a in accs), flush=True)
    for name, accs in arms.items():
        print(f"{name:<22} dev accuracy {100 * np.mean(accs):.2f} ± {100 * np.std(accs):.2f} "
              f"(mean ± std over {len(accs)} seeds)")


if __name__ == "__main__":
    main()
