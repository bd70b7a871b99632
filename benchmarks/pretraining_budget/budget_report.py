"""The pretraining-budget benchmark's report: per-arm table, goals, c's ablation, curves.

Scores are GLUE points (0-100) from each arm's `run_glue` scorecard.json: per task the mean ±
sample std (n - 1) over fine-tuning seeds, and the GLUE score (mean of the task scores, per
seed). The standard error of an arm's GLUE score is std / sqrt(n); that of a difference comes
from bert_tf's own scorecard (`scorecard_report.difference`): paired over seeds when both arms
have the same seeds, else sqrt(sa^2 / na + sb^2 / nb).

A difference is called a gain or a loss only when it is measurable: |t| = |diff| / SE at
least 2 and at least Student's two-sided 5 % critical value at the seeds' degrees of freedom
(n - 1; 4.30 for 3 seeds). Otherwise the report says "no measurable gain" (or loss): with
3 seeds, -0.94 ± 0.42 is t = 2.2 on 2 degrees of freedom, which does not show a loss.
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence

import budget_cache

TASK_LABELS = {"cola": "CoLA", "sst2": "SST-2", "mrpc": "MRPC", "stsb": "STS-B", "rte": "RTE"}
# (label, arm, reference: an arm or "max(d,e)", threshold): the issue's goals on the GLUE
# score difference arm - reference; the floor is the weaker pair below.
GOALS = [("c - a >= +5.0", "c", "a", 5.0),
         ("c >= max(d, e) + 1.0", "c", "max(d,e)", 1.0),
         ("b >= d - 0.5", "b", "d", -0.5)]
FLOOR = [("c > a", "c", "a", 0.0, True), ("c >= max(d, e)", "c", "max(d,e)", 0.0, False)]
# (label, arm, reference, what it measures): the tuned peers separate the recipe (batch, peak
# rate, warmup) from the framework.
COMPARISONS = [("d-tuned - d", "d-tuned", "d", "c's batch, rate and warmup in keras-hub"),
               ("e-tuned - e", "e-tuned", "e", "c's batch, rate and warmup in transformers"),
               ("c - d-tuned", "c", "d-tuned", "bert_tf's recipe against keras-hub at its "
                "batch, rate and warmup"),
               ("c - e-tuned", "c", "e-tuned", "bert_tf's recipe against transformers at its "
                "batch, rate and warmup")]
# Student's t, two-sided 5 %, by degrees of freedom (a df between two rows takes the lower
# row's, the larger value); beyond 30, the normal's 1.96.
T_CRITICAL = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
              9: 2.262, 10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}


def t_critical(df: int) -> float:
    """Student's two-sided 5 % critical value at `df` degrees of freedom (at least 1)."""
    if df > max(T_CRITICAL):
        return 1.96
    return T_CRITICAL[max(k for k in T_CRITICAL if k <= max(df, 1))]


def degrees_of_freedom(a: dict, b: dict) -> int:
    """n - 1 of a difference of two `stats` summaries: n the seeds it is paired over, or
    the smaller side's seeds when unpaired (the conservative choice)."""
    common = set(a["per_seed"]) & set(b["per_seed"])
    n = len(common) if len(common) > 1 else min(len(a["per_seed"]), len(b["per_seed"]))
    return n - 1


def verdict(diff: float, se: Optional[float], df: int) -> str:
    """"gain"/"loss" when measurable (module docstring), else "no measurable gain"/"loss",
    with t and the degrees of freedom; a difference without SE gets no verdict."""
    if se is None or df < 1:
        return "one seed: no verdict"
    t = diff / se if se > 0 else (math.copysign(math.inf, diff) if diff else 0.0)
    word = "gain" if diff > 0 else "loss"
    if diff == 0 or abs(t) < max(2.0, t_critical(df)):
        word = f"no measurable {word}" if diff else "no measurable difference"
    return f"{word} (t = {t:.1f}, {df} df)"


def comparisons(rows: Dict[str, dict]) -> List[dict]:
    """Each of COMPARISONS whose two arms have scorecards: the difference of GLUE scores
    with its SE and verdict."""
    from bert_tf.finetune.scorecard.scorecard_report import difference

    out = []
    for label, arm, ref, what in COMPARISONS:
        if arm in rows and ref in rows:
            a, b = rows[arm]["glue_score"], rows[ref]["glue_score"]
            d = difference(a, b)
            out.append({"comparison": label, "what": what, "diff": d["diff"], "se": d["se"],
                        "verdict": verdict(d["diff"], d["se"], degrees_of_freedom(a, b))})
    return out


def over_tasks(row: dict, tasks: Sequence[str]) -> dict:
    """`row` with its GLUE score averaged over `tasks` only (per seed, the mean of those
    tasks' scores), the scorecard's own over every task kept as "glue_score_all_tasks"."""
    import budget_screen

    if list(tasks) == list(row["tasks"]):
        return row
    return dict(row, glue_score=budget_screen.glue_over(row, tasks),
                glue_score_all_tasks=row.get("glue_score_all_tasks", row["glue_score"]))


def pretrain_cells(pretrain) -> list:
    """Steps, sequences, training seconds and tokens/s of an arm's pretraining ("-" without)."""
    if not pretrain:
        return ["-"] * 4
    steal = pretrain.get("steal_percent")  # the VM's stolen CPU share (entries before: none)
    seconds = f"{pretrain['train_seconds']:.0f}" + (f" ({steal:.0f} % stolen)"
                                                    if steal is not None and steal >= 1 else "")
    return [f"{pretrain['steps']:,}", f"{pretrain['examples']:,}", seconds,
            f"{pretrain['tokens_per_second']:,.0f}"]


def _ms(stats: Dict[str, object]) -> str:
    return f"{stats['mean']:.2f} ± {stats['std']:.2f}"


def glue_se(row: dict) -> Optional[float]:
    """The standard error of an arm's GLUE score; None for one seed."""
    from bert_tf.finetune.scorecard.scorecard_report import standard_error

    return standard_error(row["glue_score"])


def source(marker: Optional[dict]) -> str:
    """Where a stage's figures come from: its marker's date, commit, host and machine."""
    if not marker:
        return "-"
    p = marker.get("provenance", {})
    threads = marker.get("settings", {}).get("torch_threads")
    return (f"{p.get('date', '?')}, commit {p.get('commit', '?')}, {p.get('host', '?')}, "
            f"{budget_cache.machine_name(marker) or '?'}"
            + (f", {threads} torch threads" if threads else ""))


def reference(rows: Dict[str, dict], name: str) -> Optional[str]:
    """The arm a goal compares with: `name`, or the better of d and e for "max(d,e)"."""
    if name != "max(d,e)":
        return name if name in rows else None
    present = [n for n in ("d", "e") if n in rows]
    if len(present) < 2:
        return None
    return max(present, key=lambda n: rows[n]["glue_score"]["mean"])


def differences(rows: Dict[str, dict]) -> List[dict]:
    """Each goal's difference (GLUE points) with its standard error, PASS/FAIL, and the
    floor's."""
    from bert_tf.finetune.scorecard.scorecard_report import difference

    out = []
    for label, arm, ref_name, threshold, *strict in GOALS + FLOOR:
        ref = reference(rows, ref_name)
        entry = {"goal": label, "arm": arm, "reference": ref_name, "threshold": threshold,
                 "floor": bool(strict)}
        if arm in rows and ref:
            a, b = rows[arm]["glue_score"], rows[ref]["glue_score"]
            d = difference(a, b)
            ok = d["diff"] > threshold if strict and strict[0] else d["diff"] >= threshold
            entry.update(resolved=ref, diff=d["diff"], se=d["se"], passed=ok,
                         verdict=verdict(d["diff"], d["se"], degrees_of_freedom(a, b)))
        out.append(entry)
    return out


def ablation(arms: List[dict]) -> List[dict]:
    """What each of c's choices bought: every ablation arm (named "c-...", each puts one
    choice back) against c. Per arm: held-out MLM accuracy and sequences read, c minus the
    arm; c's GLUE score minus the arm's, with its standard error, when both have a
    scorecard; and whether the two budgets were spent on one machine (minutes on different
    machines buy different numbers of steps, so such a row compares machines too). Empty
    without c."""
    from bert_tf.finetune.scorecard.scorecard_report import difference

    by_name = {a["name"]: a for a in arms}
    c = by_name.get("c")
    if c is None:
        return []
    out = []
    for a in arms:
        if not a["name"].startswith("c-"):
            continue
        entry = {"arm": a["name"], "title": a["title"],
                 "same_machine": (budget_cache.machine_name(a.get("pretrain"))
                                  == budget_cache.machine_name(c.get("pretrain")))}
        if a.get("mlm") and c.get("mlm"):
            entry["mlm_bought"] = 100 * (c["mlm"]["masked_lm_accuracy"]
                                         - a["mlm"]["masked_lm_accuracy"])
        if a.get("pretrain") and c.get("pretrain"):
            entry["sequences"] = (c["pretrain"]["examples"], a["pretrain"]["examples"])
        if a.get("row") and c.get("row"):
            cs, xs = c["row"]["glue_score"], a["row"]["glue_score"]
            d = difference(cs, xs)
            entry.update(glue_bought=d["diff"], glue_se=d["se"],
                         verdict=verdict(d["diff"], d["se"], degrees_of_freedom(cs, xs)))
        out.append(entry)
    return out


def render_ablation(entries: List[dict]) -> List[str]:
    """The ablation table's markdown lines ([] without entries)."""
    if not entries:
        return []
    lines = ["", "What each of c's choices bought (c minus the arm that puts it back; "
             "held-out MLM accuracy in points, GLUE paired over seeds ± SE):", "",
             "| arm | sequences, c / arm | MLM accuracy bought | GLUE bought | verdict | "
             "same machine |",
             "| --- | --- | --- | --- | --- | --- |"]
    for e in entries:
        seqs = "{:,} / {:,}".format(*e["sequences"]) if "sequences" in e else "-"
        mlm = f"{e['mlm_bought']:+.2f}" if "mlm_bought" in e else "-"
        glue = "-"
        if "glue_bought" in e:
            se = f" ± {e['glue_se']:.2f}" if e["glue_se"] is not None else " (1 seed)"
            glue = f"{e['glue_bought']:+.2f}{se}"
        lines.append(f"| {e['arm']}: {e['title']} | {seqs} | {mlm} | {glue} | "
                     f"{e.get('verdict', '-')} | "
                     f"{'yes' if e['same_machine'] else 'NO: not comparable'} |")
    return lines


def curve(history: List[dict]) -> str:
    """`step: accuracy` pairs of an eval_history.jsonl (held-out MLM accuracy, %)."""
    return ", ".join(f"{h['step']}: {100 * h['masked_lm_accuracy']:.1f}" for h in history)


def render(machine: str, settings: dict, arms: List[dict], goals: List[dict]) -> str:
    """The markdown report (also printed): settings, the per-arm table, sources, goals."""
    tasks = settings["tasks"]
    glue_tasks = settings.get("glue_tasks", tasks)
    chance = settings.get("chance") or {}
    glue_label = "GLUE (± SE)" if list(glue_tasks) == list(tasks) else (
        "GLUE over " + ", ".join(TASK_LABELS[t] for t in glue_tasks) + " (± SE)")
    lines = [f"{machine}", "",
             f"Budget {settings['minutes']:g} min of training per arm; model "
             f"{settings['model']}; vocabulary {settings['vocab_size']:,} WordPieces "
             f"(build_vocab on the training articles); corpus {settings['corpus']}; "
             f"scorecard: run_glue --protocol=fixed ({settings['finetune']}), "
             f"seeds {settings['seeds']}, training sets capped at "
             f"{settings['max_train_examples']:,} examples (seeded subsets, the same for "
             f"every arm).", "",
             "| arm | steps | sequences | train s | tokens/s | held-out MLM acc (15 %) | "
             + " | ".join(TASK_LABELS[t] for t in tasks) + f" | {glue_label} |",
             "|" + " --- |" * (7 + len(tasks))]
    if chance:  # each task's majority-class (or chance) level, beside the arms' scores
        lines.append("| majority class / chance | - | - | - | - | - | " + " | ".join(
            f"{chance[t]['level']:.2f}" if chance.get(t) else "-" for t in tasks) + " | - |")
    for a in arms:
        p, m, row = a.get("pretrain"), a.get("mlm"), a.get("row")
        cells = [f"{a['name']}: {a['title']}"]
        cells += pretrain_cells(p)
        cells.append(f"{100 * m['masked_lm_accuracy']:.2f} %" if m else "-")
        if row:
            cells += [_ms(row["tasks"][t]["score"]) for t in tasks]
            se = glue_se(row)
            cells.append(f"{_ms(row['glue_score'])}" + (f" ({se:.2f})" if se is not None else ""))
        else:
            cells += ["-"] * (len(tasks) + 1)
        lines.append("| " + " | ".join(cells) + " |")
    left_out = [TASK_LABELS[t] for t in tasks if t not in glue_tasks]
    if left_out:
        averaged = ", ".join(TASK_LABELS[t] for t in glue_tasks)
        lines += ["", f"The GLUE score and every goal average {averaged}: "
                  f"{', '.join(left_out)} are scored but left out (--glue_tasks; the protocol "
                  "screen's choice leaves out the tasks arm c does not score above chance "
                  "on)."]
    lines += ["", "Where each arm's figures come from (date, git commit, host, machine):", ""]
    for a in arms:
        kept = f" (from the ledger: {a['ledger']})" if a.get("ledger") else ""
        lines.append(f"- {a['name']}: pretraining {source(a.get('pretrain'))}; held-out MLM "
                     f"{source(a.get('mlm'))}; scorecard {source(a.get('scorecard'))}{kept}")
    note = budget_cache.mixed_machines_note(arms)
    if note:
        lines += ["", note]
    lines += ["", "| goal (GLUE points) | difference ± SE | result | verdict |",
              "| --- | --- | --- | --- |"]
    for g in goals:
        if "diff" not in g:
            lines.append(f"| {'floor: ' if g['floor'] else ''}{g['goal']} | arms missing | - "
                         "| - |")
            continue
        ref = f" ({g['reference']} = {g['resolved']})" if g["reference"] != g["resolved"] else ""
        se = f"± {g['se']:.2f}" if g["se"] is not None else "(1 seed: no SE)"
        lines.append(f"| {'floor: ' if g['floor'] else ''}{g['goal']}{ref} | "
                     f"{g['diff']:+.2f} {se} | {'PASS' if g['passed'] else 'FAIL'} | "
                     f"{g['verdict']} |")
    compared = comparisons({a["name"]: a["row"] for a in arms if a.get("row")})
    if compared:
        lines += ["", "The recipe and the framework (GLUE points, paired over seeds):", "",
                  "| difference | ± SE | verdict | what it measures |", "| --- | --- | --- | --- |"]
        for c in compared:
            se = f"± {c['se']:.2f}" if c["se"] is not None else "(1 seed)"
            lines.append(f"| {c['comparison']} | {c['diff']:+.2f} {se} | {c['verdict']} | "
                         f"{c['what']} |")
    lines += render_ablation(ablation(arms))
    curves = [(a["name"], a["history"]) for a in arms if a.get("history")]
    if curves:
        lines += ["", "Held-out MLM accuracy (%) during training (step: accuracy; "
                  "run_pretraining --eval_every_n_steps, 15 % masks):", ""]
        lines += [f"- {name}: {curve(h)}" for name, h in curves]
    return "\n".join(lines) + "\n"
