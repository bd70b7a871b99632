"""Tests of bert_tf.training.optimization: the schedule by hand, the optimizers against NumPy
references.

The strategy test runs in a subprocess: logical CPU devices must be configured before
TensorFlow initialises, which has already happened in this process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf
from _pretraining_helpers import fresh_pythonpath

from bert_tf.core.errors import UserError
from bert_tf.training import optimization
from bert_tf.training.budget import TrainingClock
from bert_tf.training.optimization import OptimizerConfig, WarmupPolynomialDecay, create_optimizer
from bert_tf.training.schedules import WarmupStableDecay

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# ------------------------------------------------------------------------ schedule


def test_schedule_hand_computed_values():
    s = WarmupPolynomialDecay(1e-3, num_train_steps=100, num_warmup_steps=10)
    want = {
        0: 0.0,
        5: 5e-4,  # warmup/2: lr * 5 / 10
        9: 9e-4,  # last warmup step
        10: 1e-3 * (1 - 10 / 100),  # the decay line from step 0, as in the original
        55: 1e-3 * 0.45,  # midway
        100: 0.0,  # end
        150: 0.0,  # past the end: stays at end_lr
    }
    for step, lr in want.items():
        np.testing.assert_allclose(float(s(step)), lr, rtol=1e-6, atol=1e-12, err_msg=str(step))


def test_schedule_power_end_lr_and_no_warmup():
    s = WarmupPolynomialDecay(1e-3, num_train_steps=100, num_warmup_steps=0, end_lr=1e-5,
                              power=2.0)
    for step, lr in {0: 1e-3, 55: (1e-3 - 1e-5) * 0.45 ** 2 + 1e-5, 100: 1e-5, 250: 1e-5}.items():
        np.testing.assert_allclose(float(s(step)), lr, rtol=1e-6, err_msg=str(step))
    # Warmup longer than training (allowed by the original): warmup value throughout.
    s = WarmupPolynomialDecay(2e-4, num_train_steps=10, num_warmup_steps=20)
    np.testing.assert_allclose(float(s(15)), 2e-4 * 15 / 20, rtol=1e-6)


def test_schedule_serialises():
    s = WarmupPolynomialDecay(3e-4, num_train_steps=50, num_warmup_steps=5, end_lr=1e-6,
                              power=0.5)
    copy = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(s))
    assert isinstance(copy, WarmupPolynomialDecay) and copy.get_config() == s.get_config()
    for step in (0, 3, 5, 20, 60):
        assert float(copy(step)) == float(s(step))


def test_optimizer_learning_rate_follows_iterations():
    config = OptimizerConfig(learning_rate=1e-2, num_train_steps=8, num_warmup_steps=4)
    opt = create_optimizer(config)
    var = keras.Variable(np.ones(3, np.float32), name="w")
    schedule = optimization.create_schedule(config)
    for k in range(6):
        assert int(opt.iterations) == k
        np.testing.assert_allclose(float(opt.learning_rate), float(schedule(k)), rtol=1e-6)
        opt.apply_gradients([(tf.ones(3), var)])


# ------------------------------------------------------------------------ warmup-stable-decay
# and the time budget (the training clock; its use by the trainer: test_budget_schedule.py)


def test_wsd_hand_computed_values():
    s = WarmupStableDecay(1e-3, num_train_steps=100, num_warmup_steps=10, end_lr=1e-5,
                          decay_proportion=0.2)
    want = {
        0: 0.0,
        5: 5e-4,  # warmup: lr * 5 / 10
        10: 1e-3,  # the peak, reached exactly at the end of warmup
        50: 1e-3,  # stable
        79: 1e-3,  # the last step before the decay (the last 20 steps)
        # q = 1 - (1 - 0.85) / 0.2 = 0.25: end_lr + (lr - end_lr) * (1 - sqrt(0.25))
        85: 1e-5 + 9.9e-4 * 0.5,
        96: 1e-5 + 9.9e-4 * (1 - np.sqrt(0.8)),  # q = 0.8
        100: 1e-5,  # end
        150: 1e-5,  # past the end: stays at end_lr
    }
    for step, lr in want.items():
        np.testing.assert_allclose(float(s(step)), lr, rtol=1e-6, atol=1e-12, err_msg=str(step))
    assert float(s(10)) == float(np.float32(1e-3)) and float(s(100)) == float(np.float32(1e-5))
    # Without warmup the peak starts at step 0; a decay that starts during warmup caps it.
    assert float(WarmupStableDecay(2e-4, 10, 0)(0)) == float(np.float32(2e-4))
    s = WarmupStableDecay(1e-3, num_train_steps=10, num_warmup_steps=8, decay_proportion=0.5)
    # step 6: warmup allows 7.5e-4, the decay (q = 1 - 0.4 / 0.5 = 0.2) 1e-3 * (1 - sqrt(0.2))
    np.testing.assert_allclose(float(s(6)), 1e-3 * (1 - np.sqrt(0.2)), rtol=1e-6)
    np.testing.assert_allclose(float(s(2)), 2.5e-4, rtol=1e-6)  # warmup below the decay


def test_time_progress_takes_over_when_the_clock_runs_ahead_of_the_steps():
    clock = TrainingClock(max_train_minutes=1.0)  # 60 s
    linear = WarmupPolynomialDecay(1e-3, num_train_steps=1000, num_warmup_steps=10, clock=clock)
    wsd = WarmupStableDecay(1e-3, num_train_steps=1000, num_warmup_steps=10, end_lr=1e-5,
                            decay_proportion=0.2, clock=clock)
    traces = []

    @tf.function
    def rates(step):
        traces.append(1)  # Python side effect: runs once per trace
        return tf.stack([linear(step), wsd(step)])

    def check(step, seconds, want_linear, want_wsd):
        clock.variable.assign(seconds)  # as the trainer's host does between calls
        clock.sync()
        got = rates(tf.constant(step, tf.int64)).numpy()
        np.testing.assert_allclose(got, [want_linear, want_wsd], rtol=1e-5, atol=1e-12,
                                   err_msg=f"step {step}, {seconds} s")

    check(100, 0.0, 9e-4, 1e-3)  # the steps lead (0.1): as without a clock
    check(100, 30.0, 5e-4, 1e-3)  # 30 s of 60: progress 0.5, linear halfway down
    check(900, 30.0, 1e-4, 1e-5 + 9.9e-4 * (1 - np.sqrt(0.5)))  # the steps lead again (0.9)
    check(100, 54.0, 1e-4, 1e-5 + 9.9e-4 * (1 - np.sqrt(0.5)))  # the time leads (0.9)
    check(100, 60.0, 0.0, 1e-5)  # budget spent: end_lr, at step 100 of 1000
    # Warmup stays by steps: a budget spent during warmup leaves linear at its warmup value
    # (as the original's warmup overrides its decay), wsd at end_lr (its min of the two).
    check(5, 60.0, 5e-4, 1e-5)
    assert len(traces) == 1  # a variable read: the clock changes nothing in the graph


def xla_apply(opt, var):
    """One XLA-compiled apply of a gradient of ones (as the trainer's single-replica update)."""
    return tf.function(lambda: opt.apply([tf.ones(3)], [var]), jit_compile=True)


def test_the_optimizer_reads_the_clock_inside_an_xla_compiled_update():
    clock = TrainingClock(max_train_minutes=0.5)  # 30 s
    for schedule in ("linear", "wsd"):
        clock.variable.assign(0.0)
        opt = create_optimizer(OptimizerConfig(
            learning_rate=1e-2, num_train_steps=1000, num_warmup_steps=0, lr_schedule=schedule,
            decay_proportion=1.0, weight_decay_rate=0.0, clip_norm=0.0), clock=clock)
        var = keras.Variable(np.ones(3, np.float32), name="w")
        opt.build([var])
        apply = xla_apply(opt, var)
        moved = []
        for seconds in (7.5, 30.0):  # a quarter of the budget, then all of it
            clock.variable.assign(seconds)
            before = var.numpy().copy()
            apply()
            moved.append(float(before[0] - var.numpy()[0]))
        # Adam's bias-corrected first steps move by lr * g / |g| (g = 1; eps 1e-6 aside).
        quarter = {"linear": 0.75, "wsd": 1 - np.sqrt(0.25)}[schedule]
        np.testing.assert_allclose(moved, [1e-2 * quarter, 0.0], rtol=1e-4, atol=1e-9,
                                   err_msg=schedule)


def test_wsd_and_a_clocked_schedule_serialise():
    s = WarmupStableDecay(3e-4, num_train_steps=50, num_warmup_steps=5, end_lr=1e-6,
                          decay_proportion=0.3, clock=TrainingClock(2.5))
    config = keras.saving.serialize_keras_object(s)
    copy = keras.saving.deserialize_keras_object(config)
    assert isinstance(copy, WarmupStableDecay) and copy.get_config() == s.get_config()
    assert s.get_config()["max_train_minutes"] == 2.5
    # The seconds trained are training state (in the checkpoint): the copy's clock is at 0.
    assert copy.clock is not s.clock and copy.clock.budget_seconds == 150.0
    for step in (0, 3, 5, 20, 40, 60):
        assert float(copy(step)) == float(s(step))


@pytest.mark.parametrize("kwargs,message", [
    (dict(lr_schedule="cosine"), "--lr_schedule must be one of linear, wsd"),
    (dict(decay_proportion=0.0), r"--decay_proportion must be in \(0, 1\], got 0.0"),
    (dict(decay_proportion=1.5), r"--decay_proportion must be in \(0, 1\], got 1.5"),
])
def test_schedule_config_validation(kwargs, message):
    with pytest.raises(UserError, match=message):
        OptimizerConfig(learning_rate=1e-4, num_train_steps=10, num_warmup_steps=1, **kwargs)


# ------------------------------------------------------------------------ decay exclusion


def tiny_model() -> keras.Model:
    """Embedding + Dense + LayerNormalization + Dense: every kind of variable BERT has."""
    ids = keras.Input(shape=(5,), dtype="int32")
    x = keras.layers.Embedding(11, 4, name="word_embeddings")(ids)
    x = keras.layers.Dense(6, activation="tanh", name="dense_in")(x)
    x = keras.layers.LayerNormalization()(x)  # default name: layer_normalization[_N]
    x = keras.layers.Dense(3, name="dense_out")(keras.layers.Flatten()(x))
    return keras.Model(ids, x)


def test_exclusion_matches_paths_of_a_real_model():
    model = tiny_model()
    opt = create_optimizer(OptimizerConfig(learning_rate=1e-3, num_train_steps=10,
                                           num_warmup_steps=0))
    opt.build(model.trainable_variables)
    decays = {v.path: opt.decays(v) for v in model.trainable_variables}
    norm = [v.path.split("/")[0] for v in model.trainable_variables if v.name == "gamma"][0]
    assert norm.startswith("layer_normalization")
    assert decays == {
        "word_embeddings/embeddings": True,
        "dense_in/kernel": True,
        "dense_in/bias": False,
        f"{norm}/gamma": False,
        f"{norm}/beta": False,
        "dense_out/kernel": True,
        "dense_out/bias": False,
    }
    # Keras' own rule matches `.name`, which would decay LayerNorm: the reason for `.path`.
    gamma = [v for v in model.trainable_variables if v.path.endswith("gamma")][0]
    assert gamma.name == "gamma" and "layer_norm" in gamma.path


def test_exclusion_on_the_bert_pretraining_model():
    from bert_tf.modeling import BertConfig, BertPretrainingModel

    model = BertPretrainingModel(BertConfig(vocab_size=50, hidden_size=8, num_hidden_layers=1,
                                            num_attention_heads=2, intermediate_size=16,
                                            max_position_embeddings=16, type_vocab_size=2))
    opt = create_optimizer(OptimizerConfig(learning_rate=1e-3, num_train_steps=10,
                                           num_warmup_steps=0))
    opt.build(model.trainable_variables)
    for v in model.trainable_variables:
        no_decay = v.name in ("gamma", "beta") or "bias" in v.name
        assert opt.decays(v) == (not no_decay), v.path
    assert sum(opt.decays(v) for v in model.trainable_variables) >= 8  # embeddings + kernels


def test_zero_gradient_shows_decay_only_where_expected():
    """With g = 0 the Adam direction is 0, so only the decay moves weights: w *= 1 - lr * wd."""
    for name, shrink in (("adamw", lambda lr, wd: 1 - lr * wd), ("lamb", lambda lr, wd: 1 - lr)):
        model = tiny_model()
        lr, wd = 0.1, 0.25
        opt = create_optimizer(OptimizerConfig(optimizer=name, learning_rate=lr,
                                               num_train_steps=100, num_warmup_steps=0,
                                               weight_decay_rate=wd))
        before = [v.numpy() for v in model.trainable_variables]
        opt.apply_gradients([(tf.zeros_like(v), v) for v in model.trainable_variables])
        for v, w in zip(model.trainable_variables, before):
            # LAMB: update = wd * w, trust ratio ||w|| / ||wd * w|| = 1 / wd -> w *= 1 - lr.
            factor = shrink(lr, wd) if opt.decays(v) else 1.0
            np.testing.assert_allclose(v.numpy(), w * factor, rtol=1e-6, err_msg=f"{name} {v.path}")


# ------------------------------------------------------------------------ NumPy references


def reference_step(kind, weights, grads, state, lr, t, decay_flags, cfg, bias_correction):
    """One step of the reference optimizers, in float64. t is the 1-based step.

    AdamW runs TensorFlow's fused Adam kernel, whose betas are float32 tensors: 1 - 0.999 is
    then 0.00099998713 (in float64, 0.001), which without bias correction moves v by 1.3e-5
    relative. The reference takes AdamW's betas as float32 values too.
    """
    norm = np.sqrt(sum(np.sum(g.astype(np.float64) ** 2) for g in grads))
    if cfg.clip_norm and norm > cfg.clip_norm:
        grads = [g * cfg.clip_norm / norm for g in grads]
    beta_1, beta_2 = cfg.beta_1, cfg.beta_2
    if kind == "adamw":
        beta_1, beta_2 = float(np.float32(beta_1)), float(np.float32(beta_2))
    out = []
    for i, (w, g, decays) in enumerate(zip(weights, grads, decay_flags)):
        m = beta_1 * state["m"][i] + (1 - beta_1) * g
        v = beta_2 * state["v"][i] + (1 - beta_2) * g * g
        state["m"][i], state["v"][i] = m, v
        if kind == "lamb" or bias_correction:
            m, v = m / (1 - beta_1 ** t), v / (1 - beta_2 ** t)
        update = m / (np.sqrt(v) + cfg.epsilon)
        ratio = 1.0
        if decays:
            update = update + cfg.weight_decay_rate * w
            if kind == "lamb":
                w_norm, u_norm = np.linalg.norm(w), np.linalg.norm(update)
                ratio = w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0
        out.append(w - ratio * lr * update)
    return out


@pytest.mark.parametrize("kind,bias_correction", [("adamw", False), ("adamw", True),
                                                  ("lamb", False)])
def test_optimizer_matches_numpy_reference(kind, bias_correction):
    keras.utils.set_random_seed(1)
    model = tiny_model()
    cfg = OptimizerConfig(optimizer=kind, learning_rate=0.05, num_train_steps=10,
                          num_warmup_steps=2, weight_decay_rate=0.1, clip_norm=0.5,
                          adam_bias_correction=bias_correction)
    opt = create_optimizer(cfg)
    schedule = optimization.create_schedule(cfg)
    rng = np.random.default_rng(0)
    x = rng.integers(0, 11, (4, 5)).astype(np.int32)
    y = rng.normal(size=(4, 3)).astype(np.float32)
    variables = model.trainable_variables
    weights = [v.numpy().astype(np.float64) for v in variables]
    initial = [w.copy() for w in weights]
    state = {"m": [np.zeros_like(w) for w in weights], "v": [np.zeros_like(w) for w in weights]}

    @tf.function
    def train_step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        grads = tape.gradient(loss, variables)
        opt.apply_gradients(zip(grads, variables))
        return grads

    norms = []
    for t in range(1, 5):
        grads = [tf.convert_to_tensor(g).numpy().astype(np.float64) for g in train_step()]
        norms.append(np.sqrt(sum(np.sum(g ** 2) for g in grads)))
        flags = [opt.decays(v) for v in variables]
        weights = reference_step(kind, weights, grads, state, float(schedule(t - 1)), t, flags,
                                 cfg, bias_correction)
        for v, w in zip(variables, weights):
            np.testing.assert_allclose(v.numpy(), w, rtol=2e-5, atol=1e-6,
                                       err_msg=f"step {t} {v.path}")
    assert max(norms) > cfg.clip_norm  # clipping was exercised
    assert all(np.abs(w - w0).max() > 1e-3 for w, w0 in zip(weights, initial))


def test_bias_correction_choice_changes_the_update():
    var_a, var_b = keras.Variable(np.ones(2, np.float32)), keras.Variable(np.ones(2, np.float32))
    for var, bc in ((var_a, False), (var_b, True)):
        opt = create_optimizer(OptimizerConfig(learning_rate=0.1, num_train_steps=10,
                                               num_warmup_steps=0, weight_decay_rate=0.0,
                                               adam_bias_correction=bc, clip_norm=None))
        opt.apply_gradients([(tf.constant([0.5, -2.0]), var)])
    # Original (no correction): m = 0.1 g, v = 0.001 g^2 -> step lr * 0.1 / sqrt(0.001) = 0.316.
    np.testing.assert_allclose(var_a.numpy(), 1 - 0.1 * np.sign([0.5, -2.0]) * 0.1 / np.sqrt(1e-3),
                               rtol=1e-4)
    # Bias-corrected: m_hat = g, v_hat = g^2 -> step lr * sign(g) = 0.1.
    np.testing.assert_allclose(var_b.numpy(), 1 - 0.1 * np.sign([0.5, -2.0]), rtol=1e-4)


def test_bias_correction_is_on_by_default_everywhere():
    # The library class, the config and the command line agree (the README's default).
    from absl import flags as absl_flags

    from bert_tf import run_pretraining  # noqa: F401 (defines the flags)

    assert optimization.AdamWeightDecay(learning_rate=0.1).bias_correction is True
    assert OptimizerConfig(learning_rate=0.1, num_train_steps=10,
                           num_warmup_steps=0).adam_bias_correction is True
    assert absl_flags.FLAGS["adam_bias_correction"].default is True
    assert create_optimizer(OptimizerConfig(learning_rate=0.1, num_train_steps=10,
                                            num_warmup_steps=0)).bias_correction is True


# ------------------------------------------------------------------------ checkpoint, config


@pytest.mark.parametrize("kind", ["adamw", "lamb"])
def test_checkpoint_restores_slots_and_continues_identically(tmp_path, kind):
    cfg = OptimizerConfig(optimizer=kind, learning_rate=0.05, num_train_steps=10,
                          num_warmup_steps=1)
    x = np.arange(20).reshape(4, 5).astype(np.int32) % 11

    def make():
        keras.utils.set_random_seed(3)
        model = tiny_model()
        return model, create_optimizer(cfg)

    def train(model, opt, steps):
        for _ in range(steps):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x) - 1.0))
            opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                    model.trainable_variables))

    model, opt = make()
    train(model, opt, 2)
    path = tf.train.Checkpoint(model=model, optimizer=opt).save(os.fspath(tmp_path / "ckpt"))
    train(model, opt, 2)
    want = [v.numpy() for v in model.trainable_variables]

    model2, opt2 = make()
    tf.train.Checkpoint(model=model2, optimizer=opt2).restore(path)  # slots: deferred restore
    train(model2, opt2, 2)
    assert int(opt2.iterations) == 4
    for v, w in zip(model2.trainable_variables, want):
        np.testing.assert_allclose(v.numpy(), w, rtol=1e-6, err_msg=v.path)
    for a, b in zip(opt.variables, opt2.variables):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, err_msg=a.path)


def test_optimizer_config_roundtrip():
    opt = create_optimizer(OptimizerConfig(optimizer="lamb", learning_rate=2e-3,
                                           num_train_steps=30, num_warmup_steps=3,
                                           exclude_from_weight_decay=["norm"]))
    copy = keras.optimizers.deserialize(keras.optimizers.serialize(opt))
    assert isinstance(copy, optimization.LAMB)
    assert copy.exclude_from_weight_decay == ["norm"] and copy.clip_norm == 1.0
    assert float(copy.learning_rate) == float(opt.learning_rate) == 0.0
    assert copy._learning_rate.get_config() == opt._learning_rate.get_config()


def test_works_inside_a_loss_scale_optimizer():
    """mixed_float16 wraps it in keras' LossScaleOptimizer: same weights as unwrapped."""
    x = np.random.default_rng(0).integers(0, 11, (4, 5)).astype(np.int32)
    results = []
    for wrap in (False, True):
        keras.utils.set_random_seed(0)
        model = tiny_model()
        opt = create_optimizer(OptimizerConfig(learning_rate=0.1, num_train_steps=10,
                                               num_warmup_steps=0, clip_norm=0.1))
        if wrap:
            opt = keras.optimizers.LossScaleOptimizer(opt)
        opt.build(model.trainable_variables)

        @tf.function
        def step(opt=opt, model=model):  # this iteration's optimizer and model
            with tf.GradientTape() as tape:
                scaled = opt.scale_loss(tf.reduce_mean(tf.square(model(x))))
            grads = tape.gradient(scaled, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))

        for _ in range(3):
            step()
        results.append([v.numpy() for v in model.trainable_variables])
    assert float(opt.dynamic_scale) > 1  # the loss really was scaled
    for a, b in zip(*results):
        np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("kwargs,message", [
    (dict(optimizer="sgd"), "--optimizer must be one of adamw, lamb"),
    (dict(num_train_steps=0), "--num_train_steps must be positive"),
    (dict(num_warmup_steps=-1), "--num_warmup_steps must be >= 0"),
    (dict(learning_rate=0.0), "--learning_rate must be positive"),
    (dict(exclude_from_weight_decay=["("]), "bad regex"),
])
def test_config_validation(kwargs, message):
    base = dict(learning_rate=1e-4, num_train_steps=10, num_warmup_steps=1)
    base.update(kwargs)
    with pytest.raises(UserError, match=message):
        OptimizerConfig(**base)


# ------------------------------------------------------------------------ tf.distribute

_STRATEGY_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import keras
    from bert_tf.training.optimization import OptimizerConfig, create_optimizer

    rng = np.random.default_rng(0)
    x = rng.integers(0, 11, (8, 5)).astype(np.int32)
    y = rng.normal(size=(8, 3)).astype(np.float32)

    def build():
        keras.utils.set_random_seed(5)
        ids = keras.Input(shape=(5,), dtype="int32")
        h = keras.layers.Embedding(11, 4)(ids)
        h = keras.layers.LayerNormalization()(keras.layers.Dense(6, activation="tanh")(h))
        return keras.Model(ids, keras.layers.Dense(3)(keras.layers.Flatten()(h)))

    def loss_fn(model, xb, yb):
        # Per-example losses summed and divided by the GLOBAL batch, as the trainer does.
        return tf.reduce_sum(tf.reduce_mean(tf.square(model(xb) - yb), axis=-1)) / 8.0

    def run(strategy, kind):
        cfg = OptimizerConfig(optimizer=kind, learning_rate=0.05, num_train_steps=10,
                              num_warmup_steps=1, weight_decay_rate=0.1, clip_norm=0.2)
        with strategy.scope():
            model = build()
            opt = create_optimizer(cfg, model.trainable_variables)
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(8).repeat()
        dist = iter(strategy.experimental_distribute_dataset(ds))

        @tf.function
        def step(batch):
            def replica_fn(xb, yb):
                with tf.GradientTape() as tape:
                    loss = loss_fn(model, xb, yb)
                grads = tape.gradient(loss, model.trainable_variables)
                opt.apply_gradients(zip(grads, model.trainable_variables))
            strategy.run(replica_fn, args=batch)

        for _ in range(4):
            step(next(dist))
        return ([v.numpy().tolist() for v in model.trainable_variables],
                int(opt.iterations.numpy()))

    mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    assert mirrored.num_replicas_in_sync == 2
    print(json.dumps({kind: {"one": run(tf.distribute.get_strategy(), kind),
                             "two": run(mirrored, kind)} for kind in ("adamw", "lamb")}))
""")


def test_mirrored_strategy_matches_single_device():
    """2 replicas x 4 examples == 1 device x 8: same weights, clipping on the summed gradient.

    (Swapping in Keras' AdamW(global_clipnorm=0.2) made the two runs differ by ~0.1: it clips
    each replica's partial gradient.)
    """
    import json

    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=fresh_pythonpath(REPO_ROOT))
    result = subprocess.run([sys.executable, "-c", _STRATEGY_SCRIPT], env=env,
                            capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    for kind in ("adamw", "lamb"):
        (one, it_one), (two, it_two) = out[kind]["one"], out[kind]["two"]
        assert it_one == it_two == 4
        for a, b in zip(one, two):
            # Float summation order differs between 1 and 2 replicas (~6e-6 after 4 steps at
            # lr 0.05 with bias-corrected moments); per-replica clipping differs by ~0.1.
            np.testing.assert_allclose(np.array(b), np.array(a), rtol=1e-5, atol=2e-5,
                                       err_msg=kind)
