"""Fine-tuning speed of Hugging Face transformers (PyTorch CPU) on MiniLM-L6: examples/s.

    bash benchmarks/common/hf_env.sh  # once
    benchmarks/.hf-venv/bin/python benchmarks/finetuning/bench_finetune_speed_hf.py

The HF side of the fine-tuning speed comparison: `BertForSequenceClassification` built from
the all-MiniLM-L6-v2 config (6 layers, hidden 384, 12 heads), seq 128, batch 32, random ids,
2 labels, train mode (dropout 0.1), one step = forward + backward + grad-norm clip 1.0 +
`torch.optim.AdamW` (eps 1e-6, weight decay 0.01) + linear LR schedule, exactly what
benchmarks/common/hf_finetune.py does per step. Each variant (below) runs `--rounds` times, the
variants taking turns, each time in a fresh process: `--warmup` untimed steps, then `--steps`
timed steps. The best round and the median are printed (the machine may be shared, and
background load only ever slows a round down). Beside them, examples per
`--threads` CPU-seconds of this process: an estimate of the idle-machine rate when other
jobs take cores away.

CPU ISA caps are read when torch loads, hence a process per variant and round. torch does
not use oneDNN for float32 Linear/matmul on CPU (ONEDNN_VERBOSE=1 shows no oneDNN call for a
Linear forward + backward; MKL sgemm does them), so `ONEDNN_MAX_CPU_ISA=AVX2` alone changes
nothing. The equivalent cap for torch is `ATEN_CPU_CAPABILITY=avx2` (ATen's own vectorised
kernels: GELU, softmax, LayerNorm, AdamW's foreach ops) plus `MKL_ENABLE_INSTRUCTIONS=AVX2`
for the GEMMs (on this AMD CPU MKL's sgemm ran at the same speed with and without it).
Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "common")]  # machine, minilm

import machine  # noqa: E402
from minilm import minilm_dir  # noqa: E402

VARIANTS = {
    "default": {},
    "onednn-avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2"},
    "all-avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2",
                 "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
}


def measure(seq: int, batch: int, warmup: int, steps: int, rounds: int, threads: int) -> dict:
    """Times training steps in this process; returns examples/s per round and torch facts."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    config = BertConfig.from_pretrained(minilm_dir(), num_labels=2)
    model = BertForSequenceClassification(config)  # weights do not matter for speed
    model.train()
    no_decay = [p for n, p in model.named_parameters() if n.endswith("bias") or "LayerNorm" in n]
    decay = [p for n, p in model.named_parameters() if not (n.endswith("bias") or "LayerNorm" in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": no_decay, "weight_decay": 0.0}], lr=5e-5, eps=1e-6)
    total = warmup + steps * rounds
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(0.0, 1.0 - s / total))
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(1000, config.vocab_size, (batch, seq), generator=gen)
    mask = torch.ones(batch, seq, dtype=torch.long)
    types = torch.zeros(batch, seq, dtype=torch.long)
    labels = torch.randint(0, 2, (batch,), generator=gen)

    def step():
        out = model(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(warmup):
        step()
    rates, cpu_rates = [], []
    for _ in range(rounds):
        start, cpu = time.perf_counter(), time.process_time()
        for _ in range(steps):
            step()
        rates.append(batch * steps / (time.perf_counter() - start))
        # Examples per (threads x CPU-second): roughly the rate of an otherwise idle machine
        # (OpenMP threads that spin while waiting for a descheduled peer make it a low bound).
        cpu_rates.append(batch * steps * threads / (time.process_time() - cpu))
    return {"rates": rates, "cpu_rates": cpu_rates, "torch": torch.__version__,
            "capability": torch.backends.cpu.get_cpu_capability(),
            "threads": torch.get_num_threads()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5, help="steps per timed round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--variants", default="default,onednn-avx2,all-avx2",
                        help=f"comma-separated, from {sorted(VARIANTS)}")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:  # one variant, env already set by the parent; print JSON for it
        print(json.dumps(measure(args.seq, args.batch, args.warmup, args.steps, args.rounds,
                                 args.threads)))
        return
    print(machine.describe())
    print(f"HF BertForSequenceClassification (MiniLM-L6-H384), seq {args.seq}, batch "
          f"{args.batch}, {args.threads} threads, fwd+bwd+clip+AdamW; per variant and round a "
          f"fresh process: {args.warmup} warm-up steps, then {args.steps} timed steps; the "
          f"variants take turns ({args.rounds} rounds) so that they share the background load")
    names = args.variants.split(",")
    results = {name: {"rates": [], "cpu_rates": []} for name in names}
    for _ in range(args.rounds):
        for name in names:
            env = dict(os.environ)
            for key in ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS"):
                env.pop(key, None)  # each variant states its caps in full
            env.update(VARIANTS[name])
            cmd = [sys.executable, os.path.abspath(__file__), "--child", "--rounds=1"] + [
                f"--{k}={getattr(args, k)}" for k in ("seq", "batch", "warmup", "steps",
                                                       "threads")]
            out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
            res = json.loads(out.stdout.strip().splitlines()[-1])
            results[name]["rates"] += res["rates"]
            results[name]["cpu_rates"] += res["cpu_rates"]
            results[name].update(torch=res["torch"], capability=res["capability"])
    for name in names:
        res = results[name]
        caps = " ".join(f"{k}={v}" for k, v in VARIANTS[name].items()) or "(no caps)"
        print(f"  {name:12s} {caps:80s} torch {res['torch']} capability "
              f"{res['capability']}: best {max(res['rates']):6.1f} ex/s, median "
              f"{statistics.median(res['rates']):6.1f} ex/s; per {args.threads} CPU-s: "
              f"{max(res['cpu_rates']):6.1f} ex/s")
    print(f"load average after: {os.getloadavg()[0]:.1f} (a busy machine lowers wall-clock "
          "figures; the CPU-second figure estimates an idle one)")

if __name__ == "__main__":
    main()
