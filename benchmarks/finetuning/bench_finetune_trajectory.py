"""Step-by-step fine-tuning parity with Hugging Face transformers, with the noise taken out.

    bash benchmarks/common/hf_env.sh
    python3 benchmarks/common/finetune_subsets.py --output_dir /tmp/ft_bench
    .venv/bin/python benchmarks/finetuning/bench_finetune_trajectory.py --data_dir=/tmp/ft_bench

Parity of final metrics (bench_finetune_parity.py) is blurred by what a seed decides on each
side: the head's random start, the batch order and the dropout masks. On short recipes
(WNUT-17's earlier 125 updates) those alone moved entity F1 from 0 to 36. This benchmark removes
all three and compares the training itself: for each task, bert_tf's entry point
(`bert_tf.run_classifier` / `run_tagging` / `run_squad`, the real trainer, optimizer,
schedule, clipping and loss) and benchmarks/common/hf_finetune.py (transformers' Bert*For* models,
torch.optim.AdamW) start from the imported MiniLM-L6 encoder, the same head weights
(head.npz) and no dropout, and take the same batches (the rows bert_tf's input pipeline drew,
in its order). It prints both training losses for each of the first --steps updates and the
largest relative difference. Identical training gives differences at float32 round-off
(1e-6 to 1e-5) that grow slowly; a wrong learning rate, bias correction, weight decay set,
clipping or loss normalisation shows at step 2. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[2]
HERE = REPO / "benchmarks" / "finetuning"
COMMON = REPO / "benchmarks" / "common"  # machine, measure, minilm, hf_finetune
sys.path[:0] = [str(HERE), str(COMMON)]
import machine  # noqa: E402
from bench_finetune_parity import HF_PYTHON, METRICS, ours_command  # noqa: E402
from minilm import minilm_dir  # noqa: E402

STEP_LINE = re.compile(r"step (\d+)/\d+ \| loss ([0-9.e+-]+)")


def child(trace_dir: str, argv: list) -> None:
    """bert_tf's side, in this process: fixed head, recorded order, then the entry point."""
    import tensorflow as tf
    from absl import app

    from bert_tf.finetune import inputs
    from bert_tf.finetune.classification.classification_task import ClassificationTask
    from bert_tf.finetune.tagging.tagging_task import TaggingTask

    task_classes = (ClassificationTask, TaggingTask)
    builders = {cls: cls.build_model for cls in task_classes}
    dataset_fn_of = inputs.train_dataset_fn
    steps_text = pathlib.Path(trace_dir, "steps.txt").read_text()

    def flag(name: str) -> str:
        return next(a for a in argv if a.startswith(f"--{name}=")).split("=", 1)[1]

    batch = int(flag("train_batch_size"))

    def build_model(task, config):
        model = builders[type(task)](task, config)
        # BERT's head is one layer (`head`); ELECTRA's has `head_hidden` (dense + GELU) before
        # it. Both start from the same kernels on both sides, biases 0.
        layers = {"kernel": model.head}
        if getattr(model, "head_hidden", None) is not None:
            layers["hidden_kernel"] = model.head_hidden
        rng = np.random.default_rng(0)
        kernels = {}
        for name, layer in layers.items():  # "kernel" first: BERT's draw is unchanged
            if pathlib.Path(trace_dir, "own_head.txt").exists():  # bert_tf's own seeded start
                kernels[name] = layer.kernel.numpy()
            else:
                kernels[name] = (rng.standard_normal(tuple(layer.kernel.shape)) *
                                 config.initializer_range).astype(np.float32)
            layer.kernel.assign(kernels[name])
            layer.bias.assign(np.zeros(tuple(layer.bias.shape), np.float32))
        np.savez(os.path.join(trace_dir, "head.npz"), **kernels)
        return model

    def train_dataset_fn(arrays, keys, seed, trim_keys=()):
        # The rows the real pipeline draws: the same function, fed one more array (the row).
        n = len(arrays["input_ids"])
        # "full": the run's own step count (runner.num_train_steps).
        steps = (int(n / batch * float(flag("num_train_epochs"))) if steps_text == "full"
                 else int(steps_text))
        rows = dataset_fn_of(dict(arrays, trace_row=np.arange(n)), tuple(keys) + (
            "trace_row",), seed, trim_keys)(tf.distribute.InputContext(), batch)
        order = [b["trace_row"].numpy() for b in rows.take(steps)]
        np.save(os.path.join(trace_dir, "order.npy"), np.concatenate(order))
        return dataset_fn_of(arrays, keys, seed, trim_keys)

    for cls in task_classes:
        cls.build_model = build_model
    inputs.train_dataset_fn = train_dataset_fn
    module = {"bert_tf.run_classifier": "run_classifier", "bert_tf.run_tagging": "run_tagging",
              "bert_tf.run_squad": "run_squad"}[argv[0]]
    entry = __import__(f"bert_tf.{module}", fromlist=["main"])
    app.run(entry.main, argv=[argv[0]] + argv[1:])


def model_kind(model_dir: str) -> str:
    """The directory's transformers model_type ("bert" when its config.json has none)."""
    return json.loads(pathlib.Path(model_dir, "config.json").read_text()).get("model_type",
                                                                              "bert")


def trace(task: str, data: pathlib.Path, recipe: dict, steps: int, work: str,
          full: bool = False, dropout: bool = False, seed: int = 1,
          own_head: bool = False, share: str = "both", model_dir: str = "") -> tuple:
    """(bert_tf's losses, transformers' losses) over the first `steps` updates; with `full`,
    over the whole run, followed by both metrics (parity_bench.METRICS order). `model_dir`:
    a Hugging Face BERT or ELECTRA directory (default: MiniLM-L6)."""
    model_dir = model_dir or minilm_dir()
    pathlib.Path(work, "steps.txt").write_text("full" if full else str(steps))
    from bert_tf.interop.formats import read_config

    rates = ((recipe["hidden_dropout_prob"], recipe["attention_probs_dropout_prob"]) if dropout
             else (0.0, 0.0))
    if own_head:  # both start from the head bert_tf draws for this seed
        pathlib.Path(work, "own_head.txt").write_text("yes")
    pathlib.Path(work, "share.txt").write_text(share)
    if dropout:  # the recipe's dropout on both sides (each draws its own masks)
        pathlib.Path(work, "dropout.txt").write_text("on")
    no_dropout = dict(read_config("hf", model_dir).to_dict(), hidden_dropout_prob=rates[0],
                      attention_probs_dropout_prob=rates[1])
    config_file = os.path.join(work, "bert_config.json")
    pathlib.Path(config_file).write_text(json.dumps(no_dropout))
    cmd = ours_command(task, data, recipe, seed=seed, out=os.path.join(work, "bert_tf"),
                       model_dir=model_dir)
    cmd = [c for c in cmd if not c.startswith(
        ("--log_every",) if full else ("--do_eval", "--do_predict", "--log_every"))]
    cmd += [f"--bert_config_file={config_file}", "--log_every_n_steps=1"]
    if not full:
        cmd.append(f"--max_steps_per_run={steps}")
    p = subprocess.run([sys.executable, __file__, "--child", work, "--"] + cmd,
                       capture_output=True, text=True, cwd=REPO,
                       env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    ours = [float(loss) for _, loss in STEP_LINE.findall(p.stderr)]
    if p.returncode or not ours or (len(ours) != steps and not full):
        sys.exit(f"bert_tf {task} failed ({len(ours)} steps logged):\n{p.stderr[-3000:]}")
    out = os.path.join(work, "hf")
    # ELECTRA's two-layer head is traced by hf_trajectory.py (its docstring says why not by
    # hf_finetune.py).
    script = (HERE / "hf_trajectory.py" if model_kind(model_dir) == "electra"
              else COMMON / "hf_finetune.py")
    p = subprocess.run([str(HF_PYTHON), str(script), f"--task={task}",
                        f"--data_dir={data}", f"--output_dir={out}", f"--trace_dir={work}",
                        f"--seed={seed}", f"--model_dir={model_dir}"],
                       capture_output=True, text=True, cwd=REPO)
    if p.returncode:
        sys.exit(f"HF {task} failed:\n{p.stderr[-3000:]}")
    result = json.loads(pathlib.Path(out, "metrics.json").read_text())
    theirs = result["train"]["losses"]
    if not full:
        return np.array(ours), np.array(theirs)
    text = pathlib.Path(work, "bert_tf", "eval_results.txt").read_text()
    scale = 1 if task == "squad" else 100
    ours_metrics = [scale * float(re.search(rf"^{k} = ([-0-9.e]+)$", text, re.M).group(1))
                    for k in METRICS[task][1]]
    theirs_metrics = [scale * result["metrics"][split][key] for split, key in METRICS[task][2]]
    return np.array(ours), np.array(theirs), ours_metrics, theirs_metrics


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        return child(sys.argv[2], sys.argv[4:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", type=pathlib.Path, required=True)
    parser.add_argument("--tasks", default="sst2,mrpc,wnut17,squad")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--full", action="store_true",
                        help="train the whole recipe this way, then evaluate both: the final "
                             "metrics with the seed's noise taken out")
    parser.add_argument("--dropout", action="store_true",
                        help="keep the recipe's dropout (each side its own masks): with --full, "
                             "what dropout alone does to the final metrics")
    parser.add_argument("--seed", type=int, default=1, help="the runs' --seed (data order)")
    parser.add_argument("--model_dir", default="",
                        help="a Hugging Face BERT or ELECTRA directory, with vocab.txt "
                             "(default: MiniLM-L6); ELECTRA: classification tasks, --share=both")
    parser.add_argument("--own_head", action="store_true",
                        help="start both sides from the head bert_tf initialises for --seed "
                             "(default: one normal(0, initializer_range) draw from NumPy seed 0)")
    parser.add_argument("--share", choices=("both", "head", "order"), default="both",
                        help="what transformers takes of bert_tf's start: both its head and "
                             "its batch order; only the head (then its own order from --seed);"
                             " or only the order (then its own head from --seed). With --full "
                             "--dropout --own_head this tells which of the two decides a seed")
    args = parser.parse_args()
    if not HF_PYTHON.exists():
        sys.exit(f"{HF_PYTHON} is missing: run bash benchmarks/common/hf_env.sh first")
    kind = model_kind(args.model_dir or minilm_dir())
    if kind not in ("bert", "electra"):
        sys.exit(f"--model_dir={args.model_dir}: model_type {kind!r} (BERT or ELECTRA only)")
    if kind == "electra" and (args.share != "both" or not set(args.tasks.split(",")) <= {
            "sst2", "mrpc", "rte"}):
        sys.exit("--model_dir: an ELECTRA discriminator is traced on sst2, mrpc and rte "
                 "with --share=both")
    recipes = json.loads((args.data_dir / "recipes.json").read_text())
    print(machine.describe())
    summary = []
    for task in args.tasks.split(","):
        with tempfile.TemporaryDirectory(prefix=f"trajectory_{task}_") as work:
            traced = trace(task, args.data_dir, recipes[task], args.steps, work, args.full,
                           args.dropout, args.seed, args.own_head, args.share,
                           args.model_dir)
        ours, theirs = traced[:2]
        n = min(len(ours), len(theirs))
        if args.full:
            shared = {"both": "the same head and order", "head": "the same head (each side "
                      "its own order)", "order": "the same order (each side its own head)"}
            print(f"\n{task}, the whole recipe {'with' if args.dropout else 'without'} dropout "
                  f"from {shared[args.share]}: "
                  f"{n} updates; " + "; ".join(
                      f"{m} bert_tf {a:.2f}, transformers {b:.2f} (gap {a - b:+.2f})"
                      for m, a, b in zip(METRICS[task][0], traced[2], traced[3])))
        ours, theirs = ours[:n], theirs[:n]
        rel = np.abs(ours - theirs) / np.abs(theirs)
        print(f"\n{task}: training loss per update, same head, order and no dropout")
        print("| step | bert_tf | transformers | relative difference |")
        print("| --- | --- | --- | --- |")
        for k in sorted({0, 1, 2, 4, 9, 14, 19, 24, 49, 99, n - 1} & set(range(n))):
            print(f"| {k + 1} | {ours[k]:.6f} | {theirs[k]:.6f} | {rel[k]:.1e} |")
        summary.append(f"| {task} | {n} | {ours[0]:.4f} -> {ours[-1]:.4f} | "
                       f"{theirs[0]:.4f} -> {theirs[-1]:.4f} | {rel.max():.1e} |")
    print("\n| task | updates | bert_tf loss | transformers loss | largest relative difference |")
    print("| --- | --- | --- | --- | --- |")
    print("\n".join(summary))


if __name__ == "__main__":
    main()
