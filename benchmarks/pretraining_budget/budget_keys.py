"""The pretraining-budget benchmark's cache keys: what names an arm's folder and ledger entry.

An arm's key is what decides its result (`arm_key`): its settings (the benchmark's `Arm`),
the contents of the model config, the vocabulary, the training text and the recipe (its
flagfile or arm script), and for an arm that trains against the clock the budget and the
machine. Contents, not paths: one path in two caches can hold two vocabularies, and the same
vocabulary in another cache is the same arm. The machine: a budget of minutes buys different
training on each CPU, so the same arm on two machines is two arms (before, the Xeon's and
the EPYC's arm c shared a key, and the ledger, written once, kept only one).

`legacy_arm_folder` is the earlier version's key (paths, no machine), only to read the
ledger entries written under it (`budget_cache.from_legacy_ledger`).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Optional

import budget_cache

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = budget_cache.REPO
# The fields of the benchmark's Arm before peer_flags: the earlier version's keys hashed
# these.
LEGACY_ARM_FIELDS = ("name", "kind", "title", "flagfile", "flags", "drop", "records",
                     "dupe_factor", "size_to_budget", "warmup_fraction", "default")


def file_digest(path: Optional[str]) -> str:
    """The earlier version's digest of a text file (8 hex digits; "" without the file)."""
    if not path or not os.path.exists(path):
        return ""
    with open(path, "rb") as f:
        return budget_cache.digest(f.read().decode("utf-8", "replace"))


def recipe_file(arm) -> Optional[str]:
    """The text that decides how the arm trains: its flagfile or its arm script."""
    return {"bert_tf": os.path.join(REPO, arm.flagfile),
            "keras_hub": os.path.join(HERE, "budget_keras_hub.py"),
            "hf": os.path.join(HERE, "budget_hf.py")}.get(arm.kind)


# Fields the benchmark's Arm gained after the ledger's entries were keyed: they enter an arm's
# key only when set, so that the earlier arms keep their keys (and their ledger entries).
LATER_ARM_FIELDS = ("scale", "snapshots", "recipe", "architecture", "mlm_first")


MLM_PHASE = "configs/budget.flags"  # the masked-LM phase of an arm with mlm_first


def arm_fields(arm) -> dict:
    """The arm's settings in its key: every field, but LATER_ARM_FIELDS only when set."""
    fields = dataclasses.asdict(arm)
    defaults = {f.name: f.default for f in dataclasses.fields(arm)}
    return {k: v for k, v in fields.items()
            if k not in LATER_ARM_FIELDS or v != defaults[k]}


def arm_key(arm, args, cache: str, config: str, vocab: str, seq: int) -> dict:
    """What decides an arm's result: its settings, the CONTENTS of the model config, the
    vocabulary, the training text and the recipe, and for a timed arm the budget and the
    machine (minutes buy different training on each CPU). Random weights train nothing: its
    key is the model and the vocabulary only, the same on every machine."""
    key = {"arm": arm_fields(arm), "config": budget_cache.content_digest(config),
           "vocab": budget_cache.content_digest(vocab)}
    if arm.kind == "random":
        return key
    return dict(key, minutes=args.minutes, probe_minutes=args.probe_minutes, seq=seq,
                corpus=budget_cache.content_digest(os.path.join(cache, "corpus", "train.txt")),
                recipe=budget_cache.content_digest(recipe_file(arm)),
                machine=budget_cache.this_machine(),
                # an arm with a masked-LM phase trains c's recipe too
                **({"mlm_recipe": budget_cache.content_digest(os.path.join(REPO, MLM_PHASE))}
                   if arm.mlm_first else {}))


def arm_folder(arm, args, cache: str, config: str, vocab: str, seq: int) -> str:
    """The arm's cache folder: its name carries the digest of `arm_key`, so that anything
    that changes the arm's training starts a new one."""
    digest = budget_cache.digest(arm_key(arm, args, cache, config, vocab, seq))
    return os.path.join(cache, "arms", f"{arm.name}-{digest}")


def legacy_arm_folder(arm, args, cache: str, config: str, vocab: str, seq: int) -> str:
    """The arm's folder under the earlier version's key (the config's and vocabulary's
    PATHS, no machine), under which the ledger kept arms until then; "" for arms that
    version did not have. Only to find those entries (`budget_cache.from_legacy_ledger`)."""
    fields = dataclasses.asdict(arm)
    if any(fields[f] != getattr(type(arm), f) for f in fields
           if f not in LEGACY_ARM_FIELDS):
        return ""
    old = {f: fields[f] for f in LEGACY_ARM_FIELDS}
    key = {"arm": old, "minutes": args.minutes, "probe_minutes": args.probe_minutes,
           "config": config, "vocab": vocab, "seq": seq,
           "recipe": file_digest(recipe_file(arm))}
    if arm.kind == "random":
        key = {"arm": old, "config": config, "vocab": vocab}
    return os.path.join(cache, "arms", f"{arm.name}-{budget_cache.digest(key)}")
