"""Five ways to pretrain BERT in the same wall-clock budget, scored by the GLUE scorecard.

    bash benchmarks/common/hf_env.sh                     # once: arm e's venv
    .venv/bin/python benchmarks/pretraining_budget/bench_pretraining_budget.py  # 30 min an arm
    .venv/bin/python benchmarks/pretraining_budget/bench_pretraining_budget.py --smoke  # minutes
    .venv/bin/python benchmarks/pretraining_budget/bench_pretraining_budget.py \
        --arms=c,c-mask15,c-linear

On 100 MB of English Wikipedia (../shared/data/corpus/wikipedia_en, run through
`data_tools.prepare_corpus`; every 50th article held out) with one WordPiece vocabulary
(`data_tools.build_vocab` on the training articles, 16,384 pieces) and one architecture
(--bert_config, default configs/bert_config_tiny.json: L-2/H-128, 2 heads, vocab_size set to
the vocabulary's; BERT-Mini, configs/bert_config_mini.json, stays on the plateau of frequent
words in 30 minutes of two cores, docs/results/pretraining.md), each arm gets the same
training-time budget (--minutes) on this machine. The arms (a random init; b, c the original
and the budget bert_tf recipes; d, e keras-hub and transformers, and their tuned versions;
f ELECTRA; g, h the modern encoder; c120, f120 the 4 x budget curve; f-mlm and the ablations
of c) are listed, each with what it trains, in budget_arms.py; the pretraining stage is
budget_pretrain.py. Every pretrained arm's held-out masked-LM accuracy is measured by one evaluator
(bert_tf's run_pretraining --do_eval on the arm's checkpoint, converted for d and e) on the
held-out articles' MLM-only records with static 15 % masks; then `bert_tf.run_glue
--protocol=fixed` fine-tunes every arm on SST-2, MRPC, CoLA, STS-B and RTE over --seeds.
The report (printed, and written as results.md / results.json in the cache) gives per arm
the steps, sequences, training seconds, tokens/s (sequences x length / training second),
held-out MLM accuracy and GLUE scores with standard errors, and the issue's goals with the
standard error of each difference.

The scorecard stage takes --readout (run_glue --classifier_readout), --learning_rate and
--seeds, and --scorecard_only scores cached checkpoints without pretraining anything: the
protocol screen (readout x learning rate x model size) and how its choice is made before
new arms are scored are in README.md beside this script.

Every stage is cached under --cache_dir (outside the work tree) with a marker written last,
which records date, git commit and machine; a killed run resumes at the first unfinished
stage (pretraining from its checkpoints, the scorecard from its finished runs). An arm's
folder name carries a digest of its settings, the budget, the machine and the contents of
its config, vocabulary, training text and recipe (`arm_key`): changing any starts anew.
A finished arm is also kept in the repository's ledger (benchmarks/ledger/pretraining_budget/,
budget_cache.py): a run on a machine whose cache lacks the arm reports it from there, with
the machine it ran on, and the report says when the arms' budgets were spent on different
machines.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(os.path.dirname(HERE), "common")]  # budget_*; machine
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # the report imports bert_tf (TensorFlow)
import budget_bert_tf  # noqa: E402
import budget_cache  # noqa: E402
import budget_curves  # noqa: E402
import budget_data  # noqa: E402
import budget_report  # noqa: E402
import budget_screen  # noqa: E402
import machine  # noqa: E402
from budget_arms import (  # noqa: E402
    ARMS,
    CHOSEN,
    EVAL_PRED,
    EVAL_SEQ,
    Arm,
    model_config,
    modern_config_of,
    objective_flags,
)
from budget_keys import arm_folder, legacy_arm_folder  # noqa: E402
from budget_pretrain import pretrain  # noqa: E402

REPO = budget_cache.REPO
# curve: held-out evaluations during a bert_tf arm's training, and batches of 64 each.
FULL = dict(minutes=30.0, probe_minutes=1.0, max_articles=0, heldout_every=50,
            vocab_size=16384, seeds=CHOSEN["seeds"], max_train_examples=8000, curve=(10, 16))
SMOKE = dict(minutes=1.0, probe_minutes=0.25, max_articles=300, heldout_every=10,
             vocab_size=4096, seeds="1", max_train_examples=200, curve=(2, 4))
LEDGER = "pretraining_budget"  # benchmarks/ledger/<LEDGER>/: finished arms, kept in the repo


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, help="training budget per arm (default 30)")
    parser.add_argument("--arms", default="", help="comma-separated names (default: "
                        + ",".join(a.name for a in ARMS if a.default) + "); ablations: "
                        + ",".join(a.name for a in ARMS if not a.default))
    parser.add_argument("--cache_dir", default=os.path.expanduser(
        "~/.cache/bert_tf/bench_pretraining_budget"))
    parser.add_argument("--seeds", help=f"fine-tuning seeds (default {CHOSEN['seeds']}; the "
                        "screen's were 1,2,3)")
    parser.add_argument("--max_train_examples", type=int,
                        help="scorecard: cap of each training set (default 8000)")
    parser.add_argument("--tasks", default="cola,sst2,mrpc,stsb,rte")
    parser.add_argument("--bert_config", default="configs/bert_config_tiny.json",
                        help="the architecture of every arm (vocab_size is replaced)")
    parser.add_argument("--vocab_size", type=int, help="default 16384")
    parser.add_argument("--finetune_learning_rate", "--learning_rate", type=float,
                        default=CHOSEN["learning_rate"],
                        help="scorecard: run_glue --learning_rate, one for every task and arm "
                        "(the protocol screen's choice: README.md beside this script)")
    parser.add_argument("--readout", default=CHOSEN["readout"],
                        choices=("pooler", "cls", "mean"),
                        help="scorecard: run_glue --classifier_readout, the sentence vector "
                        "the classifier reads (the protocol screen's choice)")
    parser.add_argument("--glue_tasks", default=CHOSEN["glue_tasks"],
                        help="the tasks the report's GLUE score (and every goal) averages, of "
                        "those scored; 'all' = every scored task (the screen's rule 1 leaves "
                        "out the tasks c does not score above chance on)")
    parser.add_argument("--scorecard_only", action="store_true",
                        help="score cached checkpoints only: stop at an arm whose "
                        "pretraining is not in the cache (the protocol screen)")
    parser.add_argument("--screen", default="",
                        help="the protocol screen: readout@lr items, e.g. pooler@3e-4,"
                        "cls@3e-4,mean@3e-4; scores every arm under each (cached) and "
                        "prints the choice (budget_screen.py)")
    parser.add_argument("--arm_folders", default="",
                        help="name=folder items (arm=<ledger folder>): take these arms from "
                        "the ledger under that folder name, an arm pretrained on another "
                        "machine, instead of this machine's key (a screen spanning sessions)")
    parser.add_argument("--finetune_epochs", type=float, default=3.0)
    parser.add_argument("--data_dir", default=os.path.normpath(os.path.join(REPO, "..", "shared",
                                                                            "data")),
                        help="the shared data: corpus/wikipedia_en and finetune/glue_*")
    budget_cache.add_pretrain_only(parser, "pretrain the arms")
    parser.add_argument("--smoke", action="store_true",
                        help="1-minute budget, 300 articles, 1 seed, 200 training examples "
                        "per task (cached separately): checks the whole benchmark quickly")
    args = parser.parse_args()
    budget_cache.apply_preset(args, SMOKE, FULL)
    names = args.arms.split(",") if args.arms else [a.name for a in ARMS if a.default]
    known = {a.name: a for a in ARMS}
    unknown = [n for n in names if n not in known]
    if unknown:
        parser.error(f"unknown arm(s) {', '.join(unknown)}; choose from {', '.join(known)}")
    args.arm_list = [known[n] for n in names]
    items = [i for i in args.arm_folders.split(",") if i]
    args.folders = dict(i.partition("=")[::2] for i in items)
    bad = [i for i in items if "=" not in i or i.partition("=")[0] not in known]
    if bad:
        parser.error(f"--arm_folders item(s) {', '.join(bad)} are not arm=folder")
    try:
        args.protocols = budget_screen.parse(args.screen) if args.screen else []
    except ValueError as e:
        parser.error(str(e))
    return args


def scorecard_settings(args) -> dict:
    settings = dict(tasks=args.tasks, lr=args.finetune_learning_rate,
                    epochs=args.finetune_epochs, max_train_examples=args.max_train_examples)
    if args.readout != "pooler":  # at its default, the earlier scorecards' keys hold
        settings["readout"] = args.readout
    return settings


def scorecard_key(arm_dir: str, args) -> Tuple[str, str]:
    """The scorecard's folder in the arm's and its stage name (the seeds' digest)."""
    return (os.path.join(arm_dir, f"scorecard-{budget_cache.digest(scorecard_settings(args))}"),
            f"scorecard_{budget_cache.digest(args.seeds)}")


def scorecard(arm: Arm, arm_dir: str, args, glue: str, config: str, vocab: str,
              checkpoint: str) -> dict:
    """run_glue on the arm (cached per seeds; run_glue itself skips finished runs)."""
    settings = scorecard_settings(args)
    out, stage = scorecard_key(arm_dir, args)
    done = budget_cache.done(out, stage)
    if done:
        return done
    cmd = [sys.executable, "-m", "bert_tf.run_glue", f"--glue_dir={glue}",
           f"--tasks={args.tasks}", "--protocol=fixed",
           f"--learning_rate={args.finetune_learning_rate}", "--train_batch_size=32",
           f"--num_train_epochs={args.finetune_epochs}", "--warmup_proportion=0.1",
           "--max_seq_length=128", f"--seeds={args.seeds}",
           f"--max_train_examples={args.max_train_examples}", f"--output_dir={out}",
           f"--name={arm.name}", f"--vocab_file={vocab}", "--do_lower_case=true",
           f"--classifier_readout={args.readout}",
           # One head for every arm (dropout + dense on the readout vector), so that the
           # scorecard compares pretrained weights, not heads: "auto" would give ELECTRA's
           # arms (f, h) ELECTRA's dense + GELU + dense on [CLS] and the modern arms
           # ModernBERT's. For a, b, c, d and e, auto is this head already.
           "--classifier_head=bert"]
    cmd.append(f"--init_checkpoint={checkpoint}" if checkpoint else f"--bert_config_file={config}")
    print(f"  scorecard of {arm.name}: {out}", flush=True)
    budget_data.run_logged(cmd, os.path.join(out, "run_glue.log"), f"scorecard of {arm.name}")
    doc = budget_cache.read_json(os.path.join(out, "scorecard.json"))
    return budget_cache.finish(out, stage, {"row": doc["rows"][0], "protocol": doc["protocol"],
                                            "settings": settings, "seeds": args.seeds,
                                            "chance_levels": doc.get("chance_levels", {})})


def run_arm(arm: Arm, args, cache: str, config: str, vocab: str, glue: str,
            heldout: str) -> dict:
    if arm.architecture == "modern":
        config = modern_config_of(config, cache)
    arm_dir = arm_folder(arm, args, cache, config, vocab, EVAL_SEQ)
    legacy = legacy_arm_folder(arm, args, cache, config, vocab, EVAL_SEQ)
    if arm.name in args.folders:  # another machine's arm, reported from the ledger
        arm_dir, legacy = os.path.join(cache, "arms", args.folders[arm.name]), ""
    machine_line = None if arm.kind == "random" else budget_cache.this_machine()
    if not os.path.exists(arm_dir) and legacy and os.path.isdir(legacy) and (
            machine_line is None or budget_cache.machine_name(
                budget_cache.done(legacy, "pretrain")) == machine_line):
        arm_dir = legacy  # pretrained here under the earlier key: rescored, not rerun
    print(f"arm {arm.name} ({arm.title}): {arm_dir}", flush=True)
    out, stage = scorecard_key(arm_dir, args)
    downstream, kept = budget_cache.kept_arm(LEDGER, arm_dir, out, stage, args.smoke, legacy,
                                             machine_line)
    if kept:
        return kept
    if arm.name in args.folders and not budget_cache.done(arm_dir, "pretrain"):
        sys.exit(f"arm {arm.name}: folder {args.folders[arm.name]} has no scorecard under this "
                 "protocol in the ledger and no checkpoint in the cache: score it on the "
                 "machine that pretrained it, or drop it from --arm_folders")
    result = {"name": arm.name, "title": arm.title, "dir": arm_dir,
              "minutes": args.minutes * arm.scale, "recipe": arm.recipe}
    checkpoint = ""
    if arm.kind != "random":
        result["pretrain"] = pretrain(arm, arm_dir, args, cache, config, vocab)
        checkpoint = result["pretrain"]["checkpoint"]
        result["mlm"] = budget_bert_tf.mlm_accuracy(
            arm_dir, checkpoint, result["pretrain"]["bert_config"], heldout, EVAL_SEQ, EVAL_PRED,
            objective_flags(arm))
        history = result["pretrain"].get("eval_history")
        if history:
            from bert_tf.training.eval_history import read_eval_history

            # The AUC histograms ("sums") only combine batches into one evaluation; the
            # ledger keeps the figures, and the cache's eval_history.jsonl keeps the rest.
            result["history"] = [{k: v for k, v in h.items() if k != "sums"}
                                 for h in read_eval_history(history)]
    if args.pretrain_only:
        return result
    result["snapshots"] = [score_snapshot(arm, arm_dir, x * result["minutes"], args, glue,
                                          config, vocab, heldout) for x in arm.snapshots]
    result["scorecard"] = scorecard(arm, arm_dir, args, glue, config, vocab, checkpoint)
    result["row"] = result["scorecard"]["row"]
    budget_cache.to_ledger(LEDGER, arm_dir, downstream, result)
    return result


def score_snapshot(arm: Arm, arm_dir: str, minutes: float, args, glue: str, config: str,
                   vocab: str, heldout: str) -> dict:
    """A long arm's state at `minutes` (kept by its pretraining): held-out MLM accuracy and
    scorecard, each cached in the snapshot's folder and written to the ledger under it."""
    snap = budget_curves.snapshot_dir(arm_dir, minutes)
    out, stage = scorecard_key(snap, args)
    downstream, kept = budget_cache.kept_arm(LEDGER, snap, out, stage, args.smoke)
    if kept:
        return kept
    marker = budget_cache.done(snap, "snapshot")
    result = {"name": f"{arm.name}@{minutes:g}", "minutes": minutes, "dir": snap,
              "pretrain": marker, "train_seconds": marker["train_seconds"]}
    result["mlm"] = budget_bert_tf.mlm_accuracy(snap, snap, marker["bert_config"], heldout,
                                                EVAL_SEQ, EVAL_PRED, objective_flags(arm))
    result["scorecard"] = scorecard(arm, snap, args, glue, config, vocab, snap)
    result["row"] = result["scorecard"]["row"]
    budget_cache.to_ledger(LEDGER, snap, downstream, result)
    return result


def screen(args, cache: str, config: str, vocab: str, glue: str, heldout: str,
           line: str) -> None:
    """Every arm's scorecard under each of --screen's protocols, then the screen's table and
    choice (budget_screen), printed and written as screen.md / screen.json in the cache."""
    rows, chance = {}, {}
    for readout, lr in args.protocols:
        args.readout, args.finetune_learning_rate = readout, lr
        print(f"protocol {budget_screen.label((readout, lr))}", flush=True)
        results = [run_arm(arm, args, cache, config, vocab, glue, heldout)
                   for arm in args.arm_list]
        rows[(readout, lr)] = {r["name"]: r["row"] for r in results}
        for r in results:
            chance.update(r["scorecard"].get("chance_levels") or {})
    tasks = args.tasks.split(",")
    assessed = {p: budget_screen.assess(rows[p], chance, tasks) for p in args.protocols}
    text = "\n".join([line, "", f"seeds {args.seeds}, training sets capped at "
                      f"{args.max_train_examples:,}, {args.finetune_epochs:g} epochs", ""]
                     + budget_screen.render(assessed, rows, chance, tasks,
                                            budget_report.TASK_LABELS)) + "\n"
    print("\n" + text, flush=True)
    with open(os.path.join(cache, "screen.md"), "w", encoding="utf-8") as f:
        f.write(text)
    winner = budget_screen.choose(assessed)
    budget_cache.write_json(os.path.join(cache, "screen.json"), {
        "machine": line, "seeds": args.seeds, "chance_levels": chance,
        "protocols": [{"readout": p[0], "learning_rate": p[1], "rows": rows[p], **assessed[p]}
                      for p in args.protocols],
        "chosen": {"readout": winner[0], "learning_rate": winner[1]} if winner else None})
    print(f"wrote {os.path.join(cache, 'screen.md')} and screen.json", flush=True)


def main() -> None:
    args = parse_args()
    line = machine.describe()
    print(line, flush=True)
    cache = os.path.abspath(args.cache_dir)
    if os.path.abspath(cache).startswith(REPO + os.sep):
        sys.exit(f"--cache_dir={cache} is inside the work tree; the cache must live outside")
    if args.smoke:  # a smoke run's ledger stays in its cache: it never stands for an arm
        budget_cache.LEDGER_DIR = os.path.join(cache, "ledger")
    corpus_dir = os.path.join(args.data_dir, "corpus", "wikipedia_en")
    print(f"cache {cache}", flush=True)
    corpus = budget_data.corpus(cache, corpus_dir, args.heldout_every, args.max_articles or None)
    print(f"corpus: {corpus['train_articles']:,} training articles "
          f"({corpus['train_bytes'] / 1e6:.1f} MB), {corpus['heldout_articles']:,} held out "
          f"({corpus['heldout_bytes'] / 1e6:.1f} MB)", flush=True)
    vocab = budget_data.vocab(cache, args.vocab_size)
    config = model_config(args, cache, args.vocab_size)
    heldout = budget_data.records(cache, budget_data.RecordSpec(
        "heldout", False, EVAL_SEQ, EVAL_PRED, seed=54321))
    glue = budget_data.glue_dir(cache, os.path.join(args.data_dir, "finetune"),
                                args.tasks.split(","))
    if args.protocols:
        return screen(args, cache, config, vocab, glue, heldout, line)
    results = [run_arm(arm, args, cache, config, vocab, glue, heldout) for arm in args.arm_list]
    if args.pretrain_only:
        budget_cache.print_pretrained(results)
        return
    with open(config, encoding="utf-8") as f:
        c = json.load(f)
    tasks = args.tasks.split(",")
    settings = {
        "minutes": args.minutes, "tasks": tasks, "seeds": args.seeds,
        "max_train_examples": args.max_train_examples, "vocab_size": args.vocab_size,
        "model": f"L-{c['num_hidden_layers']}/H-{c['hidden_size']} ({args.bert_config})",
        "corpus": f"{corpus['train_articles']:,} Wikipedia articles for training, "
                  f"{corpus['heldout_articles']:,} held out",
        "finetune": f"lr {args.finetune_learning_rate:g}, batch 32, "
                    f"{args.finetune_epochs:g} epochs, 10 % warmup, seq 128, classifier "
                    f"readout {args.readout}"}
    kept = tasks if args.glue_tasks == "all" else [
        t for t in args.glue_tasks.split(",") if t in tasks] or tasks
    settings["glue_tasks"] = kept
    settings["chance"] = {}
    for r in results:
        settings["chance"].update((r.get("scorecard") or {}).get("chance_levels") or {})
        for part in [r] + list(r.get("snapshots") or []):  # a long arm's states too
            if part.get("row"):
                part["row"] = budget_report.over_tasks(part["row"], kept)
    goals = budget_report.differences({r["name"]: r["row"] for r in results})
    rows = {r["name"]: r["row"] for r in results}
    points = budget_curves.curve_points(results)
    checks = budget_curves.goals(rows, points)
    modern = budget_curves.modern_goals(rows)
    text = budget_report.render(line, settings, results, goals) + "\n".join(
        budget_curves.render_curve(points, rows.get("a"))
        + budget_curves.render_goals(checks)
        + budget_curves.render_goals(modern, "The modern encoder's")) + "\n"
    print("\n" + text, flush=True)
    with open(os.path.join(cache, "results.md"), "w", encoding="utf-8") as f:
        f.write(text)
    budget_cache.write_json(os.path.join(cache, "results.json"), {
        "machine": line, "settings": settings, "goals": goals,
        "comparisons": budget_report.comparisons({r["name"]: r["row"] for r in results}),
        "ablation": budget_report.ablation(results), "electra_goals": checks,
        "modern_goals": modern,
        "glue_minutes": budget_curves.chart_data(points, rows.get("a")),
        "arms": [{k: v for k, v in r.items() if k != "history"} for r in results]})
    print(f"wrote {os.path.join(cache, 'results.md')} and results.json", flush=True)


if __name__ == "__main__":
    main()
