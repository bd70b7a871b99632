"""The real Trainer step of a BERT sequence classifier on one fixed random batch, timed.

Shared by bench_finetune_speed.py and bench_xla_optimizer.py: both time
`Trainer.steps.train_loop` (forward, backward, clipping, AdamW, the LR schedule) on an
in-memory batch, so that reading input costs nothing.
"""

from __future__ import annotations

import tempfile
import time
from typing import Optional


def classifier_step_timer(config, batch: int, seq: int, use_xla: bool = False,
                          xla_optimizer: Optional[bool] = None):
    """Builds a two-class `BertClassifier` of `config` under a Trainer.

    Returns:
        (the trainer, run): run(n) trains n steps in one call and returns its seconds.
    """
    import numpy as np
    import tensorflow as tf

    from bert_tf.finetune import heads
    from bert_tf.finetune.objectives import ClassificationObjective
    from bert_tf.training import optimization, trainer

    opt = optimization.OptimizerConfig(learning_rate=5e-5, num_train_steps=100000,
                                       num_warmup_steps=0)
    t = trainer.Trainer(
        trainer.TrainerConfig(output_dir=tempfile.mkdtemp(), train_batch_size=batch,
                              use_xla=use_xla, xla_optimizer=xla_optimizer, use_nsp=False),
        tf.distribute.get_strategy(),
        model_fn=lambda: heads.BertClassifier(config, 2),
        optimizer_fn=lambda: optimization.create_optimizer(opt),
        objective=ClassificationObjective())
    rng = np.random.default_rng(1)
    data = {"input_ids": rng.integers(1000, config.vocab_size, (batch, seq)).astype(np.int32),
            "input_mask": np.ones((batch, seq), np.int32),
            "segment_ids": np.zeros((batch, seq), np.int32),
            "label_ids": rng.integers(0, 2, (batch,)).astype(np.int32)}
    iterator = iter(t.distribute_dataset(
        lambda context, b: tf.data.Dataset.from_tensors(data).repeat(), batch))

    def run(n: int) -> float:
        start = time.perf_counter()
        t.steps.train_loop(iterator, tf.constant(n))[0].numpy()
        return time.perf_counter() - start

    return t, run
