"""Trains the tiny BERT for a few steps under given strategies and saves losses and weights.

Run by tests/test_distribution.py in subprocesses, because logical CPU devices and
multi-worker collectives must be configured before TensorFlow initialises:

    python tests/_distributed_worker.py --out=r.npz --strategies=mirrored,one_device \\
        --num_cpu_devices=2
    TF_CONFIG=... python tests/_distributed_worker.py --out=w0.npz \\
        --strategies=multi_worker_mirrored

Every strategy sees the same global batches (blocks_dataset_fn), so their losses and final
weights must agree. The data gives replicas different numbers of masked tokens, and the
small clip_norm makes gradient clipping active on every step.

The per-replica pass runs in graph mode unless --use_xla=1: what the strategies must agree on
(the reduction over the global batch, the all-reduce before clipping) happens outside the
function `use_xla` compiles, and XLA's compile of each strategy's step cost 60 of this
process's 108 s on a loaded 2-core machine. The XLA-compiled pass is tested in process
(tests/test_distribution.py: mixed precision).
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
from _pretraining_helpers import (  # noqa: E402
    blocks_dataset_fn,
    exit_without_teardown,
    synthetic_examples,
    tiny_bert_config,
)

STEPS = 3
GLOBAL_BATCH = 8
CLIP_NORM = 0.1


def train(strategy_name: str, output_dir: str, num_cpu_devices: int, use_xla: bool) -> dict:
    from bert_tf.modeling.pretraining_model import BertPretrainingModel
    from bert_tf.training import distribution, optimization, trainer

    strategy = distribution.create_strategy(distribution.DistributionConfig(
        distribution_strategy=strategy_name, num_cpu_devices=num_cpu_devices))
    bert = tiny_bert_config()
    opt = optimization.OptimizerConfig(learning_rate=1e-3, num_train_steps=STEPS,
                                       num_warmup_steps=1, clip_norm=CLIP_NORM)
    t = trainer.Trainer(
        trainer.TrainerConfig(output_dir=output_dir, train_batch_size=GLOBAL_BATCH,
                              num_train_steps=STEPS, save_checkpoints_steps=2,
                              log_every_n_steps=1, use_xla=use_xla),
        strategy, model_fn=lambda: BertPretrainingModel(bert),
        optimizer_fn=lambda: optimization.create_optimizer(opt))
    result = t.train(blocks_dataset_fn(synthetic_examples(64, seed=3)))
    weights = [v.numpy() for v in t.model.trainable_variables]
    return {"losses": result.losses, "replicas": strategy.num_replicas_in_sync,
            "weights": weights}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--strategies", required=True)
    parser.add_argument("--num_cpu_devices", type=int, default=0)
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--use_xla", type=int, default=0)
    args = parser.parse_args()
    # The strategies are compared over CPU devices: on a machine with a GPU, create_strategy
    # would put the replicas on the GPUs instead (and one GPU would make one replica).
    import tensorflow as tf

    tf.config.set_visible_devices([], "GPU")
    arrays = {}
    for name in args.strategies.split(","):
        out = train(name, os.path.join(args.output_dir, name), args.num_cpu_devices,
                    bool(args.use_xla))
        arrays[f"{name}/losses"] = out["losses"]
        arrays[f"{name}/replicas"] = np.array(out["replicas"])
        for i, w in enumerate(out["weights"]):
            arrays[f"{name}/weight_{i:03d}"] = w
    np.savez(args.out + ".tmp.npz", **arrays)
    os.replace(args.out + ".tmp.npz", args.out)


if __name__ == "__main__":
    main()
    exit_without_teardown("distributed worker")
