"""The replicated train and eval steps: where losses are reduced over the global batch.

Losses are per example. This module is the one place that reduces them over the global
batch (all replicas, all accumulated micro-batches), through the task's `Objective`
(`bert_tf.training.objectives`). For pretraining, for example:

    masked_lm_loss     = sum(w * CE) / (sum(w) + 1e-5)       sums over the global batch
    next_sentence_loss = sum(CE_nsp) / global_batch_size
    loss               = masked_lm_loss + next_sentence_loss

Replicas hold different numbers of masked tokens (or labelled words), so averaging
per-replica means would weight them unequally. Instead each replica first learns the global
denominators (`Objective.denominators`, summed across replicas; known from the input before
the forward pass), then differentiates its own share of the global loss, e.g.

    local sum(w * CE) / (global sum(w) + 1e-5) + local sum(CE_nsp) / global_batch_size,

and the gradients are summed across replicas. The sum of the shares is exactly the global
loss, so N replicas, or k accumulated micro-batches, give the gradient of one big batch.

Gradients are all-reduced here, before the optimizer sees them, so that gradient clipping
and the float16 loss-scale finiteness check act on the global gradient (identical on every
replica); the optimizer's own all-reduce is switched off for that call.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Dict, Iterator, Optional, Tuple

import numpy as np
import tensorflow as tf

from bert_tf.training import checkpointing, objectives
from bert_tf.training.new_rows_only import NewRowsOnly

# No autograph anywhere in the step functions: the loops below are tf.while_loop calls
# written out, and the model, losses and optimizer are written for graph mode already (Keras
# 3 traces its own steps without autograph). Converting them cost seconds of CPU at every
# start of a run, paid again by each run of a fine-tuning grid (DEVELOPERS.md).
_plain = tf.autograph.experimental.do_not_convert


@contextlib.contextmanager
def _optimizer_without_all_reduce(optimizer) -> Iterator[None]:
    """Makes a Keras 3 optimizer take the gradients it is given as already summed.

    Keras' TF optimizer all-reduces gradients inside `apply`, after clipping them per replica.
    We reduce first (see the module docstring), so its reduction is replaced by the identity
    while `apply` is traced (the setting is read at trace time only).
    """
    targets = [optimizer]
    inner = getattr(optimizer, "inner_optimizer", None)  # LossScaleOptimizer
    if inner is not None:
        targets.append(inner)
    for opt in targets:
        if not hasattr(opt, "_all_reduce_sum_gradients"):
            raise RuntimeError(
                "this Keras version's optimizer has no _all_reduce_sum_gradients; the trainer "
                "cannot control where gradients are reduced"
            )
        object.__setattr__(opt, "_all_reduce_sum_gradients", lambda grads_and_vars: grads_and_vars)
    try:
        yield
    finally:
        for opt in targets:
            opt.__dict__.pop("_all_reduce_sum_gradients", None)


# Runs planned for fewer steps keep the optimizer update in graph mode. XLA fuses the update
# into a few passes over the weights, which can save a little at every step, but compiling
# it costs seconds once per run. benchmarks/bench_xla_optimizer.py finds the compile paid
# back after 60-150 steps for models from the test suite's tiny ones to BERT-Small; with an
# AVX2 cap the saving per step is smaller and noisier (docs/results/pretraining.md).
XLA_OPTIMIZER_MIN_STEPS = 200


def xla_optimizer_pays(num_train_steps: int) -> bool:
    """Whether a run of `num_train_steps` steps is long enough for an XLA-compiled optimizer
    update to pay back its compile (`XLA_OPTIMIZER_MIN_STEPS`)."""
    return num_train_steps >= XLA_OPTIMIZER_MIN_STEPS


class StepFunctions:
    """Builds the tf.functions that run training and eval steps under a strategy.

    Args:
        model: the model (built under `strategy.scope()`).
        optimizer: its Keras optimizer (possibly a LossScaleOptimizer), built.
        strategy: the distribution strategy.
        step: int64 global step variable, incremented per train step.
        objective: what is minimised and reported (`objectives.Objective`).
        accumulation_steps: k; every replica batch holds k micro-batches, whose gradients are
            summed before one optimizer update.
        use_xla: XLA-compile the per-replica forward/backward pass.
        xla_optimizer: XLA-compile the optimizer update when there is a single replica
            (see `xla_optimizer_pays`). The update is element-wise only (moments,
            clipping, decay), which XLA fuses into a few passes over the weights. With several
            replicas the optimizer may synchronize (merge_call), which a nested tf.function
            cannot, so it is left in graph mode.
        new_rows: the first steps update only the new vocabulary rows (`new_rows_only`):
            `train_loop` runs them in a graph of their own.
    """

    def __init__(self, model, optimizer, strategy: tf.distribute.Strategy, step: tf.Variable,
                 objective: objectives.Objective, accumulation_steps: int = 1,
                 use_xla: bool = False, xla_optimizer: bool = True,
                 new_rows: Optional[NewRowsOnly] = None):
        self.model = model
        self.optimizer = optimizer
        self.strategy = strategy
        self.step = step
        self.objective = objective
        self.accumulation_steps = accumulation_steps
        self.keys = tuple(objective.sum_keys)
        # A sum is a float32 scalar unless the objective declares a fixed shape for it (the
        # score histograms of ELECTRA's AUC): the loops' accumulators start at zeros of it.
        shapes = getattr(objective, "sum_shapes", {})
        self._zeros = lambda: {key: tf.zeros(shapes.get(key, [])) for key in self.keys}
        self._seed_states = checkpointing.seed_state_variables(model)  # dropout RNG
        self._gradients = tf.function(self._local_gradients, jit_compile=use_xla,
                                      autograph=False)
        self.set_xla_optimizer(xla_optimizer)
        # Not XLA-compiled: under MirroredStrategy a jit-compiled function inside the
        # get_next_as_optional branch loses its replica's device placement; eval is a small
        # part of the run anyway.
        self._forward = self._local_eval_sums
        self.new_rows = new_rows
        self._frozen = new_rows.bind(model) if new_rows and new_rows.num_steps else None
        self._loop = tf.function(self._train_loop, autograph=False)
        self.eval_loop = tf.function(self._eval_loop, autograph=False)
        self.predict_step = tf.function(self._predict_step, autograph=False)

    def set_xla_optimizer(self, enabled: bool) -> None:
        """Chooses whether the optimizer update is XLA-compiled (on a single replica only).

        Takes effect only before the first `train_loop` call, which traces the update in.
        """
        self.xla_optimizer = enabled and self.strategy.num_replicas_in_sync == 1
        if self.xla_optimizer:
            self._apply = tf.function(self._apply_gradients, jit_compile=True, autograph=False)
        else:
            self._apply = self._apply_gradients

    # ------------------------------------------------------------------ per replica

    @_plain
    def _micro_batch_gradients(self, batch, denominators):
        own = self.objective.gradients(self.model, batch, denominators,
                                       self.optimizer.scale_loss)
        if own is not None:  # the objective differentiates itself (GradCache)
            return own
        variables = self.model.trainable_variables
        with tf.GradientTape() as tape:
            outputs = self.objective.forward(self.model, batch, training=True)
            # This replica's share of the global objective (see the module docstring).
            share, sums = self.objective.loss_and_sums(outputs, batch, denominators)
            scaled = self.optimizer.scale_loss(share)
        grads = tape.gradient(scaled, variables)
        # Embedding lookups give IndexedSlices; dense gradients sum and all-reduce simply.
        # Variables outside the loss (the pooler under --no_nsp) keep None: no update at all.
        grads = [None if g is None else tf.convert_to_tensor(g) for g in grads]
        return grads, sums

    def _local_gradients(self, batch, denominators):
        """Gradients of this replica's loss share, summed over its k micro-batches.

        Args:
            batch: this replica's features, leading dimension k * micro_batch.
            denominators: the objective's denominators summed over the GLOBAL batch.

        Returns:
            (gradients, one per trainable variable, None for variables the loss does not
            reach; local sums, see Objective.sum_keys).
        """
        k = self.accumulation_steps
        if k == 1:
            return self._micro_batch_gradients(batch, denominators)
        micro = {
            name: tf.reshape(value, tf.concat([[k, -1], tf.shape(value)[1:]], axis=0))
            for name, value in batch.items()
        }
        # The first micro-batch outside the loop fixes which gradients are None.
        grads, sums = self._micro_batch_gradients(
            {name: value[0] for name, value in micro.items()}, denominators)
        present = [i for i, g in enumerate(grads) if g is not None]

        def add_micro_batch(i, acc, sums):
            micro_grads, micro_sums = self._micro_batch_gradients(
                {name: value[i] for name, value in micro.items()}, denominators)
            return (i + 1, [a + micro_grads[j] for a, j in zip(acc, present)],
                    {key: sums[key] + micro_sums[key] for key in self.keys})

        _, acc, sums = tf.while_loop(lambda i, acc, sums: i < k, add_micro_batch,
                                     (tf.constant(1), [grads[i] for i in present], sums))
        for a, j in zip(acc, present):
            grads[j] = a
        return grads, sums

    @_plain
    def replica_train_step(self, batch, new_rows_only: bool = False):
        ctx = tf.distribute.get_replica_context()
        # The global denominators come from the labels alone, before any forward pass.
        local = self.objective.denominators(batch)
        names = sorted(local)
        reduced = ctx.all_reduce(tf.distribute.ReduceOp.SUM, [local[n] for n in names])
        denominators = dict(zip(names, reduced))
        # The seed-generator states are mirrored, so without this every replica would draw
        # the same dropout masks. Each replica shifts its own copy's seed by its replica id
        # for this step's draws (aggregation NONE: the assign stays local), then shifts back:
        # the states stay equal across replicas, as checkpointed and restored.
        shift = self.strategy.num_replicas_in_sync > 1 and self._seed_states
        if shift:
            offset = tf.stack([tf.cast(ctx.replica_id_in_sync_group, tf.int64),
                               tf.constant(0, tf.int64)])
            for state in self._seed_states:
                state.assign(state + offset)
        grads, sums = self._gradients(batch, denominators)
        if shift:
            for state in self._seed_states:
                state.assign(state - offset)
        if self.strategy.num_replicas_in_sync > 1:
            present = [i for i, g in enumerate(grads) if g is not None]
            reduced = ctx.all_reduce(tf.distribute.ReduceOp.SUM, [grads[i] for i in present])
            for i, g in zip(present, reduced):
                grads[i] = g
        self._apply(grads, new_rows_only)
        return sums

    @_plain
    def _apply_gradients(self, grads, new_rows_only: bool = False):
        """Applies summed gradients (None for variables the loss does not reach); with
        `new_rows_only`, then puts every weight but the new rows back (`new_rows_only`)."""
        held = self._frozen.snapshot() if new_rows_only else None
        pairs = [(g, v) for g, v in zip(grads, self.model.trainable_variables) if g is not None]
        with _optimizer_without_all_reduce(self.optimizer):
            self.optimizer.apply([g for g, _ in pairs], [v for _, v in pairs])
        if held is not None:
            self._frozen.restore(held)

    @_plain
    def _local_eval_sums(self, batch):
        return self.objective.local_sums(
            self.objective.forward(self.model, batch, training=False), batch)

    @_plain
    def _local_predictions(self, batch):
        outputs = self.objective.forward(self.model, batch, training=False)
        return self.objective.predictions(outputs, batch)

    # ------------------------------------------------------------------ loops

    @_plain
    def _reduce(self, per_replica: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
        return {
            key: self.strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica[key], axis=None)
            for key in self.keys
        }

    def train_loop(self, iterator, num_steps) -> Tuple[tf.Tensor, Dict[str, tf.Tensor]]:
        """Runs up to `num_steps` train steps in one call (sized by `preemption.HostLoop`).

        Stops early after a step whose loss is not finite (its update has been applied; the
        caller must not save that state).

        Returns:
            (losses: float32 [steps run], the objective of each step;
             sums: {key: float32 scalar} summed over the global batches of those steps).
        """
        left = self.new_rows.steps_left(int(self.step.numpy())) if self._frozen else 0
        if not left:
            return self._loop(iterator, num_steps)
        first = min(left, int(num_steps))
        losses, sums = self._loop(iterator, tf.constant(first), True)
        if first == int(num_steps) or int(tf.size(losses)) < first:
            return losses, sums  # the call ends in the phase, or a loss was not finite
        more, more_sums = self._loop(iterator, tf.constant(int(num_steps) - first))
        return tf.concat([losses, more], 0), {k: sums[k] + more_sums[k] for k in self.keys}

    def _train_loop(self, iterator, num_steps: tf.Tensor, new_rows_only: bool = False
                    ) -> Tuple[tf.Tensor, Dict[str, tf.Tensor]]:
        """`train_loop` in one graph (two: `new_rows_only` is fixed when traced)."""
        step_fn = functools.partial(self.replica_train_step, new_rows_only=new_rows_only)
        num_steps = tf.convert_to_tensor(num_steps)

        def step(i, step_losses, totals, finite):
            sums = self._reduce(self.strategy.run(step_fn, args=(next(iterator),)))
            self.step.assign_add(1)
            loss = self.objective.metrics(sums)["loss"]
            return (i + 1, step_losses.write(i, loss),
                    {key: totals[key] + sums[key] for key in self.keys},
                    tf.math.is_finite(loss))

        # Ends after num_steps steps, or after the first step whose loss is not finite.
        _, step_losses, totals, _ = tf.while_loop(
            lambda i, step_losses, totals, finite: tf.logical_and(
                finite, tf.cast(i, num_steps.dtype) < num_steps), step,
            (tf.constant(0), tf.TensorArray(tf.float32, size=0, dynamic_size=True),
             self._zeros(), tf.constant(True)))
        return step_losses.stack(), totals

    def _eval_loop(self, iterator, max_steps: tf.Tensor) -> Tuple[tf.Tensor, Dict[str, tf.Tensor]]:
        """Evaluates up to `max_steps` batches (fewer if the data ends first).

        Returns:
            (number of batches evaluated: int32 scalar; sums over them, see Objective.sum_keys).
        """
        max_steps = tf.convert_to_tensor(max_steps)  # int32 or int64 (a large --max_eval_steps)

        def evaluate(batches, totals, more):
            optional = iterator.get_next_as_optional()

            def add_batch():
                sums = self._reduce(self.strategy.run(self._forward,
                                                      args=(optional.get_value(),)))
                return (batches + 1, {key: totals[key] + sums[key] for key in self.keys},
                        tf.constant(True))

            return tf.cond(optional.has_value(), add_batch,
                           lambda: (batches, totals, tf.constant(False)))

        # Ends after max_steps batches, or when the data ends.
        batches, totals, _ = tf.while_loop(
            lambda batches, totals, more: tf.logical_and(
                more, tf.cast(batches, max_steps.dtype) < max_steps), evaluate,
            (tf.constant(0), self._zeros(), tf.constant(True)))
        return batches, totals


    def _predict_step(self, batch_iterator) -> Dict[str, tf.Tensor]:
        """One global batch of per-example predictions, gathered along the batch axis.

        Returns:
            {name: tensor [global_batch, ...]} in replica order (the input pipeline's order
            when one pipeline feeds all replicas; callers order by an example-index feature).
        """
        per_replica = self.strategy.run(self._local_predictions, args=(next(batch_iterator),))
        return {name: self.strategy.gather(value, axis=0)
                for name, value in per_replica.items()}


def to_numpy(sums: Dict[str, tf.Tensor]) -> Dict[str, np.ndarray]:
    return {key: np.asarray(value, np.float64) for key, value in sums.items()}


def add_sums(a: Dict[str, float], b: Dict[str, float]) -> Dict[str, float]:
    """Elementwise sum of two sum dicts (either may be empty)."""
    return {key: a.get(key, 0.0) + b.get(key, 0.0) for key in set(a) | set(b)}
