"""The distribution and precision flags every training entry point shares.

Imported only by the `python -m` entry points (run_pretraining, the fine-tuning commands,
run_glue), which parse the flags and turn them at once into a frozen
`distribution.DistributionConfig` with `config_from_flags`: one definition, one help text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from absl import flags, logging

if TYPE_CHECKING:  # it imports TensorFlow; --help and flag errors should not wait for it
    from bert_tf.training.distribution import DistributionConfig

FLAGS = flags.FLAGS
STRATEGIES = ["auto", "tpu", "mirrored", "multi_worker_mirrored", "one_device"]
DTYPE_POLICIES = ["float32", "mixed_bfloat16", "mixed_float16"]


def define_flags() -> None:
    """Defines --distribution_strategy, --tpu, --num_gpus, --num_cpu_devices,
    --dtype_policy and --use_xla (alias --enable_xla); call once, at import."""
    flags.DEFINE_enum("distribution_strategy", "auto", STRATEGIES,
                      "auto: TPU if attached, workers from TF_CONFIG, all GPUs, else one "
                      "device.")
    flags.DEFINE_string("tpu", None, "TPU name or grpc:// address ('local' on a TPU VM).")
    flags.DEFINE_integer("num_gpus", -1, "GPUs to use (-1 = all visible).")
    flags.DEFINE_integer("num_cpu_devices", 0, "Split the CPU into this many logical devices "
                         "(tests the multi-replica path).")
    flags.DEFINE_enum("dtype_policy", "float32", DTYPE_POLICIES,
                      "Keras precision policy; mixed_float16 adds dynamic loss scaling.")
    flags.DEFINE_bool("use_xla", None, "XLA-compile the train step (default: per device, see "
                      "bert_tf.training.distribution).")
    flags.DEFINE_alias("enable_xla", "use_xla")


def config_from_flags() -> "DistributionConfig":
    """The frozen config of the parsed flags (warns about a --num_gpus a TPU ignores)."""
    from bert_tf.training.distribution import DistributionConfig

    if FLAGS.distribution_strategy == "tpu" and FLAGS["num_gpus"].present:
        logging.warning("--num_gpus is ignored with --distribution_strategy=tpu")
    return DistributionConfig(
        distribution_strategy=FLAGS.distribution_strategy, tpu=FLAGS.tpu or "",
        num_gpus=FLAGS.num_gpus, dtype_policy=FLAGS.dtype_policy, use_xla=FLAGS.use_xla,
        num_cpu_devices=FLAGS.num_cpu_devices)
