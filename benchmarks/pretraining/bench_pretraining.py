"""Training throughput of bert_tf's trainer vs keras-hub's BertMaskedLM.fit, side by side.

    python benchmarks/pretraining/bench_pretraining.py   # BERT-Small, seq 128, batch 32, 20 preds

Measured in ONE process, one after the other, on the same synthetic batch:

  1. a dense float32 matmul (2048 x 2048 x 2048, graph mode = oneDNN), the practical peak
     FLOP/s of this CPU;
  2. keras_hub.models.BertMaskedLM of the same dimensions trained with fit() (its default
     compile, which on a CPU-only machine means no XLA), with jit_compile=True, and under
     the mixed_bfloat16 policy;
  3. bert_tf's Trainer step (MLM + NSP) with XLA on and off, float32 and mixed_bfloat16.
     On CPUs bert_tf's default is no XLA (see distribution.resolve_use_xla).

After compiling everything, the contenders are timed in interleaved rounds (so they share
the background load of a shared machine) and the best round of each is reported, with the
median. Each round times `--steps` steady-state steps: keras-hub's fit() runs one more batch
first and a callback times from its end, so fit()'s per-call set-up is not counted; bert_tf
runs its steps in one train-loop call and that call is timed whole. For each it prints
examples/s and the achieved model FLOP/s: matmul FLOPs of the forward pass (2 * matmul
params * tokens, attention 2 * 2 * seq^2 * hidden per layer, the MLM head at the masked
positions only: transform + vocab projection) times 3 for training. bert_tf
executes fewer (its last block runs only where the heads read it); the count printed per
contender is the model's, the same for all. Figures are printed, never asserted; the machine
may be shared, so compare the ratios within one run.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

SIZES = {  # name: (layers, hidden, heads, intermediate)
    "tiny": (2, 128, 2, 512),
    "mini": (4, 256, 4, 1024),
    "small": (4, 512, 8, 2048),
    "medium": (8, 512, 8, 2048),
    "base": (12, 768, 12, 3072),
}


def train_flops_per_example(layers, hidden, intermediate, seq, preds, vocab, nsp=True,
                            last_layer_rows=None) -> float:
    """Matmul FLOPs of one training example (forward x 3).

    last_layer_rows: None counts the model as the issue defines it (every layer at every
    token). A number counts what bert_tf executes: its last block computes queries, output
    projection and feed-forward only at that many rows ([CLS] + the masked positions), with
    keys and values at every token.
    """
    per_token = 2 * (4 * hidden * hidden + 2 * hidden * intermediate)
    attention = 2 * 2 * seq * seq * hidden
    encoder = layers * (per_token * seq + attention)
    if last_layer_rows is not None:
        skipped = seq - last_layer_rows
        # Queries, output projection and feed-forward at the skipped rows; their attention.
        encoder -= skipped * 2 * (2 * hidden * hidden + 2 * hidden * intermediate)
        encoder -= 2 * 2 * skipped * seq * hidden
    mlm_head = 2 * preds * (hidden * hidden + hidden * vocab)
    nsp_head = 2 * (hidden * hidden + 2 * hidden) if nsp else 0
    return 3.0 * (encoder + mlm_head + nsp_head)


MATMUL_N = 2048
MATMUL_REPS = 10


def matmul_runner():
    """Runs MATMUL_REPS float32 2048^3 matmuls (graph mode, i.e. oneDNN) and waits."""
    a = tf.random.normal([MATMUL_N, MATMUL_N])
    b = tf.random.normal([MATMUL_N, MATMUL_N])
    matmul = tf.function(lambda x, y: tf.matmul(x, y))

    def run():
        for _ in range(MATMUL_REPS):
            c = matmul(a, b)
        c.numpy()

    run()
    return run


def synthetic_batch(batch, seq, preds, vocab, seed=0):
    rng = np.random.default_rng(seed)
    positions = np.sort(np.stack([rng.choice(np.arange(1, seq), preds, replace=False)
                                  for _ in range(batch)]), axis=1).astype(np.int32)
    return {
        "input_ids": rng.integers(1000, vocab, (batch, seq)).astype(np.int32),
        "input_mask": np.ones((batch, seq), np.int32),
        "segment_ids": (np.arange(seq)[None, :] >= seq // 2).repeat(batch, 0).astype(np.int32),
        "masked_lm_positions": positions,
        "masked_lm_ids": rng.integers(1000, vocab, (batch, preds)).astype(np.int32),
        "masked_lm_weights": np.ones((batch, preds), np.float32),
        "next_sentence_labels": rng.integers(0, 2, (batch, 1)).astype(np.int32),
    }


class Contender:
    """A training setup to time: `step(n)` runs n training steps and returns their seconds."""

    def __init__(self, key, label, nsp, step):
        self.key, self.label, self.nsp, self.step = key, label, nsp, step
        self.seconds = []


def keras_hub_contender(key, label, dims, args, data, jit_compile, policy="float32"
                        ) -> Contender:
    import keras
    import keras_hub

    layers, hidden, heads, intermediate = dims
    keras.utils.set_random_seed(0)
    keras.mixed_precision.set_dtype_policy(policy)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=args.vocab, num_layers=layers, num_heads=heads, hidden_dim=hidden,
        intermediate_dim=intermediate, dropout=0.1, max_sequence_length=512)
    model = keras_hub.models.BertMaskedLM(backbone=backbone, preprocessor=None)
    model.compile(
        optimizer=keras.optimizers.AdamW(1e-4, weight_decay=0.01, global_clipnorm=1.0),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        weighted_metrics=[keras.metrics.SparseCategoricalAccuracy()],
        jit_compile=jit_compile)
    keras.mixed_precision.set_dtype_policy("float32")  # do not leak into the next model
    x = {"token_ids": data["input_ids"], "padding_mask": data["input_mask"],
         "segment_ids": data["segment_ids"], "mask_positions": data["masked_lm_positions"]}
    dataset = tf.data.Dataset.from_tensors(
        (x, data["masked_lm_ids"], data["masked_lm_weights"])).repeat()

    class StepClock(keras.callbacks.Callback):
        """Seconds from the end of the first batch of a fit() call to the end of its last."""

        def on_train_batch_end(self, batch, logs=None):
            if batch == 0:
                self.start = time.perf_counter()
            self.end = time.perf_counter()

    clock = StepClock()

    def step(n):
        # Steady state, as in a long fit(): one extra first batch absorbs fit()'s per-call
        # set-up (iterator, callbacks), which is not counted. This is kind to keras-hub: a
        # user's fit() pays that once per epoch, here it would be paid every round.
        model.fit(dataset, steps_per_epoch=n + 1, epochs=1, verbose=0, callbacks=[clock])
        return clock.end - clock.start

    return Contender(key, label, False, step)


def bert_tf_contender(key, label, dims, args, data, use_xla, use_nsp, policy="float32"
                      ) -> Contender:
    from bert_tf.modeling.config import BertConfig
    from bert_tf.modeling.pretraining_model import BertPretrainingModel
    from bert_tf.training import optimization, trainer

    layers, hidden, heads, intermediate = dims
    # keras-hub's BERT uses the tanh GELU; so does the original BERT code.
    config = BertConfig(vocab_size=args.vocab, hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=heads, intermediate_size=intermediate,
                        type_vocab_size=2, hidden_act="gelu_approximate")
    opt = optimization.OptimizerConfig(learning_rate=1e-4, num_train_steps=10000,
                                       num_warmup_steps=100)
    t = trainer.Trainer(
        trainer.TrainerConfig(output_dir=tempfile.mkdtemp(), train_batch_size=args.batch,
                              use_xla=use_xla, use_nsp=use_nsp, dtype_policy=policy),
        tf.distribute.OneDeviceStrategy("/cpu:0"),
        model_fn=lambda: BertPretrainingModel(config, use_nsp=use_nsp),
        optimizer_fn=lambda: optimization.create_optimizer(opt))
    import keras

    keras.mixed_precision.set_dtype_policy("float32")  # do not leak into the next model
    dataset_fn = lambda context, batch: tf.data.Dataset.from_tensors(data).repeat()  # noqa
    iterator = iter(t.distribute_dataset(dataset_fn, args.batch))

    def step(n):
        # n steps in one call: steps_per_loop = n.
        start = time.perf_counter()
        losses, _ = t.steps.train_loop(iterator, tf.constant(n))
        losses.numpy()
        return time.perf_counter() - start

    return Contender(key, label, use_nsp, step)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(SIZES), default="small")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--preds", type=int, default=20)
    parser.add_argument("--vocab", type=int, default=30522)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per round")
    parser.add_argument("--rounds", type=int, default=6, help="interleaved timing rounds")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps (compilation)")
    parser.add_argument("--only", default="",
                        help="comma-separated subset: keras_hub,keras_hub_xla,keras_hub_bf16,"
                             "ours_graph,"
                             "ours_xla,ours_bf16_graph,ours_bf16_xla")
    args = parser.parse_args()
    dims = SIZES[args.model]
    layers, hidden, heads, intermediate = dims
    data = synthetic_batch(args.batch, args.seq, args.preds, args.vocab)
    flops = {nsp: train_flops_per_example(layers, hidden, intermediate, args.seq, args.preds,
                                          args.vocab, nsp) for nsp in (True, False)}
    print(f"BERT-{args.model}: {layers} layers, hidden {hidden}, {heads} heads, intermediate "
          f"{intermediate}, vocab {args.vocab}; seq {args.seq}, batch {args.batch}, "
          f"{args.preds} predictions; {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f}")
    executed = train_flops_per_example(layers, hidden, intermediate, args.seq, args.preds,
                                       args.vocab, True, last_layer_rows=args.preds + 1)
    print(f"model training FLOPs per example: {flops[True] / 1e9:.2f} G (MLM only "
          f"{flops[False] / 1e9:.2f} G); bert_tf executes {executed / 1e9:.2f} G (its last "
          f"block runs only at [CLS] + the {args.preds} masked positions). The % of matmul "
          f"below counts model FLOPs for every contender.")
    matmul = matmul_runner()
    matmul_seconds = []

    makers = [
        ("keras_hub", "keras-hub BertMaskedLM.fit (default compile)",
         lambda key, label: keras_hub_contender(key, label, dims, args, data, "auto")),
        ("keras_hub_xla", "keras-hub BertMaskedLM.fit (jit_compile=True)",
         lambda key, label: keras_hub_contender(key, label, dims, args, data, True)),
        ("keras_hub_bf16", "keras-hub BertMaskedLM.fit, mixed_bfloat16",
         lambda key, label: keras_hub_contender(key, label, dims, args, data, "auto",
                                                "mixed_bfloat16")),
        ("ours_graph", "bert_tf Trainer, MLM+NSP, float32, no XLA",
         lambda key, label: bert_tf_contender(key, label, dims, args, data, False, True)),
        ("ours_xla", "bert_tf Trainer, MLM+NSP, float32, XLA",
         lambda key, label: bert_tf_contender(key, label, dims, args, data, True, True)),
        ("ours_bf16_graph", "bert_tf Trainer, MLM+NSP, mixed_bfloat16, no XLA",
         lambda key, label: bert_tf_contender(key, label, dims, args, data, False, True,
                                              "mixed_bfloat16")),
        ("ours_bf16_xla", "bert_tf Trainer, MLM+NSP, mixed_bfloat16, XLA",
         lambda key, label: bert_tf_contender(key, label, dims, args, data, True, True,
                                              "mixed_bfloat16")),
    ]
    wanted = set(args.only.split(",")) if args.only else None
    contenders = []
    for key, label, make in makers:
        if wanted and key not in wanted:
            continue
        contender = make(key, label)
        contender.step(args.warmup)  # trace / compile
        contenders.append(contender)
    # Interleaved rounds: every contender sees the same background load; keep the best round.
    for _ in range(args.rounds):
        start = time.perf_counter()
        matmul()
        matmul_seconds.append(time.perf_counter() - start)
        for contender in contenders:
            contender.seconds.append(contender.step(args.steps))
    peak = 2.0 * MATMUL_N ** 3 * MATMUL_REPS / min(matmul_seconds)
    print(f"dense matmul {MATMUL_N}^3 float32 (best round): {peak / 1e9:.1f} GFLOP/s")
    reference = None
    for contender in contenders:
        best = args.steps * args.batch / min(contender.seconds)
        median = args.steps * args.batch / float(np.median(contender.seconds))
        achieved = best * flops[contender.nsp]
        line = (f"{contender.label:50s} {best:7.2f} examples/s (median {median:6.2f})  "
                f"{achieved / 1e9:6.1f} GFLOP/s = {100 * achieved / peak:5.1f}% of matmul")
        if contender.key == "keras_hub":
            reference = contender
        elif reference is not None:
            # Per round: this contender and keras-hub ran seconds apart under similar load.
            ratios = np.array(reference.seconds) / np.array(contender.seconds)
            line += (f"  {best * min(reference.seconds) / (args.steps * args.batch):.2f}x "
                     f"keras-hub fit (best rounds), per-round median {np.median(ratios):.2f}x")
        print(line, flush=True)
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
