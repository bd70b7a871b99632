"""One worker of a two-worker MultiWorkerMirroredStrategy run on loopback, for
tests/test_resume.py: trains the tiny BERT on TFRecords through the real input pipeline,
for several input positions in ONE process, so that the cluster starts (TensorFlow import,
collectives) once per phase instead of once per position.

    TF_CONFIG=... python tests/_resume_worker.py --phase=first \\
        --job=iterator,dir/part-*.tfrecord,out-iterator,w0-first-iterator.npz \\
        --job=arithmetic,dir2/part-*.tfrecord,out-arithmetic,w0-first-arithmetic.npz

Each --job is `position,data,output_dir,out`, run in the order given (every worker giving
the same order). Position `iterator` reads in file order with a saved iterator,
`arithmetic` in training order with an arithmetic position (bert_tf.data.record_positions).
--phase=first trains an uninterrupted run (output_dir/straight, a checkpoint every SPLIT
steps); --phase=second, a new process, resumes output_dir/split to STEPS: the test makes it
a copy of the uninterrupted run stopped at its checkpoint at step SPLIT. The losses of each
run go to `out`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
from _pretraining_helpers import (  # noqa: E402
    PREDS,
    SEQ,
    VOCAB,
    exit_without_teardown,
    tiny_bert_config,
)

STEPS = 4
SPLIT = 2
GLOBAL_BATCH = 8


def make_trainer(strategy, output_dir: str):
    from bert_tf.modeling.pretraining_model import BertPretrainingModel
    from bert_tf.training import optimization, trainer

    opt = optimization.OptimizerConfig(learning_rate=1e-3, num_train_steps=STEPS,
                                       num_warmup_steps=1)
    config = trainer.TrainerConfig(
        output_dir=output_dir, train_batch_size=GLOBAL_BATCH, num_train_steps=STEPS,
        save_checkpoints_steps=SPLIT, log_every_n_steps=1)
    return trainer.Trainer(config, strategy,
                           model_fn=lambda: BertPretrainingModel(tiny_bert_config()),
                           optimizer_fn=lambda: optimization.create_optimizer(opt))


def input_fn(position: str, data: str, output_dir: str):
    """The real reader in file order (no shuffle, no repeat) for `iterator`: each worker
    reads its own file, and the records of a step are known, so the test can make exactly
    those unreadable (validate_files would read every file's first record before training).
    For `arithmetic`, training order (seeded file order, windows of 4 shuffled), reopened
    from the record counts, which the first phase caches in output_dir."""
    from bert_tf.data import input_config, record_positions
    from bert_tf.training import trainer

    config = input_config.InputConfig(
        input_patterns=data, batch_size=1, max_seq_length=SEQ,
        max_predictions_per_seq=PREDS, vocab_size=VOCAB, is_training=False, compression="",
        use_v2_feature_names=False, validate_files=False)
    if position == "arithmetic":
        os.makedirs(output_dir, exist_ok=True)
        config = record_positions.with_counts(
            dataclasses.replace(config, is_training=True, input_position="arithmetic",
                                shuffle_buffer_size=4, seed=3),
            os.path.join(output_dir, record_positions.COUNTS_FILE))
    return trainer.pretraining_dataset_fn(config)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--phase", choices=("first", "second"), required=True)
    parser.add_argument("--job", action="append", required=True,
                        help="position,data,output_dir,out")
    args = parser.parse_args()

    from bert_tf.training import distribution

    strategy = distribution.create_strategy(distribution.DistributionConfig(
        distribution_strategy="multi_worker_mirrored"))
    for job in args.job:
        position, data_pattern, output_dir, out = job.split(",")
        assert position in ("iterator", "arithmetic"), position
        data = input_fn(position, data_pattern, output_dir)
        if args.phase == "first":
            straight = make_trainer(strategy, os.path.join(output_dir, "straight")).train(data)
            arrays = {"straight": straight.losses}
        else:
            part2 = make_trainer(strategy, os.path.join(output_dir, "split")).train(data)
            arrays = {"part2": part2.losses,
                      "part2_steps": np.array([part2.start_step, part2.final_step])}
        np.savez(out + ".tmp.npz", **arrays)
        os.replace(out + ".tmp.npz", out)


if __name__ == "__main__":
    main()
    exit_without_teardown("resume worker")
