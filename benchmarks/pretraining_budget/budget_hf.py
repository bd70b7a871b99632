"""Arm e of bench_pretraining_budget.py: Hugging Face transformers' `BertForMaskedLM` + `Trainer`.

    bash benchmarks/common/hf_env.sh
    benchmarks/.hf-venv/bin/python benchmarks/pretraining_budget/budget_hf.py \\
        --train_text=train.txt \\
        --vocab_file=vocab.txt --bert_config_file=bert_config.json --output_dir=OUT --minutes=30

Runs in benchmarks/.hf-venv (torch CPU, transformers, accelerate; see hf_env.sh), not in
bert_tf's venv. What transformers' own documentation does to train a BERT-style model from
scratch:

- data, as examples/pytorch/language-modeling/run_mlm.py without --line_by_line: every text
  tokenized with its special tokens (`[CLS] text [SEP]`, `return_special_tokens_mask=True`),
  all of them concatenated and cut into blocks of --max_seq_length (the remainder dropped);
  the texts are the training articles (sentences joined by spaces), the tokenizer
  `BertTokenizerFast(vocab=vocab.txt)` (transformers 5 spells it `vocab`; its ids are checked
  against bert_tf's FullTokenizer on the first 2,000 sentences, as hf_finetune.py does);
- masking: `DataCollatorForLanguageModeling` with its default `mlm_probability=0.15`
  (80/10/10), drawn afresh for every batch;
- model: `BertForMaskedLM(BertConfig(...))` with the dimensions of --bert_config_file and
  transformers' other defaults (GELU is its "gelu", the exact erf form);
- optimizer and schedule: the blog post "How to train a new language model from scratch using
  Transformers and Tokenizers" (huggingface.co/blog/how-to-train) passes `--learning_rate
  1e-4 --per_gpu_train_batch_size 16` and leaves the rest to `TrainingArguments`' defaults:
  AdamW (betas 0.9/0.999, eps 1e-8), weight decay 0, no warmup, linear decay to 0,
  max_grad_norm 1.0. The decay runs over `max_steps`, which a throughput probe sizes to the
  budget, as arm b is sized.
- threads: torch's intra-op thread count is pinned to the cores this process may use (the
  core count benchmarks/common/machine.py reports), printed and recorded in train_stats.json:
  torch's own default depends on how the machine reports its cores (on some 2-vCPU VMs it
  counts one physical core), which would leave the arm a core short of the others.
- the "tuned peer" arm (e-tuned) passes bert_tf's batch, peak rate and warmup steps
  (--batch_size, --learning_rate, --warmup_steps from configs/budget.flags) to
  `TrainingArguments`; everything else as above.

Budget: only training counts (each optimizer step's wall time, from `on_step_begin` to
`on_step_end`; not tokenizing, building, checkpoint saves), the process's first step at the
pace of the second as bert_tf's clock does. A callback stops training when the budget is
spent. The Trainer checkpoints about every 5 minutes of training (with the clock beside it)
and a rerun resumes from the latest (`resume_from_checkpoint`). Writes to --output_dir:
`hf_model/` (config.json, model.safetensors, vocab.txt) and `train_stats.json`.

Its pieces (`trainer`, `train_to_budget`, `check_tokenizer`, `save_model`) also run the
continued-pretraining arm of bench_domain_adaptation.py (domain_hf.py).
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]

import budget_cache  # noqa: E402
import budget_data  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from hf_finetune import IdCheck  # noqa: E402

# The blog's two settings (the rest are TrainingArguments' defaults).
LEARNING_RATE = 1e-4
BATCH_SIZE = 16
MLM_PROBABILITY = 0.15  # DataCollatorForLanguageModeling's default
CHECKPOINT_SECONDS = 300
# The probe times at least this many steps, however long they take: arm d of the domain
# benchmark (MiniLM, batch 64, about 18 s a step) timed 3 steps in its 60-s probe, which
# put it at 22.5 s a step, and the decay sized from it ended at 1,439 s of the 1,800.
PROBE_MIN_STEPS = 10
CLOCK_FILE = "budget_clock.json"


def blocks(train_text: str, tokenizer, block_size: int, cache: str) -> dict:
    """run_mlm.py's tokenize + group_texts: {"input_ids", "special_tokens_mask"} [n, block]."""
    if os.path.exists(cache):
        with np.load(cache) as z:
            return dict(z)
    ids, special = [], []
    texts = [" ".join(doc) for doc in budget_data.articles(train_text)]
    for start in range(0, len(texts), 256):
        enc = tokenizer(texts[start:start + 256], return_special_tokens_mask=True)
        for row, mask in zip(enc["input_ids"], enc["special_tokens_mask"]):
            ids.extend(row)
            special.extend(mask)
    n = len(ids) // block_size
    out = {"input_ids": np.asarray(ids[:n * block_size], np.int32).reshape(n, block_size),
           "special_tokens_mask": np.asarray(special[:n * block_size], np.int8).reshape(
               n, block_size)}
    np.savez(cache + ".tmp.npz", **out)
    os.replace(cache + ".tmp.npz", cache)
    return out


class Blocks(torch.utils.data.Dataset):
    def __init__(self, data: dict):
        self.ids = torch.from_numpy(data["input_ids"].astype(np.int64))
        self.special = torch.from_numpy(data["special_tokens_mask"].astype(np.int64))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "special_tokens_mask": self.special[i]}


class Budget(transformers.TrainerCallback):
    """The training clock: stops (with a checkpoint) when the budget is spent; saves the
    clock beside each checkpoint."""

    def __init__(self, clock: budget_cache.TrainingClock):
        self.clock, self.timer = clock, budget_cache.StepTimer(clock)
        self.last_save = clock.seconds
        self.min_steps = 0  # the probe sets PROBE_MIN_STEPS: time at least this many steps

    def on_step_begin(self, args, state, control, **kwargs):
        self.timer.begin()

    def on_step_end(self, args, state, control, **kwargs):
        self.timer.end()
        if self.clock.time_up and self.timer.steps >= self.min_steps:
            control.should_training_stop = True
            control.should_save = True
        elif self.clock.seconds - self.last_save >= CHECKPOINT_SECONDS:
            control.should_save = True
        return control

    def on_save(self, args, state, control, **kwargs):
        # After the checkpoint is complete (and the oldest of 2 removed): a run killed in
        # between resumes from the previous checkpoint, the last one with its clock.
        self.last_save = self.clock.seconds
        self.clock.state_file = os.path.join(args.output_dir, f"checkpoint-{state.global_step}",
                                             CLOCK_FILE)
        self.clock.save(state.global_step)

    def on_train_end(self, args, state, control, **kwargs):
        self.timer.close()


def model_config(path: str) -> transformers.BertConfig:
    with open(path, encoding="utf-8") as f:
        c = json.load(f)
    keys = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
            "intermediate_size", "hidden_dropout_prob", "attention_probs_dropout_prob",
            "max_position_embeddings", "type_vocab_size", "initializer_range")
    return transformers.BertConfig(**{k: c[k] for k in keys})  # hidden_act: its default


def pin_threads() -> int:
    """Sets torch's intra-op threads to the cores this process may use; returns the count."""
    cores = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
             else os.cpu_count() or 1)
    torch.set_num_threads(cores)
    return torch.get_num_threads()


def trainer(config, data, collator, out: str, max_steps: int, seed: int, clock,
            save_steps: int = 0, *, model_dir: str = "", learning_rate: float = LEARNING_RATE,
            batch_size: int = BATCH_SIZE, weight_decay: float = 0.0,
            warmup_steps: int = 0) -> tuple:
    """A Trainer of a BertForMaskedLM (seeded) and its Budget callback.

    The model is fresh from `config`, or `model_dir`'s weights (continued pretraining: a head
    the directory lacks starts fresh); the optimizer settings not given are TrainingArguments'
    defaults.
    """
    transformers.set_seed(seed)
    model = (transformers.BertForMaskedLM.from_pretrained(model_dir) if model_dir
             else transformers.BertForMaskedLM(config))
    args = transformers.TrainingArguments(
        output_dir=out, learning_rate=learning_rate, per_device_train_batch_size=batch_size,
        weight_decay=weight_decay, warmup_steps=warmup_steps,
        max_steps=max_steps, seed=seed, save_strategy="steps" if save_steps else "no",
        save_steps=save_steps or 500, save_total_limit=2,
        logging_steps=max(1, min(max_steps, 10**5) // 50), report_to=[], disable_tqdm=True,
        use_cpu=True)
    budget = Budget(clock)
    return transformers.Trainer(model=model, args=args, train_dataset=Blocks(data),
                                data_collator=collator, callbacks=[budget]), budget


def check_tokenizer(tokenizer, vocab_file: str, train_text: str) -> IdCheck:
    """The HF tokenizer's ids against FullTokenizer's on the first 2,000 training sentences;
    exits if more than 1 % differ."""
    check = IdCheck(os.path.dirname(os.path.abspath(vocab_file)))
    sentences = [s for doc, _ in zip(budget_data.articles(train_text), range(200))
                 for s in doc][:2000]
    check(sentences, tokenizer(sentences, add_special_tokens=False)["input_ids"])
    if check.mismatched > len(sentences) // 100:
        sys.exit(f"the HF tokenizer disagrees with FullTokenizer on {check.mismatched} of "
                 f"{len(sentences)} sentences, e.g. {check.examples[:1]}")
    return check


def train_to_budget(make_trainer, output_dir: str, budget: float, probe_seconds: float,
                    seed: int) -> tuple:
    """The budgeted run: a probe, then training to the budget, resuming if killed.

    Args:
        make_trainer: (out, max_steps, seed, clock, save_steps) -> (Trainer, Budget), e.g.
            `trainer` with its model and settings bound.
        output_dir: probe.json (steps per second, measured once) and trainer/ go here.
        budget, probe_seconds: training seconds of the run and of the probe.
        seed: the run's seed (the probe uses 0).

    Returns:
        (the trained model, the Trainer, its TrainingClock, the steps the linear decay was
        sized to, the probe's steps per second).
    """
    probe_file = os.path.join(output_dir, "probe.json")
    if not os.path.exists(probe_file):
        clock = budget_cache.TrainingClock(None, probe_seconds)
        probe, callback = make_trainer(os.path.join(output_dir, "probe"), 10**6, 0, clock, 0)
        callback.min_steps = PROBE_MIN_STEPS
        probe.train()
        budget_cache.write_json(probe_file, {"steps_per_second": callback.timer.steps
                                             / clock.seconds})
        shutil.rmtree(os.path.join(output_dir, "probe"), ignore_errors=True)
    rate = budget_cache.read_json(probe_file)["steps_per_second"]
    steps = budget_cache.calibrated_steps(rate, budget)
    print(f"probe: {rate:.3f} steps/s -> linear decay over {steps} steps", flush=True)

    out = os.path.join(output_dir, "trainer")
    saved = sorted(glob.glob(os.path.join(out, "checkpoint-*", CLOCK_FILE)),
                   key=lambda p: int(re.search(r"checkpoint-(\d+)", p).group(1)))
    clock = budget_cache.TrainingClock(saved[-1] if saved else None, budget)
    run, _ = make_trainer(out, steps, seed, clock, max(20, int(rate * CHECKPOINT_SECONDS)))
    if saved and (clock.time_up or clock.step >= steps):
        model = transformers.BertForMaskedLM.from_pretrained(os.path.dirname(saved[-1]))
    else:
        print(f"training from step {clock.step} ({clock.seconds:.0f} s of {budget:.0f} s)",
              flush=True)
        run.train(resume_from_checkpoint=os.path.dirname(saved[-1]) if saved else None)
        model = run.model
    return model, run, clock, steps, rate


def save_model(model, tokenizer, vocab_file: str, hf_dir: str) -> None:
    """The model and tokenizer as an HF directory with `vocab_file` as its vocab.txt,
    written under a temporary name and renamed."""
    shutil.rmtree(hf_dir + ".tmp", ignore_errors=True)
    model.save_pretrained(hf_dir + ".tmp")
    tokenizer.save_pretrained(hf_dir + ".tmp")
    shutil.copyfile(vocab_file, os.path.join(hf_dir + ".tmp", "vocab.txt"))  # ours, exactly
    shutil.rmtree(hf_dir, ignore_errors=True)
    os.replace(hf_dir + ".tmp", hf_dir)


def main() -> None:
    args = budget_cache.arm_parser(__doc__.splitlines()[0]).parse_args()
    transformers.logging.set_verbosity_error()
    threads = pin_threads()
    learning_rate = args.learning_rate or LEARNING_RATE
    batch_size = args.batch_size or BATCH_SIZE
    warmup = args.warmup_steps or 0
    print(f"torch {torch.__version__}: {threads} intra-op threads; batch {batch_size}, peak "
          f"{learning_rate:g}, {warmup} warmup steps", flush=True)
    os.makedirs(args.output_dir, exist_ok=True)
    # transformers 5 takes `vocab` (a `vocab_file=` keyword would be ignored silently, leaving
    # a tokenizer with no vocabulary); the id check below would catch that too.
    tokenizer = transformers.BertTokenizerFast(vocab=args.vocab_file, do_lower_case=True)
    check = check_tokenizer(tokenizer, args.vocab_file, args.train_text)
    data = blocks(args.train_text, tokenizer, args.max_seq_length,
                  os.path.join(args.output_dir, "blocks.npz"))
    print(f"{len(data['input_ids']):,} blocks of {args.max_seq_length}", flush=True)
    config = model_config(args.bert_config_file)
    collator = transformers.DataCollatorForLanguageModeling(
        tokenizer=tokenizer, mlm_probability=MLM_PROBABILITY)
    budget = 60 * args.minutes

    model, run, clock, steps, rate = train_to_budget(
        lambda out, max_steps, seed, clock, save_steps: trainer(
            config, data, collator, out, max_steps, seed, clock, save_steps,
            learning_rate=learning_rate, batch_size=batch_size, warmup_steps=warmup),
        args.output_dir, budget, args.probe_seconds, args.seed)
    final = clock.step
    hf_dir = os.path.join(args.output_dir, "hf_model")
    save_model(model, tokenizer, args.vocab_file, hf_dir)
    losses = [h["loss"] for h in run.state.log_history if "loss" in h]
    seconds = clock.seconds
    budget_cache.write_json(os.path.join(args.output_dir, "train_stats.json"), {
        "steps": final, "examples": final * batch_size, "train_seconds": seconds,
        "examples_per_second": final * batch_size / seconds if seconds else 0.0,
        "tokens_per_second": final * batch_size * args.max_seq_length / seconds if seconds else 0.0,
        "num_train_steps": steps, "probe_steps_per_second": rate,
        "sequences_available": len(data["input_ids"]), "last_loss": losses[-1] if losses else None,
        "tokenizer_check": check.report(),
        "settings": {"learning_rate": learning_rate, "batch_size": batch_size,
                     "torch_threads": threads,
                     "mlm_probability": MLM_PROBABILITY, "max_seq_length": args.max_seq_length,
                     "optimizer": run.args.optim.value, "weight_decay": run.args.weight_decay,
                     "warmup_steps": run.args.warmup_steps,
                     "lr_scheduler": run.args.lr_scheduler_type.value,
                     "hidden_act": config.hidden_act, "torch": torch.__version__,
                     "transformers": transformers.__version__},
        "hf_model": hf_dir})
    print(f"done: {final} steps, {seconds:.0f} s of training", flush=True)


if __name__ == "__main__":
    main()
