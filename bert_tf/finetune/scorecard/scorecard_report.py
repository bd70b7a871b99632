"""The scorecard's report: statistics over seeds, the GLUE score, markdown, JSON, submission.

Scores are points (GLUE's 0-100 scale). Per task and seed, the task score is the mean of its
metrics (MRPC: F1 and accuracy; STS-B: Pearson and Spearman; MNLI: matched and mismatched
accuracy), as GLUE's leaderboard averages them; the GLUE score of a seed is the mean of its
task scores, and the report gives mean ± std (sample std, n - 1) and the median over seeds.

Under the grid protocol each task keeps the learning rate with the best mean score over seeds
(ties go to the smaller rate); its GLUE server predictions come from that rate's best seed on
dev, as the BERT paper selected.

A run whose loss diverged (`RunRecord.diverged`) is not scored: the model it left is not the
model's result. Its task's figures are over the other seeds, marked "k of n seeds diverged",
or "diverged" when no seed is left; the GLUE score is over the seeds whose every task is
scored. The grid prefers a rate at which fewer runs diverged, whatever the others' scores.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import statistics
import zipfile
from typing import Dict, List, Optional, Sequence

from bert_tf import install_check
from bert_tf.core import fileio
from bert_tf.finetune.scorecard import glue
from bert_tf.finetune.scorecard.scorecard_runs import Model, Protocol, Run, RunRecord, task_score
from bert_tf.finetune.scorecard.suite import ScoredTask

SCORECARD_JSON = "scorecard.json"
SCORECARD_MD = "scorecard.md"
SUBMISSION_DIR = "submission"
SUBMISSION_ZIP = "submission.zip"


def stats(per_seed: Dict[int, float]) -> Dict[str, object]:
    """{"mean", "std" (n - 1; 0 for one seed), "median", "per_seed": {"<seed>": value}}."""
    values = [per_seed[s] for s in sorted(per_seed)]
    return {"mean": statistics.fmean(values),
            "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "median": statistics.median(values),
            "per_seed": {str(s): per_seed[s] for s in sorted(per_seed)}}


def standard_error(summary: Dict[str, object]) -> Optional[float]:
    """std / sqrt(n) of a `stats` summary; None for one seed (no spread to estimate it from)."""
    n = len(summary["per_seed"])
    return summary["std"] / math.sqrt(n) if n > 1 else None


def healthy_records(task: ScoredTask, model: Model, lr: float, protocol: Protocol,
                    records: Dict[Run, RunRecord]) -> Dict[int, RunRecord]:
    """seed -> record of the runs at `lr` that did not diverge."""
    runs = {s: records[Run(model, task, lr, s)] for s in protocol.seeds}
    return {s: r for s, r in runs.items() if not r.diverged}


def _mean_score(task: ScoredTask, chosen: Dict[int, RunRecord]) -> Optional[float]:
    return statistics.fmean(task_score(r, task) for r in chosen.values()) if chosen else None


def _best_lr(task: ScoredTask, model: Model, protocol: Protocol,
             records: Dict[Run, RunRecord]) -> float:
    def key(lr: float):
        chosen = healthy_records(task, model, lr, protocol, records)
        mean = _mean_score(task, chosen)
        return (len(chosen), -math.inf if mean is None else mean, -lr)

    # max over (runs that did not diverge, score, -lr): the best mean, the smaller rate on a
    # tie.
    return max(protocol.learning_rates, key=key)


def summarize(models: Sequence[Model], tasks: Sequence[ScoredTask], protocol: Protocol,
              records: Dict[Run, RunRecord],
              chance_levels: Optional[Dict[str, Optional[Dict[str, object]]]] = None
              ) -> Dict[str, object]:
    """The scorecard.json document (every run of `models` x `tasks` must be in `records`).

    `chance_levels`: task name -> `scorecard_baselines.task_level` (the score of a model
    that learned nothing, and which level it is), shown beside the rows.
    """
    rows = []
    for model in models:
        row_tasks: Dict[str, object] = {}
        per_seed_glue: Dict[int, List[float]] = {s: [] for s in protocol.seeds}
        for task in tasks:
            lr = _best_lr(task, model, protocol, records)
            chosen = healthy_records(task, model, lr, protocol, records)
            scores = {s: task_score(r, task) for s, r in chosen.items()}
            for s, value in scores.items():
                per_seed_glue[s].append(value)
            best_seed = max(scores, key=lambda s: (scores[s], -s)) if scores else None
            grid = {f"{x:g}": _mean_score(task, healthy_records(task, model, x, protocol,
                                                                records))
                    for x in protocol.learning_rates}
            first = records[Run(model, task, lr, protocol.seeds[0])]
            row_tasks[task.name] = {
                "metric": " / ".join(label for _, label in task.metrics),
                "learning_rate": lr, "score": stats(scores) if scores else None,
                "metrics": {key: stats({s: task.scale * r.metrics[key]
                                        for s, r in chosen.items()})
                            for key, _ in task.metrics} if scores else {},
                "diverged_seeds": [s for s in protocol.seeds if s not in chosen],
                "grid": grid, "selected_seed": best_seed,
                "train_examples": list(first.train_examples),
                "predictions": {name: os.path.join(Run(model, task, lr, best_seed).folder(""),
                                                   path)
                                for name, path in (chosen[best_seed].predictions
                                                   if scores else {}).items()},
                "glue_task": task.glue_task,
                "fine_tuning_seconds": sum(r.seconds for r in chosen.values()),
            }
        # Over the seeds whose every task is scored (none diverged).
        full = {s: statistics.fmean(v) for s, v in per_seed_glue.items() if len(v) == len(tasks)}
        rows.append({"name": model.name, "init_checkpoint": model.init_checkpoint,
                     "tasks": row_tasks, "glue_score": stats(full) if full else None})
    return {
        "score_name": "GLUE score" if all(t.glue_task for t in tasks) else "average score",
        "protocol": {**{k: v for k, v in vars(protocol).items()},
                     "learning_rates": list(protocol.learning_rates),
                     "seeds": list(protocol.seeds)},
        "chance_levels": dict(chance_levels or {}),
        "machine": install_check.describe_cpu(),
        "date": datetime.date.today().isoformat(),
        "rows": rows,
    }


def _cell(s: Optional[Dict[str, object]], diverged: Sequence[int] = (), seeds: int = 0) -> str:
    if s is None:
        return "diverged"
    note = f" ({len(diverged)} of {seeds} seeds diverged)" if diverged else ""
    return f"{s['mean']:.2f} ± {s['std']:.2f}{note}"


def markdown(doc: Dict[str, object]) -> str:
    """scorecard.md: the summary table, then per task metrics, medians and seeds."""
    p = doc["protocol"]
    rows = doc["rows"]
    tasks = list(rows[0]["tasks"])
    lrs = ", ".join(f"{x:g}" for x in p["learning_rates"])
    lines = [
        "# Scorecard", "",
        f"- protocol: {p['name']} (learning rate{'s' if len(p['learning_rates']) > 1 else ''} "
        f"{lrs}; batch {p['train_batch_size']}, {p['num_train_epochs']:g} epochs, warmup "
        f"{p['warmup_proportion']:g}, max_seq_length {p['max_seq_length']}, classifier readout "
        f"{p.get('classifier_readout', 'pooler')}), seeds "
        f"{', '.join(str(s) for s in p['seeds'])}",
    ]
    sizes = []
    for name in tasks:
        used, total = rows[0]["tasks"][name]["train_examples"]
        sizes.append(f"{name} {used:,} of {total:,}" if used < total else f"{name} all {used:,}")
    subset = (f"seeded subsets (subset seed {p['subset_seed']}) of at most "
              f"{p['max_train_examples']:,}" if p["max_train_examples"] else "full sets")
    lines += [f"- training examples ({subset}): {'; '.join(sizes)}",
              f"- machine: {doc['machine']}; {doc['date']}", ""]
    head = [doc["score_name"]] + [f"{n} {rows[0]['tasks'][n]['metric']}" for n in tasks]
    lines += ["| model | " + " | ".join(head) + " |", "|---" * (len(head) + 1) + "|"]
    n_seeds = len(p["seeds"])
    for row in rows:
        cells = [_cell(row["glue_score"])] + [
            _cell(row["tasks"][n]["score"], row["tasks"][n].get("diverged_seeds", ()), n_seeds)
            for n in tasks]
        lines.append(f"| {row['name']} | " + " | ".join(cells) + " |")
    lines += _chance_lines(doc, tasks)
    lines += ["", "Per task (the selected learning rate; each metric over seeds):", "",
              "| model | task | lr | metric | mean ± std | median | per seed |",
              "|---|---|---|---|---|---|---|"]
    for row in rows:
        for name in tasks:
            t = row["tasks"][name]
            diverged = t.get("diverged_seeds", ())
            if t["score"] is None:
                lines.append(f"| {row['name']} | {name} | {t['learning_rate']:g} | score | "
                             f"diverged (every seed) | | |")
                continue
            for key, s in [("score", t["score"])] + list(t["metrics"].items()):
                seeds = ", ".join(f"{v:.2f}" for v in s["per_seed"].values()) + (
                    f"; seed {', '.join(str(d) for d in diverged)} diverged" if diverged else "")
                lines.append(f"| {row['name']} | {name} | {t['learning_rate']:g} | {key} | "
                             f"{_cell(s)} | {s['median']:.2f} | {seeds} |")
    if len(p["learning_rates"]) > 1:
        lines += ["", "Grid (mean score over seeds per learning rate):", "",
                  "| model | task | " + " | ".join(f"{x:g}" for x in p["learning_rates"]) + " |",
                  "|---|---|" + "---|" * len(p["learning_rates"])]
        for row in rows:
            for name in tasks:
                grid = row["tasks"][name]["grid"]
                lines.append(f"| {row['name']} | {name} | " + " | ".join(
                    "diverged" if v is None else f"{v:.2f}" for v in grid.values()) + " |")
    return "\n".join(lines) + "\n"


def _chance_lines(doc: Dict[str, object], tasks: List[str]) -> List[str]:
    """The summary table's "majority / chance" row, then which level each task's is."""
    levels = doc.get("chance_levels") or {}
    if not any(levels.get(n) for n in tasks):
        return []
    known = [levels[n]["level"] for n in tasks if levels.get(n)]
    overall = f"{statistics.fmean(known):.2f}" if len(known) == len(tasks) else "—"
    cells = [overall] + [f"{levels[n]['level']:.2f}" if levels.get(n) else "—" for n in tasks]
    lines = ["| *majority / chance* | " + " | ".join(cells) + " |", "",
             "What a model that learned nothing scores (the majority class of the dev labels, "
             "scored with the task's metrics; 0 for MCC and correlations):", "",
             "| task | level | which |", "|---|---|---|"]
    for name in tasks:
        level = levels.get(name)
        lines.append(f"| {name} | {level['level']:.2f} | {level['kind']} |" if level
                     else f"| {name} | — | none for this kind of task |")
    return lines


def write_report(output_dir: str, doc: Dict[str, object]) -> List[str]:
    """Writes scorecard.json and scorecard.md atomically; returns their paths."""
    paths = []
    for name, text in ((SCORECARD_JSON, json.dumps(doc, indent=2, sort_keys=True) + "\n"),
                       (SCORECARD_MD, markdown(doc))):
        path = os.path.join(output_dir, name)
        with fileio.atomic_output(path, "wb") as f:
            f.write(text.encode("utf-8"))
        paths.append(path)
    return paths


def write_submission(output_dir: str, doc: Dict[str, object], glue_dir: str) -> List[str]:
    """The GLUE server's files for the first row, and submission.zip of them.

    Each task's file comes from its selected run's test predictions; WNLI, when it was not
    scored but its folder is in `glue_dir`, predicts its training majority (the BERT paper's
    answer). Files GLUE needs that no run produced are listed in the returned warnings.

    Returns:
        The names of GLUE's files that the submission lacks.
    """
    row = doc["rows"][0]
    folder = os.path.join(output_dir, SUBMISSION_DIR)
    fileio.makedirs(folder)
    files: Dict[str, List[str]] = {}
    for task in row["tasks"].values():
        for name, path in task["predictions"].items():
            files[name] = glue.submission_lines(task["glue_task"],
                                                os.path.join(output_dir, path))
    wnli = glue.GLUE_TASKS["wnli"]
    if ("WNLI.tsv" not in files and glue_dir
            and fileio.exists(os.path.join(glue.task_dir(glue_dir, wnli), "test.tsv"))):
        files["WNLI.tsv"] = glue.majority_predictions(glue_dir, "wnli")
    for name, lines in files.items():
        with fileio.atomic_output(os.path.join(folder, name), "wb") as f:
            f.write(("\n".join(lines) + "\n").encode("utf-8"))
    with fileio.atomic_output(os.path.join(output_dir, SUBMISSION_ZIP), "wb") as f:
        with zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as z:
            for name in sorted(files):
                z.write(os.path.join(folder, name), arcname=name)
    return [name for name in glue.SUBMISSION_FILES if name not in files]


def difference(a: Dict[str, object], b: Dict[str, object]) -> Dict[str, Optional[float]]:
    """a − b over seeds, and its standard error.

    Paired when the two share at least two seeds: the mean and the standard error of the
    per-seed differences over the shared seeds only. A seed that one side lacks (e.g. a
    diverged run) is left out of both, so that each seed's own effect (data order, the new
    head's initialisation) cancels. Otherwise unpaired: the difference of the means over all
    seeds, with standard error sqrt(std_a² / n_a + std_b² / n_b).

    Args:
        a: a `stats` summary.
        b: another.

    Returns:
        {"diff", "se", "paired": how many seeds the difference is paired over (0:
        unpaired)}. "se" is None for an unpaired difference where a side has one seed:
        there is no spread to estimate it from (the formula would give 0).
    """
    pa, pb = a["per_seed"], b["per_seed"]
    common = sorted(set(pa) & set(pb))
    if len(common) > 1:
        diffs = [pa[s] - pb[s] for s in common]
        return {"diff": statistics.fmean(diffs),
                "se": statistics.stdev(diffs) / math.sqrt(len(diffs)), "paired": len(common)}
    if min(len(pa), len(pb)) < 2:
        return {"diff": a["mean"] - b["mean"], "se": None, "paired": 0}
    na, nb = len(pa), len(pb)
    return {"diff": a["mean"] - b["mean"],
            "se": math.sqrt(a["std"] ** 2 / na + b["std"] ** 2 / nb), "paired": 0}
