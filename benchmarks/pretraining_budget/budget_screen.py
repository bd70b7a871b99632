"""The protocol screen's decision: which scorecard protocol registers pretraining.

A protocol is a classifier readout and a fine-tuning learning rate (`--screen`, e.g.
`pooler@3e-4,cls@3e-4,mean@3e-4`). For each, the screen has the scorecards of random
weights (arm a) and of the pretrained arms (c and d, README.md beside this script), all over
the same fine-tuning seeds. The rule, written down before any screen was scored (README.md,
"The protocol screen"):

1. A task on which arm c does not score above the task's majority / chance level (run_glue's
   `chance_levels`) under a protocol is left out of that protocol's GLUE score, and the table
   says so.
2. Per pretrained arm, t = (arm - a) / SE, the GLUE difference paired over seeds
   (`scorecard_report.difference`); the protocol's criterion is the mean t over the arms.
3. The largest mean t wins; a protocol within 0.5 of it that is simpler wins instead
   (`pooler` before `cls` before `mean`, then the smaller learning rate).
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence, Tuple

READOUTS = ("pooler", "cls", "mean")  # simplest first: the tie-break order
TIE = 0.5  # mean t within this of the best is a tie


def parse(spec: str) -> List[Tuple[str, float]]:
    """`readout@lr,...` -> [(readout, lr)]; raises ValueError naming a bad item."""
    out = []
    for item in filter(None, (s.strip() for s in spec.split(","))):
        readout, at, lr = item.partition("@")
        if not at or readout not in READOUTS:
            raise ValueError(f"--screen item {item!r} is not readout@learning_rate with readout "
                             f"one of {', '.join(READOUTS)}")
        try:
            out.append((readout, float(lr)))
        except ValueError:
            raise ValueError(f"--screen item {item!r}: {lr!r} is not a learning rate") from None
    if not out:
        raise ValueError("--screen names no protocol")
    return out


def label(protocol: Tuple[str, float]) -> str:
    return f"{protocol[0]} @ {protocol[1]:g}"


def simplicity(protocol: Tuple[str, float]) -> Tuple[int, float]:
    """The tie-break key: smaller is simpler."""
    return READOUTS.index(protocol[0]), protocol[1]


def kept_tasks(row_c: dict, chance: Dict[str, dict], tasks: Sequence[str]) -> List[str]:
    """The tasks on which arm c's mean score is above the task's chance level (rule 1); a
    task without a level is kept."""
    return [t for t in tasks if t not in chance
            or row_c["tasks"][t]["score"]["mean"] > chance[t]["level"]]


def glue_over(row: dict, tasks: Sequence[str]) -> Dict[str, object]:
    """The GLUE score over `tasks` only: per seed the mean of those tasks' scores, as a
    `scorecard_report.stats` summary (seeds every task has)."""
    from bert_tf.finetune.scorecard.scorecard_report import stats

    per_task = [row["tasks"][t]["score"]["per_seed"] for t in tasks]
    seeds = set.intersection(*(set(p) for p in per_task)) if per_task else set()
    return stats({s: sum(p[s] for p in per_task) / len(per_task) for s in sorted(seeds)})


def assess(rows: Dict[str, dict], chance: Dict[str, dict], tasks: Sequence[str],
           pretrained: Sequence[str] = ("c", "d")) -> dict:
    """One protocol's figures: the kept tasks, each pretrained arm's GLUE difference from
    arm a over them (diff, se, t) and the mean t (None when an arm or its SE is missing)."""
    from bert_tf.finetune.scorecard.scorecard_report import difference

    kept = kept_tasks(rows["c"], chance, tasks) if "c" in rows else list(tasks)
    out = {"kept": kept, "dropped": [t for t in tasks if t not in kept], "arms": {}}
    ts = []
    for arm in pretrained:
        if arm not in rows or "a" not in rows or not kept:
            continue
        d = difference(glue_over(rows[arm], kept), glue_over(rows["a"], kept))
        t = None
        if d["se"]:
            t = d["diff"] / d["se"]
        elif d["se"] == 0 and d["diff"]:
            t = math.copysign(math.inf, d["diff"])
        out["arms"][arm] = dict(d, t=t)
        ts.append(t)
    complete = len(ts) == len(pretrained) and all(t is not None for t in ts)
    out["mean_t"] = sum(ts) / len(ts) if complete else None
    return out


def choose(assessed: Dict[Tuple[str, float], dict]) -> Optional[Tuple[str, float]]:
    """The winner by rule 3, None when some protocol lacks its mean t."""
    if not assessed or any(a["mean_t"] is None for a in assessed.values()):
        return None
    best = max(a["mean_t"] for a in assessed.values())
    near = [p for p, a in assessed.items() if a["mean_t"] >= best - TIE]
    return min(near, key=simplicity)


def render(assessed: Dict[Tuple[str, float], dict], rows: Dict[Tuple[str, float], dict],
           chance: Dict[str, dict], tasks: Sequence[str], labels: Dict[str, str]) -> List[str]:
    """The screen's markdown: per protocol and arm the task scores beside the chance row,
    then the differences from random weights with t, and the choice."""
    arms = sorted({arm for r in rows.values() for arm in r})
    lines = ["Protocol screen: scores per protocol and arm (mean ± std over seeds); a task "
             "marked * is left out of that protocol's GLUE (arm c not above its chance level).",
             "", "| protocol | arm | " + " | ".join(labels.get(t, t) for t in tasks)
             + " | GLUE over kept tasks |", "|" + " --- |" * (3 + len(tasks))]
    lines.append("| chance | - | " + " | ".join(
        f"{chance[t]['level']:.2f}" if t in chance else "-" for t in tasks) + " | - |")
    for p, a in assessed.items():
        for arm in arms:
            row = rows[p].get(arm)
            if not row:
                continue
            cells = []
            for t in tasks:
                s = row["tasks"][t]["score"]
                cells.append(f"{s['mean']:.2f} ± {s['std']:.2f}"
                             + ("*" if t in a["dropped"] else ""))
            g = glue_over(row, a["kept"])
            lines.append(f"| {label(p)} | {arm} | " + " | ".join(cells)
                         + f" | {g['mean']:.2f} ± {g['std']:.2f} |")
    lines += ["", "| protocol | kept tasks | " + " | ".join(
        f"{arm} - a (± SE, t)" for arm in ("c", "d")) + " | mean t |", "| --- " * 5 + "|"]
    for p, a in assessed.items():
        cells = []
        for arm in ("c", "d"):
            d = a["arms"].get(arm)
            if not d:
                cells.append("-")
                continue
            se = f" ± {d['se']:.2f}" if d["se"] is not None else ""
            t = f", t = {d['t']:.1f}" if d["t"] is not None else ""
            cells.append(f"{d['diff']:+.2f}{se}{t}")
        mean_t = f"{a['mean_t']:.2f}" if a["mean_t"] is not None else "-"
        lines.append(f"| {label(p)} | {', '.join(labels.get(t, t) for t in a['kept'])} | "
                     + " | ".join(cells) + f" | {mean_t} |")
    winner = choose(assessed)
    lines += ["", f"Chosen (largest mean t; within {TIE} the simpler): "
              + (label(winner) if winner else "none yet: a protocol lacks an arm's scorecard")]
    return lines
