"""Arm d of bench_pretraining_budget.py: keras-hub's `BertMaskedLM` pretrained with `fit()`.

    .venv/bin/python benchmarks/pretraining_budget/budget_keras_hub.py --train_text=train.txt \\
        --vocab_file=vocab.txt --bert_config_file=bert_config.json --output_dir=OUT --minutes=30

Runs in bert_tf's venv (keras-hub is one of its dependencies) in a process of its own. What a
keras-hub user gets, from keras-hub's own parts and defaults:

- model: `BertBackbone` with the dimensions of --bert_config_file, inside `BertMaskedLM`
  (its MLM head: `MaskedLMHead`, tied embeddings); `BertTokenizer(vocabulary=vocab.txt,
  lowercase=True, strip_accents=True)`: the vocabulary comes from build_vocab
  --do_lower_case, which lower-cases and strips accents, so the tokenizer must do both
  (keras-hub's WordPiece strips accents only when asked; without it "café" is [UNK] or
  other pieces than the vocabulary was learned from);
- masking: `BertMaskedLMPreprocessor`'s `MaskedLMMaskGenerator` at its default rate (15 % of
  the non-special tokens, 80/10/10), drawn afresh for every batch, with 32 prediction slots
  (`mask_selection_length`) as the keras.io guide uses. The preprocessor's default, 96 slots,
  holds about 19 real predictions in a 128-token row: the output layer (most of a step at
  BERT-Tiny's width) would compute 96 rows for them;
- optimizer, batch, sequence length: the keras.io guide "Pretraining a Transformer from scratch
  with KerasHub" (keras-io guides/keras_hub/transformer_pretraining.py): `AdamW(5e-4)` with
  Keras' defaults (weight decay 0.004, epsilon 1e-7, no clipping), batch 128, length 128,
  `compile()`'s default loss and weighted accuracy. (The guide masks 25 %; this arm keeps
  BertMaskedLM's own rate, 15 %, as arm e does.) The guide compiles with
  `jit_compile=True`, `compile()`'s own default on a CPU is no XLA: the probe times both and
  the arm trains with the faster.
- schedule: the guide's rate is constant; here it decays linearly to 0 (no warmup: the guide
  has none) over the steps a throughput probe predicts for the budget, as arm b is sized.
- the "tuned peer" arm (d-tuned) passes bert_tf's batch, peak rate and warmup steps
  (--batch_size, --learning_rate, --warmup_steps from configs/budget.flags): linear warmup,
  then the same linear decay; everything else as above.

Text: the training articles, each tokenized whole by the tokenizer and cut into consecutive
chunks of length - 2 tokens, packed `[CLS] chunk [SEP]` by the preprocessor's packer (one
segment; an article's last chunk is padded). Tokenizing happens before the clock starts.

Budget: only training counts (the batches' wall time; not tokenizing, building, checkpoint
saves), the first batch of a process (graph tracing and XLA compilation) at the pace of the
second, as bert_tf's clock counts its first call. A checkpoint about every 5 minutes of
training (model, optimizer, clock) lets a killed run resume. Writes to --output_dir:
`preset/` (keras-hub preset: `save_to_preset`), `bert_tf/` (the same weights as a bert_tf
checkpoint, through bert_tf.interop.keras_hub_checkpoint) and `train_stats.json`.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]

import budget_cache  # noqa: E402
import budget_data  # noqa: E402
import keras  # noqa: E402
import keras_hub  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

# The guide's pretraining settings (see the module docstring).
LEARNING_RATE = 5e-4
BATCH_SIZE = 128
MASK_SELECTION_LENGTH = 32
CHECKPOINT_SECONDS = 300
REPORT_SECONDS = 30


def tokenize(train_text: str, preprocessor, seq_len: int, cache: str) -> np.ndarray:
    """token_ids [n, seq_len] int32: the articles' chunks packed by the preprocessor."""
    if os.path.exists(cache):
        return np.load(cache)
    texts = [" ".join(doc) for doc in budget_data.articles(train_text)]
    chunk = seq_len - 2
    pieces = []
    ds = tf.data.Dataset.from_tensor_slices(texts).batch(16).map(
        preprocessor.tokenizer, num_parallel_calls=tf.data.AUTOTUNE)
    for ids in ds:
        for row in ids.to_list():
            pieces.extend(row[i:i + chunk] for i in range(0, len(row), chunk))
    packed = []
    for start in range(0, len(pieces), 4096):
        token_ids, _ = preprocessor.packer(tf.ragged.constant(pieces[start:start + 4096],
                                                               dtype=tf.int32))
        packed.append(token_ids.numpy().astype(np.int32))
    token_ids = np.concatenate(packed)
    np.save(cache + ".tmp.npy", token_ids)
    os.replace(cache + ".tmp.npy", cache)
    return token_ids


def dataset(token_ids: np.ndarray, preprocessor, seed: int, skip_batches: int,
            batch_size: int) -> tf.data.Dataset:
    """Shuffled, repeated batches masked afresh by the preprocessor's masker: (x, y, w)."""

    def mask(ids):
        # BertMaskedLMPreprocessor's own steps after packing (keras-hub masked_lm_preprocessor).
        out = preprocessor.masker(ids)
        x = {"token_ids": out["token_ids"],
             "padding_mask": ids != preprocessor.tokenizer.pad_token_id,
             "segment_ids": tf.zeros_like(ids), "mask_positions": out["mask_positions"]}
        return x, out["mask_ids"], out["mask_weights"]

    ds = tf.data.Dataset.from_tensor_slices(token_ids).shuffle(
        min(len(token_ids), 100_000), seed=seed).repeat().batch(batch_size, drop_remainder=True)
    return ds.skip(skip_batches).map(mask, num_parallel_calls=tf.data.AUTOTUNE).prefetch(2)


class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup from 0 to `peak` over `warmup` steps, then linear decay to 0 at `total`
    (warmup 0: keras' PolynomialDecay(peak, total, 0.0, power=1), the default arm's)."""

    def __init__(self, peak: float, warmup: int, total: int):
        self.peak, self.warmup, self.total = peak, warmup, max(total, warmup + 1)

    def __call__(self, step):
        step = keras.ops.cast(step, "float32")
        rising = self.peak * step / max(self.warmup, 1)
        falling = self.peak * (self.total - step) / (self.total - self.warmup)
        return keras.ops.maximum(keras.ops.where(step < self.warmup, rising, falling), 0.0)

    def get_config(self):
        return {"peak": self.peak, "warmup": self.warmup, "total": self.total}


def build(config: dict, learning_rate, jit_compile: bool):
    """BertMaskedLM (no preprocessor: batches come masked) compiled as the guide does."""
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=config["vocab_size"], num_layers=config["num_hidden_layers"],
        num_heads=config["num_attention_heads"], hidden_dim=config["hidden_size"],
        intermediate_dim=config["intermediate_size"], dropout=config["hidden_dropout_prob"],
        max_sequence_length=config["max_position_embeddings"],
        num_segments=config["type_vocab_size"])
    model = keras_hub.models.BertMaskedLM(backbone, preprocessor=None)
    optimizer = keras.optimizers.AdamW(learning_rate)
    model.compile(optimizer=optimizer, jit_compile=jit_compile)
    return model, optimizer


class Budget(keras.callbacks.Callback):
    """The training clock, the stop at the budget, checkpoints and progress lines."""

    def __init__(self, clock: budget_cache.TrainingClock, save, start_step: int):
        super().__init__()
        self.clock, self.timer, self.save = clock, budget_cache.StepTimer(clock), save
        self.step, self.logs = start_step, {}
        self.last_save, self.last_report = clock.seconds, time.monotonic()

    def on_train_batch_begin(self, batch, logs=None):
        self.timer.begin()

    def on_train_batch_end(self, batch, logs=None):
        self.timer.end()
        self.step += 1
        self.logs = dict(logs or {})
        if self.clock.time_up:
            self.model.stop_training = True
        if self.clock.seconds - self.last_save >= CHECKPOINT_SECONDS:
            self.save(self.step)
            self.last_save = self.clock.seconds
        if time.monotonic() - self.last_report >= REPORT_SECONDS:
            self.last_report = time.monotonic()
            print(f"step {self.step} | loss {self.logs.get('loss', float('nan')):.4f} | "
                  f"mlm_acc {self.logs.get('sparse_categorical_accuracy', 0):.4f} | "
                  f"clock {self.clock.seconds:.0f} s", flush=True)

    def on_train_end(self, logs=None):
        self.timer.close()


def probe_rate(config: dict, token_ids: np.ndarray, preprocessor, seconds: float,
               jit_compile: bool, batch_size: int) -> float:
    """Steps per second of this model and batch, from a throwaway model."""
    model, _ = build(config, LEARNING_RATE, jit_compile)
    clock = budget_cache.TrainingClock(None, seconds)
    callback = Budget(clock, lambda step: None, 0)
    model.fit(dataset(token_ids, preprocessor, 0, 0, batch_size), epochs=1,
              steps_per_epoch=10**6,
              callbacks=[callback], verbose=0)
    rate = callback.step / clock.seconds
    del model
    keras.backend.clear_session()
    return rate


def main() -> None:
    args = budget_cache.arm_parser(__doc__.splitlines()[0]).parse_args()
    from bert_tf.interop import keras_hub_checkpoint
    from bert_tf.interop.native import write_native

    os.makedirs(args.output_dir, exist_ok=True)
    with open(args.bert_config_file, encoding="utf-8") as f:
        config = json.load(f)
    peak = args.learning_rate or LEARNING_RATE
    batch_size = args.batch_size or BATCH_SIZE
    warmup = args.warmup_steps or 0
    tokenizer = keras_hub.models.BertTokenizer(vocabulary=args.vocab_file, lowercase=True,
                                               strip_accents=True)
    preprocessor = keras_hub.models.BertMaskedLMPreprocessor(
        tokenizer, sequence_length=args.max_seq_length,
        mask_selection_length=MASK_SELECTION_LENGTH)
    preprocessor.build(None)  # makes its packer and masker
    start = time.monotonic()
    token_ids = tokenize(args.train_text, preprocessor, args.max_seq_length,
                         os.path.join(args.output_dir, "token_ids.npy"))
    print(f"{len(token_ids):,} sequences of {args.max_seq_length} "
          f"({time.monotonic() - start:.0f} s to tokenize)", flush=True)
    budget = 60 * args.minutes
    probe_file = os.path.join(args.output_dir, "probe.json")
    if not os.path.exists(probe_file):
        rates = {str(jit): probe_rate(config, token_ids, preprocessor, args.probe_seconds, jit,
                                      batch_size) for jit in (True, False)}
        jit = rates["True"] >= rates["False"]
        budget_cache.write_json(probe_file, {"steps_per_second": rates[str(jit)],
                                             "jit_compile": jit, "rates": rates})
    probe = budget_cache.read_json(probe_file)
    rate, jit = probe["steps_per_second"], probe["jit_compile"]
    steps = budget_cache.calibrated_steps(rate, budget)
    print(f"probe: {probe['rates']} steps/s (jit_compile: rate) -> jit_compile={jit}; batch "
          f"{batch_size}, peak {peak:g}, {warmup} warmup steps, linear decay to step {steps}",
          flush=True)

    keras.utils.set_random_seed(args.seed)
    schedule = WarmupLinearDecay(peak, warmup, steps)
    model, optimizer = build(config, schedule, jit)
    optimizer.build(model.trainable_variables)
    # The clock's seconds live in the checkpoint, so a checkpoint and its time never disagree.
    trained = tf.Variable(0.0, dtype=tf.float64, trainable=False)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, trained_seconds=trained)
    manager = tf.train.CheckpointManager(checkpoint, os.path.join(args.output_dir, "ckpt"),
                                         max_to_keep=1)
    if manager.latest_checkpoint:
        checkpoint.restore(manager.latest_checkpoint).assert_existing_objects_matched()
    clock = budget_cache.TrainingClock(None, budget)
    clock.seconds = float(trained.numpy())
    start_step = int(optimizer.iterations.numpy())
    print(f"training from step {start_step} ({clock.seconds:.0f} s of {budget:.0f} s trained)",
          flush=True)

    def save(step: int) -> None:
        trained.assign(clock.seconds)
        manager.save(checkpoint_number=step)

    callback = Budget(clock, save, start_step)
    if start_step < steps and not clock.time_up:
        model.fit(dataset(token_ids, preprocessor, args.seed, start_step, batch_size), epochs=1,
                  steps_per_epoch=steps - start_step, callbacks=[callback], verbose=0)
        save(int(optimizer.iterations.numpy()))
    final = int(optimizer.iterations.numpy())
    preset = os.path.join(args.output_dir, "preset")
    if not os.path.exists(os.path.join(preset, "config.json")):
        shutil.rmtree(preset + ".tmp", ignore_errors=True)
        model.save_to_preset(preset + ".tmp")
        preprocessor.save_to_preset(preset + ".tmp")
        shutil.rmtree(preset, ignore_errors=True)
        os.replace(preset + ".tmp", preset)
    native = os.path.join(args.output_dir, "bert_tf")
    if not os.path.exists(os.path.join(native, "checkpoint")):
        shutil.rmtree(native, ignore_errors=True)
        write_native(keras_hub_checkpoint.read(preset, args.vocab_file), native)
    seconds = clock.seconds
    budget_cache.write_json(os.path.join(args.output_dir, "train_stats.json"), {
        "steps": final, "examples": final * batch_size, "train_seconds": seconds,
        "examples_per_second": final * batch_size / seconds if seconds else 0.0,
        "tokens_per_second": final * batch_size * args.max_seq_length / seconds if seconds else 0.0,
        "num_train_steps": steps, "probe_steps_per_second": rate,
        "final_learning_rate": float(schedule(final)), "sequences_available": len(token_ids),
        "last_logs": {k: float(v) for k, v in callback.logs.items()},
        "settings": {"learning_rate": peak, "batch_size": batch_size,
                     "optimizer": "keras AdamW defaults", "warmup_steps": warmup,
                     "schedule": f"linear warmup over {warmup} steps, then linear to 0",
                     "mask_selection_rate": preprocessor.mask_selection_rate,
                     "mask_selection_length": preprocessor.mask_selection_length,
                     "tokenizer": {"lowercase": tokenizer.lowercase,
                                   "strip_accents": tokenizer.strip_accents},
                     "max_seq_length": args.max_seq_length, "jit_compile": jit,
                     "probe_rates": probe["rates"]},
        "checkpoint": native, "bert_config": os.path.join(native, "bert_config.json")})
    print(f"done: {final} steps, {seconds:.0f} s of training", flush=True)


if __name__ == "__main__":
    main()
