"""What the trainer optimizes and reports: the contract between a task and the train loop.

The trainer and its step functions know nothing of MLM, NSP, classes or spans. A task gives
them an `Objective`:

* `denominators(batch)`: per-replica quantities known from the labels alone (the number of
  examples, of masked tokens, of labelled words). The loop sums them over all replicas
  before the forward pass, so each replica can differentiate its exact share of the loss of
  the GLOBAL batch (see `bert_tf.training.train_loop`).
* `forward(model, batch, training)`: the model outputs the loss needs.
* `loss_and_sums(outputs, batch, global_denominators)`: this replica's share of the global
  loss (the shares of all replicas and all accumulated micro-batches add up to the global
  loss), and float32 scalar sums over the replica's examples (`sum_keys`) to add over
  replicas and steps, from which `metrics(sums)` computes the figures of progress lines and
  eval results (always with a "loss" key: the objective minimised, as a global-batch mean).
  A sum may be a fixed-shape vector instead (a histogram): the objective then names its
  shape in `sum_shapes` ({key: shape}), which the train loop's accumulators start from.
* `predictions(outputs, batch)`: per-example outputs for `Trainer.predict` (fine-tuning tasks
  score whole dev sets on the host: F1, MCC, span matching cannot be summed per batch).
* `gradients(model, batch, global_denominators, scale_loss)`: optional. None (the default)
  lets the train loop differentiate `forward` + `loss_and_sums` with one tape. An objective
  that must differentiate in its own way (GradCache: embed in mini-batches, back-propagate
  cached embedding gradients; `bert_tf.finetune.retrieval.contrastive_loss`) returns what
  that tape would: (gradients, one per `model.trainable_variables`, dense, None where the
  loss does not reach; the sums of `loss_and_sums`), of the scaled loss share.
* `uniform_loss`: the "loss" metric of a model that has learned nothing, its heads guessing
  uniformly: the sum over the loss's terms of ln(the number of choices of each head), times
  the term's weight (ln vocab_size + ln 2 for MLM + NSP; a generator MLM plus 50 x a binary
  discriminator would declare ln vocab_size + 50 ln 2). A healthy run starts near it; a
  loss far above it is divergence whatever the recent level (`bert_tf.training.health`).
  None: the objective declares no such bound.

Losses stay per example inside each objective; the reduction over the global batch happens
only in `loss_and_sums` with the all-reduced denominators.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import tensorflow as tf

from bert_tf.core import schema
from bert_tf.training import losses


class Objective:
    """Base class: see the module docstring. Subclasses set `sum_keys` and override all."""

    sum_keys: Tuple[str, ...] = ()
    # See the module docstring; subclasses set it when they know their heads' sizes.
    uniform_loss: Optional[float] = None

    def denominators(self, batch: Mapping[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
        raise NotImplementedError

    def forward(self, model: Any, batch: Mapping[str, tf.Tensor], training: bool
                ) -> Dict[str, tf.Tensor]:
        raise NotImplementedError

    def loss_and_sums(self, outputs: Mapping[str, tf.Tensor], batch: Mapping[str, tf.Tensor],
                      global_denominators: Mapping[str, tf.Tensor]
                      ) -> Tuple[tf.Tensor, Dict[str, tf.Tensor]]:
        raise NotImplementedError

    def local_sums(self, outputs: Mapping[str, tf.Tensor], batch: Mapping[str, tf.Tensor]
                   ) -> Dict[str, tf.Tensor]:
        """The sums of `loss_and_sums` alone (eval: no loss share is needed)."""
        return self.loss_and_sums(outputs, batch, self.denominators(batch))[1]

    def metrics(self, sums: Mapping[str, Any]) -> Dict[str, tf.Tensor]:
        raise NotImplementedError

    def predictions(self, outputs: Mapping[str, tf.Tensor], batch: Mapping[str, tf.Tensor]
                    ) -> Dict[str, tf.Tensor]:
        """Per-example outputs to gather on the host; default: every model output."""
        return dict(outputs)

    def gradients(self, model: Any, batch: Mapping[str, tf.Tensor],
                  global_denominators: Mapping[str, tf.Tensor],
                  scale_loss: Callable[[tf.Tensor], tf.Tensor]
                  ) -> Optional[Tuple[List[Optional[tf.Tensor]], Dict[str, tf.Tensor]]]:
        """The objective's own gradients of its scaled loss share, or None (the default) for
        the train loop's one tape (module docstring)."""
        return None

    def eval_notes(self, metrics: Mapping[str, float]) -> List[str]:
        """Warnings a periodic evaluation's metrics call for (logged by the trainer); default
        none."""
        return []


class PretrainingObjective(Objective):
    """Masked LM (+ next-sentence prediction), with the original release's reductions.

        masked_lm_loss     = sum(w * CE) / (sum(w) + 1e-5)   over the global batch
        next_sentence_loss = sum(CE_nsp) / global_batch_size

    Args:
        use_nsp: train the next-sentence head too.
        vocab_size: the MLM head's size, for `uniform_loss` (None: no absolute bound).
    """

    def __init__(self, use_nsp: bool = True, vocab_size: Optional[int] = None):
        self.use_nsp = use_nsp
        self.sum_keys = losses.sum_keys(use_nsp)
        if vocab_size:
            self.uniform_loss = math.log(vocab_size) + (math.log(2) if use_nsp else 0.0)

    def denominators(self, batch):
        weights = batch[schema.MASKED_LM_WEIGHTS]
        return {"mlm_weight": tf.reduce_sum(weights),
                "num_examples": tf.cast(tf.shape(weights)[0], tf.float32)}

    def forward(self, model, batch, training):
        # The heads' logits only: the last block runs at [CLS] and the masked positions.
        return model.head_logits(batch, training=training)

    def loss_and_sums(self, outputs, batch, global_denominators):
        terms = losses.compute_loss_terms(outputs, batch)
        share = losses.reduce_pretraining_losses(
            terms, global_denominators["mlm_weight"], global_denominators["num_examples"])["loss"]
        return share, terms.local_sums()

    def metrics(self, sums):
        return losses.metrics_from_sums(sums)
