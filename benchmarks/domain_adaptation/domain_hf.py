"""Arm d of bench_domain_adaptation.py: transformers' continued pretraining of a pretrained BERT.

    bash benchmarks/hf_env.sh
    benchmarks/.hf-venv/bin/python benchmarks/domain_hf.py --train_text=train.txt \\
        --model_dir=MODEL --output_dir=OUT --minutes=30

Runs in benchmarks/.hf-venv (torch CPU, transformers, accelerate; see hf_env.sh). What
transformers' documentation does to adapt a pretrained model to a domain: the course chapter
"Fine-tuning a masked language model" (huggingface.co/learn/llm-course/chapter7/3, domain
adaptation of DistilBERT to IMDb reviews), with `BertForMaskedLM`, `Trainer` and
`DataCollatorForLanguageModeling`:

- data: every text tokenized with its special tokens, all concatenated and cut into chunks of
  128 tokens (the chapter's `group_texts`, chunk_size 128), as budget_hf.blocks does; the
  texts are the training abstracts; the tokenizer is the model's own (`BertTokenizerFast`
  from --model_dir, its ids checked against bert_tf's FullTokenizer);
- masking: `DataCollatorForLanguageModeling(mlm_probability=0.15)`, drawn for every batch;
- model: `BertForMaskedLM.from_pretrained(--model_dir)`; a head the directory lacks (a
  sentence-transformers model has no MLM head) is initialised by transformers, and
  train_stats.json lists those weights;
- optimizer and schedule: the chapter's `TrainingArguments(learning_rate=2e-5,
  weight_decay=0.01, per_device_train_batch_size=64, fp16=True)`, fp16 left out (CPU), the rest
  TrainingArguments' defaults: AdamW (betas 0.9/0.999, eps 1e-8), no warmup, linear decay to
  0 over `max_steps`, which a throughput probe sizes to the budget, max_grad_norm 1.0.

Budget, probe, checkpoints and resuming: budget_hf.train_to_budget (only training steps count,
the first step of a process at the pace of the second). Writes to --output_dir: `hf_model/`
(config.json, model.safetensors, the tokenizer, vocab.txt) and `train_stats.json`.
"""

from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]

import budget_cache  # noqa: E402
import budget_hf  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

# The course chapter's settings (the rest are TrainingArguments' defaults).
LEARNING_RATE = 2e-5
WEIGHT_DECAY = 0.01
BATCH_SIZE = 64
MLM_PROBABILITY = 0.15


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("train_text", "model_dir", "output_dir"):
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--probe_seconds", type=float, default=60.0)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--seed", type=int, default=12345)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()
    os.makedirs(args.output_dir, exist_ok=True)
    vocab_file = os.path.join(args.model_dir, "vocab.txt")
    tokenizer = transformers.BertTokenizerFast.from_pretrained(args.model_dir,
                                                               do_lower_case=True)
    check = budget_hf.check_tokenizer(tokenizer, vocab_file, args.train_text)
    data = budget_hf.blocks(args.train_text, tokenizer, args.max_seq_length,
                            os.path.join(args.output_dir, "blocks.npz"))
    print(f"{len(data['input_ids']):,} blocks of {args.max_seq_length}", flush=True)
    _, loading = transformers.BertForMaskedLM.from_pretrained(args.model_dir,
                                                              output_loading_info=True)
    fresh = sorted(loading["missing_keys"])
    print(f"weights not in {args.model_dir} (initialised by transformers): "
          f"{', '.join(fresh) or 'none'}", flush=True)
    collator = transformers.DataCollatorForLanguageModeling(
        tokenizer=tokenizer, mlm_probability=MLM_PROBABILITY)

    model, run, clock, steps, rate = budget_hf.train_to_budget(
        lambda out, max_steps, seed, clock, save_steps: budget_hf.trainer(
            None, data, collator, out, max_steps, seed, clock, save_steps,
            model_dir=args.model_dir, learning_rate=LEARNING_RATE, batch_size=BATCH_SIZE,
            weight_decay=WEIGHT_DECAY),
        args.output_dir, 60 * args.minutes, args.probe_seconds, args.seed)
    hf_dir = os.path.join(args.output_dir, "hf_model")
    budget_hf.save_model(model, tokenizer, vocab_file, hf_dir)
    final, seconds = clock.step, clock.seconds
    losses = [h["loss"] for h in run.state.log_history if "loss" in h]
    tokens = final * BATCH_SIZE * args.max_seq_length
    budget_cache.write_json(os.path.join(args.output_dir, "train_stats.json"), {
        "steps": final, "examples": final * BATCH_SIZE, "train_seconds": seconds,
        "examples_per_second": final * BATCH_SIZE / seconds if seconds else 0.0,
        "tokens_per_second": tokens / seconds if seconds else 0.0,
        "num_train_steps": steps, "probe_steps_per_second": rate,
        "sequences_available": len(data["input_ids"]), "last_loss": losses[-1] if losses else None,
        "fresh_weights": fresh, "tokenizer_check": check.report(),
        "settings": {"learning_rate": LEARNING_RATE, "batch_size": BATCH_SIZE,
                     "mlm_probability": MLM_PROBABILITY, "max_seq_length": args.max_seq_length,
                     "optimizer": run.args.optim.value, "weight_decay": run.args.weight_decay,
                     "warmup_steps": run.args.warmup_steps,
                     "lr_scheduler": run.args.lr_scheduler_type.value,
                     "torch": torch.__version__, "transformers": transformers.__version__},
        "hf_model": hf_dir})
    print(f"done: {final} steps, {seconds:.0f} s of training", flush=True)


if __name__ == "__main__":
    main()
