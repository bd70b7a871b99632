"""bench_domain_adaptation.py's report: tokens per word, the per-arm table, differences, goals.

Scores are test entity F1 points (0-100) per NER set: mean ± sample std (n - 1) over the
fine-tuning seeds, as bert_tf's scorecard gives them (`scorecard_report.stats`; the
transformers arm's runs are summarised by the same function). The standard error of a
difference is `scorecard_report.difference`'s: paired over the seeds both arms have (at least
two), else sqrt(sa^2 / na + sb^2 / nb).
"""

from __future__ import annotations

from typing import Dict, List, Optional

import budget_cache
import budget_report

SET_LABELS = {"ncbi": "NCBI-disease", "bc5cdr": "BC5CDR-disease"}
# (label, arm, reference, threshold): the issue's goals on F1 differences, each on both sets.
GOALS = [("b - a >= +1.0 F1", "b", "a", 1.0),
         ("c - a >= +1.0 F1", "c", "a", 1.0),
         ("c >= b", "c", "b", 0.0),
         ("b >= d", "b", "d", 0.0)]
# d - e: what d's pretraining bought under transformers; a - e: bert_tf's fine-tuning against
# transformers' on the same model (the control arm e).
PAIRS = [("b", "a"), ("c", "a"), ("c", "b"), ("b", "d"), ("d", "e"), ("a", "e")]
TOKENS_GOAL = 0.15  # c: at least 15 % fewer tokens per word on the PubMed text


def differences(scores: Dict[str, Dict[str, dict]]) -> List[dict]:
    """arm - reference (F1 points) ± SE for PAIRS on every set where both arms have scores.

    Args:
        scores: arm -> set -> stats ({"mean", "std", "per_seed", ...}).
    """
    from bert_tf.finetune.scorecard.scorecard_report import difference

    out = []
    for arm, ref in PAIRS:
        for name in SET_LABELS:
            if name in scores.get(arm, {}) and name in scores.get(ref, {}):
                a, b = scores[arm][name], scores[ref][name]
                d = difference(a, b)
                out.append({"arm": arm, "reference": ref, "set": name, "diff": d["diff"],
                            "se": d["se"],
                            # The seeds paired, else the fewer of the two arms'.
                            "seeds": d["paired"] or min(len(a["per_seed"]),
                                                        len(b["per_seed"]))})
    return out


def goals(diffs: List[dict], tokens: Optional[dict]) -> List[dict]:
    """PASS/FAIL of every goal (None: arms or figures missing)."""
    out = []
    if tokens is not None:
        out.append({"goal": f"c: tokens per word on held-out PubMed -{100 * TOKENS_GOAL:.0f} %"
                            " or better", "value": f"{-100 * tokens['reduction']:+.1f} %",
                    "passed": tokens["reduction"] >= TOKENS_GOAL})
    for label, arm, ref, threshold in GOALS:
        found = [d for d in diffs if d["arm"] == arm and d["reference"] == ref]
        value = "; ".join(f"{SET_LABELS[d['set']]} {_diff(d)}" for d in found)
        passed = (all(d["diff"] >= threshold for d in found)
                  if len(found) == len(SET_LABELS) else None)
        out.append({"goal": f"{label} on both sets", "value": value or "arms missing",
                    "passed": passed})
    return out


def _diff(d: dict) -> str:
    return f"{d['diff']:+.2f} ± {d['se']:.2f}" if d["se"] is not None else f"{d['diff']:+.2f}"


def _ms(stats: Optional[dict]) -> str:
    if not stats:
        return "-"
    if len(stats["per_seed"]) < 2:
        return f"{stats['mean']:.2f}"
    return f"{stats['mean']:.2f} ± {stats['std']:.2f}"


def _tokens_lines(vocab: dict, heldout: dict) -> List[str]:
    return [
        f"Vocabulary c: `data_tools.extend_vocab --mode={vocab['mode']} "
        f"--num_new_tokens={vocab['num_new_tokens']}` on the training abstracts "
        f"({vocab['added']:,} WordPieces added to the base model's 30,522).", "",
        "| text | words | tokens/word, base vocabulary | tokens/word, extended | change |",
        "| --- | --- | --- | --- | --- |",
        f"| training abstracts (extend_vocab's report) | {vocab['before']['words']:,} | "
        f"{vocab['before']['tokens_per_word']:.4f} | {vocab['after']['tokens_per_word']:.4f} | "
        f"{-100 * vocab['reduction']:+.1f} % |",
        f"| held-out abstracts (recomputed) | {heldout['before']['words']:,} | "
        f"{heldout['before']['tokens_per_word']:.4f} | {heldout['after']['tokens_per_word']:.4f}"
        f" | {-100 * heldout['reduction']:+.1f} % |", ""]


def render(machine: str, settings: dict, vocab: Optional[dict], heldout: Optional[dict],
           arms: List[dict], diffs: List[dict], goal_rows: List[dict]) -> str:
    """The markdown report (also printed)."""
    lines = [machine, "",
             f"Continued pretraining: {settings['minutes']:g} min of training time per "
             f"pretraining arm on this machine; base model {settings['model']}; corpus "
             f"{settings['corpus']}. Fine-tuning, the same recipe for every arm: "
             f"{settings['finetune']}; seeds {settings['seeds']}; {settings['ner']}.", ""]
    if vocab and heldout:
        lines += _tokens_lines(vocab, heldout)
    names = list(SET_LABELS)
    lines += ["| arm | steps | sequences | train s | tokens/s | held-out MLM acc (15 %) | "
              + " | ".join(f"{SET_LABELS[n]} test F1" for n in names) + " |",
              "|" + " --- |" * (6 + len(names))]
    for a in arms:
        p, m = a.get("pretrain"), a.get("mlm")
        cells = [f"{a['name']}: {a['title']}"]
        cells += budget_report.pretrain_cells(p)
        acc = f"{100 * m['masked_lm_accuracy']:.2f} %" if m else "-"
        own = a.get("mlm_own_vocab")
        if own:
            acc += f" ({100 * own['masked_lm_accuracy']:.2f} % on its own vocabulary's records)"
        cells.append(acc)
        cells += [_ms(a.get("scores", {}).get(n)) for n in names]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Held-out MLM accuracy: the held-out abstracts' MLM-only records (base "
              "vocabulary, static 15 % masks), one evaluator for every arm (run_pretraining "
              "--do_eval). Arm a has none: MiniLM has no MLM head (run_pretraining --do_eval "
              "refuses a checkpoint without one), so continued pretraining starts its head "
              "fresh.", "",
              "Where each arm's figures come from (date, git commit, host, machine):", ""]
    for a in arms:
        kept = f" (from the ledger: {a['ledger']})" if a.get("ledger") else ""
        lines.append(f"- {a['name']}: pretraining {budget_report.source(a.get('pretrain'))}; "
                     f"held-out MLM {budget_report.source(a.get('mlm'))}; fine-tuning "
                     f"{budget_report.source(a.get('finetune'))}{kept}")
    note = budget_cache.mixed_machines_note(arms)
    if note:
        lines += ["", note]
    lines += ["", "| difference (test F1 points, ± SE) | "
              + " | ".join(SET_LABELS[n] for n in names) + " |",
              "|" + " --- |" * (1 + len(names))]
    for arm, ref in PAIRS:
        cells = []
        for n in names:
            d = [x for x in diffs if (x["arm"], x["reference"], x["set"]) == (arm, ref, n)]
            cells.append(_diff(d[0]) if d else "-")
        lines.append(f"| {arm} - {ref} | " + " | ".join(cells) + " |")
    lines += ["", "| goal | value | result |", "| --- | --- | --- |"]
    for g in goal_rows:
        result = {True: "PASS", False: "FAIL", None: "-"}[g["passed"]]
        lines.append(f"| {g['goal']} | {g['value']} | {result} |")
    curves = [(a["name"], a["history"]) for a in arms if a.get("history")]
    if curves:
        lines += ["", "Held-out MLM accuracy (%) during continued pretraining (step: accuracy; "
                  "--eval_every_n_steps, fresh 15 % masks):", ""]
        lines += [f"- {name}: {budget_report.curve(history)}" for name, history in curves]
    return "\n".join(lines) + "\n"
