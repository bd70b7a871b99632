"""The pretraining-budget benchmark's bert_tf side: the bert_tf arms and the one MLM evaluator.

A bert_tf arm is `python -m bert_tf.run_pretraining` with a flagfile of the repo
(configs/demo.flags for arm b, configs/budget.flags for arm c), the arm's own flags, and the
benchmark's overrides last (they win): its TFRecords, the shared bert_config.json, the
output folder and `--max_train_minutes`. run_pretraining counts the budget as training time
only (train calls; not start-up, tracing, checkpoint saves or evaluation), summed over
resumes, so a killed arm reruns the same command and continues (bert_tf/training/budget.py).

Before an arm trains, a probe of `probe_minutes` (same command, a scratch folder) measures its
steps per second; an arm with `size_to_budget` gets `--num_train_steps` = that rate times the
budget (and a warmup fraction of it), so its linear decay ends with the budget,
as a user sizing the original recipe to a deadline would. The probe also spaces the
checkpoints (about every 5 minutes of training) and the held-out curve's evaluations
(`--eval_every_n_steps`, `eval_history.jsonl`; evaluation time does not count).

`mlm_accuracy` measures every pretrained arm the same way: run_pretraining `--do_eval
--no_nsp` on the arm's checkpoint (bert_tf's own, or d's and e's converted ones) over all of
the held-out MLM-only records with their static 15 % masks.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from typing import Dict, List, Optional, Sequence, Tuple

import budget_cache
import budget_curves
import budget_data
import machine  # benchmarks/common, on sys.path through budget_cache

PY = sys.executable
REPO = budget_cache.REPO
CLOCK_LINE = re.compile(r"training clock ([0-9.]+) s of the ([0-9.]+) s budget at step (\d+); "
                        r"learning rate ([-0-9.e+]+)")
SPENT_LINE = re.compile(r"already spent \(([0-9.]+) s trained\) at step (\d+)")
CHECKPOINT_SECONDS = 300  # checkpoint spacing in training time (resumes lose at most this)


def parse_flags(flagfile: str, flags: List[str]) -> Dict[str, str]:
    """{name: value} of an absl flagfile then `flags` (later wins; `--x` = true, `--nox` =
    false). Only the `--name=value` lines the benchmark needs to read are understood."""
    values: Dict[str, str] = {}
    lines: List[str] = []
    if flagfile:
        with open(os.path.join(REPO, flagfile), encoding="utf-8") as f:
            lines = [line.strip() for line in f]
    for item in lines + list(flags):
        if not item.startswith("--"):
            continue
        name, eq, value = item[2:].partition("=")
        if not eq:
            name, value = (name[2:], "false") if name.startswith("no") else (name, "true")
        values[name] = value
    return values


def is_true(values: Dict[str, str], name: str) -> bool:
    return values.get(name, "false").lower() in ("true", "1", "t", "yes")


def clock(log_path: str) -> Optional[Tuple[float, int, float]]:
    """(trained seconds, final step, final learning rate) from the last clock line of a
    run_pretraining log, or None."""
    if not os.path.exists(log_path):
        return None
    with open(log_path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    found = CLOCK_LINE.findall(text)
    if found:
        seconds, _, step, lr = found[-1]
        return float(seconds), int(step), float(lr)
    spent = SPENT_LINE.findall(text)
    if spent:
        return float(spent[-1][0]), int(spent[-1][1]), float("nan")
    return None


def command(flagfile: str, flags: List[str], overrides: List[str]) -> List[str]:
    cmd = [PY, "-m", "bert_tf.run_pretraining"]
    if flagfile:
        cmd.append(f"--flagfile={os.path.join(REPO, flagfile)}")
    return cmd + list(flags) + list(overrides)


def probe(arm_dir: str, flagfile: str, flags: List[str], overrides: List[str],
          minutes: float) -> Dict[str, float]:
    """Steps per training second of the arm's command, from a short run in a scratch folder."""
    marker = budget_cache.done(arm_dir, "probe")
    if marker:
        return marker
    out = os.path.join(arm_dir, "probe")
    shutil.rmtree(out, ignore_errors=True)
    log = os.path.join(arm_dir, "probe.log")
    if os.path.exists(log):
        os.remove(log)
    ticks = machine.cpu_ticks()
    budget_data.run_logged(command(flagfile, flags, overrides + [
        f"--output_dir={out}", f"--max_train_minutes={minutes}", "--num_train_steps=10000000",
        "--eval_every_n_steps=0", "--save_checkpoints_steps=10000000"]), log, "probe")
    steal = machine.steal_percent(ticks, machine.cpu_ticks())
    measured = clock(log)
    if measured is None or measured[1] == 0:
        sys.exit(f"probe: no training clock line in {log}")
    shutil.rmtree(out, ignore_errors=True)
    seconds, steps, _ = measured
    return budget_cache.finish(arm_dir, "probe", {"steps": steps, "train_seconds": seconds,
                                                  "steps_per_second": steps / seconds,
                                                  "steal_percent": steal})


def pretrain(arm_dir: str, flagfile: str, flags: List[str], overrides: List[str],
             minutes: float, size_to_budget: bool, probe_minutes: float,
             curve: Tuple[str, int, int], warmup_fraction: Optional[float] = None,
             stops: Sequence[Tuple[float, str]] = ()) -> dict:
    """Trains a bert_tf arm to its budget (resuming a killed run); returns the marker.

    Args:
        arm_dir: the arm's cache folder.
        flagfile, flags: the arm's recipe.
        overrides: the benchmark's flags (inputs, model, no eval), appended last.
        minutes: the training-time budget.
        size_to_budget: set --num_train_steps from the probe's rate, so that a linear
            schedule ends with the budget.
        warmup_fraction: with size_to_budget, --num_warmup_steps as this share of the steps
            (None: as the flags say).
        probe_minutes: the probe's budget.
        curve: (held-out records, evaluations over the budget, batches of 64 each) for
            --eval_every_n_steps; no curve if the records are "".
        stops: (training seconds, folder) where the run's state is kept on the way: the run
            is cut there into slices (--max_steps_per_run, each resumed exactly) and the
            checkpoint each ends with is copied to its folder, marked "snapshot"
            (budget_curves.py).
    """
    marker = budget_cache.done(arm_dir, "pretrain")
    if marker:
        return marker
    rate = probe(arm_dir, flagfile, flags, overrides, probe_minutes)["steps_per_second"]
    values = parse_flags(flagfile, flags)
    extra = [f"--max_train_minutes={minutes}",
             f"--save_checkpoints_steps={max(20, int(rate * CHECKPOINT_SECONDS))}"]
    steps = int(values.get("num_train_steps", "100000"))
    if size_to_budget:
        steps = budget_cache.calibrated_steps(rate, 60 * minutes)
        extra.append(f"--num_train_steps={steps}")
        if warmup_fraction is not None:
            extra.append(f"--num_warmup_steps={round(warmup_fraction * steps)}")
    expected = min(steps, budget_cache.calibrated_steps(rate, 60 * minutes))
    curve_input, curve_points, curve_batches = curve
    if curve_input:
        extra += [f"--eval_every_n_steps={max(1, expected // curve_points)}",
                  f"--eval_input_file={curve_input}", f"--max_eval_steps={curve_batches}",
                  "--eval_batch_size=64"]
    out = os.path.join(arm_dir, "pretrain")
    log = os.path.join(arm_dir, "pretrain.log")
    cmd = command(flagfile, flags, overrides + extra + [f"--output_dir={out}"])
    print(f"    {' '.join(cmd[2:])}", flush=True)
    for target, snap in stops:
        if budget_cache.done(snap, "snapshot"):
            continue
        seconds, step = (clock(log) or (0.0, 0, 0.0))[:2]
        n = budget_curves.slice_steps(seconds, step, target, rate)
        budget_data.run_logged(cmd + [f"--max_steps_per_run={n}"], log, "pretraining slice")
        seconds, step, lr = clock(log)
        budget_curves.keep_checkpoint(out, step, snap)
        budget_cache.finish(snap, "snapshot", {
            "steps": step, "train_seconds": seconds, "final_learning_rate": lr,
            "checkpoint": snap, "bert_config": os.path.join(snap, "bert_config.json"),
            "command": cmd[2:] + [f"--max_steps_per_run={n}"]})
    ticks = machine.cpu_ticks()
    budget_data.run_logged(cmd, log, "pretraining")
    steal = machine.steal_percent(ticks, machine.cpu_ticks())
    measured = clock(log)
    if measured is None:
        sys.exit(f"pretraining: no training clock line in {log}")
    seconds, step, lr = measured
    values = parse_flags(flagfile, flags + overrides + extra)
    batch, seq = int(values.get("train_batch_size", "32")), int(values.get("max_seq_length", "128"))
    history = os.path.join(out, "eval_history.jsonl")
    return budget_cache.finish(arm_dir, "pretrain", {
        "steps": step, "examples": step * batch, "train_seconds": seconds,
        "examples_per_second": step * batch / seconds if seconds else 0.0,
        "tokens_per_second": step * batch * seq / seconds if seconds else 0.0,
        "final_learning_rate": lr, "probe_steps_per_second": rate,
        # over the last process (a resumed run's earlier ones are not measured)
        "steal_percent": steal,
        "num_train_steps": int(values.get("num_train_steps", steps)),
        "train_batch_size": batch, "max_seq_length": seq,
        "command": cmd[2:], "checkpoint": out, "bert_config": os.path.join(out, "bert_config.json"),
        "eval_history": history if os.path.exists(history) else ""})


def mlm_accuracy(arm_dir: str, checkpoint: str, bert_config: str, heldout: str,
                 max_seq_length: int, max_predictions_per_seq: int,
                 objective: Sequence[str] = ()) -> dict:
    """Held-out masked-LM accuracy of a checkpoint, on every held-out record (static masks).
    `objective`: the run's objective flags (ELECTRA: its generator's accuracy is measured)."""
    marker = budget_cache.done(arm_dir, "mlm_eval")
    if marker:
        return marker
    out = os.path.join(arm_dir, "mlm_eval")
    shutil.rmtree(out, ignore_errors=True)
    # ELECTRA has no next-sentence head, and refuses --no_nsp.
    nsp = [] if objective else ["--no_nsp"]
    budget_data.run_logged([PY, "-m", "bert_tf.run_pretraining", "--do_train=false",
                            "--do_eval=true", *nsp, f"--bert_config_file={bert_config}",
                            f"--init_checkpoint={checkpoint}", f"--eval_input_file={heldout}",
                            f"--output_dir={out}", f"--max_seq_length={max_seq_length}",
                            f"--max_predictions_per_seq={max_predictions_per_seq}",
                            "--eval_batch_size=64", "--max_eval_steps=1000000",
                            "--distribution_strategy=one_device", *objective],
                           os.path.join(arm_dir, "mlm_eval.log"), "held-out MLM evaluation")
    results = {}
    with open(os.path.join(out, "eval_results.txt"), encoding="utf-8") as f:
        for line in f:
            key, _, value = line.partition(" = ")
            results[key.strip()] = float(value)
    return budget_cache.finish(arm_dir, "mlm_eval", {
        "masked_lm_accuracy": results["masked_lm_accuracy"],
        "masked_lm_loss": results["masked_lm_loss"], "checkpoint": checkpoint})


def convert_hf(hf_dir: str, native_dir: str, vocab_file: str) -> str:
    """A Hugging Face directory converted to a bert_tf checkpoint (bert_tf's converter)."""
    if not os.path.exists(os.path.join(native_dir, "checkpoint")):
        shutil.rmtree(native_dir, ignore_errors=True)
        budget_data.run_logged([PY, "-m", "bert_tf.convert_checkpoint", "--from_format=hf",
                                "--to_format=bert_tf", f"--input={hf_dir}",
                                f"--output={native_dir}", f"--vocab_file={vocab_file}"],
                               native_dir + ".log", "conversion")
    return native_dir
