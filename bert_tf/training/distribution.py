"""Distribution strategies, mixed precision and XLA settings for training.

One place decides where the model runs: `create_strategy` turns a `DistributionConfig` into a
`tf.distribute.Strategy` (TPUStrategy, MirroredStrategy, MultiWorkerMirroredStrategy or
OneDeviceStrategy; on a machine with only a CPU, TensorFlow's default strategy),
`set_dtype_policy` sets the Keras mixed-precision policy before the model
is built, and `resolve_use_xla` picks whether the train step is XLA-compiled.

Everything here must run before TensorFlow initialises its devices (in particular
`split_cpu_devices`, which tests use to get several logical CPU devices out of one host), so
entry points call these functions first.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Optional

import tensorflow as tf

from bert_tf.core import errors
from bert_tf.core.errors import UserError

STRATEGIES = ("auto", "tpu", "mirrored", "multi_worker_mirrored", "one_device")
DTYPE_POLICIES = ("float32", "mixed_bfloat16", "mixed_float16")


@dataclasses.dataclass(frozen=True)
class DistributionConfig:
    """Where and how to run.

    Attributes:
        distribution_strategy: one of `STRATEGIES`. "auto" picks a TPU if one is attached (or
            `tpu` is given), several workers if TF_CONFIG names them, all GPUs if there are
            several, else one device.
        tpu: TPU name, `grpc://host:port` address, or "local" for a TPU VM; "" for none.
        num_gpus: GPUs to use with "mirrored"/"one_device"; -1 means all that are visible.
        dtype_policy: Keras dtype policy: float32, mixed_bfloat16 or mixed_float16.
        use_xla: XLA-compile the train step; None picks the default for the device
            (see `resolve_use_xla`).
        num_cpu_devices: if > 1, split the host CPU into this many logical devices, so that
            "mirrored" runs several replicas on one CPU (tests of the distributed code path).
    """

    distribution_strategy: str = "auto"
    tpu: str = ""
    num_gpus: int = -1
    dtype_policy: str = "float32"
    use_xla: Optional[bool] = None
    num_cpu_devices: int = 0

    def __post_init__(self) -> None:
        if self.distribution_strategy not in STRATEGIES:
            raise UserError(
                f"--distribution_strategy={self.distribution_strategy!r}: "
                f"expected one of {', '.join(STRATEGIES)}"
            )
        if self.dtype_policy not in DTYPE_POLICIES:
            raise UserError(
                f"--dtype_policy={self.dtype_policy!r}: expected one of {', '.join(DTYPE_POLICIES)}"
            )
        if self.num_gpus < -1:
            raise UserError(f"--num_gpus={self.num_gpus}: expected -1 (all) or a count >= 0")
        if self.num_cpu_devices < 0:
            raise UserError(f"--num_cpu_devices={self.num_cpu_devices}: expected >= 0")


def split_cpu_devices(num_devices: int) -> None:
    """Splits the first physical CPU into `num_devices` logical devices.

    Must run before TensorFlow initialises its devices (before any op or strategy is
    created); logical devices cannot be changed afterwards.

    Raises:
        UserError: TensorFlow has already initialised its devices differently.
    """
    if num_devices <= 1:
        return
    cpus = tf.config.list_physical_devices("CPU")
    try:
        tf.config.set_logical_device_configuration(
            cpus[0], [tf.config.LogicalDeviceConfiguration()] * num_devices
        )
    except RuntimeError:
        # Already initialised: acceptable only if it already has the devices we want.
        if len(tf.config.list_logical_devices("CPU")) != num_devices:
            raise UserError(
                f"--num_cpu_devices={num_devices}: TensorFlow devices were initialised before "
                "the CPU could be split"
            ) from None


def _tf_config_workers() -> int:
    """Number of workers named in the TF_CONFIG environment variable (0 if unset)."""
    raw = os.environ.get("TF_CONFIG", "")
    if not raw:
        return 0
    try:
        cluster = json.loads(raw).get("cluster", {})
    except (ValueError, AttributeError):
        raise UserError("TF_CONFIG is not valid JSON") from None
    return len(cluster.get("worker", [])) + len(cluster.get("chief", []))


def _tpu_requested(config: DistributionConfig) -> bool:
    if config.tpu:
        return True
    if os.environ.get("TPU_NAME") or os.environ.get("COLAB_TPU_ADDR"):
        return True
    # TPU VMs expose the chips as local devices without any name or address.
    return bool(tf.config.list_physical_devices("TPU"))


def resolve_strategy_name(config: DistributionConfig) -> str:
    """The concrete strategy "auto" stands for on this machine (others are returned as is)."""
    name = config.distribution_strategy
    if name != "auto":
        return name
    if _tpu_requested(config):
        return "tpu"
    if _tf_config_workers() > 1:
        return "multi_worker_mirrored"
    gpus = _selected_gpus(config)
    if len(gpus) > 1 or config.num_cpu_devices > 1:
        return "mirrored"
    return "one_device"


def _selected_gpus(config: DistributionConfig) -> list:
    gpus = tf.config.list_logical_devices("GPU")
    return gpus if config.num_gpus < 0 else gpus[: config.num_gpus]


def _connect_tpu(tpu: str) -> tf.distribute.cluster_resolver.TPUClusterResolver:
    """Resolves, connects to and initialises the TPU system (once per process)."""
    try:
        if tpu in ("", "local"):
            # TPU VM (or Colab with TPU_NAME / COLAB_TPU_ADDR set): no remote connection.
            address = "local" if tpu == "local" or tf.config.list_physical_devices("TPU") else ""
            resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=address or None)
        else:
            resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
        if tpu != "local":
            tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, tf.errors.OpError, RuntimeError) as e:
        raise UserError(f"--tpu={tpu!r}: cannot connect to the TPU: {errors.reason(e)}") from None
    return resolver


def create_strategy(config: DistributionConfig) -> tf.distribute.Strategy:
    """Creates the distribution strategy described by `config`.

    Call this before building any model or dataset: TPU initialisation and multi-worker
    collectives must be set up before other TensorFlow ops run.

    Args:
        config: the distribution settings.

    Returns:
        The strategy; models, optimizers and metrics are built under its `scope()`.

    Raises:
        UserError: an impossible request (no TPU reachable, more GPUs asked than present,
            multi_worker_mirrored without TF_CONFIG).
    """
    if config.num_cpu_devices > 1:
        split_cpu_devices(config.num_cpu_devices)
    name = resolve_strategy_name(config)
    if name == "tpu":
        resolver = _connect_tpu(config.tpu)
        return tf.distribute.TPUStrategy(resolver)
    if name == "multi_worker_mirrored":
        if _tf_config_workers() == 0:
            raise UserError(
                "--distribution_strategy=multi_worker_mirrored needs TF_CONFIG naming the workers"
            )
        return tf.distribute.MultiWorkerMirroredStrategy()
    gpus = _selected_gpus(config)
    if config.num_gpus > 0 and len(gpus) < config.num_gpus:
        raise UserError(f"--num_gpus={config.num_gpus}: only {len(gpus)} GPU(s) visible")
    if name == "mirrored":
        # No GPU: mirror over the logical CPU devices (one unless --num_cpu_devices split it).
        devices = [d.name for d in gpus] or [d.name for d in tf.config.list_logical_devices("CPU")]
        return tf.distribute.MirroredStrategy(devices)
    # one_device
    if not tf.config.list_physical_devices("GPU"):
        # Only a CPU: TensorFlow's default strategy. OneDeviceStrategy pins every op and
        # batch to /cpu:0 and cost 30% more CPU per example for the same steps (BERT-Mini,
        # 2-core AVX2: 10.1 vs 14.1 examples per CPU second, benchmarks/pretraining/bench_cli.py).
        return tf.distribute.get_strategy()
    device = gpus[0].name if gpus and config.num_gpus != 0 else "/cpu:0"
    return tf.distribute.OneDeviceStrategy(device)


def set_dtype_policy(policy: str) -> None:
    """Sets Keras' global dtype policy; call before the model is built.

    Under mixed_* policies layers compute in (b)float16 and keep float32 variables; the
    pre-training model still returns float32 logits, so losses are computed in float32.
    """
    if policy not in DTYPE_POLICIES:
        raise UserError(f"--dtype_policy={policy!r}: expected one of {', '.join(DTYPE_POLICIES)}")
    import keras

    keras.mixed_precision.set_dtype_policy(policy)


def needs_loss_scaling(policy: str) -> bool:
    """float16 gradients underflow without loss scaling; bfloat16 has float32's range."""
    return policy == "mixed_float16"


def wrap_optimizer(optimizer, policy: str):
    """Wraps `optimizer` in a dynamic `keras.optimizers.LossScaleOptimizer` for mixed_float16.

    Returns:
        The optimizer to train with (unchanged for float32 and mixed_bfloat16).
    """
    if not needs_loss_scaling(policy):
        return optimizer
    import keras

    return keras.optimizers.LossScaleOptimizer(optimizer)


def is_tpu_strategy(strategy: tf.distribute.Strategy) -> bool:
    return isinstance(strategy, (tf.distribute.TPUStrategy, tf.distribute.experimental.TPUStrategy))


def is_default_strategy(strategy: tf.distribute.Strategy) -> bool:
    """True for TensorFlow's default strategy (what `create_strategy` gives on a CPU-only
    machine for one_device), outside any other strategy's scope."""
    return not tf.distribute.has_strategy() and strategy is tf.distribute.get_strategy()


def resolve_use_xla(config: DistributionConfig, strategy: tf.distribute.Strategy) -> bool:
    """Whether to XLA-compile the per-replica forward/backward pass.

    An explicit `use_xla` wins. Otherwise: on for TPUs (which compile everything anyway) and
    GPUs (XLA fuses the many small element-wise ops of layer norm, GELU, dropout and
    softmax), off on CPUs: XLA's CPU matmuls do not use oneDNN, and
    benchmarks/pretraining/bench_pretraining.py measured BERT-Small slower with XLA than in
    graph mode, in float32 and more so in mixed_bfloat16 (docs/results/pretraining.md).
    (The optimizer update is XLA-compiled on every device, see train_loop.StepFunctions.)
    """
    if config.use_xla is not None:
        return bool(config.use_xla)
    if is_tpu_strategy(strategy):
        return True
    if is_default_strategy(strategy):
        return False  # create_strategy uses it only without a GPU
    devices = strategy.extended.worker_devices
    return any("GPU" in device.upper() for device in devices)


def worker_info(strategy: tf.distribute.Strategy) -> tuple[int, int]:
    """(task id, number of workers) of this process; (0, 1) for single-host strategies."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) and resolver is not None:
        task_type, task_id = resolver.task_type, resolver.task_id
        spec = resolver.cluster_spec().as_dict()
        num_workers = len(spec.get("worker", [])) + len(spec.get("chief", []))
        # With a "chief" task, workers are numbered after it.
        index = (task_id or 0) + (1 if task_type == "worker" and "chief" in spec else 0)
        return index, max(num_workers, 1)
    return 0, 1


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """True on the process that writes summaries, eval results and the main checkpoint."""
    return worker_info(strategy)[0] == 0


def per_replica_batch_size(global_batch: int, num_replicas: int, accumulation: int = 1,
                           what: str = "train_batch_size") -> int:
    """Examples per replica per micro-batch.

    Raises:
        UserError: the global batch does not divide evenly.
    """
    parts = num_replicas * accumulation
    if global_batch % parts:
        detail = f"{num_replicas} replicas" + (
            f" x {accumulation} accumulation steps" if accumulation > 1 else "")
        raise UserError(f"--{what}={global_batch} is not divisible by {detail} (= {parts})")
    return global_batch // parts
