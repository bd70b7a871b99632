"""One worker of a two-worker MultiWorkerMirroredStrategy run on loopback, for
tests/test_resume.py: trains the tiny BERT on TFRecords through the real input pipeline.

    TF_CONFIG=... python tests/_resume_worker.py --phase=first --data=dir/part-*.tfrecord \\
        --output_dir=out --out=w0-first.npz

--position=arithmetic reads in training order with an arithmetic position
(bert_tf.data.record_positions) instead of in file order with a saved iterator.
--phase=first trains an uninterrupted run (out/straight) and the first part of a split run
(out/split, stopped after SPLIT steps); --phase=second, a new process, resumes out/split to
STEPS. The losses of each run go to --out.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
from _pretraining_helpers import PREDS, SEQ, VOCAB, tiny_bert_config  # noqa: E402

STEPS = 4
SPLIT = 2
GLOBAL_BATCH = 8


def make_trainer(strategy, output_dir: str, **overrides):
    from bert_tf.modeling.pretraining_model import BertPretrainingModel
    from bert_tf.training import optimization, trainer

    opt = optimization.OptimizerConfig(learning_rate=1e-3, num_train_steps=STEPS,
                                       num_warmup_steps=1)
    config = trainer.TrainerConfig(
        output_dir=output_dir, train_batch_size=GLOBAL_BATCH, num_train_steps=STEPS,
        save_checkpoints_steps=SPLIT, log_every_n_steps=1, **overrides)
    return trainer.Trainer(config, strategy,
                           model_fn=lambda: BertPretrainingModel(tiny_bert_config()),
                           optimizer_fn=lambda: optimization.create_optimizer(opt))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--phase", choices=("first", "second"), required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--position", choices=("iterator", "arithmetic"), default="iterator")
    args = parser.parse_args()

    from bert_tf.data import input_config, record_positions
    from bert_tf.training import distribution, trainer

    strategy = distribution.create_strategy(distribution.DistributionConfig(
        distribution_strategy="multi_worker_mirrored"))
    # The real reader in file order (no shuffle, no repeat): each worker reads its own file,
    # and the records of a step are known, so the test can make exactly those unreadable.
    # validate_files would read every file's first record before training.
    config = input_config.InputConfig(
        input_patterns=args.data, batch_size=1, max_seq_length=SEQ,
        max_predictions_per_seq=PREDS, vocab_size=VOCAB, is_training=False, compression="",
        use_v2_feature_names=False, validate_files=False)
    if args.position == "arithmetic":
        os.makedirs(args.output_dir, exist_ok=True)
        # Training order (seeded file order, windows of 4 shuffled), reopened from the
        # record counts, which the first phase caches in output_dir.
        config = record_positions.with_counts(
            dataclasses.replace(config, is_training=True, input_position="arithmetic",
                                shuffle_buffer_size=4, seed=3),
            os.path.join(args.output_dir, record_positions.COUNTS_FILE))
    data = trainer.pretraining_dataset_fn(config)
    split_dir = os.path.join(args.output_dir, "split")
    arrays = {}
    if args.phase == "first":
        straight = make_trainer(strategy, os.path.join(args.output_dir, "straight")).train(data)
        part1 = make_trainer(strategy, split_dir, max_steps_per_run=SPLIT).train(data)
        arrays = {"straight": straight.losses, "part1": part1.losses,
                  "part1_steps": np.array([part1.start_step, part1.final_step])}
    else:
        part2 = make_trainer(strategy, split_dir).train(data)
        arrays = {"part2": part2.losses, "part2_steps": np.array([part2.start_step,
                                                                  part2.final_step])}
    np.savez(args.out + ".tmp.npz", **arrays)
    os.replace(args.out + ".tmp.npz", args.out)


if __name__ == "__main__":
    main()
