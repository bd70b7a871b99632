"""The settings of a `bert_tf.training.trainer.Trainer` run and what its `train` returns.

A module of its own so that the trainer stays one concern; `trainer` re-exports every name.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, Optional

import numpy as np
import tensorflow as tf

from bert_tf.core.errors import UserError
from bert_tf.training import health

# (input context, per-replica batch size) -> dataset of feature dicts.
DatasetFn = Callable[[tf.distribute.InputContext, int], tf.data.Dataset]


@dataclasses.dataclass(frozen=True)
class TrainerConfig:
    """Settings of a pre-training run (the original run_pretraining.py flags where it had them).

    Attributes:
        output_dir: checkpoints, summaries and eval_results.txt go here.
        train_batch_size: GLOBAL examples per optimizer step (all replicas, all micro-batches).
        eval_batch_size: GLOBAL examples per eval batch.
        num_train_steps: total optimizer steps of the run.
        save_checkpoints_steps: save every this many steps (and at the end).
        keep_checkpoint_max: number of recent checkpoints kept (up to 3 more while the
            next losses have not vouched for the newest, see bert_tf.training.health).
        steps_per_loop: train steps between host-side logging and checkpoint checks.
        gradient_accumulation_steps: k micro-batches summed per optimizer step.
        log_every_n_steps: progress report interval; there is also a report after the first
            loop and every 30 s (all at loop boundaries, see bert_tf.training.progress).
        max_eval_steps: eval batches at most.
        max_steps_per_run: stop this process after this many steps (0 = no limit), saving a
            checkpoint; rerun with the same output_dir to continue (time-limited jobs).
        max_train_minutes: the run's training-time budget (0 = none), summed over resumes
            (bert_tf.training.budget); training stops when it is spent, saving a
            checkpoint; eval then runs as usual. Where it stops depends on the machine.
        init_checkpoint: warm-start model weights from this checkpoint (prefix or directory)
            when output_dir has no checkpoint yet.
        use_nsp: train the next-sentence head too.
        seed: seeds model initialization and dropout.
        use_xla: XLA-compile the per-replica step.
        xla_optimizer: XLA-compile the optimizer update on a single replica (None: when the
            steps this process will run, after a resume and --max_steps_per_run, are enough
            to pay for the compile, `train_loop.xla_optimizer_pays`).
        dtype_policy: float32, mixed_bfloat16 or mixed_float16 (adds loss scaling).
        num_warmup_steps, divergence_threshold: after warmup, a loss spike of this factor stops
            the run (0 = off; see bert_tf.training.health).
        eval_every_n_steps: evaluate `train`'s eval input every N steps (0 = off).
    """

    output_dir: str
    train_batch_size: int = 32
    eval_batch_size: int = 8
    num_train_steps: int = 100000
    save_checkpoints_steps: int = 1000
    keep_checkpoint_max: int = 5
    steps_per_loop: int = 1
    gradient_accumulation_steps: int = 1
    log_every_n_steps: int = 100
    max_eval_steps: int = 100
    max_steps_per_run: int = 0
    max_train_minutes: float = 0.0
    init_checkpoint: str = ""
    use_nsp: bool = True
    seed: int = 12345
    use_xla: bool = False
    xla_optimizer: Optional[bool] = None
    dtype_policy: str = "float32"
    num_warmup_steps: int = 0
    divergence_threshold: float = health.DEFAULT_THRESHOLD
    eval_every_n_steps: int = 0

    def __post_init__(self) -> None:
        positive = ("train_batch_size", "eval_batch_size", "num_train_steps",
                    "save_checkpoints_steps", "keep_checkpoint_max", "steps_per_loop",
                    "gradient_accumulation_steps", "log_every_n_steps", "max_eval_steps")
        for name in positive:
            if getattr(self, name) <= 0:
                raise UserError(f"--{name} must be positive, got {getattr(self, name)}")
        for name in ("max_steps_per_run", "num_warmup_steps", "eval_every_n_steps"):
            if getattr(self, name) < 0:
                raise UserError(f"--{name} must be >= 0, got {getattr(self, name)}")
        health.check_threshold(self.divergence_threshold)
        if not self.max_train_minutes >= 0:
            raise UserError(f"--max_train_minutes must be >= 0, got {self.max_train_minutes}")
        if not self.output_dir:
            raise UserError("--output_dir is required")


@dataclasses.dataclass(frozen=True)
class TrainResult:
    """What `Trainer.train` did.

    Attributes:
        start_step: the step the run started (or resumed) at.
        final_step: the step reached (and saved).
        losses: float [final_step - start_step], the objective of every step run.
        last_report: the last progress report (metrics of the last interval).
    """

    start_step: int
    final_step: int
    losses: np.ndarray
    last_report: Optional[Dict[str, float]]
