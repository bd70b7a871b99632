"""Learning-rate schedules: BERT's warmup + polynomial decay, and warmup-stable-decay.

Both are functions of the optimizer's step (`optimizer.iterations`, the number of applies)
and, in a run with a time budget (`--max_train_minutes`), of the training clock
(`bert_tf.training.budget`): the decay is then laid out over the run's progress,
max(step / num_train_steps, trained seconds / budget), so that it ends (at `end_lr`) when
the budget is spent, even where the steps were not. Warmup is always counted in steps.
Without a clock the schedules are functions of the step alone (the original's).

    linear  WarmupPolynomialDecay: the original BERT schedule.
    wsd     WarmupStableDecay: warmup, the peak rate held, then a 1-sqrt decay over the
            last `decay_proportion` of the run.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import keras
import tensorflow as tf

from bert_tf.training.budget import TrainingClock, training_progress


class _ClockedSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Serialises the clock's budget (a fresh clock at 0 s comes back from the config: the
    seconds trained are training state, in the checkpoint, not configuration)."""

    clock: Optional[TrainingClock] = None

    def _clock_config(self) -> Dict[str, Any]:
        return {"max_train_minutes": self.clock.max_train_minutes} if self.clock else {}

    @classmethod
    def from_config(cls, config: Dict[str, Any]):
        config = dict(config)
        minutes = config.pop("max_train_minutes", 0.0)
        return cls(**config, clock=TrainingClock(minutes) if minutes else None)


@keras.saving.register_keras_serializable(package="bert_tf")
class WarmupPolynomialDecay(_ClockedSchedule):
    """BERT's schedule: linear warmup, and polynomial decay over the whole run.

    As in the original, the polynomial decay runs from step 0 over the run's progress p
    (step / num_train_steps without a clock):
        decayed = (lr - end_lr) * (1 - p) ** power + end_lr
    and while step < num_warmup_steps it is replaced by the warmup value lr * step / warmup.
    So the peak is lr * (warmup - 1) / warmup at step warmup - 1, and at step `warmup` the
    rate continues on the decay line at decayed(warmup) (slightly below lr).

    With a clock (a time budget), p = max(step / num_train_steps, trained seconds / budget),
    so the decay finishes at the budget. Should the budget end during warmup, the run ends
    at the warmup value.
    """

    def __init__(self, learning_rate: float, num_train_steps: int, num_warmup_steps: int,
                 end_lr: float = 0.0, power: float = 1.0, name: str = "WarmupPolynomialDecay",
                 clock: Optional[TrainingClock] = None):
        super().__init__()
        self.learning_rate = learning_rate
        self.num_train_steps = num_train_steps
        self.num_warmup_steps = num_warmup_steps
        self.end_lr = end_lr
        self.power = power
        self.name = name
        self.clock = clock

    def __call__(self, step: Any) -> tf.Tensor:
        """The learning rate at `step` (applies done so far), a float32 scalar."""
        with tf.name_scope(self.name):
            step = tf.cast(step, tf.float32)
            progress = training_progress(step, self.num_train_steps, self.clock)
            span = self.learning_rate - self.end_lr
            decayed = span * tf.pow(1.0 - progress, self.power) + self.end_lr
            if not self.num_warmup_steps:
                return decayed
            warmup = tf.cast(self.num_warmup_steps, tf.float32)
            return tf.where(step < warmup, self.learning_rate * step / warmup, decayed)

    def get_config(self) -> Dict[str, Any]:
        return {
            "learning_rate": self.learning_rate,
            "num_train_steps": self.num_train_steps,
            "num_warmup_steps": self.num_warmup_steps,
            "end_lr": self.end_lr,
            "power": self.power,
            "name": self.name,
            **self._clock_config(),
        }


@keras.saving.register_keras_serializable(package="bert_tf")
class WarmupStableDecay(_ClockedSchedule):
    """Warmup-stable-decay: a linear warmup to the peak, the peak held, then a decay to
    end_lr over the last `decay_proportion` of the run's progress p:

        warmup(step) = lr * min(step / num_warmup_steps, 1)          (lr without warmup)
        q            = clip(1 - (1 - p) / decay_proportion, 0, 1)    (how far into the decay)
        decayed(p)   = end_lr + (lr - end_lr) * (1 - sqrt(q))
        rate         = min(warmup(step), decayed(p))

    The min only matters when a short budget starts the decay before warmup ends: the rate
    then never exceeds what either phase allows. Unlike the linear schedule the peak is
    reached exactly, at step num_warmup_steps.

    Why this shape. A schedule whose decay is laid out over the whole run (linear, cosine)
    must know the run's length in advance; under a time budget that length is only known
    as the run goes, and a run stopped early never decays. Holding the peak and decaying
    only at the end keeps the rate right whatever the length, and Hägele et al. (2024,
    "Scaling Laws and Compute-Optimal Training Beyond Fixed Training Durations") found
    that such a constant rate with a short final cooldown matches a tuned cosine schedule.
    Of the cooldown shapes they compared, 1 - sqrt (the rate falls fast at first, then
    slowly near the end) beat the linear one, and a cooldown of about 20 % of the run
    closed the gap to cosine; ModernBERT (Warner et al., 2024) pretrained with this
    warmup-stable-1-sqrt schedule.
    """

    def __init__(self, learning_rate: float, num_train_steps: int, num_warmup_steps: int,
                 end_lr: float = 0.0, decay_proportion: float = 0.2,
                 name: str = "WarmupStableDecay", clock: Optional[TrainingClock] = None):
        super().__init__()
        if not 0.0 < decay_proportion <= 1.0:
            raise ValueError(f"decay_proportion must be in (0, 1], got {decay_proportion}")
        self.learning_rate = learning_rate
        self.num_train_steps = num_train_steps
        self.num_warmup_steps = num_warmup_steps
        self.end_lr = end_lr
        self.decay_proportion = decay_proportion
        self.name = name
        self.clock = clock

    def __call__(self, step: Any) -> tf.Tensor:
        """The learning rate at `step` (applies done so far), a float32 scalar."""
        with tf.name_scope(self.name):
            step = tf.cast(step, tf.float32)
            progress = training_progress(step, self.num_train_steps, self.clock)
            # Written as 1 - remaining / proportion so that p = 1 gives q = 1 exactly.
            into = tf.clip_by_value(1.0 - (1.0 - progress) / self.decay_proportion, 0.0, 1.0)
            span = self.learning_rate - self.end_lr
            # Exactly lr before the decay (end_lr + span rounds in float32).
            decayed = tf.where(into > 0.0, self.end_lr + span * (1.0 - tf.sqrt(into)),
                               tf.constant(self.learning_rate, tf.float32))
            if not self.num_warmup_steps:
                return decayed
            warmup = tf.cast(self.num_warmup_steps, tf.float32)
            ramp = self.learning_rate * tf.minimum(step / warmup, 1.0)
            return tf.minimum(ramp, decayed)

    def get_config(self) -> Dict[str, Any]:
        return {
            "learning_rate": self.learning_rate,
            "num_train_steps": self.num_train_steps,
            "num_warmup_steps": self.num_warmup_steps,
            "end_lr": self.end_lr,
            "decay_proportion": self.decay_proportion,
            "name": self.name,
            **self._clock_config(),
        }
