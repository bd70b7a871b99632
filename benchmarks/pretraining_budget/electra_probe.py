"""Why ELECTRA's discriminator does or does not learn: controls on known replacements.

Trains the budget benchmark's ELECTRA (its model config and records, from its cache) for a
few hundred steps with the replacements of one `--replacements` kind, and prints the
discriminator's AUC, loss and the generator's MLM accuracy averaged over every 50 training
batches:

    generator   the generator's samples (ELECTRA itself)
    uniform     uniform random ids from 1000 on: a token's identity gives it away
    unigram     the batch's masked tokens shuffled across the batch
    previous    the token before: only the context gives it away
    previous_disc_only   the same, trained on the discriminator's loss alone

`--mlm_warm_start_steps=N` first trains the discriminator's encoder alone as a masked LM for
N steps (BERT's MLM head, the same records), then ELECTRA from it: does an encoder that
already reads the context give the discriminator its signal?

`--masked_lm_prob=P` draws the masks at every read at rate P (dynamic masking, in the 51
slots of arm c's records) instead of reading the records' stored 15 %.

`--mlm_init=CHECKPOINT` starts the discriminator's encoder from a bert_tf MLM run's
checkpoint instead (arm c's, say: an encoder that has left the frequent-word plateau), and
the generator from scratch.

`--context_of=CHECKPOINT` instead measures how much the final hidden states of the
discriminator and the generator at other positions move when one token of a random row
changes (a network that reads each token alone moves them by ~0). CHECKPOINT is an ELECTRA
run's, a bert_tf MLM run's with `--context_kind=bert` (its encoder), or `random` (the
networks at their initial weights: the baseline every figure is read against).

    .venv/bin/python benchmarks/pretraining_budget/electra_probe.py --replacements=uniform
    .venv/bin/python benchmarks/pretraining_budget/electra_probe.py \\
        --context_of=<cache>/arms/f-<key>/pretrain/ckpt-<step>

The figures are in docs/results/pretraining.md (ELECTRA at BERT-Tiny). Step-based, so a
loaded machine changes the time, not the figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import os
import sys
import time

import budget_cache  # noqa: F401  (puts benchmarks/common and the repo on sys.path)
import machine
import numpy as np
import tensorflow as tf

from bert_tf.core import schema
from bert_tf.data import dynamic_masking
from bert_tf.data.input_config import InputConfig
from bert_tf.data.input_pipeline import make_pretraining_dataset
from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.electra import ElectraPretrainingModel
from bert_tf.training import electra_objective as eo

KINDS = ("generator", "uniform", "unigram", "previous", "previous_disc_only")


class ControlObjective(eo.ElectraObjective):
    """ELECTRA's objective with the replacements of one control kind (module docstring)."""

    def __init__(self, vocab_size: int, disc_weight: float, kind: str):
        super().__init__(vocab_size, disc_weight)
        self.kind = kind

    def forward(self, model, batch, training):
        if self.kind == "generator":
            return super().forward(model, batch, training)
        mlm_logits = model.generator_logits(batch, training=training)
        ids = batch[schema.MASKED_LM_IDS]
        if self.kind == "uniform":
            sampled = tf.random.uniform(tf.shape(ids), 1000, self.vocab_size, tf.int32)
        elif self.kind == "unigram":
            sampled = tf.reshape(tf.random.shuffle(tf.reshape(ids, [-1])), tf.shape(ids))
        else:  # previous, previous_disc_only
            positions = batch[schema.MASKED_LM_POSITIONS]
            original = dynamic_masking.restore_original_ids(
                batch[schema.INPUT_IDS], positions, ids, batch[schema.MASKED_LM_WEIGHTS])
            sampled = tf.gather(original, tf.maximum(positions - 1, 0), batch_dims=1)
        return self.discriminate(model, batch, mlm_logits, sampled, training)


def model_config(cache: str, bert_config: str) -> BertConfig:
    """The benchmark's model config (its vocabulary size), or --bert_config at that size."""
    found = sorted(glob.glob(os.path.join(cache, "model", "bert_config_*.json")))
    if not found:
        sys.exit(f"no model config in {cache}/model: run bench_pretraining_budget.py first")
    config = BertConfig.from_json_file(found[0])
    if bert_config:
        config = dataclasses.replace(BertConfig.from_json_file(bert_config),
                                     vocab_size=config.vocab_size)
    return config


def records(cache: str, split: str, slots: int = 20) -> str:
    found = sorted(glob.glob(os.path.join(cache, "records", f"{split}_mlm_s128_p{slots}_*")))
    if not found:
        sys.exit(f"no {split} MLM records (128 tokens, {slots} slots) in {cache}/records")
    return os.path.join(found[0], "part-*.tfrecord")


def input_config(args, config: BertConfig) -> InputConfig:
    """The training batches: the records' stored 15 % masks, or with --masked_lm_prob masks
    drawn at every read in the slots arm c's records have (51: c's 40 %)."""
    if not args.masked_lm_prob:
        return InputConfig(input_patterns=records(args.cache_dir, "train"), batch_size=32,
                           max_seq_length=128, max_predictions_per_seq=20,
                           vocab_size=config.vocab_size, is_training=True)
    from bert_tf.core.masking_rules import MaskingConfig

    slots = 51
    masking = MaskingConfig.from_vocab_file(
        os.path.join(args.cache_dir, "vocab", "vocab.txt"), slots, args.masked_lm_prob)
    return InputConfig(input_patterns=records(args.cache_dir, "train", slots), batch_size=32,
                       max_seq_length=128, max_predictions_per_seq=slots,
                       vocab_size=config.vocab_size, is_training=True, masking=masking)


def mlm_warm_start(model: ElectraPretrainingModel, config: BertConfig, data, steps: int,
                   learning_rate: float) -> None:
    """Trains `model.encoder` as a masked LM for `steps` batches (module docstring)."""
    import keras

    from bert_tf.modeling.pretraining_model import BertPretrainingModel
    from bert_tf.modeling.weight_map import encoder_weight_map, get_weights, set_weights
    from bert_tf.training import losses

    mlm = BertPretrainingModel(config, use_nsp=False)
    optimizer = keras.optimizers.AdamW(learning_rate=learning_rate, weight_decay=0.01,
                                       global_clipnorm=1.0)

    @tf.function
    def step(batch):
        with tf.GradientTape() as tape:
            logits = mlm(batch, training=True)["mlm_logits"]
            ce, weight = losses.masked_lm_loss(logits, batch[schema.MASKED_LM_IDS],
                                               batch[schema.MASKED_LM_WEIGHTS])
            loss = tf.reduce_sum(ce) / (tf.reduce_sum(weight) + 1e-5)
        grads = tape.gradient(loss, mlm.trainable_variables)
        optimizer.apply_gradients(zip(grads, mlm.trainable_variables))
        return loss

    for i, batch in enumerate(data.take(steps)):
        loss = step(batch)
        if (i + 1) % 100 == 0:
            print(f"MLM warm start step {i + 1}: loss {float(loss):.3f}", flush=True)
    values = get_weights(encoder_weight_map(mlm.encoder))
    set_weights(encoder_weight_map(model.encoder), values, strict=True, source="MLM warm start")


def mlm_encoder(config: BertConfig, checkpoint: str):
    """The encoder of a bert_tf MLM run's checkpoint (`--mlm_init`, `--context_kind=bert`).
    Every encoder weight must be restored: a silent partial read would measure init."""
    from bert_tf.modeling.pretraining_model import BertPretrainingModel

    mlm = BertPretrainingModel(config, use_nsp=False)
    before = [v.numpy().copy() for v in mlm.encoder.weights]
    tf.train.Checkpoint(model=mlm).read(checkpoint).expect_partial()
    same = sum(np.array_equal(a, v.numpy()) for a, v in zip(before, mlm.encoder.weights))
    if same > 2:  # a LayerNorm at exactly its init may survive; whole layers may not
        sys.exit(f"{checkpoint}: {same} of {len(before)} encoder weights were not restored")
    return mlm.encoder


def train(args, config: BertConfig) -> None:
    import keras

    data = make_pretraining_dataset(input_config(args, config))
    model = ElectraPretrainingModel(config, args.generator_hidden_fraction, sampling_seed=1)
    if args.mlm_warm_start_steps:
        mlm_warm_start(model, config, data, args.mlm_warm_start_steps, args.learning_rate)
    if args.mlm_init:
        from bert_tf.modeling.weight_map import encoder_weight_map, get_weights, set_weights

        values = get_weights(encoder_weight_map(mlm_encoder(config, args.mlm_init)))
        set_weights(encoder_weight_map(model.encoder), values, strict=True, source="--mlm_init")
    objective = ControlObjective(config.vocab_size, args.disc_weight, args.replacements)
    optimizer = keras.optimizers.AdamW(learning_rate=args.learning_rate, weight_decay=0.01,
                                       global_clipnorm=1.0)
    disc_only = args.replacements == "previous_disc_only"

    @tf.function
    def step(batch):
        with tf.GradientTape() as tape:
            outputs = objective.forward(model, batch, training=True)
            denominators = objective.denominators(batch)
            loss, sums = objective.loss_and_sums(outputs, batch, denominators)
            if disc_only:
                loss = sums["disc_ce"] / denominators["disc_tokens"]
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients([(g, v) for g, v in zip(grads, model.trainable_variables)
                                   if g is not None])
        return objective.metrics(sums)

    start, window = time.monotonic(), []
    for i, batch in enumerate(data.take(args.steps)):
        m = step(batch)
        window.append([float(m[k]) for k in ("discriminator_auc", "discriminator_loss",
                                             "masked_lm_accuracy")])
        if (i + 1) % 50 == 0:
            auc, loss, mlm = np.mean(window[-50:], axis=0)
            print(f"step {i + 1}: discriminator AUC {auc:.3f}, loss {loss:.4f}; generator MLM "
                  f"accuracy {mlm:.3f} ({time.monotonic() - start:.0f} s)", flush=True)
    if args.save:
        tf.train.Checkpoint(model=model).write(args.save)


def context_of(args, config: BertConfig) -> None:
    if args.context_kind == "bert":
        encoders = (("MLM encoder", mlm_encoder(config, args.context_of)),)
    else:
        model = ElectraPretrainingModel(config, args.generator_hidden_fraction, sampling_seed=1)
        if args.context_of != "random":
            before = model.encoder.weights[0].numpy().copy()
            tf.train.Checkpoint(model=model).read(args.context_of).expect_partial()
            if np.array_equal(before, model.encoder.weights[0].numpy()):
                sys.exit(f"{args.context_of}: the discriminator was not restored")
        encoders = (("discriminator", model.encoder), ("generator", model.generator))
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, 5000, (4, 64)).astype("int32")
    edited = ids.copy()
    edited[:, 40] = rng.integers(1000, 5000, 4)
    rest = [p for p in range(64) if p != 40]
    for name, encoder in encoders:
        def run(x, encoder=encoder):
            return encoder({"input_ids": x, "input_mask": np.ones_like(x),
                            "segment_ids": np.zeros_like(x)})["sequence_output"].numpy()
        a, b = run(ids), run(edited)
        moved = np.abs(a - b).max(-1)[:, rest].mean()
        print(f"{name}: changing token 40 moves the other positions' hidden states by "
              f"{moved:.4f} (their mean size {np.abs(a).mean():.4f}: "
              f"{100 * moved / np.abs(a).mean():.1f} %)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache_dir", default=os.path.expanduser(
        "~/.cache/bert_tf/bench_pretraining_budget"), help="bench_pretraining_budget's cache")
    parser.add_argument("--replacements", default="generator", choices=KINDS)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--generator_hidden_fraction", type=float, default=0.25)
    parser.add_argument("--disc_weight", type=float, default=50.0)
    parser.add_argument("--learning_rate", type=float, default=5e-4)
    parser.add_argument("--bert_config", default="",
                        help="another discriminator shape (its vocab_size is replaced)")
    parser.add_argument("--mlm_warm_start_steps", type=int, default=0,
                        help="train the discriminator as a masked LM this long first")
    parser.add_argument("--save", default="", help="write the trained model's checkpoint here")
    parser.add_argument("--masked_lm_prob", type=float, default=0.0,
                        help="draw masks at this rate at every read (default: the records' "
                        "stored 15 %%)")
    parser.add_argument("--mlm_init", default="",
                        help="start the discriminator's encoder from this MLM checkpoint")
    parser.add_argument("--context_of", default="",
                        help="a checkpoint prefix (ELECTRA's, or --context_kind=bert), or "
                        "'random'")
    parser.add_argument("--context_kind", default="electra", choices=("electra", "bert"))
    args = parser.parse_args()
    print(machine.describe(), flush=True)
    config = model_config(args.cache_dir, args.bert_config)
    if args.context_of:
        context_of(args, config)
    else:
        train(args, config)


if __name__ == "__main__":
    main()
