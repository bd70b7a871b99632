"""The pretraining-budget benchmark's pretraining stage: one arm's run, cached in its folder.

`pretrain` runs an arm's recipe against the clock: bert_tf's run_pretraining for the bert_tf
arms (on the records `budget_data` builds, through `budget_bert_tf.pretrain`), the peers'
scripts (budget_keras_hub.py, budget_hf.py in benchmarks/.hf-venv) for d and e, and an arm
with a masked-LM phase first in two phases (`pretrain_after_mlm`). Its marker, written last,
holds the checkpoint and the training figures (steps, sequences, seconds, tokens/s, steal).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Dict, Tuple

import budget_bert_tf
import budget_cache
import budget_curves
import budget_data
import machine
from budget_arms import EVAL_SEQ, Arm
from budget_keys import MLM_PHASE

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = budget_cache.REPO
HF_PYTHON = os.path.join(os.path.dirname(HERE), ".hf-venv", "bin", "python")  # hf_env.sh's


def bert_tf_recipe(arm: Arm, arm_dir: str) -> Tuple[str, Dict[str, str]]:
    """The arm's flagfile (a copy without `drop`, if any) and its flag values."""
    path = os.path.join(REPO, arm.flagfile)
    if not os.path.exists(path):
        sys.exit(f"arm {arm.name}: {arm.flagfile} does not exist yet")
    if arm.drop:
        with open(path, encoding="utf-8") as f:
            kept = [line for line in f if line.strip()[2:].partition("=")[0] not in arm.drop]
        os.makedirs(arm_dir, exist_ok=True)
        path = os.path.join(arm_dir, "recipe.flags")
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(kept)
    return path, budget_bert_tf.parse_flags(path, list(arm.flags))


def pretrain_after_mlm(arm: Arm, arm_dir: str, args, cache: str, config: str,
                       vocab: str) -> dict:
    """An arm with `mlm_first`: c's masked LM for that share of the budget (in mlm/), then the
    arm's own recipe for the rest (in second/), its discriminator from the masked LM's
    encoder. The marker sums the two phases' steps, sequences and training seconds."""
    first = dataclasses.replace(arm, flagfile=MLM_PHASE, flags=(), mlm_first=0.0,
                                scale=arm.scale * arm.mlm_first)
    mlm = pretrain(first, os.path.join(arm_dir, "mlm"), args, cache, config, vocab)
    second = dataclasses.replace(arm, mlm_first=0.0, scale=arm.scale * (1 - arm.mlm_first),
                                 flags=arm.flags + (f"--init_checkpoint={mlm['checkpoint']}",
                                                    "--init_discriminator_only=true"))
    own = pretrain(second, os.path.join(arm_dir, "second"), args, cache, config, vocab)
    phases = (mlm, own)
    seconds = sum(p["train_seconds"] for p in phases)
    tokens = sum(p["tokens_per_second"] * p["train_seconds"] for p in phases)
    return budget_cache.finish(arm_dir, "pretrain", dict(
        own, steps=mlm["steps"] + own["steps"], examples=mlm["examples"] + own["examples"],
        train_seconds=seconds, tokens_per_second=tokens / seconds if seconds else 0.0,
        examples_per_second=(mlm["examples"] + own["examples"]) / seconds if seconds else 0.0,
        steal_percent=max(p.get("steal_percent") or 0.0 for p in phases),
        phases=[{k: p.get(k) for k in ("steps", "examples", "train_seconds", "checkpoint",
                                       "command")} for p in phases]))


def pretrain(arm: Arm, arm_dir: str, args, cache: str, config: str, vocab: str) -> dict:
    """The arm's pretraining stage (cached); returns its marker (checkpoint, figures)."""
    done = budget_cache.done(arm_dir, "pretrain")
    if done:
        return done
    if arm.mlm_first:
        return pretrain_after_mlm(arm, arm_dir, args, cache, config, vocab)
    out = os.path.join(arm_dir, "pretrain")
    train_text = os.path.join(cache, "corpus", "train.txt")
    minutes = args.minutes * arm.scale
    common = [f"--train_text={train_text}", f"--vocab_file={vocab}",
              f"--bert_config_file={config}", f"--output_dir={out}", f"--minutes={minutes}",
              f"--probe_seconds={60 * args.probe_minutes}", f"--max_seq_length={EVAL_SEQ}"]
    if args.scorecard_only:
        sys.exit(f"arm {arm.name}: --scorecard_only, but its pretraining is not cached in "
                 f"{arm_dir}")
    common += list(arm.peer_flags)
    if arm.kind == "keras_hub":
        ticks = machine.cpu_ticks()
        budget_data.run_logged([sys.executable, os.path.join(HERE, "budget_keras_hub.py")]
                               + common, os.path.join(arm_dir, "pretrain.log"), f"arm {arm.name}")
        stats = budget_cache.read_json(os.path.join(out, "train_stats.json"))
        stats["steal_percent"] = machine.steal_percent(ticks, machine.cpu_ticks())
        return budget_cache.finish(arm_dir, "pretrain", stats)
    if arm.kind == "hf":
        if not os.path.exists(HF_PYTHON):
            sys.exit(f"{HF_PYTHON} is missing: run bash benchmarks/common/hf_env.sh first")
        ticks = machine.cpu_ticks()
        budget_data.run_logged([HF_PYTHON, os.path.join(HERE, "budget_hf.py")] + common,
                               os.path.join(arm_dir, "pretrain.log"), f"arm {arm.name}")
        stats = budget_cache.read_json(os.path.join(out, "train_stats.json"))
        stats["steal_percent"] = machine.steal_percent(ticks, machine.cpu_ticks())
        native = budget_bert_tf.convert_hf(stats["hf_model"], os.path.join(arm_dir, "bert_tf"),
                                           vocab)
        stats.update(checkpoint=native, bert_config=os.path.join(native, "bert_config.json"))
        return budget_cache.finish(arm_dir, "pretrain", stats)
    flagfile, values = bert_tf_recipe(arm, arm_dir)
    seq = int(values.get("max_seq_length", 128))
    pred = int(values.get("max_predictions_per_seq", 20))
    spec = budget_data.RecordSpec("train", arm.records == "nsp", seq, pred,
                                  dupe_factor=arm.dupe_factor, packed=arm.records == "packed")
    overrides = [f"--bert_config_file={config}", f"--input_file={budget_data.records(cache, spec)}",
                 "--do_train=true", "--do_eval=false"]
    if budget_bert_tf.is_true(values, "dynamic_masking"):
        overrides.append(f"--vocab_file={vocab}")
    curve = budget_data.records(cache, budget_data.RecordSpec("heldout", False, seq, pred,
                                                              seed=54321))
    stops = [(60 * minutes * x, budget_curves.snapshot_dir(arm_dir, x * minutes))
             for x in arm.snapshots]
    return budget_bert_tf.pretrain(arm_dir, flagfile, list(arm.flags), overrides,
                                   minutes, arm.size_to_budget, args.probe_minutes,
                                   (curve, *args.curve), arm.warmup_fraction, stops)
