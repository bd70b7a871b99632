"""In-batch negatives for bi-encoders (MultipleNegativesRankingLoss), plain and cached.

For a batch of B queries, each with its positive passage and n hard negatives, every query is
scored against all B * (1 + n) passages of the batch by cosine similarity x `scale` (20, i.e.
temperature 0.05), and the loss is the cross entropy with the query's own positive as the
target: the other examples' positives and every hard negative are its negatives. This is
sentence-transformers' MultipleNegativesRankingLoss; the passages are ordered as it orders
them (all positives, then each example's first negative, then the second, ...), so the
target of query i is column i.

`BiEncoderObjective` gives the trainer per-example losses (`bert_tf.training.objectives`).
Negatives come from the batch one forward pass sees: a replica's batch, or one accumulated
micro-batch. Larger batches of negatives at bounded memory need the cached form,
`BiEncoderObjective.cached_gradients` (GradCache, as sentence-transformers'
CachedMultipleNegativesRankingLoss):

1. embed the batch in mini-batches without recording gradients;
2. compute the loss of the whole batch from those embeddings, and its gradient with respect
   to every embedding (the cache);
3. embed each mini-batch again with gradients and back-propagate the cached embedding
   gradients through it (the gradient of sum(embedding * cached gradient)).

Memory holds one mini-batch's activations, while the loss is that of the whole batch: the
loss and the parameter gradients equal the plain loss's. Dropout draws the same masks in
steps 1 and 3 (the model's seed-generator states are put back between them).

Batch features (int32): "query_input_ids", "query_input_mask", "query_segment_ids"
[batch, query_len]; "passage_input_ids", "passage_input_mask", "passage_segment_ids"
[batch, 1 + n, passage_len] (index 0: the positive); optional "example_index" [batch] (-1 for
padding rows, which neither score nor serve as negatives).
"""

from __future__ import annotations

import math
from typing import Callable, Dict, List, Mapping, Optional, Tuple

import tensorflow as tf

from bert_tf.finetune.objectives import EXAMPLE_INDEX
from bert_tf.modeling.encoder import INPUT_NAMES
from bert_tf.training import checkpointing
from bert_tf.training.objectives import Objective

SCALE = 20.0
QUERY, PASSAGE = "query_", "passage_"
_MASKED_LOGIT = -1e9  # a padding row's passages: never a candidate


def cosine_logits(queries: tf.Tensor, passages: tf.Tensor, scale: float = SCALE) -> tf.Tensor:
    """float32 [batch, candidates]: cos(query i, passage j) * scale.

    Args:
        queries: [batch, dim]; passages: [candidates, dim] (normalised here, as
            sentence-transformers' cos_sim does: v / max(||v||, 1e-12)).
    """
    q = tf.math.l2_normalize(tf.cast(queries, tf.float32), axis=-1, epsilon=1e-24)
    p = tf.math.l2_normalize(tf.cast(passages, tf.float32), axis=-1, epsilon=1e-24)
    return tf.matmul(q, p, transpose_b=True) * scale


def in_batch_losses(queries: tf.Tensor, passages: tf.Tensor, scale: float = SCALE,
                    candidate_mask: Optional[tf.Tensor] = None) -> Tuple[tf.Tensor, tf.Tensor]:
    """Per-query cross entropy against all passages, the target of query i being column i.

    Args:
        queries: [batch, dim].
        passages: [batch * (1 + n), dim], positives first (`passage_rows` order).
        scale: multiplies the cosines.
        candidate_mask: float32 [batch * (1 + n)], 0 for passages that may not be negatives.

    Returns:
        (losses float32 [batch], correct float32 [batch]: 1 where the positive scores highest).
    """
    logits = cosine_logits(queries, passages, scale)  # [batch, candidates]
    if candidate_mask is not None:
        logits = tf.where(candidate_mask[None, :] > 0, logits, _MASKED_LOGIT)
    labels = tf.range(tf.shape(queries)[0])
    losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    correct = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), labels), tf.float32)
    return losses, correct


def query_inputs(batch: Mapping[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
    """The encoder inputs of the queries: [batch, query_len] each."""
    return {name: batch[QUERY + name] for name in INPUT_NAMES}


def passage_rows(batch: Mapping[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
    """The encoder inputs of the passages, [batch * (1 + n), passage_len] each: every
    example's positive, then every example's first negative, and so on."""
    out = {}
    for name in INPUT_NAMES:
        value = batch[PASSAGE + name]  # [batch, 1 + n, passage_len]
        columns_first = tf.transpose(value, [1, 0, 2])
        out[name] = tf.reshape(columns_first, [-1, tf.shape(value)[2]])
    return out


def _real(batch: Mapping[str, tf.Tensor]) -> tf.Tensor:
    if EXAMPLE_INDEX in batch:
        return tf.cast(batch[EXAMPLE_INDEX] >= 0, tf.float32)
    return tf.ones(tf.shape(batch[QUERY + "input_ids"])[:1], tf.float32)


def _mini_batches(rows: tf.Tensor, size: int) -> tf.Tensor:
    return (rows + size - 1) // size


def _slice(inputs: Mapping[str, tf.Tensor], i: tf.Tensor, size: int) -> Dict[str, tf.Tensor]:
    return {name: value[i * size:(i + 1) * size] for name, value in inputs.items()}


class BiEncoderObjective(Objective):
    """MultipleNegativesRankingLoss per example, for a model returning {"embedding"}
    (`embedder.BertEmbedder`); the module docstring gives the batch."""

    sum_keys = ("loss_sum", "correct", "num_examples")

    def __init__(self, scale: float = SCALE, mini_batch_size: int = 0,
                 candidates: Optional[int] = None):
        """Args:
            scale: multiplies the cosines.
            mini_batch_size: > 0: the trainer's gradients come from `cached_gradients` with
                this many texts at a time (`Objective.gradients`); 0: one tape, as usual.
            candidates: passages a query is scored against (replica batch x (1 + n)), for
                `uniform_loss` = ln(candidates) (None: no absolute divergence bound).
        """
        self.scale = scale
        self.mini_batch_size = mini_batch_size
        if candidates and candidates > 1:
            self.uniform_loss = math.log(candidates)

    def gradients(self, model, batch, global_denominators, scale_loss):
        if not self.mini_batch_size:
            return None
        return self.cached_gradients(model, batch, global_denominators, self.mini_batch_size,
                                     training=True, scale_loss=scale_loss)

    def denominators(self, batch):
        return {"num_examples": tf.reduce_sum(_real(batch))}

    def forward(self, model, batch, training):
        return {"query_embedding": model(query_inputs(batch), training=training)["embedding"],
                "passage_embedding": model(passage_rows(batch), training=training)["embedding"]}

    def loss_and_sums(self, outputs, batch, global_denominators):
        real = _real(batch)
        columns = tf.shape(batch[PASSAGE + "input_ids"])[1]
        losses, correct = in_batch_losses(outputs["query_embedding"],
                                          outputs["passage_embedding"], self.scale,
                                          candidate_mask=tf.tile(real, [columns]))
        losses *= real
        share = tf.reduce_sum(losses) / tf.maximum(global_denominators["num_examples"], 1.0)
        return share, {"loss_sum": tf.reduce_sum(losses),
                       "correct": tf.reduce_sum(correct * real),
                       "num_examples": tf.reduce_sum(real)}

    def metrics(self, sums):
        n = tf.cast(sums["num_examples"], tf.float32)
        return {"loss": tf.math.divide_no_nan(tf.cast(sums["loss_sum"], tf.float32), n),
                "in_batch_accuracy": tf.math.divide_no_nan(tf.cast(sums["correct"], tf.float32),
                                                           n)}

    def cached_gradients(self, model, batch: Mapping[str, tf.Tensor],
                         global_denominators: Mapping[str, tf.Tensor], mini_batch_size: int,
                         training: bool = True,
                         scale_loss: Callable[[tf.Tensor], tf.Tensor] = tf.identity,
                         ) -> Tuple[List[Optional[tf.Tensor]], Dict[str, tf.Tensor]]:
        """The gradients of this batch's loss share, by GradCache (module docstring).

        Returns what the trainer's own tape gives for `loss_and_sums` (train_loop's
        `_micro_batch_gradients`), at the memory of `mini_batch_size` texts at a time.

        Args:
            model: returns {"embedding": [rows, dim]} for encoder inputs.
            batch: the module docstring's features.
            global_denominators: `denominators` summed over the global batch.
            mini_batch_size: texts embedded at once (queries and passages separately).
            training: enables dropout (the same masks in both embedding passes).
            scale_loss: the optimizer's loss scaling (`optimizer.scale_loss`).

        Returns:
            (gradients, one per `model.trainable_variables`, dense, None where the loss
            does not reach; the sums of `loss_and_sums`).
        """
        seeds = checkpointing.seed_state_variables(model)
        start_states = [tf.identity(s) for s in seeds]
        groups = [query_inputs(batch), passage_rows(batch)]
        # (1) Embeddings of every text, no activations kept.
        embeddings = [self._embed_without_gradients(model, inputs, mini_batch_size, training)
                      for inputs in groups]
        # (2) The whole batch's loss and its gradient at each embedding.
        with tf.GradientTape() as tape:
            tape.watch(embeddings)
            share, sums = self.loss_and_sums(
                {"query_embedding": embeddings[0], "passage_embedding": embeddings[1]},
                batch, global_denominators)
            scaled = scale_loss(share)
        cached = tape.gradient(scaled, embeddings)
        # (3) Back through the encoder, one mini-batch at a time, with step 1's dropout masks.
        for state, value in zip(seeds, start_states):
            state.assign(value)
        variables = model.trainable_variables
        grads: Optional[List[Optional[tf.Tensor]]] = None
        for inputs, cache in zip(groups, cached):
            grads = self._backward(model, inputs, cache, mini_batch_size, training, variables,
                                   grads)
        return grads, sums

    @staticmethod
    def _embed_without_gradients(model, inputs, size, training) -> tf.Tensor:
        count = _mini_batches(tf.shape(inputs["input_ids"])[0], size)
        parts = tf.TensorArray(tf.float32, size=count, infer_shape=False)

        def body(i, parts):
            vectors = model(_slice(inputs, i, size), training=training)["embedding"]
            return i + 1, parts.write(i, tf.stop_gradient(tf.cast(vectors, tf.float32)))

        _, parts = tf.while_loop(lambda i, _: i < count, body, (tf.constant(0), parts))
        return parts.concat()

    @staticmethod
    def _backward(model, inputs, cache, size, training, variables, grads):
        """`grads` plus the gradients of sum(embedding * cache) over the mini-batches."""

        def mini_batch_grads(i):
            with tf.GradientTape() as tape:
                vectors = tf.cast(model(_slice(inputs, i, size), training=training)["embedding"],
                                  tf.float32)
                surrogate = tf.reduce_sum(vectors * cache[i * size:(i + 1) * size])
            found = tape.gradient(surrogate, variables)
            return [None if g is None else tf.convert_to_tensor(g) for g in found]

        # The first mini-batch outside the loop fixes which gradients exist (as train_loop).
        first = mini_batch_grads(tf.constant(0))
        if grads is None:
            grads = first
        else:
            grads = [a if b is None else b if a is None else a + b for a, b in zip(grads, first)]
        present = [j for j, g in enumerate(first) if g is not None]
        count = _mini_batches(tf.shape(inputs["input_ids"])[0], size)

        def body(i, acc):
            more = mini_batch_grads(i)
            return i + 1, [a + more[j] for a, j in zip(acc, present)]

        _, acc = tf.while_loop(lambda i, _: i < count, body,
                               (tf.constant(1), [grads[j] for j in present]))
        grads = list(grads)
        for a, j in zip(acc, present):
            grads[j] = a
        return grads
