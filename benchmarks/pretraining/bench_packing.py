"""Pretraining throughput with packed rows: padded BERT against the packed modern encoder.

    .venv/bin/python benchmarks/pretraining/bench_packing.py          # 20 MB of Wikipedia, seq 512
    .venv/bin/python benchmarks/pretraining/bench_packing.py --smoke  # a few minutes: it runs

On the shared Wikipedia (../shared/data/corpus/wikipedia_en: raw articles, one paragraph per
line, a blank line between articles; its README), at sequence length --seq (512):

1. Data (cached): the first --text_mb MB of articles, `prepare_corpus` (one sentence per
   line), then `create_pretraining_data` with dupe 1 three ways: the original NSP pairs
   (`bert`, what BERT trains on), `--no_nsp` blocks (shown for reference) and
   `--feature_set=packed_mlm`. For each: rows, real tokens per row, the share of the slots
   that are padding, and the share of attention pairs that are padding or (packed rows)
   cross-document, hence masked but computed.
2. Timing: the trainer's step (forward, backward, AdamW; float32, no XLA: the CPU default)
   of each arm on real batches of its records (--steps batches read once, then cycled, so
   every round trains on each of them once; the input pipeline is not timed), in interleaved
   rounds, so that the arms share the machine's background load; the best round is reported,
   with the median of the per-round ratios (the timed rows' real tokens per row are printed
   beside: they are a sample of the set's):

       bert_padded    configs/bert_config_mini.json, MLM + NSP on the NSP pairs (the original)
       bert_packed    the same model, MLM only, on the packed rows
       modern_padded  configs/modernbert_mini.json (ModernBERT's block at BERT-Mini's
                      parameter count: rotary, GeGLU, pre-LN, a local window of 128 in two
                      layers of three), MLM only, on the NSP pairs
       modern_packed  the same, on the packed rows: the issue's arm

   Throughput counts real tokens only: rows per second times the real tokens per row of the
   batches trained on. The padding share of compute is the share of the encoder's matmul
   FLOPs (dense layers at every slot, attention at every query-key pair) spent at padding
   slots and pairs; packed rows also compute, and mask, the pairs across their documents.

Figures are printed, never asserted. Every result goes to results.json in the cache with its
settings and provenance (date, commit, host, machine line); a rerun with the same settings
on the same machine prints the cached figures unless --retime.
"""

from __future__ import annotations

import argparse
import glob
import gzip
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BENCHMARKS = os.path.dirname(HERE)
REPO = os.path.dirname(BENCHMARKS)
sys.path[0:0] = [os.path.join(BENCHMARKS, d) for d in ("pretraining_budget", "common")] + [REPO]
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import budget_cache  # noqa: E402 (write_json, markers, provenance: shared with the budget bench)
import machine  # noqa: E402
import measure  # noqa: E402
import numpy as np  # noqa: E402

PY = sys.executable
VOCAB = os.path.join(REPO, "data", "vocab", "bert-base-uncased-vocab.txt")
SETS = {"bert": [], "no_nsp": ["--no_nsp"], "packed_mlm": ["--feature_set=packed_mlm"]}
ARMS = {  # name: (config, use_nsp, record set)
    "bert_padded": ("configs/bert_config_mini.json", True, "bert"),
    "bert_packed": ("configs/bert_config_mini.json", False, "packed_mlm"),
    "modern_padded": ("configs/modernbert_mini.json", False, "bert"),
    "modern_packed": ("configs/modernbert_mini.json", False, "packed_mlm"),
}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus_dir", default=os.path.normpath(os.path.join(
        REPO, "..", "shared", "data", "corpus", "wikipedia_en")))
    parser.add_argument("--text_mb", type=float, default=20.0,
                        help="raw text read, whole articles, from the first file on")
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--preds", type=int, default=80, help="max_predictions_per_seq")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=8, help="steps per round (= batches)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per arm (trace)")
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--num_workers", type=int, default=os.cpu_count() or 1,
                        help="of the data jobs")
    parser.add_argument("--cache_dir", default=os.path.expanduser(
        "~/.cache/bert_tf/bench_packing"))
    parser.add_argument("--retime", action="store_true", help="time again if cached")
    parser.add_argument("--data_only", action="store_true",
                        help="make (or read) the records and print their padding; no timing")
    parser.add_argument("--smoke", action="store_true",
                        help="0.4 MB of text, batch 2, 2 rounds of 2 steps: checks it runs")
    args = parser.parse_args()
    if args.smoke:
        args.text_mb, args.batch, args.steps, args.rounds, args.warmup = 0.4, 2, 2, 2, 1
        args.num_workers = 1
        args.cache_dir = os.path.join(args.cache_dir, "smoke")
    unknown = set(args.arms.split(",")) - set(ARMS)
    if unknown:
        parser.error(f"--arms: unknown {', '.join(sorted(unknown))} (known: {', '.join(ARMS)})")
    return args


# ---- data ---------------------------------------------------------------------------------

def raw_sample(corpus_dir: str, text_mb: float, path: str) -> int:
    """The first whole articles of the corpus, about text_mb MB, into `path`; the articles."""
    sources = sorted(glob.glob(os.path.join(corpus_dir, "*.txt.gz")))
    if not sources:
        sys.exit(f"no *.txt.gz in --corpus_dir={corpus_dir} (see its README)")
    limit, written, articles = text_mb * 1e6, 0, 0
    with open(path + ".tmp", "w", encoding="utf-8") as out:
        for source in sources:
            with gzip.open(source, "rt", encoding="utf-8") as f:
                for line in f:
                    out.write(line)
                    written += len(line.encode())
                    if not line.strip():
                        articles += 1
                        if written >= limit:
                            break
            if written >= limit:
                break
    os.replace(path + ".tmp", path)
    return articles


def data(args: argparse.Namespace) -> dict:
    """The three record sets (cached); {set: marker with the record path and statistics}."""
    key = budget_cache.digest([args.corpus_dir, args.text_mb, args.seq, args.preds])
    root = os.path.join(args.cache_dir, f"data-{key}")
    os.makedirs(root, exist_ok=True)
    text = os.path.join(root, "prepared.txt")
    if not budget_cache.done(root, "text"):
        articles = raw_sample(args.corpus_dir, args.text_mb, os.path.join(root, "raw.txt"))
        print(f"  prepare_corpus on {articles} articles ({args.text_mb} MB) ...", flush=True)
        job = measure.run_job([PY, "-m", "data_tools.prepare_corpus",
                               f"--input_file={os.path.join(root, 'raw.txt')}",
                               f"--output_file={text}", "--progress_seconds=0"], cwd=REPO)
        budget_cache.finish(root, "text", {"articles": articles, "text_mb": args.text_mb,
                                           "wall_seconds": round(job.wall, 1)})
    sets = {}
    for name, flags in SETS.items():
        marker = budget_cache.done(root, name)
        if not marker:
            path = os.path.join(root, f"{name}.tfrecord")
            print(f"  create_pretraining_data ({name}) ...", flush=True)
            job = measure.run_job([PY, "-m", "data_tools.create_pretraining_data",
                                   f"--input_file={text}", f"--output_file={path}",
                                   f"--vocab_file={VOCAB}", f"--max_seq_length={args.seq}",
                                   f"--max_predictions_per_seq={args.preds}",
                                   "--dupe_factor=1", f"--num_workers={args.num_workers}",
                                   "--progress_seconds=0", "--log_examples=0"] + flags, cwd=REPO)
            stats = [line.split("statistics: ")[1] for line in job.stderr.splitlines()
                     if "statistics: " in line]
            marker = budget_cache.finish(root, name, dict(
                record_stats(path, args.seq, name == "packed_mlm"), path=path,
                job_statistics=stats[-1] if stats else "", wall_seconds=round(job.wall, 1)))
        sets[name] = marker
    return sets


def record_stats(path: str, seq: int, packed: bool) -> dict:
    """Slots and attention pairs of a record file: real, padding, cross-document."""
    import tensorflow as tf

    spec = {"input_mask": tf.io.FixedLenFeature([seq], tf.int64)}
    if packed:
        spec["doc_ids"] = tf.io.FixedLenFeature([seq], tf.int64)
    rows = real = same_doc_pairs = real_pairs = 0
    for batch in tf.data.TFRecordDataset(path).batch(1024).map(
            lambda s: tf.io.parse_example(s, spec)):
        lengths = batch["input_mask"].numpy().sum(axis=1)
        rows += len(lengths)
        real += int(lengths.sum())
        real_pairs += int((lengths.astype(np.int64) ** 2).sum())
        if packed:
            docs = batch["doc_ids"].numpy()
            for row in docs:
                same_doc_pairs += int((np.bincount(row[row > 0]) ** 2).sum())
    same_doc_pairs = same_doc_pairs if packed else real_pairs
    return {"rows": rows, "real_tokens": real, "slots": rows * seq,
            "pairs": rows * seq * seq, "real_pairs": real_pairs,
            "same_document_pairs": same_doc_pairs}


def waste(stats: dict, config) -> "tuple[float, float]":
    """(padding, cross-document) shares of the encoder's matmul FLOPs on these records."""
    h, i = config.hidden_size, config.intermediate_size
    dense = 2 * (4 * h * h + (3 if config.hidden_act == "geglu" else 2) * h * i)  # per slot
    attention = 2 * 2 * h  # per query-key pair: scores and the weighted sum
    total = dense * stats["slots"] + attention * stats["pairs"]
    pad = (dense * (stats["slots"] - stats["real_tokens"])
           + attention * (stats["pairs"] - stats["real_pairs"]))
    cross = attention * (stats["real_pairs"] - stats["same_document_pairs"])
    return pad / total, cross / total


# ---- timing -------------------------------------------------------------------------------

def load_batches(path: str, args: argparse.Namespace) -> dict:
    """The first --steps batches of a record file, stacked: {name: [steps, batch, ...]}."""
    from bert_tf.data import input_pipeline
    from bert_tf.data.input_config import InputConfig

    config = InputConfig(input_patterns=path, batch_size=args.batch, max_seq_length=args.seq,
                         max_predictions_per_seq=args.preds, vocab_size=30522,
                         is_training=False, drop_remainder=True)
    batches = [{k: v.numpy() for k, v in b.items()}
               for b in input_pipeline.make_pretraining_dataset(config).take(args.steps)]
    if len(batches) < args.steps:
        sys.exit(f"{path} holds {len(batches)} batches of {args.batch}, fewer than --steps")
    return {k: np.stack([b[k] for b in batches]) for k in batches[0]}


def make_arm(name: str, batches: dict, args: argparse.Namespace):
    """(step(n) -> seconds of n train steps, the model's parameter count)."""
    import tensorflow as tf

    from bert_tf.modeling.config import BertConfig
    from bert_tf.modeling.pretraining_model import BertPretrainingModel
    from bert_tf.training import optimization, trainer

    path, nsp, _ = ARMS[name]
    config = BertConfig.from_json_file(os.path.join(REPO, path))
    opt = optimization.OptimizerConfig(learning_rate=1e-4, num_train_steps=10000,
                                       num_warmup_steps=100)
    t = trainer.Trainer(
        trainer.TrainerConfig(output_dir=tempfile.mkdtemp(), train_batch_size=args.batch,
                              use_xla=False, use_nsp=nsp, dtype_policy="float32"),
        tf.distribute.OneDeviceStrategy("/cpu:0"),
        model_fn=lambda: BertPretrainingModel(config, use_nsp=nsp),
        optimizer_fn=lambda: optimization.create_optimizer(opt))
    dataset_fn = lambda context, batch: tf.data.Dataset.from_tensor_slices(batches).repeat()  # noqa
    iterator = iter(t.distribute_dataset(dataset_fn, args.batch))

    def step(n: int) -> float:
        start = time.perf_counter()
        losses, _ = t.steps.train_loop(iterator, tf.constant(n))
        losses.numpy()
        return time.perf_counter() - start

    return step, t.model.count_params(), config


def timing(args: argparse.Namespace, sets: dict) -> dict:
    """{arm: {"seconds": per round, "rows": per round, "real_tokens": per round, ...}}."""
    arms, steps = {}, {}
    for name in args.arms.split(","):
        batches = load_batches(sets[ARMS[name][2]]["path"], args)
        step, params, _ = make_arm(name, batches, args)
        print(f"  {name}: {params:,} parameters; tracing ...", flush=True)
        step(args.warmup)
        steps[name] = step
        arms[name] = {"params": params, "seconds": [], "rows": args.steps * args.batch,
                      "real_tokens": int(batches["input_mask"].sum())}
    for r in range(args.rounds):
        for name, step in steps.items():
            arms[name]["seconds"].append(step(args.steps))
        print(f"  round {r + 1}/{args.rounds}: " + ", ".join(
            f"{n} {a['seconds'][-1]:.2f} s" for n, a in arms.items()), flush=True)
    return arms


# ---- report -------------------------------------------------------------------------------

def report_sets(sets: dict, seq: int, text_mb: float, articles: int) -> None:
    print(f"records at {seq} tokens from {text_mb} MB of Wikipedia ({articles} articles), "
          "dupe 1:")
    print(f"  {'set':11s} {'rows':>7s} {'real tokens/row':>16s} {'padding slots':>14s} "
          f"{'masked pairs (pad + cross-doc)':>31s}")
    for name, s in ((n, sets[n]) for n in SETS):
        masked = 1 - s["same_document_pairs"] / s["pairs"]
        print(f"  {name:11s} {s['rows']:7d} {s['real_tokens'] / s['rows']:16.1f} "
              f"{100 * (1 - s['real_tokens'] / s['slots']):13.1f}% {100 * masked:30.1f}%")


def report(results: dict) -> None:
    from bert_tf.modeling.config import BertConfig

    settings, sets, arms = results["settings"], results["sets"], results["arms"]
    print(f"\n{results['provenance']['machine']}")
    report_sets(sets, settings["seq"], settings["text_mb"], results["articles"])
    print(f"\narms: batch {settings['batch']}, {settings['rounds']} interleaved rounds of "
          f"{settings['steps']} steps, best round (median of per-round ratios):")
    base = arms.get("bert_padded")
    for name, a in ((n, arms[n]) for n in ARMS if n in arms):  # (the JSON sorts its keys)
        config = BertConfig.from_json_file(os.path.join(REPO, ARMS[name][0]))
        pad, cross = waste(sets[ARMS[name][2]], config)
        best = min(a["seconds"])
        line = (f"  {name:14s} {a['params'] / 1e6:5.2f}M params  {a['rows'] / best:6.1f} rows/s"
                f" x {a['real_tokens'] / a['rows']:5.1f} = {a['real_tokens'] / best:7.0f} real "
                f"tokens/s  padding {100 * pad:4.1f}% of compute (cross-doc {100 * cross:3.1f}%)")
        if base is not None and name != "bert_padded":
            ratio = (a["real_tokens"] / best) / (base["real_tokens"] / min(base["seconds"]))
            per_round = np.median([(a["real_tokens"] / s) / (base["real_tokens"] / b)
                                   for s, b in zip(a["seconds"], base["seconds"])])
            line += f"  {ratio:.2f}x bert_padded ({per_round:.2f}x)"
        print(line)
    if base is not None and "modern_packed" in arms:
        a = arms["modern_packed"]
        ratio = (a["real_tokens"] / min(a["seconds"])) / (base["real_tokens"] /
                                                          min(base["seconds"]))
        before = waste(sets["bert"], BertConfig.from_json_file(
            os.path.join(REPO, ARMS["bert_padded"][0])))[0]
        after = waste(sets["packed_mlm"], BertConfig.from_json_file(
            os.path.join(REPO, ARMS["modern_packed"][0])))[0]
        print(f"\nmodern_packed / bert_padded: {ratio:.2f}x real tokens per second (goal "
              f">= 1.3x); padding share of compute {100 * before:.1f}% -> {100 * after:.1f}%")
    print(f"(results: {results['path']}; {results['provenance']['date']}, commit "
          f"{results['provenance']['commit']})")


def main() -> None:
    args = parse_args()
    print(machine.describe(), flush=True)
    print(f"load average {os.getloadavg()[0]:.1f}; data ...", flush=True)
    sets = data(args)
    articles = budget_cache.done(os.path.dirname(sets["bert"]["path"]), "text")["articles"]
    if args.data_only:
        report_sets(sets, args.seq, args.text_mb, articles)
        return
    settings = {k: getattr(args, k) for k in ("corpus_dir", "text_mb", "seq", "preds", "batch",
                                               "steps", "rounds", "warmup", "arms")}
    key = budget_cache.digest([settings, budget_cache.this_machine()])
    root = os.path.join(args.cache_dir, f"timing-{key}")
    results = None if args.retime else budget_cache.done(root, "results")
    if results is None:
        arms = timing(args, sets)
        results = budget_cache.finish(root, "results", {
            "settings": settings, "sets": {n: {k: v for k, v in s.items() if k != "provenance"}
                                           for n, s in sets.items()},
            "articles": articles,
            "arms": arms, "load_average_end": os.getloadavg()[0]})
    else:
        print(f"cached timing of {results['provenance']['date']} (--retime to time again)")
    results["path"] = budget_cache.marker_path(root, "results")
    report(results)


if __name__ == "__main__":
    main()
