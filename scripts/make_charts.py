"""Draws the results pages' charts from the measured figures in docs/results/data/*.json.

    python scripts/make_charts.py                       # every chart whose data exists
    python scripts/make_charts.py --import_curve=out/pretrain/eval_history.jsonl \\
        --curve_command="OUT=out bash scripts/run_main.sh (--eval_every_n_steps=100)"
    python scripts/make_charts.py \\
        --import_budget=~/.cache/bert_tf/bench_pretraining_budget/results.json

Each JSON file under docs/results/data/ holds one benchmark's figures as they were measured,
with the command that made them, the machine and the date; each chart is an SVG under
docs/results/img/ with the same stem, and the results pages show it beside its table. The
SVGs are deterministic (no date, fixed ids), so rerunning on unchanged data changes nothing
in git.

`--import_curve` turns a run's `eval_history.jsonl` (`run_pretraining --eval_every_n_steps`)
into pretraining_curve.json; `--import_budget` copies the pretraining-budget benchmark's
results.json (`benchmarks/pretraining_budget/bench_pretraining_budget.py`, format of
`benchmarks/pretraining_budget/budget_report.py`) into pretraining_budget.json, and the
held-out curves its bert_tf arms recorded into pretraining_budget_curves.json. Charts whose
data file does not exist yet are listed as pending and skipped.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
from pathlib import Path
from typing import Callable, Dict, List, Optional

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "docs" / "results" / "data"
IMG = ROOT / "docs" / "results" / "img"
OURS = "#1f6fb4"
PEER = "#b0b0b0"
PEER2 = "#e0a040"


def _style() -> None:
    plt.rcParams.update({
        "svg.hashsalt": "bert_tf",  # fixed element ids: the same data gives the same file
        "svg.fonttype": "none",  # text stays text (small files, searchable)
        "font.size": 10,
        "axes.spines.top": False,
        "axes.spines.right": False,
    })


def _caption(fig, doc: dict) -> None:
    _footnote(fig, f"{doc['machine']}; {doc['date']}")


def _footnote(fig, text: str) -> None:
    # Below the figure's lower edge: savefig's tight bounding box takes it in, and it never
    # overlaps the tick labels.
    fig.text(0.01, 0.0, text, fontsize=7, color="#555555", ha="left", va="top", wrap=True)


def _save(fig, path: Path) -> Path:
    fig.tight_layout()  # the axes' labels inside the figure, above the footnote
    fig.savefig(path, format="svg", metadata={"Date": None}, bbox_inches="tight")
    plt.close(fig)
    return path


def _hbars(ax, labels: List[str], values: List[float], colors: List[str], fmt: str) -> None:
    y = list(range(len(labels)))[::-1]
    ax.barh(y, values, color=colors)
    ax.set_yticks(y, labels)
    for yi, value in zip(y, values):
        ax.text(value, yi, " " + fmt.format(value), va="center", fontsize=9)
    ax.set_xlim(0, max(values) * 1.2)


def chart_pretraining_throughput(doc: dict) -> plt.Figure:
    """Horizontal bars, examples/s, bert_tf against keras-hub's fit()."""
    fig, ax = plt.subplots(figsize=(7, 2.6))
    rows = doc["rows"]
    _hbars(ax, [r["system"] for r in rows], [r["value"] for r in rows],
           [PEER if r["peer"] else OURS for r in rows], "{:.1f}")
    ax.set_xlabel(f"{doc['unit']} (BERT-Small, seq 128, batch 32)")
    ax.set_title("Pretraining throughput on a 2-core CPU", loc="left")
    _caption(fig, doc)
    return fig


def chart_finetune_throughput(doc: dict) -> plt.Figure:
    """Grouped bars, examples/s, bert_tf and transformers per CPU setting."""
    fig, ax = plt.subplots(figsize=(7, 2.8))
    rows = doc["rows"]
    x = range(len(rows))
    width = 0.38
    ours = [r["bert_tf"] for r in rows]
    theirs = [r["transformers"] for r in rows]
    ax.bar([i - width / 2 for i in x], ours, width, color=OURS, label="bert_tf")
    ax.bar([i + width / 2 for i in x], theirs, width, color=PEER, label="transformers")
    top = max(ours + theirs) * 1.3
    for i, (row, a, b) in enumerate(zip(rows, ours, theirs)):
        ax.text(i - width / 2, a, f"{a:.1f}", ha="center", va="bottom", fontsize=9)
        ax.text(i + width / 2, b, f"{b:.1f}", ha="center", va="bottom", fontsize=9)
        # The benchmark's ratio of the unrounded speeds, where it printed one (9.2 / 9.0
        # rounds to 1.02x; the run's own figure was 1.03x).
        ratio = row.get("ratio", a / b)
        # Above the value labels by a share of the axis: rows of very different speeds
        # (9 and 37 examples/s) would put a ratio at 1.12x the bar into its labels.
        ax.text(i, max(a, b) + 0.1 * top, f"{ratio:.2f}x", ha="center", fontsize=9,
                fontweight="bold")
    ax.set_xticks(list(x), [r["setting"] for r in rows])
    ax.set_ylim(0, top)
    ax.set_ylabel(doc["unit"])
    ax.set_title("Fine-tuning throughput (MiniLM-L6, seq 128, batch 32)", loc="left")
    ax.legend(frameon=False, loc="upper left")
    if "machine" in doc:
        _caption(fig, doc)
    else:  # one machine per row: the rows are different CPUs
        _footnote(fig, "; ".join(f"{r['setting']}: {r['machine']}, {r['date']}" for r in rows))
    return fig


def chart_data_jobs_speed(doc: dict) -> plt.Figure:
    """One panel per job against its reference."""
    panels = doc["panels"]
    fig, axes = plt.subplots(len(panels), 1, figsize=(7, 1.9 * len(panels) + 0.4))
    for ax, panel in zip(axes, panels):
        rows = panel["rows"]
        _hbars(ax, [r["system"] for r in rows], [r["value"] for r in rows],
               [PEER if r["peer"] else OURS for r in rows], "{:g}")
        ax.set_xlabel(panel["unit"])
        ax.set_title(panel["title"], loc="left", fontsize=10)
    fig.tight_layout()
    _footnote(fig, "; ".join(f"{p['machine']}, {p['date']}" for p in panels))
    return fig


def chart_sentence_splitters(doc: dict) -> plt.Figure:
    """Share of hand-checked cases split right against MB/s (log scale)."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for row in doc["rows"]:
        chosen = row.get("chosen", False)
        ax.scatter(row["mb_per_s"], row["all"], s=60, color=OURS if chosen else PEER,
                   zorder=3)
        ax.annotate(row["splitter"], (row["mb_per_s"], row["all"]), xytext=(6, -3),
                    textcoords="offset points", fontsize=8,
                    fontweight="bold" if chosen else "normal")
    ax.set_xscale("log")
    ax.set_xlim(0.08, 300)
    ax.set_xlabel("MB/s on the bundled corpus (log scale)")
    ax.set_ylabel("% of 76 hand-checked cases")
    ax.set_title("Sentence splitters: right and fast is top right", loc="left")
    ax.grid(True, which="major", alpha=0.3)
    _caption(fig, doc)
    return fig


def chart_data_at_scale(doc: dict) -> plt.Figure:
    """MB/s on 1 and 2 workers per stage, with the ratio."""
    fig, ax = plt.subplots(figsize=(7, 2.9))
    rows = doc["rows"]
    x = range(len(rows))
    width = 0.38
    one = [r["one_worker"] for r in rows]
    two = [r["two_workers"] for r in rows]
    ax.bar([i - width / 2 for i in x], one, width, color=PEER, label="1 worker")
    ax.bar([i + width / 2 for i in x], two, width, color=OURS, label="2 workers")
    for i, row in enumerate(rows):
        # The benchmark's ratio of the unrounded speeds, where it printed one.
        ratio = row.get("ratio", row["two_workers"] / row["one_worker"])
        ax.text(i + width / 2, row["two_workers"], f"{ratio:.2f}x", ha="center", va="bottom",
                fontsize=9)
    ax.set_xticks(list(x), [r["stage"] for r in rows])
    ax.set_ylabel(doc["unit"])
    ax.set_ylim(0, max(two) * 1.2)
    ax.set_title("Data jobs on 1 GB of raw text", loc="left")
    ax.legend(frameon=False)
    _caption(fig, doc)
    return fig


def chart_finetune_parity(doc: dict) -> plt.Figure:
    """Mean ± std per task and metric, bert_tf beside transformers."""
    rows = doc["rows"]
    fig, ax = plt.subplots(figsize=(7, 3.2))
    x = range(len(rows))
    width = 0.38
    for offset, key, color in ((-width / 2, "bert_tf", OURS), (width / 2, "transformers", PEER)):
        ax.bar([i + offset for i in x], [r[key][0] for r in rows], width,
               yerr=[r[key][1] for r in rows], capsize=3, color=color, label=key)
    ax.set_xticks(list(x), [f"{r['task']}\n{r['metric']}\n({r['seeds']} seeds)" for r in rows],
                  fontsize=8)
    ax.set_ylabel("dev score (mean ± std over seeds)")
    ax.set_ylim(0, 100)
    ax.set_title("Fine-tuning the same MiniLM-L6 checkpoint: bert_tf and transformers",
                 loc="left")
    ax.legend(frameon=False, ncols=2)
    _caption(fig, doc)
    return fig


def chart_pretraining_curve(doc: dict) -> plt.Figure:
    """Held-out MLM (and NSP) accuracy against the training step."""
    points = doc["points"]
    fig, ax = plt.subplots(figsize=(7, 3.2))
    steps = [p["step"] for p in points]
    ax.plot(steps, [p["masked_lm_accuracy"] for p in points], marker="o", color=OURS,
            label="masked-LM accuracy")
    if all(p.get("next_sentence_accuracy") is not None for p in points):
        ax.plot(steps, [p["next_sentence_accuracy"] for p in points], marker="s",
                color=PEER2, label="next-sentence accuracy")
    for baseline in doc.get("baselines", []):
        ax.axhline(baseline["value"], color="#777777", linestyle=":", linewidth=1)
        ax.text(steps[0], baseline["value"] + 0.015, baseline["label"], fontsize=8,
                color="#555555")
    ax.set_xlabel("training step (batch 32)")
    ax.set_ylabel("held-out accuracy")
    ax.set_ylim(0, 1)
    ax.grid(True, alpha=0.3)
    ax.set_title(doc["title"], loc="left", fontsize=10)
    ax.legend(frameon=False)
    _caption(fig, doc)
    return fig


def chart_pretraining_budget(doc: dict) -> plt.Figure:
    """GLUE score (mean ± standard error over seeds) of every arm of the budget benchmark."""
    from bert_tf.finetune.scorecard.scorecard_report import standard_error

    arms = [a for a in doc["arms"] if a.get("row")]
    fig, ax = plt.subplots(figsize=(7, 0.5 * len(arms) + 1.4))
    labels, means, errors, colors = [], [], [], []
    for arm in arms:
        glue = arm["row"]["glue_score"]
        labels.append(f"{arm['name']}: {arm['title']}")
        means.append(glue["mean"])
        errors.append(standard_error(glue) or 0.0)  # one seed: no error bar
        colors.append(OURS if arm["name"].startswith(("b", "c")) else PEER)
    y = list(range(len(arms)))[::-1]
    ax.barh(y, means, xerr=errors, capsize=3, color=colors)
    ax.set_yticks(y, labels, fontsize=8)
    for yi, mean in zip(y, means):
        ax.text(mean, yi + 0.25, f" {mean:.2f}", fontsize=8)
    ax.set_xlabel("GLUE score (mean ± standard error over fine-tuning seeds)")
    ax.set_title(f"GLUE after {doc['settings']['minutes']:g} minutes of pretraining, "
                 f"{len(arms)} arms", loc="left")
    _footnote(fig, doc["machine"])
    return fig


def chart_pretraining_budget_curves(doc: dict) -> plt.Figure:
    """Held-out MLM accuracy of the budget benchmark's bert_tf arms, against step and time."""
    fig, (by_step, by_time) = plt.subplots(1, 2, figsize=(8, 3.2), sharey=True)
    for i, curve in enumerate(doc["curves"]):
        color = (OURS, PEER2, "#6a9f58", "#9b59b6")[i % 4]
        points = curve["points"]
        accuracy = [100 * p["masked_lm_accuracy"] for p in points]
        label = f"{curve['name']}: {curve['title']}"
        by_step.plot([p["step"] for p in points], accuracy, marker="o", markersize=3,
                     color=color, label=label)
        by_time.plot([p["train_seconds"] / 60 for p in points], accuracy, marker="o",
                     markersize=3, color=color)
    batch = {c.get("train_batch_size") for c in doc["curves"]}
    by_step.set_xlabel("training step" + (f" (batch {batch.pop()})" if len(batch) == 1 else ""))
    by_time.set_xlabel("training minutes")
    by_step.set_ylabel("held-out MLM accuracy (%)")
    for ax in (by_step, by_time):
        ax.grid(True, alpha=0.3)
    by_step.legend(frameon=False, fontsize=7, loc="lower right")
    fig.suptitle(doc["title"], x=0.01, ha="left", fontsize=10)
    _footnote(fig, doc["machine"])
    return fig


def chart_pretraining_budget_minutes(doc: dict) -> plt.Figure:
    """GLUE minus random weights against pretraining minutes, per recipe of the budget
    benchmark (± standard error, paired over seeds); filled: the run's schedule ends there,
    open: a snapshot of a longer run, taken before its decay."""
    fig, ax = plt.subplots(figsize=(7, 3.4))
    recipes = sorted({p["recipe"] for p in doc["points"]})
    for i, recipe in enumerate(recipes):
        color = (OURS, PEER2, "#6a9f58")[i % 3]
        for schedule, face in (("long", "white"), ("own", color)):
            pts = [p for p in doc["points"] if p["recipe"] == recipe
                   and p["schedule"] == schedule and p.get("minus_random") is not None]
            if not pts:
                continue
            ax.errorbar([p["minutes"] for p in pts], [p["minus_random"] for p in pts],
                        yerr=[p.get("minus_random_se") or 0.0 for p in pts], marker="o",
                        linestyle="-" if schedule == "long" else "none", color=color,
                        markerfacecolor=face, capsize=3,
                        label=f"{recipe}: {doc['titles'].get(recipe, recipe)}"
                        + (" (snapshots of the long run)" if schedule == "long" else ""))
            for p in pts:
                ax.annotate(f"{p['minus_random']:+.2f}", (p["minutes"], p["minus_random"]),
                            textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.axhline(0.0, color=PEER, linewidth=1)
    ax.set_xlabel("pretraining minutes (training time)")
    ax.set_ylabel("GLUE minus random weights")
    ax.grid(True, alpha=0.3)
    ax.legend(frameon=False, fontsize=7, loc="upper left")
    ax.set_title(doc["title"], loc="left", fontsize=10)
    _footnote(fig, doc["machine"])
    return fig


# Charts whose data no benchmark run has produced yet: draw_all lists them as pending, and
# a chart leaves this set when its data file is checked in.
PENDING = {"pretraining_budget_minutes"}

CHARTS: Dict[str, Callable[[dict], plt.Figure]] = {
    "pretraining_throughput": chart_pretraining_throughput,
    "finetune_throughput": chart_finetune_throughput,
    "data_jobs_speed": chart_data_jobs_speed,
    "sentence_splitters": chart_sentence_splitters,
    "data_at_scale": chart_data_at_scale,
    "finetune_parity": chart_finetune_parity,
    "pretraining_curve": chart_pretraining_curve,
    "pretraining_budget": chart_pretraining_budget,
    "pretraining_budget_curves": chart_pretraining_budget_curves,
    "pretraining_budget_minutes": chart_pretraining_budget_minutes,
}


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def import_curve(history_path: str, command: str, machine: Optional[str]) -> Path:
    """Writes pretraining_curve.json from a run's eval_history.jsonl."""
    sys.path.insert(0, str(ROOT))
    from bert_tf.training.eval_history import read_eval_history

    records = read_eval_history(history_path)
    if not records:
        raise SystemExit(f"{history_path}: no evaluations")
    keys = ("step", "masked_lm_accuracy", "masked_lm_loss", "next_sentence_accuracy",
            "next_sentence_loss", "train_seconds")
    doc = {
        "title": "Held-out accuracy during the README's main job (L-4/H-128, WikiText-2)",
        "command": command,
        "machine": machine or f"{os.cpu_count()}-core {_cpu_model()}",
        "date": datetime.date.today().isoformat(),
        "data": "derived from WikiText-2 (data/corpus/wikitext2.bert.txt), CC BY-SA 3.0",
        "points": [{key: record.get(key) for key in keys} for record in records],
    }
    path = DATA / "pretraining_curve.json"
    if path.exists():  # hand-written reference levels of the same data stay
        baselines = json.loads(path.read_text(encoding="utf-8")).get("baselines")
        if baselines:
            doc["baselines"] = baselines
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return path


def import_budget(results_path: str) -> List[Path]:
    """Copies the budget benchmark's results.json (budget_report's format), and the held-out
    curves of the arms that recorded one (their eval_history.jsonl) as a second file."""
    with open(os.path.expanduser(results_path), encoding="utf-8") as f:
        doc = json.load(f)
    for key in ("machine", "settings", "arms"):
        if key not in doc:
            raise SystemExit(f"{results_path}: no {key!r}: not a budget benchmark results.json")
    path = DATA / "pretraining_budget.json"
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    written = [path]
    sys.path.insert(0, str(ROOT))
    from bert_tf.training.eval_history import read_eval_history

    curves = []
    for arm in doc["arms"]:
        history = (arm.get("pretrain") or {}).get("eval_history")
        # read_eval_history: in step order, a resumed run's repeated step once, [] if absent.
        records = read_eval_history(history) if history else []
        if not records:
            continue
        # Only masked-LM: the curve's held-out records are MLM-only (one evaluator for every
        # arm), so an NSP head's accuracy on them means nothing.
        curves.append({"name": arm["name"], "title": arm["title"],
                       "train_batch_size": arm["pretrain"].get("train_batch_size"),
                       "points": [{k: r.get(k) for k in ("step", "masked_lm_accuracy",
                                                         "masked_lm_loss", "train_seconds")}
                                  for r in records]})
    if curves:
        path = DATA / "pretraining_budget_curves.json"
        path.write_text(json.dumps({
            "title": "Held-out masked-LM accuracy (15 % masks) during the budget benchmark's "
                     "bert_tf arms",
            "machine": doc["machine"], "settings": doc["settings"],
            "command": "python benchmarks/pretraining_budget/bench_pretraining_budget.py",
            "curves": curves}, indent=1) + "\n", encoding="utf-8")
        written.append(path)
    if doc.get("glue_minutes"):
        path = DATA / "pretraining_budget_minutes.json"
        path.write_text(json.dumps({
            "title": "GLUE against pretraining minutes, minus random weights",
            "machine": doc["machine"], "settings": doc["settings"],
            "command": "python benchmarks/pretraining_budget/bench_pretraining_budget.py "
                       "--arms=a,c,f,c120,f120",
            "titles": {a["name"]: a["title"] for a in doc["arms"]},
            "points": doc["glue_minutes"]}, indent=1) + "\n", encoding="utf-8")
        written.append(path)
    return written


def draw_all(data_dir: Path, img_dir: Path) -> List[Path]:
    """Draws every chart whose data file exists in `data_dir` as `img_dir/<name>.svg`.

    Args:
        data_dir: the folder of the charts' JSON files (docs/results/data).
        img_dir: where the SVGs go (docs/results/img; created if missing).

    Returns:
        The SVGs written, in the order of CHARTS. A chart whose data file does not exist
        yet is listed as pending on stdout and skipped.
    """
    _style()
    img_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, draw in CHARTS.items():
        data = data_dir / f"{name}.json"
        if not data.exists():
            print(f"pending: {data.name} does not exist yet; no {name}.svg")
            continue
        doc = json.loads(data.read_text(encoding="utf-8"))
        written.append(_save(draw(doc), img_dir / f"{name}.svg"))
    return written


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--import_curve", help="eval_history.jsonl to chart as the curve")
    parser.add_argument("--curve_command", default="OUT=/tmp/demo_curve bash "
                        "scripts/run_main.sh, pretraining with --eval_every_n_steps=100",
                        help="the command that made --import_curve's run (shown on the page)")
    parser.add_argument("--curve_machine", help="the machine of that run (default: this one)")
    parser.add_argument("--import_budget", help="bench_pretraining_budget's results.json")
    args = parser.parse_args(argv)
    if args.import_curve:
        print(f"wrote {import_curve(args.import_curve, args.curve_command, args.curve_machine)}")
    if args.import_budget:
        for path in import_budget(args.import_budget):
            print(f"wrote {path}")
    for path in draw_all(DATA, IMG):
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
