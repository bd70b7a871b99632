"""bench_retrieval.py's report: the side-by-side table, the goals with their verdicts, speeds.

Scores are BEIR's metrics on the test split in points (x 100): mean ± sample std (n - 1)
over the seeds of a fine-tuned arm; BM25 and the zero-shot model have one deterministic
value. The standard error of a difference a - b is unpaired, sqrt(se_a^2 + se_b^2) with
se = std / sqrt(n) (a seed of one arm shares nothing with the same seed of another: other
trainers, other batches), a deterministic arm contributing 0; a seeded arm with one seed
leaves it unknown. A goal "a - b > t" (or ">=") is

    met                       a - b - t > 2 SE
    not met                   a - b - t < -2 SE
    no measurable difference  in between (the seeds cannot tell it from the threshold)

and, without an SE (one seed: --smoke), met or not met by the point value, said so. Speed
goals are ratios of single measurements, met or not met by their value.
"""

from __future__ import annotations

import math
import statistics
from typing import Dict, List, Optional, Sequence

METRICS = ("ndcg_at_10", "recall_at_100", "mrr_at_10", "map_at_100")
PUBLISHED_ZERO_SHOT = 64.51  # all-MiniLM-L6-v2 on SciFact, nDCG@10 (MTEB)
ZERO_SHOT_TOLERANCE = 0.3
# (label, arm, reference, threshold): nDCG@10 differences in points.
GOALS = [("fine-tuned bert_tf >= sentence-transformers - 0.5", "bert_tf_ft", "st_ft", -0.5),
         ("fine-tuned bert_tf > BM25", "bert_tf_ft", "bm25", 0.0),
         ("reranker > BM25", "rerank", "bm25", 0.0),
         ("reranker > fine-tuned bert_tf", "rerank", "bert_tf_ft", 0.0)]
# Shown beside the goals: what this package's pretraining is worth, and the controls.
OTHER_PAIRS = [("pretrained_ft", "bert_tf_ft"), ("pretrained_ft", "bm25"),
               ("pretrained_ft", "zero_shot"), ("bert_tf_ft", "zero_shot"),
               ("st_ft", "zero_shot")]
TRAIN_RATIO_GOAL = 1.3
BUSY_CORES = 0.25  # other work's CPU before an arm above which its speeds are flagged
EMBED_RATIO_GOAL = 1.0


def stats(values: Dict[str, float]) -> Dict[str, object]:
    """{"mean", "std" (n - 1; 0 for one value), "n", "per_seed"} of seed -> value."""
    v = [values[s] for s in sorted(values)]
    return {"mean": statistics.fmean(v), "std": statistics.stdev(v) if len(v) > 1 else 0.0,
            "n": len(v), "per_seed": dict(values)}


def _se(summary: dict, seeded: bool) -> Optional[float]:
    if not seeded:
        return 0.0
    return summary["std"] / math.sqrt(summary["n"]) if summary["n"] > 1 else None


def difference(a: dict, b: dict, metric: str = "ndcg_at_10") -> Optional[dict]:
    """a - b of `metric` (points) with its unpaired SE (module docstring); None when an arm
    has no scores."""
    if not a.get("scores") or not b.get("scores"):
        return None
    sa, sb = a["scores"][metric], b["scores"][metric]
    parts = [_se(sa, a["seeded"]), _se(sb, b["seeded"])]
    se = None if None in parts else math.sqrt(parts[0] ** 2 + parts[1] ** 2)
    return {"diff": sa["mean"] - sb["mean"], "se": se}


def verdict(diff: float, se: Optional[float], threshold: float) -> str:
    margin = diff - threshold
    if se is None:
        return ("met" if margin > 0 else "not met") + " (one seed: no SE)"
    if se == 0.0:
        return "met" if margin > 0 else "not met"
    if margin > 2 * se:
        return "met"
    if margin < -2 * se:
        return "not met"
    return "no measurable difference"


def _ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return a / b if a and b else None


def goals(arms: Dict[str, dict], smoke: bool = False) -> List[dict]:
    """Every goal's value and verdict ("arms missing" when one was not run). `smoke`: the
    published figure is of the full test split, so it is not compared."""
    out = []
    zs = arms.get("zero_shot", {}).get("scores")
    if zs:
        got = zs["ndcg_at_10"]["mean"]
        out.append({"goal": f"zero-shot MiniLM within {ZERO_SHOT_TOLERANCE} of the published "
                            f"{PUBLISHED_ZERO_SHOT}", "value": f"{got:.2f}",
                    "verdict": "- (smoke subset, not the published test split)" if smoke else
                    "met" if abs(got - PUBLISHED_ZERO_SHOT) <= ZERO_SHOT_TOLERANCE
                    else "not met"})
    for label, arm, ref, threshold in GOALS:
        d = difference(arms.get(arm, {}), arms.get(ref, {}))
        out.append({"goal": label, "value": _diff(d) if d else "arms missing",
                    "verdict": verdict(d["diff"], d["se"], threshold) if d else "-"})
    speed = arms.get("train_speed", {}).get("speed", {})
    default = speed.get("default")
    if default:
        r = default["ratio"]
        out.append({"goal": f"training examples/s bert_tf >= {TRAIN_RATIO_GOAL}x "
                            "sentence-transformers", "value": _x(r),
                    "verdict": "-" if r is None else
                    ("met" if r >= TRAIN_RATIO_GOAL else "not met")})
    embed = arms.get("embed_speed", {}).get("embed")
    if embed:
        r = embed["ratio"]
        out.append({"goal": "corpus passages/s bert_tf embed_corpus >= sentence-transformers' "
                            "encode", "value": _x(r),
                    "verdict": "-" if r is None else
                    ("met" if r >= EMBED_RATIO_GOAL else "not met")})
    return out


def _diff(d: dict) -> str:
    return f"{d['diff']:+.2f} ± {d['se']:.2f}" if d["se"] is not None else f"{d['diff']:+.2f}"


def _x(r: Optional[float]) -> str:
    return f"{r:.2f}x" if r else "-"


def _ms(s: Optional[dict]) -> str:
    if not s:
        return "-"
    return f"{s['mean']:.2f} ± {s['std']:.2f}" if s["n"] > 1 else f"{s['mean']:.2f}"


def _rate(s: Optional[dict]) -> str:
    if not s:
        return "-"
    return f"{s['mean']:.1f} ± {s['std']:.1f}" if s["n"] > 1 else f"{s['mean']:.1f}"


def _speed_lines(arms: Dict[str, dict]) -> List[str]:
    lines = []
    speed = arms.get("train_speed", {}).get("speed", {})
    if speed:
        lines += ["", "Training speed, steady state (the first step left out), the recipe's batch "
                  "on the same pairs, each side a fresh process, back to back:", "",
                  "| CPU ISA | bert_tf examples/s | sentence-transformers examples/s | ratio |",
                  "| --- | --- | --- | --- |"]
        for name, s in speed.items():
            label = ("as the machine has it" if name == "default" else
                     "capped at AVX2 (" + ", ".join(f"{k}={v}" for k, v in s["env"].items()) + ")")
            lines.append(f"| {label} | {s['bert_tf'] or 0:.2f} | {s['st'] or 0:.2f} | "
                         f"{_x(s['ratio'])} |")
    bt, st = (arms.get(n, {}).get("throughput") for n in ("bert_tf_ft", "st_ft"))
    if bt and st:
        lines += ["", f"In the fine-tuning arms themselves: bert_tf {_rate(bt)} examples/s, "
                  f"sentence-transformers {_rate(st)} ({_x(_ratio(bt['mean'], st['mean']))})."]
    embed = arms.get("embed_speed", {}).get("embed")
    if embed:
        zs = arms.get("zero_shot", {}).get("eval_rate")
        lines += ["", f"Corpus embedding, {embed['passages']:,} passages, batch "
                  f"{embed['batch_size']}, {embed['max_seq_length']} tokens: bert_tf "
                  f"`data_tools.embed_corpus` {embed['bert_tf'] or 0:.1f} passages/s, "
                  f"sentence-transformers `encode` {embed['st'] or 0:.1f} passages/s "
                  f"({_x(embed['ratio'])})"
                  + (f"; run_retrieval --do_eval's own embedding (zero_shot arm, the "
                     f"folder's 256 tokens) {zs:.1f} passages/s" if zs else "") + "."]
        if embed.get("st_ndcg_at_10") is not None:
            lines.append(f"sentence-transformers' zero-shot nDCG@10 by the same search and "
                         f"metrics: {embed['st_ndcg_at_10']:.2f}.")
    return lines


def render(machine: str, settings: Dict[str, str], arms: Dict[str, dict],
           order: Sequence[str], goal_rows: List[dict]) -> str:
    """The markdown report (also printed)."""
    lines = [machine, "", f"Data: {settings['data']}.", f"Bi-encoder recipe (bert_tf and "
             f"sentence-transformers alike): {settings['recipe']}.",
             f"Reranker recipe: {settings['rerank']}.", f"Seeds: {settings['seeds']}.", "",
             "| arm | seeds | nDCG@10 | Recall@100 | MRR@10 | MAP@100 | train examples/s | "
             "wall (CPU) per seed |", "|" + " --- |" * 8]
    for name in order:
        a = arms.get(name)
        if not a or name in ("embed_speed", "train_speed"):
            continue
        if a.get("not_run"):
            lines.append(f"| {name}: {a['title']} | not run: {a['not_run']} |" + " |" * 6)
            continue
        s = a.get("scores", {})
        wall, cpu = a.get("wall_seconds"), a.get("cpu_seconds")
        lines.append(f"| {name}: {a['title']} | {len(a.get('seeds', {}))} | "
                     + " | ".join(_ms(s.get(m)) for m in METRICS)
                     + f" | {_rate(a.get('throughput'))} | "
                     + (f"{wall['mean'] / 60:.1f} min" if wall else "-")
                     + (f" ({cpu['mean'] / 60:.1f} min)" if cpu else "") + " |")
    lines += ["", "Where each arm's figures come from (date, git commit, host, machine):", ""]
    for name in order:
        a = arms.get(name)
        if a and not a.get("not_run"):
            p = a.get("provenance", {})
            kept = f" (from the ledger: {a['ledger']})" if a.get("ledger") else ""
            lines.append(f"- {name}: {p.get('date', '?')}, {p.get('commit', '?')}, "
                         f"{p.get('host', '?')}, {p.get('machine', '?')}{kept}")
    lines += ["", "| difference (nDCG@10 points, ± SE) | value |", "| --- | --- |"]
    for arm, ref in [(g[1], g[2]) for g in GOALS] + OTHER_PAIRS:
        d = difference(arms.get(arm, {}), arms.get(ref, {}))
        if d:
            lines.append(f"| {arm} - {ref} | {_diff(d)} |")
    lines += ["", "| goal | value | verdict |", "| --- | --- | --- |"]
    lines += [f"| {g['goal']} | {g['value']} | {g['verdict']} |" for g in goal_rows]
    lines += _speed_lines(arms)
    busy = [f"{name} ({a['busy_cores_before']:.1f})" for name, a in arms.items()
            if (a.get("busy_cores_before") or 0) > BUSY_CORES
            and (a.get("throughput") or name in ("embed_speed", "train_speed"))]
    if busy:
        lines += ["", "WARNING: other work was running as these arms started (cores busy over "
                  "the 2 s before, at most): " + ", ".join(busy) + ". Their speeds (and wall "
                  "times) are not this machine's; run them again on a quiet machine."]
    return "\n".join(lines) + "\n"
