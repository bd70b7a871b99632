"""When an XLA-compiled optimizer update pays: graph mode beside XLA, by model size.

    .venv/bin/python benchmarks/pretraining/bench_xla_optimizer.py [--steps=40] [--rounds=3]

The trainer compiles the AdamW update with XLA only in runs planned for at least
`train_loop.XLA_OPTIMIZER_MIN_STEPS` steps. This prints what that rule rests on. For BERT
shapes from the test suite's tiny model up to BERT-Small, sequence
classification at seq 128, batch 32, it runs the real Trainer step
(`Trainer.steps.train_loop`) with the update in graph mode and XLA-compiled, each in a child
process of its own, and prints:

- the first call (tracing, graph optimisation and, for XLA, the compile), in seconds;
- the best steady step time over --rounds rounds of --steps steps, in ms;
- the break-even run length: the steps after which XLA's saving per step has paid for its
  longer first call ("never" when XLA is not faster per step).

Rounds alternate between the two modes so that both see the same background load. Run as the
machine is, and capped to AVX2 (ONEDNN_MAX_CPU_ISA=AVX2).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
HERE = REPO / "benchmarks" / "pretraining"
sys.path.insert(0, str(REPO / "benchmarks" / "common"))
sys.path.insert(0, str(REPO))
import machine  # noqa: E402
import measure as measure_lib  # noqa: E402

# name: (vocab, layers, hidden); heads = hidden / 64 (at least 2), intermediate = 4 x hidden.
SHAPES = {
    "test tiny L-2/H-64, vocab 8k": (8000, 2, 64),
    "L-2/H-128, vocab 30k": (30522, 2, 128),
    "main job L-4/H-128, vocab 8k": (8192, 4, 128),
    "BERT-Mini L-4/H-256, vocab 16k": (16384, 4, 256),
    "BERT-Mini L-4/H-256, vocab 30k": (30522, 4, 256),
    "BERT-Small L-4/H-512, vocab 30k": (30522, 4, 512),
}
CAPS = {"as is": {}, "AVX2 cap": {"ONEDNN_MAX_CPU_ISA": "AVX2"}}
SEQ, BATCH = 128, 32


def child(vocab: int, layers: int, hidden: int, xla: bool, steps: int) -> dict:
    """Times one mode in this process: its first call, then one round of `steps` steps."""
    import numpy as np
    from classifier_steps import classifier_step_timer

    from bert_tf.modeling.config import BertConfig

    config = BertConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=max(2, hidden // 64),
                        intermediate_size=4 * hidden, max_position_embeddings=SEQ)
    t, run = classifier_step_timer(config, BATCH, SEQ, xla_optimizer=xla)
    assert t.steps.xla_optimizer == xla
    first = run(1)
    run(2)  # the second call can still allocate
    parameters = sum(int(np.prod(v.shape)) for v in t.model.trainable_variables)
    return {"first": first, "step": run(steps) / steps, "parameters": parameters}


def measure(shape, xla: bool, steps: int, env: dict) -> dict:
    cmd = [sys.executable, str(HERE / "bench_xla_optimizer.py"),
           f"--child={','.join(map(str, shape))},{int(xla)}", f"--steps={steps}"]
    return measure_lib.child_json(cmd, env, REPO)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shapes", default="", help="comma-separated indices into SHAPES")
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        vocab, layers, hidden, xla = map(int, args.child.split(","))
        print(json.dumps(child(vocab, layers, hidden, bool(xla), args.steps)))
        return
    from bert_tf.training.train_loop import XLA_OPTIMIZER_MIN_STEPS

    print(machine.describe())
    print(f"sequence classification, seq {SEQ}, batch {BATCH}; best of {args.rounds} "
          f"alternating rounds of {args.steps} steps; the trainer's rule: XLA in runs of "
          f"{XLA_OPTIMIZER_MIN_STEPS:,} steps or more")
    names = list(SHAPES)
    if args.shapes:
        names = [names[int(i)] for i in args.shapes.split(",")]
    base = {k: v for k, v in os.environ.items() if k != "ONEDNN_MAX_CPU_ISA"}
    base["TF_CPP_MIN_LOG_LEVEL"] = "2"
    for cap, cap_env in CAPS.items():
        print(f"== {cap}")
        print(f"  {'model':34} {'parameters':>11} {'first call s':>15} {'step ms':>15} "
              f"{'break-even':>11}")
        print(f"  {'':34} {'':>11} {'graph':>7} {'XLA':>7} {'graph':>7} {'XLA':>7}")
        for name in names:
            runs = {False: [], True: []}
            for _ in range(args.rounds):
                for xla in (False, True):
                    runs[xla].append(measure(SHAPES[name], xla, args.steps,
                                             dict(base, **cap_env)))
            first = {x: min(r["first"] for r in runs[x]) for x in runs}
            step = {x: min(r["step"] for r in runs[x]) for x in runs}
            parameters = runs[False][0]["parameters"]
            saving = step[False] - step[True]
            even = (f"{max(0.0, first[True] - first[False]) / saving:,.0f}" if saving > 0
                    else "never")
            print(f"  {name:34} {parameters:>11,} {first[False]:7.2f} {first[True]:7.2f} "
                  f"{1000 * step[False]:7.1f} {1000 * step[True]:7.1f} {even:>11}",
                  flush=True)


if __name__ == "__main__":
    main()
