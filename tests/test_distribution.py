"""Tests of bert_tf.training.distribution and of training under distribution strategies on CPU.

- MirroredStrategy over two logical CPU devices == one device with the whole batch (losses
  and weights), with replicas holding different numbers of masked tokens and gradient
  clipping active: proves the global-batch reduction and the all-reduce before clipping.
- Two-process MultiWorkerMirroredStrategy on loopback == the same single-device run.
- Two replicas fed the same examples draw different dropout masks (identical losses with
  dropout 0, different with dropout 0.3).
- mixed_bfloat16 and mixed_float16 (with dynamic loss scaling) give float32's losses, step
  by step, within one rounding of their compute dtype.

Logical devices and collectives must be set up before TensorFlow initialises, so the
strategy runs happen in subprocesses (tests/_distributed_worker.py); the Mirrored runs and
the dropout probe share one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from _pretraining_helpers import (
    REPO_ROOT,
    run_on_loopback,
    subprocess_env,
    synthetic_examples,
    tiny_bert_config,
)

from bert_tf.core.errors import UserError
from bert_tf.modeling.pretraining_model import BertPretrainingModel
from bert_tf.training import distribution, optimization, trainer

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_distributed_worker.py")


def worker_command(out, output_dir, strategies, num_cpu_devices=0):
    return [sys.executable, WORKER, f"--out={out}", f"--output_dir={output_dir}",
            f"--strategies={strategies}", f"--num_cpu_devices={num_cpu_devices}"]


def load(path, strategy):
    data = np.load(path)
    weights = [data[k] for k in sorted(data.files) if k.startswith(f"{strategy}/weight_")]
    return data[f"{strategy}/losses"], weights, int(data[f"{strategy}/replicas"])


@pytest.fixture(scope="module")
def mirrored_process(tmp_path_factory):
    """One subprocess with two logical CPU devices: the same training on Mirrored(2 CPU
    devices) and on one device (tests/_distributed_worker.py, as its command line
    `--strategies=mirrored,one_device --num_cpu_devices=2` runs it), then
    `replica_dropout_probe`. Returns (the training's .npz, the probe's .npz)."""
    tmp = tmp_path_factory.mktemp("mirrored")
    out, probe = tmp / "result.npz", tmp / "probe.npz"
    argv = worker_command(out, tmp, "mirrored,one_device", num_cpu_devices=2)[1:]
    code = (f"import sys; sys.path.insert(0, {os.path.dirname(WORKER)!r}); "
            f"sys.argv = {argv!r}; "
            "import _distributed_worker; _distributed_worker.main(); "
            "import test_distribution; "
            f"test_distribution.replica_dropout_probe({os.fspath(probe)!r}); "
            "_distributed_worker.exit_without_teardown()")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=subprocess_env(),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, probe


@pytest.fixture(scope="module")
def mirrored_and_single(mirrored_process):
    """The .npz of the same training on Mirrored(2 CPU devices) and on one device."""
    return mirrored_process[0]


def test_mirrored_two_replicas_equal_one_device_with_the_whole_batch(mirrored_and_single):
    losses_m, weights_m, replicas_m = load(mirrored_and_single, "mirrored")
    losses_1, weights_1, replicas_1 = load(mirrored_and_single, "one_device")
    assert (replicas_m, replicas_1) == (2, 1)
    assert losses_m.shape == (3,) and np.all(np.isfinite(losses_m))
    np.testing.assert_allclose(losses_m, losses_1, rtol=1e-5)
    for a, b in zip(weights_m, weights_1):
        np.testing.assert_allclose(a, b, atol=1e-5)
    # The data really does put unequal masked-token counts on the two replicas (16 vs 4
    # per block of 8), so averaging per-replica means would have given other losses.
    weights = synthetic_examples(64, seed=3)["masked_lm_weights"]
    assert weights[0:4].sum() == 16 and weights[4:8].sum() == 4


def _mirrored_trainer(strategy, rate: float, steps: int, output_dir: str) -> trainer.Trainer:
    """The tiny BERT's Trainer with dropout `rate` on both dropout settings."""
    bert = tiny_bert_config(hidden_dropout_prob=rate, attention_probs_dropout_prob=rate)
    opt = optimization.OptimizerConfig(learning_rate=1e-3, num_train_steps=steps,
                                       num_warmup_steps=0)
    return trainer.Trainer(
        trainer.TrainerConfig(output_dir=output_dir, train_batch_size=8,
                              num_train_steps=steps, use_xla=False),
        strategy, model_fn=lambda: BertPretrainingModel(bert),
        optimizer_fn=lambda: optimization.create_optimizer(opt))


def replica_dropout_probe(out: str, steps: int = 2) -> None:
    """Runs in a subprocess (logical devices): the real per-replica train step, every replica
    fed the same batch, with dropout 0 and 0.3. Saves each replica's local loss sums and its
    copy of the dropout seed-generator states after every step."""
    from bert_tf.training.checkpointing import seed_state_variables

    strategy = distribution.create_strategy(distribution.DistributionConfig(
        distribution_strategy="mirrored", num_cpu_devices=2))
    examples = synthetic_examples(4, seed=1)

    def same_batch_everywhere(context, per_replica_batch):
        return tf.data.Dataset.from_tensors(examples).repeat()

    arrays = {}
    for rate in (0.0, 0.3):
        t = _mirrored_trainer(strategy, rate, steps, os.path.join(os.path.dirname(out), str(rate)))
        iterator = iter(t.distribute_dataset(same_batch_everywhere, 4))
        step = tf.function(
            lambda it, t=t: strategy.run(t.steps.replica_train_step, args=(next(it),)))
        seeds = seed_state_variables(t.model)
        # Dropout 0 builds no seed generator; 0.3: embeddings + the one layer's attention and
        # 2 residual dropouts.
        assert len(seeds) >= (4 if rate else 0), len(seeds)
        for i in range(steps):
            sums = step(iterator)
            for key in ("mlm_weighted_ce", "nsp_ce"):
                arrays[f"{rate}/{i}/{key}"] = np.array(
                    [float(v) for v in strategy.experimental_local_results(sums[key])])
            if seeds:
                arrays[f"{rate}/{i}/seed_states"] = np.stack(
                    [np.stack([c.numpy() for c in v.value.values]) for v in seeds])
    np.savez(out, **arrays)


@pytest.mark.slow  # the probe builds and traces two mirrored Trainers (~40 s CPU)
def test_replicas_draw_different_dropout_masks(mirrored_process):
    """Both replicas of MirroredStrategy get the same examples. With dropout 0.3 their
    losses differ (different masks); with dropout 0 they are identical. Each replica's copy
    of the dropout RNG state is the same after the step, so one checkpointed state resumes
    every replica on its own stream."""
    out = mirrored_process[1]
    data = np.load(out)
    for i in range(2):
        for key in ("mlm_weighted_ce", "nsp_ce"):
            same = data[f"0.0/{i}/{key}"]
            assert same.shape == (2,) and np.all(np.isfinite(same))
            assert same[0] == same[1], (i, key, same)
            dropped = data[f"0.3/{i}/{key}"]
            # Different masks: the summed losses of the same 4 examples differ.
            assert abs(dropped[0] - dropped[1]) > 1e-4 * abs(dropped[0]), (i, key, dropped)
        states = data[f"0.3/{i}/seed_states"]  # [generators, replicas, 2]
        np.testing.assert_array_equal(states[:, 0], states[:, 1])
        np.testing.assert_array_equal(states[:, 0, 1], i + 1)  # one draw per step each
    # Dropout changes the losses: the 0.3 run really drew masks.
    assert data["0.3/0/mlm_weighted_ce"][0] != data["0.0/0/mlm_weighted_ce"][0]


@pytest.mark.slow
def test_multi_worker_mirrored_on_loopback_agrees_with_one_device(tmp_path, mirrored_and_single,
                                                                  cli):
    procs = run_on_loopback(cli, [
        worker_command(tmp_path / f"worker{index}.npz", tmp_path, "multi_worker_mirrored")
        for index in range(2)])
    for proc in procs:
        assert proc.returncode == 0, proc.stderr[-3000:]
    losses_1, weights_1, _ = load(mirrored_and_single, "one_device")
    for index in range(2):
        losses, weights, replicas = load(tmp_path / f"worker{index}.npz", "multi_worker_mirrored")
        assert replicas == 2
        np.testing.assert_allclose(losses, losses_1, rtol=1e-5)
        for a, b in zip(weights, weights_1):
            np.testing.assert_allclose(a, b, atol=1e-5)
    # The chief kept the checkpoints; the other worker's scratch copy is gone.
    ckpt_dir = tmp_path / "multi_worker_mirrored"
    assert tf.train.latest_checkpoint(os.fspath(ckpt_dir)).endswith("ckpt-3")
    assert not list((ckpt_dir / "tmp_worker_checkpoints").glob("worker-1/ckpt-*"))


@pytest.fixture
def restore_dtype_policy():
    yield
    keras.mixed_precision.set_dtype_policy("float32")


def train_fixed_batch(tmp_path, policy, steps=8):
    """Trains repeatedly on one batch (so the loss must fall) under a precision policy."""
    examples = synthetic_examples(8, seed=5)

    def dataset_fn(context, per_replica_batch):
        return tf.data.Dataset.from_tensors(examples).repeat()

    opt = optimization.OptimizerConfig(learning_rate=1e-2, num_train_steps=steps,
                                       num_warmup_steps=0)
    t = trainer.Trainer(
        trainer.TrainerConfig(output_dir=os.fspath(tmp_path), train_batch_size=8,
                              num_train_steps=steps, save_checkpoints_steps=steps,
                              log_every_n_steps=steps, use_xla=True, xla_optimizer=True,
                              dtype_policy=policy),
        tf.distribute.OneDeviceStrategy("/cpu:0"),
        model_fn=lambda: BertPretrainingModel(tiny_bert_config()),
        optimizer_fn=lambda: optimization.create_optimizer(opt))
    return t, t.train(dataset_fn).losses


@pytest.fixture(scope="module")
def float32_losses(tmp_path_factory):
    """train_fixed_batch's losses in float32, the reference of the mixed-precision runs.

    Run eagerly (`run_functions_eagerly`): nothing is traced or compiled, 1.6 CPU s instead
    of about 6, and the losses are the compiled run's to 1e-7 relative."""
    tf.config.run_functions_eagerly(True)
    try:
        _, losses = train_fixed_batch(tmp_path_factory.mktemp("float32"), "float32")
    finally:
        tf.config.run_functions_eagerly(False)
    assert losses[-1] < losses[0] - 0.5, losses  # the fixed batch is being learnt
    return losses


# Every step's loss must be float32's within one rounding of the compute dtype: half a unit
# in the last place of bfloat16's 8 significant bits (2**-9 = 0.2 %) or float16's 11 (2**-12
# = 0.024 %). The first step's loss is the forward pass from the same float32 initial
# weights; each later one follows the updates, which are applied to float32 master weights:
# a loss computed in the compute dtype, updates lost to rounded weights or a loss scale left
# in the gradients would all show. Measured on 2026-12-01: at most 1.6e-4 (bfloat16) and
# 4.9e-5 (float16) relative over the 8 steps.
def test_mixed_bfloat16_follows_float32_within_bfloat16_rounding(tmp_path, restore_dtype_policy,
                                                                  float32_losses):
    t, losses = train_fixed_batch(tmp_path, "mixed_bfloat16")
    encoder_dense = [v for v in t.model.encoder.weights if "kernel" in v.path][0]
    assert encoder_dense.dtype == "float32"  # float32 master weights
    assert t.model.encoder.compute_dtype == "bfloat16"
    np.testing.assert_allclose(losses, float32_losses, rtol=2.0 ** -9, atol=0)


def test_mixed_float16_uses_dynamic_loss_scaling(tmp_path, restore_dtype_policy, float32_losses):
    t, losses = train_fixed_batch(tmp_path, "mixed_float16")
    assert isinstance(t.optimizer, keras.optimizers.LossScaleOptimizer)
    assert t.model.encoder.compute_dtype == "float16"
    np.testing.assert_allclose(losses, float32_losses, rtol=2.0 ** -12, atol=0)
    # The scale was applied to the loss and removed from the gradients: the updates stayed
    # sane (a scale left in the gradients would have blown the weights up).
    assert float(t.optimizer.dynamic_scale.numpy()) >= 1.0
    assert max(float(np.abs(v.numpy()).max()) for v in t.model.trainable_variables) < 10


def test_config_validation_messages():
    with pytest.raises(UserError, match="--distribution_strategy='gpu': expected one of"):
        distribution.DistributionConfig(distribution_strategy="gpu")
    with pytest.raises(UserError, match="--dtype_policy='float16': expected one of"):
        distribution.DistributionConfig(dtype_policy="float16")
    with pytest.raises(UserError, match="--num_gpus=-2"):
        distribution.DistributionConfig(num_gpus=-2)


def test_auto_strategy_choice(monkeypatch):
    monkeypatch.delenv("TPU_NAME", raising=False)
    monkeypatch.delenv("COLAB_TPU_ADDR", raising=False)
    monkeypatch.delenv("TF_CONFIG", raising=False)
    auto = distribution.DistributionConfig()
    # One device unless the machine has several GPUs (this test runs on CPU-only CI too).
    several_gpus = len(tf.config.list_logical_devices("GPU")) > 1
    assert distribution.resolve_strategy_name(auto) == ("mirrored" if several_gpus
                                                        else "one_device")
    assert distribution.resolve_strategy_name(
        distribution.DistributionConfig(num_cpu_devices=2)) == "mirrored"
    assert distribution.resolve_strategy_name(
        distribution.DistributionConfig(tpu="my-tpu")) == "tpu"
    monkeypatch.setenv("TF_CONFIG", json.dumps(
        {"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 0}}))
    assert distribution.resolve_strategy_name(auto) == "multi_worker_mirrored"
    monkeypatch.setenv("TF_CONFIG", "{not json")
    with pytest.raises(UserError, match="TF_CONFIG is not valid JSON"):
        distribution.resolve_strategy_name(auto)


def test_one_device_is_the_default_strategy_without_a_gpu_and_the_first_gpu_with_one():
    # OneDeviceStrategy("/cpu:0") cost 30% more CPU per example than the default strategy
    # (benchmarks/pretraining/bench_cli.py); with no GPU there is nothing to pin, so the default
    # is used. With a GPU, the run is pinned to the first one, with XLA on.
    gpus = tf.config.list_logical_devices("GPU")
    strategy = distribution.create_strategy(
        distribution.DistributionConfig(distribution_strategy="one_device"))
    if gpus:
        assert isinstance(strategy, tf.distribute.OneDeviceStrategy)
        assert strategy.extended.worker_devices == (gpus[0].name,)
    else:
        assert strategy is tf.distribute.get_strategy()
    assert strategy.num_replicas_in_sync == 1
    assert distribution.worker_info(strategy) == (0, 1)
    assert distribution.resolve_use_xla(distribution.DistributionConfig(), strategy) is bool(gpus)


def test_multi_worker_without_tf_config_is_a_user_error(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(UserError, match="needs TF_CONFIG"):
        distribution.create_strategy(
            distribution.DistributionConfig(distribution_strategy="multi_worker_mirrored"))


def test_loss_scaling_only_for_float16():
    opt = keras.optimizers.SGD()
    assert distribution.wrap_optimizer(opt, "float32") is opt
    assert distribution.wrap_optimizer(opt, "mixed_bfloat16") is opt
    wrapped = distribution.wrap_optimizer(opt, "mixed_float16")
    assert isinstance(wrapped, keras.optimizers.LossScaleOptimizer)
    assert wrapped.inner_optimizer is opt


def test_xla_default_is_off_on_cpu_and_explicit_choice_wins():
    cpu = tf.distribute.OneDeviceStrategy("/cpu:0")
    assert distribution.resolve_use_xla(distribution.DistributionConfig(), cpu) is False
    assert distribution.resolve_use_xla(distribution.DistributionConfig(use_xla=True), cpu) is True


def test_per_replica_batch_sizes_must_divide():
    assert distribution.per_replica_batch_size(32, 4, 2) == 4
    with pytest.raises(UserError, match=r"--train_batch_size=30 is not divisible by 4 replicas "
                                        r"x 2 accumulation steps \(= 8\)"):
        distribution.per_replica_batch_size(30, 4, 2)
    with pytest.raises(UserError, match="--eval_batch_size=3 is not divisible by 2 replicas"):
        distribution.per_replica_batch_size(3, 2, what="eval_batch_size")
