"""bench_retrieval.py's bert_tf side: BM25, and the bert_tf commands each arm runs.

Every command is the one a user runs (`python -m bert_tf.run_retrieval`, `run_rerank`,
`bert_tf.export`, `data_tools.embed_corpus`), in a child process whose output goes to a log
beside its output folder (`budget_data.run_logged`: a failure ends the benchmark with the
log's tail). Figures are read back from what the commands write:

- scores: `eval_results.txt` (BEIR's ndcg_at_10, recall_at_100, mrr_at_10, map_at_100;
  run_rerank's also first_stage_*);
- training examples/s: the trainer's progress lines (`step S/T | ... | X examples/s`),
  steady state only: the first line (step 1, with graph tracing) is left out, the others
  give seconds = steps x batch / rate each, summed (the trainer counts training calls only,
  not checkpoint saves);
- corpus passages/s: embed_corpus's `embedded N passages ... in S s` line (from its first
  batch to its last, the SavedModel loaded before), and run_retrieval --do_eval's own
  embedding from the log's timestamps (`embedding passages 1 to` -> `embedding N queries`).

BM25 runs in this process: bert_tf's first stage (`reranking.first_stage.bm25_candidates`,
bm25s) ranks the top 100 of every test query, scored by `ir_metrics.evaluate` as run_rerank
scores its first stage (0.6617 on SciFact's test split).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import time
from typing import Dict, Iterator, List, Optional

import budget_bert_tf
import budget_data

PY = sys.executable
PROGRESS = re.compile(r"step (\d+)/(\d+) \|.*?\| ([0-9.]+) examples/s( \(incl\. graph tracing\))?")
LOG_TIME = re.compile(r"^[IWEF]\d{4} (\d\d):(\d\d):(\d\d\.\d+) ")
EMBEDDED = re.compile(r"embedded (\d+) passages in \d+ shard\(s\) in ([0-9.]+) s")
# The ISA caps of a capped run: oneDNN's (TensorFlow's and torch's mkldnn ops), and for torch
# its own kernels' and MKL's, so that both frameworks run as on an AVX2-only CPU.
AVX2_ENV = {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2",
            "MKL_ENABLE_INSTRUCTIONS": "AVX2"}


@contextlib.contextmanager
def isa_env(cap: str) -> Iterator[Dict[str, str]]:
    """The children started inside run with `cap` ("AVX2") or without any cap ("")."""
    saved = {k: os.environ.get(k) for k in AVX2_ENV}
    for k in AVX2_ENV:
        os.environ.pop(k, None)
    if cap:
        os.environ.update(AVX2_ENV)
    try:
        yield dict(AVX2_ENV) if cap else {}
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def busy_cores(seconds: float = 2.0) -> Optional[float]:
    """Cores' worth of CPU the machine spent over `seconds` while this process sleeps (from
    /proc/stat): other work running. Measured before each arm x seed, since torch's threads
    in particular collapse beside other work (--smoke, beside another benchmark: 2 threads
    ran 4x slower than 1). None where there is no /proc/stat."""
    def snapshot():
        with open("/proc/stat", encoding="ascii") as f:
            ticks = [int(x) for x in f.readline().split()[1:9]]
        return sum(ticks), ticks[3] + ticks[4]  # all, idle + iowait

    try:
        total0, idle0 = snapshot()
        time.sleep(seconds)
        total1, idle1 = snapshot()
    except OSError:
        return None
    total = total1 - total0
    return (os.cpu_count() or 1) * (1 - (idle1 - idle0) / total) if total > 0 else 0.0


def last_run(log_path: str) -> str:
    """The log's text from its last command header on (run_logged appends)."""
    with open(log_path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    return text[text.rfind("\n=== ") + 1:]


def eval_results(path: str) -> Dict[str, float]:
    """{key: value} of an eval_results.txt."""
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            key, eq, value = line.partition(" = ")
            if eq:
                out[key.strip()] = float(value)
    return out


def throughput(log_text: str, batch_size: int) -> Dict[str, Optional[float]]:
    """Steady-state training examples/s from the progress lines (module docstring)."""
    prev, examples, seconds, last = 0, 0, 0.0, 0
    for m in PROGRESS.finditer(log_text):
        step, rate = int(m.group(1)), float(m.group(3))
        n, prev, last = step - prev, step, step
        if m.group(4) or n <= 0 or rate <= 0:
            continue  # the first line: graph tracing
        examples += n * batch_size
        seconds += n * batch_size / rate
    return {"steps": last, "steady_examples": examples, "train_seconds": seconds,
            "examples_per_second": examples / seconds if seconds else None}


def _seconds(line: str) -> Optional[float]:
    m = LOG_TIME.match(line)
    return int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3)) if m else None


def eval_embedding_rate(log_text: str, passages: int) -> Optional[float]:
    """run_retrieval --do_eval's corpus passages/s, from its log lines' timestamps."""
    start = end = None
    for line in log_text.splitlines():
        if start is None and "embedding passages 1 to" in line:
            start = _seconds(line)
        elif start is not None and re.search(r"embedding \d+ queries", line):
            end = _seconds(line)
            break
    if start is None or end is None:
        return None
    span = end - start + (86400 if end < start else 0)  # past midnight
    return passages / span if span > 0 else None


def bm25(folder: str) -> Dict[str, float]:
    """BM25's (bm25s) top 100 of every test query, scored as run_rerank's first stage."""
    from bert_tf.finetune.reranking.first_stage import bm25_candidates
    from bert_tf.finetune.retrieval import beir_data, ir_metrics

    split = beir_data.read_split(folder, "test")
    found = bm25_candidates(split, 100)
    run = {qid: {pid: float(len(pids) - rank) for rank, pid in enumerate(pids)}
           for qid, pids in found.items()}
    return ir_metrics.evaluate(split.qrels, run)


def recipe_flags(recipe: Dict[str, object], seed: int) -> List[str]:
    """run_retrieval's training flags of the bi-encoder recipe."""
    return [f"--train_batch_size={recipe['batch_size']}",
            f"--learning_rate={recipe['learning_rate']}",
            f"--num_train_epochs={recipe['epochs']}",
            f"--warmup_proportion={recipe['warmup_proportion']}",
            f"--weight_decay_rate={recipe['weight_decay']}", "--clip_norm=1.0",
            f"--similarity_scale={recipe['scale']}", "--pooling=mean", "--normalize",
            f"--max_query_length={recipe['max_query_length']}",
            f"--max_passage_length={recipe['max_passage_length']}",
            f"--eval_batch_size={recipe['eval_batch_size']}", f"--seed={seed}",
            "--log_every_n_steps=5"]


def retrieval(out: str, init: List[str], folder: str, flags: List[str], train: bool,
              what: str, passages: int = 0, batch_size: int = 0) -> Dict[str, object]:
    """run_retrieval into `out` (training on the folder's train qrels when `train`, then
    --do_eval on its test split unless flags hold --max_steps_per_run); its figures."""
    speed_only = any(f.startswith("--max_steps_per_run") for f in flags)
    cmd = [PY, "-m", "bert_tf.run_retrieval", *init, f"--output_dir={out}", *flags]
    if train:
        cmd += [f"--train_dir={folder}", "--do_train"]
    if not speed_only:
        cmd += [f"--eval_dir={folder}", "--do_eval"]
    log = out + ".log"
    budget_data.run_logged(cmd, log, what)
    text = last_run(log)
    result: Dict[str, object] = {"command": " ".join(cmd[1:])}
    if not speed_only:
        result["metrics"] = eval_results(os.path.join(out, "eval_results.txt"))
    if train:
        result["train"] = throughput(text, batch_size)
    if passages:
        result["eval_passages_per_second"] = eval_embedding_rate(text, passages)
    return result


def rerank(out: str, init: str, folder: str, recipe: Dict[str, object], seed: int,
           what: str) -> Dict[str, object]:
    """run_rerank: train on the folder's train qrels (BM25 negatives), rerank BM25's top k."""
    cmd = [PY, "-m", "bert_tf.run_rerank", f"--init_checkpoint={init}", f"--train_dir={folder}",
           f"--eval_dir={folder}", f"--output_dir={out}", "--do_train", "--do_rerank",
           "--first_stage=bm25", f"--rerank_top_k={recipe['top_k']}",
           f"--num_hard_negatives={recipe['negatives']}",
           f"--max_seq_length={recipe['max_seq_length']}",
           f"--train_batch_size={recipe['batch_size']}",
           f"--learning_rate={recipe['learning_rate']}",
           f"--num_train_epochs={recipe['epochs']}",
           f"--warmup_proportion={recipe['warmup_proportion']}",
           f"--eval_batch_size={recipe['eval_batch_size']}", f"--seed={seed}",
           f"--loss={recipe.get('loss', 'bce')}", f"--fusion={recipe.get('fusion', 'none')}",
           "--log_every_n_steps=5"]
    log = out + ".log"
    budget_data.run_logged(cmd, log, what)
    return {"command": " ".join(cmd[1:]),
            "metrics": eval_results(os.path.join(out, "eval_results.txt")),
            "train": throughput(last_run(log), int(recipe["batch_size"]))}


def embed_corpus(work: str, model_dir: str, corpus_file: str, max_seq_length: int,
                 batch_size: int) -> Dict[str, object]:
    """The model folder exported with its `embed` signature, then data_tools.embed_corpus
    over the corpus file: passages/s of the embedding (module docstring)."""
    saved = os.path.join(work, "saved_model")
    if not os.path.exists(saved):
        budget_data.run_logged([PY, "-m", "bert_tf.export", f"--output_dir={model_dir}",
                                f"--export_dir={saved}", f"--max_seq_length={max_seq_length}"],
                               os.path.join(work, "export.log"), "export")
    log = os.path.join(work, "embed_corpus.log")
    cmd = [PY, "-m", "data_tools.embed_corpus", f"--input_file={corpus_file}",
           f"--saved_model_dir={saved}", f"--output_dir={os.path.join(work, 'embeddings')}",
           f"--batch_size={batch_size}", "--noprogress"]
    budget_data.run_logged(cmd, log, "embed_corpus")
    m = EMBEDDED.search(last_run(log))
    if not m:
        raise SystemExit(f"no 'embedded N passages' line in {log}")
    passages, seconds = int(m.group(1)), float(m.group(2))
    return {"command": " ".join(cmd[1:]), "passages": passages, "seconds": seconds,
            "passages_per_second": passages / seconds if seconds else None}


def standin_checkpoint(work: str, model_dir: str) -> str:
    """--smoke's stand-in for --pretrained_checkpoint: the model folder converted to a
    bert_tf checkpoint (bert_tf's converter), so that the arm's path runs end to end."""
    return budget_bert_tf.convert_hf(model_dir, os.path.join(work, "standin"),
                                     os.path.join(model_dir, "vocab.txt"))
