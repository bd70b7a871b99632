"""The pretraining-budget benchmark's curve: GLUE against pretraining minutes, and ELECTRA's goals.

A "long" arm (the benchmark's `Arm.scale` > 1, e.g. c120 and f120: 4 x the 30-minute budget)
trains ONE run whose schedule is laid over its whole budget, and keeps its state at the
fractions `Arm.snapshots` of that budget (30 and 60 of its 120 minutes). The run is cut
into slices at those points with run_pretraining's `--max_steps_per_run` (every slice stops
with a checkpoint, and the next one resumes it exactly: the same command, the same
`--max_train_minutes`, so the schedule is the 120-minute one throughout); each slice's
length in steps is the seconds left to its point times the rate measured so far
(`slice_steps`), so a snapshot lands within a few steps of its minute, and the report gives
the training seconds it really holds. Each snapshot is a folder of its own beside the arm's
(`snapshot_dir`): the checkpoint, then its held-out MLM accuracy and scorecard, each cached
with its marker and written to the ledger under the snapshot's own name.

The 30- and 60-minute points of a 120-minute run are taken before its learning rate decays;
the 30-minute arms c and f decay within their 30 minutes. The table shows both.

Pure Python: `scorecard_report` is bert_tf's, without TensorFlow.
"""

from __future__ import annotations

import os
from typing import Dict, List, Optional, Sequence

import budget_report


def snapshot_dir(arm_dir: str, minutes: float) -> str:
    """The folder of a long arm's state at `minutes` of training (a sibling of the arm's)."""
    return f"{arm_dir}@{minutes:g}min"


def slice_steps(trained_seconds: float, steps: int, target_seconds: float,
                probe_rate: float) -> int:
    """Steps the next slice trains so that the run reaches `target_seconds` of training.

    Args:
        trained_seconds, steps: the run's training clock and step so far (0, 0 at first).
        target_seconds: where the slice should stop.
        probe_rate: steps per second from the probe, used until the run has its own rate.

    Returns:
        At least 1 step.
    """
    rate = steps / trained_seconds if steps and trained_seconds > 0 else probe_rate
    return max(1, round((target_seconds - trained_seconds) * rate))


def curve_points(results: List[dict], recipes: Sequence[str] = ("c", "f")) -> List[dict]:
    """The curve's points: per recipe, its own-budget arm and its long arm's snapshots.

    Args:
        results: the benchmark's per-arm results; a long arm's carries "snapshots", a list
            of {"minutes", "train_seconds", "row", ...} and its end ("row", "pretrain").
        recipes: the recipes whose curve is drawn.

    Returns:
        [{"recipe", "arm", "minutes", "train_seconds", "schedule", "row"}], by recipe then
        minutes; "schedule" is "own" for the arm whose schedule ends at its minutes, "long"
        for a snapshot of a longer run (taken before its decay).
    """
    by_name = {r["name"]: r for r in results}
    points = []
    for recipe in recipes:
        own = by_name.get(recipe)
        if own and own.get("row"):
            points.append({"recipe": recipe, "arm": recipe, "schedule": "own",
                           "minutes": own.get("minutes"), "row": own["row"],
                           "train_seconds": (own.get("pretrain") or {}).get("train_seconds")})
        for r in results:
            if r.get("recipe") != recipe or not r.get("snapshots"):
                continue
            for s in r["snapshots"] + [dict(r, minutes=r.get("minutes"), end=True)]:
                if s.get("row"):
                    points.append({"recipe": recipe, "arm": r["name"],
                                   "schedule": "own" if s.get("end") else "long",
                                   "minutes": s["minutes"], "row": s["row"],
                                   "train_seconds": s.get("train_seconds") or (
                                       s.get("pretrain") or {}).get("train_seconds")})
    return sorted(points, key=lambda p: (p["recipe"], p["minutes"] or 0, p["schedule"]))


def against(row: dict, base: dict, task: Optional[str] = None) -> dict:
    """row - base in GLUE points (or one task's score), paired over seeds, with SE and
    verdict."""
    from bert_tf.finetune.scorecard.scorecard_report import difference

    a = row["tasks"][task]["score"] if task else row["glue_score"]
    b = base["tasks"][task]["score"] if task else base["glue_score"]
    d = difference(a, b)
    return {"diff": d["diff"], "se": d["se"],
            "verdict": budget_report.verdict(d["diff"], d["se"],
                                             budget_report.degrees_of_freedom(a, b))}


def render_curve(points: List[dict], random_row: Optional[dict]) -> List[str]:
    """The curve's markdown table ([] without points)."""
    if not points:
        return []
    lines = ["", "GLUE against pretraining minutes (schedule: own = the run's schedule ends "
             "there; long = a snapshot of the 120-minute run, before its decay); minus random "
             "weights (arm a), paired over seeds ± SE:", "",
             "| recipe | arm | minutes | train s | schedule | GLUE (± SE) | minus random | "
             "verdict |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for p in points:
        se = budget_report.glue_se(p["row"])
        glue = f"{p['row']['glue_score']['mean']:.2f}" + (f" ({se:.2f})" if se is not None
                                                           else "")
        minus, verdict = "-", "-"
        if random_row:
            d = against(p["row"], random_row)
            minus = f"{d['diff']:+.2f}" + (f" ± {d['se']:.2f}" if d["se"] is not None else "")
            verdict = d["verdict"]
        seconds = f"{p['train_seconds']:.0f}" if p.get("train_seconds") else "-"
        minutes = f"{p['minutes']:g}" if p.get("minutes") is not None else "-"
        lines.append(f"| {p['recipe']} | {p['arm']} | {minutes} | {seconds} | {p['schedule']} "
                     f"| {glue} | {minus} | {verdict} |")
    return lines


def check(label: str, d: Optional[dict], threshold: float, strict: bool = False,
          two_se: bool = False) -> dict:
    """One goal as a computed check: "met", "not met" or "no measurable difference".

    A difference within the noise (|t| below 2 and below Student's 5 % value) is "no
    measurable difference", whatever its sign. Otherwise it is "met" when it clears the
    threshold (strictly for `strict`); `two_se`: the threshold is 2 standard errors.
    """
    if d is None:
        return {"goal": label, "result": "arms missing"}
    out = {"goal": label, "diff": d["diff"], "se": d["se"]}
    if d["se"] is None:
        return dict(out, result="one seed: no verdict")
    if d["verdict"].startswith("no measurable") or d["verdict"].startswith("one seed"):
        return dict(out, result="no measurable difference")
    bar = 2 * d["se"] if two_se else threshold
    ok = d["diff"] > bar if strict else d["diff"] >= bar
    return dict(out, result="met" if ok else "not met")


PEERS = ("d", "e", "d-tuned", "e-tuned")  # the frameworks users would pick instead


def best_by_glue(rows: Dict[str, dict], names) -> Optional[str]:
    """The one of `names` present in `rows` with the highest GLUE mean (None: none is)."""
    present = [n for n in names if n in rows]
    return max(present, key=lambda n: rows[n]["glue_score"]["mean"]) if present else None


def goals(rows: Dict[str, dict], points: List[dict]) -> List[dict]:
    """ELECTRA's goals as computed checks: at the 30-minute budget f - a >= +3.0 and f -
    max(d, e, tuned peers) >= +2.0; on STS-B and SST-2 f above random by 2 SE; at 120
    minutes the better of c and f beats random by >= +5.0; the floor f > a and f >= c."""
    f, a = rows.get("f"), rows.get("a")
    best_peer = best_by_glue(rows, PEERS)
    peers = check(f"f - max(d, e, tuned peers) >= +2.0 (best: {best_peer or '-'})",
                  against(f, rows[best_peer]) if f and best_peer else None, 2.0)
    missing = [n for n in PEERS if n not in rows]
    if missing and best_peer and "diff" in peers:  # the max over some peers is not the goal's
        peers["result"] = f"{peers['result']} against the peers run; not run: " + ", ".join(
            missing)
    out = [check("f - a >= +3.0", against(f, a) if f and a else None, 3.0), peers]
    for task in ("stsb", "sst2"):
        ok = f and a and task in f["tasks"] and task in a["tasks"]
        out.append(check(f"{budget_report.TASK_LABELS[task]}: f - a >= 2 SE",
                         against(f, a, task) if ok else None, 0.0, two_se=True))
    # The long arms' ends (120 minutes at the default budget; less in a smoke run).
    longest = [p for p in points if p["schedule"] == "own" and p["arm"] != p["recipe"]]
    best = max(longest, key=lambda p: p["row"]["glue_score"]["mean"]) if longest else None
    out.append(check(f"at 120 min, max(c, f) - a >= +5.0 (best: {best['arm'] if best else '-'})",
                     against(best["row"], a) if best and a else None, 5.0))
    out.append(check("floor: f > a", against(f, a) if f and a else None, 0.0, strict=True))
    c = rows.get("c")
    out.append(check("floor: f >= c", against(f, c) if f and c else None, 0.0))
    return out


def modern_goals(rows: Dict[str, dict]) -> List[dict]:
    """The modern encoder's goals as computed checks, at the 30-minute budget: g - c >=
    +1.5 (the modern block and packing against BERT's, both with c's recipe), and the better
    of g and h (by GLUE mean) beats random weights by >= +4.0."""
    g, c, a = rows.get("g"), rows.get("c"), rows.get("a")
    best = best_by_glue(rows, ("g", "h"))
    return [check("g - c >= +1.5", against(g, c) if g and c else None, 1.5),
            check(f"max(g, h) - a >= +4.0 (best: {best or '-'})",
                  against(rows[best], a) if best and a else None, 4.0)]


def render_goals(checks: List[dict], whose: str = "ELECTRA's") -> List[str]:
    """The goals' markdown table."""
    lines = ["", f"{whose} goals (GLUE points, paired over fine-tuning seeds; one "
             "pretraining run per arm):", "", "| goal | difference ± SE | result |",
             "| --- | --- | --- |"]
    for g in checks:
        diff = "-"
        if "diff" in g:
            diff = f"{g['diff']:+.2f}" + (f" ± {g['se']:.2f}" if g["se"] is not None else "")
        lines.append(f"| {g['goal']} | {diff} | {g['result']} |")
    return lines


def chart_data(points: List[dict], random_row: Optional[dict]) -> List[dict]:
    """The curve as results.json keeps it (and a chart reads it): per point its recipe,
    minutes, schedule, GLUE mean and SE, and the difference from random with its SE."""
    out = []
    for p in points:
        entry = {k: p[k] for k in ("recipe", "arm", "minutes", "schedule", "train_seconds")}
        entry.update(glue=p["row"]["glue_score"]["mean"], glue_se=budget_report.glue_se(p["row"]))
        if random_row:
            d = against(p["row"], random_row)
            entry.update(minus_random=d["diff"], minus_random_se=d["se"])
        out.append(entry)
    return out


def keep_checkpoint(out: str, step: int, snap: str) -> str:
    """Copies the checkpoint of `step` in run folder `out` (and its small JSON files) into
    `snap`, with a `checkpoint` index naming it; returns `snap`."""
    import shutil

    prefix = f"ckpt-{step}"
    names = [n for n in os.listdir(out) if n.startswith(prefix + ".")]
    if not names:
        raise SystemExit(f"no checkpoint of step {step} in {out}")
    os.makedirs(snap, exist_ok=True)
    for n in names + [n for n in os.listdir(out) if n.endswith(".json")]:
        shutil.copy2(os.path.join(out, n), os.path.join(snap, n))
    with open(os.path.join(snap, "checkpoint"), "w", encoding="utf-8") as f:
        f.write(f'model_checkpoint_path: "{prefix}"\nall_model_checkpoint_paths: "{prefix}"\n')
    return snap
