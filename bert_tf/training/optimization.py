"""The optimizer: AdamW (BERT's AdamWeightDecay) or LAMB, a learning-rate schedule, clipping.

    optimizer = create_optimizer(OptimizerConfig(learning_rate=1e-4, num_train_steps=100_000,
                                                 num_warmup_steps=10_000))

The learning-rate schedule (`bert_tf.training.schedules`: BERT's warmup + polynomial decay,
or warmup-stable-decay) is driven by `optimizer.iterations`, the number of applies: with
gradient accumulation the trainer sums k micro-batch gradients and applies once, so one apply
is one training step. Given the training clock of a run with a time budget
(`bert_tf.training.budget`), it is laid out over the budget too: its decay ends when the
budget is spent.

AdamW is the original BERT optimizer's update: decoupled weight decay added to the Adam
direction, `w -= lr * (m_hat / (sqrt(v_hat) + eps) + wd * w)`, with bias-corrected moments by
default. The original release did NOT bias-correct (`adam_bias_correction=False` reproduces
it exactly): then m / sqrt(v) starts 3.2x (step 1) to 6.5x (step 10) larger than Adam's and
only settles after ~1,000 steps. Under the original 10k-step warmup that is harmless, but with
short warmups (fine-tuning-sized runs, the CPU demo) it drove a post-LN BERT-Mini into the
input-independent unigram solution: it could not even memorise a single batch, while the
bias-corrected update does (measured on the demo data, lr 1e-3). Keras' own AdamW is not used:
it always bias-corrects (so it cannot reproduce the original), and it matches
`exclude_from_weight_decay` against `variable.name` ("gamma", "bias"), which never contains
the layer's name ("layer_norm"); here the patterns are searched in `variable.path`
("transformer_layer_0/self_attention_layer_norm/gamma").

LAMB (You et al., 2019) is the layer-wise adaptive variant used for large-batch BERT: the
bias-corrected Adam direction plus weight decay, scaled per variable by the trust ratio
||w|| / ||update||. Variables excluded from weight decay are also excluded from the trust
ratio (as in the common TF implementations), so LayerNorm and biases take plain Adam steps.
Keras' Lamb is not used: it has no weight decay inside the trust ratio.

Gradients are clipped to `clip_norm` by global norm AFTER they are summed across replicas, so
a MirroredStrategy/TPU run clips the same gradient as a single-device run with the same
global batch (Keras' `global_clipnorm` would clip each replica's partial gradient).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import keras
import tensorflow as tf

from bert_tf.core.errors import UserError
from bert_tf.training.budget import TrainingClock
from bert_tf.training.schedules import (  # noqa: F401 (WarmupPolynomialDecay: API here too)
    WarmupPolynomialDecay,
    WarmupStableDecay,
)

DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY = ("LayerNorm", "layer_norm", "bias")
OPTIMIZERS = ("adamw", "lamb")
SCHEDULES = ("linear", "wsd")


@dataclasses.dataclass(frozen=True, kw_only=True)
class OptimizerConfig:
    """Optimizer settings (the original BERT defaults where it had them).

    Attributes:
        optimizer: "adamw" or "lamb".
        learning_rate: peak learning rate, reached at the end of warmup.
        num_train_steps: steps of the schedule (the whole run, warmup included).
        num_warmup_steps: steps of the linear warmup from 0; 0 for none.
        end_lr: learning rate at num_train_steps (or the time budget) and after.
        power: exponent of the polynomial decay of "linear" (1.0 = linear).
        lr_schedule: "linear" (BERT's warmup + polynomial decay over the whole run) or
            "wsd" (warmup, the peak held, a 1-sqrt decay at the end; see schedules.py).
        decay_proportion: "wsd" only: the final fraction of the run over which it decays.
        weight_decay_rate: decoupled weight decay coefficient.
        beta_1, beta_2, epsilon: Adam moments and the denominator's epsilon.
        clip_norm: global-norm gradient clipping; None or 0 disables it.
        exclude_from_weight_decay: regexes searched in each variable's path; a match means no
            weight decay (and, for LAMB, no trust ratio).
        adam_bias_correction: AdamW only; False matches the original BERT optimizer exactly
            (unstable with short warmups, see the module docstring).
    """

    optimizer: str = "adamw"
    learning_rate: float
    num_train_steps: int
    num_warmup_steps: int
    end_lr: float = 0.0
    power: float = 1.0
    weight_decay_rate: float = 0.01
    beta_1: float = 0.9
    beta_2: float = 0.999
    epsilon: float = 1e-6
    clip_norm: Optional[float] = 1.0
    exclude_from_weight_decay: Tuple[str, ...] = DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY
    adam_bias_correction: bool = True
    lr_schedule: str = "linear"
    decay_proportion: float = 0.2

    def __post_init__(self) -> None:
        # Accept a list from flags; keep the frozen config hashable.
        object.__setattr__(self, "exclude_from_weight_decay", tuple(self.exclude_from_weight_decay))
        if self.optimizer not in OPTIMIZERS:
            raise UserError(f"--optimizer must be one of {', '.join(OPTIMIZERS)}, "
                            f"got {self.optimizer!r}")
        if not self.learning_rate > 0:
            raise UserError(f"--learning_rate must be positive, got {self.learning_rate}")
        if self.num_train_steps <= 0:
            raise UserError(f"--num_train_steps must be positive, got {self.num_train_steps}")
        if self.num_warmup_steps < 0:
            raise UserError(f"--num_warmup_steps must be >= 0, got {self.num_warmup_steps}")
        if self.lr_schedule not in SCHEDULES:
            raise UserError(f"--lr_schedule must be one of {', '.join(SCHEDULES)}, "
                            f"got {self.lr_schedule!r}")
        if not 0 < self.decay_proportion <= 1:
            raise UserError(f"--decay_proportion must be in (0, 1], got {self.decay_proportion}")
        if self.weight_decay_rate < 0:
            raise UserError(f"--weight_decay_rate must be >= 0, got {self.weight_decay_rate}")
        if not (0 <= self.beta_1 < 1 and 0 <= self.beta_2 < 1):
            raise UserError(
                f"beta_1 and beta_2 must be in [0, 1), got {self.beta_1}, {self.beta_2}")
        if self.clip_norm is not None and self.clip_norm < 0:
            raise UserError(f"--clip_norm must be >= 0, got {self.clip_norm}")
        for pattern in self.exclude_from_weight_decay:
            try:
                re.compile(pattern)
            except re.error as e:
                raise UserError(f"exclude_from_weight_decay: bad regex {pattern!r}: {e}") from None


def variable_path(variable: Any) -> str:
    """The name the exclusion patterns are searched in: Keras 3 `.path`, else tf `.name`."""
    return getattr(variable, "path", None) or variable.name


def uses_weight_decay(variable: Any, exclude_patterns: Sequence[str]) -> bool:
    """False when any exclusion regex is found in the variable's path (e.g. LayerNorm, bias)."""
    path = variable_path(variable)
    return not any(re.search(pattern, path) for pattern in exclude_patterns)


def _tf_variable(variable: Any) -> Any:
    """The TensorFlow variable of a Keras variable (a TensorFlow one stays)."""
    return variable.value if isinstance(variable, keras.Variable) else variable


def _handle(variable: Any) -> tf.Tensor:
    """The resource handle of a Keras or TensorFlow variable (inside `Strategy.update`, a
    distributed variable's gives the copy being updated)."""
    return _tf_variable(variable).handle


def _dense(gradient: Any) -> Any:
    """IndexedSlices -> dense tensor (the moments decay on every row anyway); None stays."""
    if isinstance(gradient, tf.IndexedSlices):
        return tf.convert_to_tensor(gradient)
    return gradient


class _BertOptimizerBase(keras.optimizers.Optimizer):
    """Adam-moment optimizer with per-variable decay flags and clipping after the all-reduce.

    Subclasses implement `update_step`. The TF backend's Optimizer does the tf.distribute
    plumbing; `_backend_update_step` is overridden only to clip after its cross-replica sum
    (`_all_reduce_sum_gradients`, which a trainer that sums gradients itself may replace by
    the identity), using that backend's private hooks, checked at construction.
    """

    def __init__(self, learning_rate: Any = 1e-4, weight_decay_rate: float = 0.01,
                 beta_1: float = 0.9, beta_2: float = 0.999, epsilon: float = 1e-6,
                 clip_norm: Optional[float] = 1.0,
                 exclude_from_weight_decay: Sequence[str] = DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY,
                 name: str = "bert_optimizer", **kwargs: Any):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        for hook in ("_all_reduce_sum_gradients", "_distributed_tf_update_step",
                     "_distribution_strategy"):
            if not hasattr(self, hook):
                raise RuntimeError(f"this Keras version's TF optimizer has no {hook}; "
                                   f"bert_tf.training.optimization needs the TensorFlow backend")
        self.weight_decay_rate = weight_decay_rate
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.clip_norm = clip_norm
        self.exclude_from_weight_decay = list(exclude_from_weight_decay)

    def build(self, var_list: List[Any]) -> None:
        if self.built:
            return
        super().build(var_list)
        # Decided once per variable here, from the Keras variable (under tf.distribute,
        # update_step only sees the per-device tf.Variable, which has no `.path`).
        self._decay_flags = [uses_weight_decay(v, self.exclude_from_weight_decay) for v in var_list]
        self._m = [self.add_variable_from_reference(v, name="m") for v in var_list]
        self._v = [self.add_variable_from_reference(v, name="v") for v in var_list]

    def decays(self, variable: Any) -> bool:
        """Whether the (built) optimizer applies weight decay to this model variable."""
        return self._decay_flags[self._get_variable_index(variable)]

    def _backend_update_step(self, grads, trainable_variables, learning_rate):
        self._step_tensors = {}  # per_step's tensors of the step being built (in this graph)
        variables = [_tf_variable(v) for v in trainable_variables]
        grads_and_vars = self._all_reduce_sum_gradients(list(zip(grads, variables)))
        # Dense gradients: the global norm of an IndexedSlices (embedding lookups) is taken
        # over its rows with repeated ids unsummed, which is not the gradient's norm.
        grads_and_vars = [(_dense(g), v) for g, v in grads_and_vars]
        if self.clip_norm:
            present = [i for i, (g, _) in enumerate(grads_and_vars) if g is not None]
            clipped, _ = tf.clip_by_global_norm([grads_and_vars[i][0] for i in present],
                                                self.clip_norm)
            for i, g in zip(present, clipped):
                grads_and_vars[i] = (g, grads_and_vars[i][1])
        tf.__internal__.distribute.interim.maybe_merge_call(
            self._distributed_tf_update_step, self._distribution_strategy, grads_and_vars,
            learning_rate,
        )

    def _moments(self, gradient: Any, variable: Any) -> Tuple[int, tf.Tensor, tf.Tensor]:
        """Updates the moment slots; returns (index, m, v) after the update."""
        index = self._get_variable_index(variable)
        gradient = tf.cast(_dense(gradient), variable.dtype)
        m_slot, v_slot = self._m[index], self._v[index]
        m = self.beta_1 * tf.convert_to_tensor(m_slot) + (1.0 - self.beta_1) * gradient
        v = self.beta_2 * tf.convert_to_tensor(v_slot) + (1.0 - self.beta_2) * tf.square(gradient)
        self.assign(m_slot, m)
        self.assign(v_slot, v)
        return index, m, v

    def _bias_corrected(self, m: tf.Tensor, v: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
        denominator_m, denominator_v = self._bias_denominators(m)
        return m / denominator_m, v / denominator_v

    def _bias_denominators(self, m: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
        """(1 - beta_1^t, 1 - beta_2^t) at this step, in m's dtype and on m's device."""
        power_1, power_2 = self.beta_powers(m.dtype, m.device)
        return 1.0 - power_1, 1.0 - power_2

    def beta_powers(self, dtype: tf.DType, device: str) -> Tuple[tf.Tensor, tf.Tensor]:
        """(beta_1^t, beta_2^t) at this step t (iterations + 1): scalars of `dtype`."""

        def build():
            step = tf.cast(self.iterations + 1, dtype)
            return (tf.pow(tf.cast(self.beta_1, dtype), step),
                    tf.pow(tf.cast(self.beta_2, dtype), step))

        return self.per_step(("beta_powers", dtype, device), build)

    def per_step(self, key: Tuple, build: Callable[[], Any]) -> Any:
        """`build()`'s tensors, built once per step, `key` (what, dtype, device), in a graph.

        Shared by every variable's update: built per variable, the bias-correction terms
        were a third of the optimizer's share of tracing a train step (the same values, so
        the updates are bit for bit the same). Eagerly they are built each time (a kept
        tensor would hold an earlier step's).
        """
        cache = None if tf.executing_eagerly() else getattr(self, "_step_tensors", None)
        if cache is not None and key in cache:
            return cache[key]
        built = build()
        if cache is not None:
            cache[key] = built
        return built

    def get_config(self) -> Dict[str, Any]:
        config = super().get_config()
        config.update({
            "weight_decay_rate": self.weight_decay_rate,
            "beta_1": self.beta_1,
            "beta_2": self.beta_2,
            "epsilon": self.epsilon,
            "clip_norm": self.clip_norm,
            "exclude_from_weight_decay": list(self.exclude_from_weight_decay),
        })
        return config


@keras.saving.register_keras_serializable(package="bert_tf")
class AdamWeightDecay(_BertOptimizerBase):
    """BERT's AdamW: `w -= lr * (m_hat / (sqrt(v_hat) + eps) + wd * w)`, decay only where not
    excluded; m_hat = m / (1 - beta_1^t), v_hat = v / (1 - beta_2^t), or the raw moments
    without bias_correction.

    Args:
        bias_correction: True (default, as OptimizerConfig and --adam_bias_correction) divides
            m and v by (1 - beta^t) first, as standard Adam does; False is the original BERT
            update on the raw moments (unstable with short warmups, see the module docstring).
        See _BertOptimizerBase / OptimizerConfig for the others.
    """

    def __init__(self, *args: Any, bias_correction: bool = True, name: str = "adam_weight_decay",
                 **kwargs: Any):
        super().__init__(*args, name=name, **kwargs)
        self.bias_correction = bias_correction

    def update_step(self, gradient, variable, learning_rate):
        # TensorFlow's fused Adam kernel (one op and one pass over the weights and moments,
        # instead of about fifteen ops each writing a tensor of the variable's size; it is
        # also what XLA compiles). It computes
        #     w -= lr * sqrt(1 - p2) / (1 - p1) * m / (sqrt(v) + eps')
        # with p = beta^t, which is the class docstring's update when eps' = eps * sqrt(1 - p2);
        # p = 0 gives the original update on the raw moments. The decoupled decay is taken
        # first, from the same weights the update reads: w - lr * wd * w - lr * adam.
        index = self._get_variable_index(variable)
        dtype = variable.dtype
        lr = tf.cast(learning_rate, dtype)
        if self._decay_flags[index] and self.weight_decay_rate:
            self.assign_sub(variable, (lr * self.weight_decay_rate) * variable)
        scalars = self.per_step(("adam", dtype, variable.device),
                                lambda: self._kernel_scalars(dtype, variable.device))
        tf.raw_ops.ResourceApplyAdam(
            var=_handle(variable), m=_handle(self._m[index]), v=_handle(self._v[index]), lr=lr,
            grad=tf.cast(_dense(gradient), dtype), **scalars)

    def _kernel_scalars(self, dtype: tf.DType, device: str) -> Dict[str, tf.Tensor]:
        """The fused kernel's step scalars (betas, their powers, epsilon'), in `dtype`."""
        if self.bias_correction:
            power_1, power_2 = self.beta_powers(dtype, device)
            epsilon = self.epsilon * tf.sqrt(1.0 - power_2)
        else:
            power_1 = power_2 = tf.constant(0.0, dtype)
            epsilon = tf.constant(self.epsilon, dtype)
        return {"beta1_power": power_1, "beta2_power": power_2, "epsilon": epsilon,
                "beta1": tf.constant(self.beta_1, dtype), "beta2": tf.constant(self.beta_2, dtype)}

    def get_config(self) -> Dict[str, Any]:
        config = super().get_config()
        config["bias_correction"] = self.bias_correction
        return config


@keras.saving.register_keras_serializable(package="bert_tf")
class LAMB(_BertOptimizerBase):
    """LAMB: bias-corrected Adam direction + weight decay, scaled by ||w|| / ||update||.

    The trust ratio is 1 when either norm is 0, and for variables matched by the exclusion
    patterns (LayerNorm, biases).
    """

    def __init__(self, *args: Any, name: str = "lamb", **kwargs: Any):
        super().__init__(*args, name=name, **kwargs)

    def update_step(self, gradient, variable, learning_rate):
        index, m, v = self._moments(gradient, variable)
        m, v = self._bias_corrected(m, v)
        update = m / (tf.sqrt(v) + self.epsilon)
        ratio = tf.constant(1.0, variable.dtype)
        if self._decay_flags[index]:
            if self.weight_decay_rate:
                update += self.weight_decay_rate * variable
            w_norm = tf.norm(variable)
            u_norm = tf.norm(update)
            ratio = tf.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, ratio)
        self.assign_sub(variable, ratio * tf.cast(learning_rate, variable.dtype) * update)


def create_schedule(config: OptimizerConfig, clock: Optional[TrainingClock] = None
                    ) -> keras.optimizers.schedules.LearningRateSchedule:
    """The learning-rate schedule of `config`; with `clock`, laid out over its budget too."""
    if config.lr_schedule == "wsd":
        return WarmupStableDecay(config.learning_rate, config.num_train_steps,
                                 config.num_warmup_steps, config.end_lr,
                                 config.decay_proportion, clock=clock)
    return WarmupPolynomialDecay(config.learning_rate, config.num_train_steps,
                                 config.num_warmup_steps, config.end_lr, config.power,
                                 clock=clock)


def create_optimizer(
    config: OptimizerConfig, trainable_variables: Optional[Sequence[Any]] = None,
    clock: Optional[TrainingClock] = None,
) -> keras.optimizers.Optimizer:
    """Makes the optimizer with its schedule; call it inside `strategy.scope()`.

    Under tf.distribute the optimizer must be built (its slots created) before the first
    `tf.function` step: Keras' lazy build inside a distributed tf.function fails (Keras' own
    optimizers too). Pass `trainable_variables` to build it here. Build it also before
    restoring a checkpoint, so the slots are restored at once rather than deferred.

    Args:
        config: the optimizer settings.
        trainable_variables: the model's trainable variables, to build the optimizer now.
        clock: the training clock of a run with a time budget (the same object the trainer
            advances), or None for a schedule of the steps alone.

    Returns:
        An AdamWeightDecay or LAMB optimizer; its learning rate follows the schedule of
        `optimizer.iterations` (the number of applies) and the clock. Note that, as in the
        original, the first apply uses the rate at step 0, which is 0 with warmup.
    """
    common = dict(
        learning_rate=create_schedule(config, clock),
        weight_decay_rate=config.weight_decay_rate,
        beta_1=config.beta_1,
        beta_2=config.beta_2,
        epsilon=config.epsilon,
        clip_norm=config.clip_norm or None,
        exclude_from_weight_decay=config.exclude_from_weight_decay,
    )
    if config.optimizer == "lamb":
        optimizer = LAMB(**common)
    else:
        optimizer = AdamWeightDecay(bias_correction=config.adam_bias_correction, **common)
    if trainable_variables is not None:
        optimizer.build(list(trainable_variables))
    return optimizer
