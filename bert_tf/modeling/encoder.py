"""`BertEncoder`: the BERT Transformer encoder as a Keras 3 functional model.

Built from keras-hub layers, checked against BERT's definition:

* `keras_hub.layers.ReversibleEmbedding` holds the word embeddings; its `reverse` projection
  (hidden states times the transposed table) gives the tied MLM output layer.
  `embeddings.WordEmbedding` only changes how that projection is computed (one 2-D matmul with a
  transposed operand instead of materialising the transposed table every step).
* `keras_hub.layers.PositionEmbedding` is the learned absolute position table, sliced to the
  sequence length.
* `keras_hub.layers.TransformerEncoder(normalize_first=False)` is exactly BERT's post-LN block:
  x = LN(x + Dropout(Attention(x))), then x = LN(x + Dropout(W2 act(W1 x))), and it owns
  the block's layers and weights. `BertTransformerBlock` below subclasses it for three
  things: BERT's two dropout rates (`attention_probs_dropout_prob` for the attention
  probabilities, `hidden_dropout_prob` for the residual branches; keras-hub takes one);
  attention computed as batched matmuls with its `keras.layers.MultiHeadAttention`'s weights
  (Keras' einsum formulation is several times slower on CPU), masking padded keys by adding -1e9
  (-3e4 in float16) to their scores as BERT did; and `query_positions`, to compute the last
  block only where the pre-training heads read it.
* Segment embeddings are a plain `keras.layers.Embedding`; embeddings are summed, then
  LayerNorm (epsilon 1e-12, as BERT) and dropout. With `embedding_size` E != hidden_size
  (ELECTRA-Small: 128 and 256) the tables are E wide and a Dense `embeddings_project`
  E -> hidden follows, as in ELECTRA; without it (every BERT config) there is no projection
  and the layers, variables and checkpoints are BERT's. An encoder built with
  `shared_embeddings=other` uses `other`'s tables and LayerNorm (ELECTRA's generator) and
  only its own projection.
* The pooler is Dense(hidden, tanh) on the first ([CLS]) position.

All weights use a truncated normal initializer with stddev `initializer_range` (biases and
LayerNorm keep zeros/ones). Initializers are unseeded on purpose: a Keras initializer with an
integer seed returns the same values every call, and MultiHeadAttention clones its initializer
for query, key and value, so they would start identical. Reproducible initialization comes
from `keras.utils.set_random_seed(seed)` before building the model (the trainer does this from
its seed).

Layer names are part of the checkpoint format; `bert_tf.modeling.weight_map` gives every
weight a canonical, framework-neutral name for converters.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Optional

import keras
import keras_hub
import numpy as np
import tensorflow as tf

from bert_tf.core.errors import UserError
from bert_tf.modeling import modern_config, packing
from bert_tf.modeling.activations import get_activation
from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.embeddings import WordEmbedding, embed, shared_embedding_layers

# BERT's LayerNorm epsilon (the original used 1e-12 everywhere).
LAYER_NORM_EPSILON = 1e-12

INPUT_NAMES = ("input_ids", "input_mask", "segment_ids")


def bert_initializer(config: BertConfig) -> keras.initializers.Initializer:
    """A fresh truncated-normal initializer with stddev `config.initializer_range`."""
    return keras.initializers.TruncatedNormal(stddev=config.initializer_range)


@keras.saving.register_keras_serializable(package="bert_tf")
class BertTransformerBlock(keras_hub.layers.TransformerEncoder):
    """keras-hub's post-LN Transformer block with BERT's two dropout rates, faster attention.

    `dropout` (hidden_dropout_prob) applies to the residual branches, as in the parent;
    `attention_dropout` (attention_probs_dropout_prob) to the attention probabilities
    (None: the same as `dropout`, the parent's behaviour).

    Call args:
        inputs: [batch, seq_len, hidden].
        padding_mask: int or bool [batch, seq_len], 1 for real tokens.
        query_positions: optional int32 [batch, num_queries]. When given, only these
            positions are computed: their queries attend to all (unpadded) positions of
            `inputs`, then the residuals, LayerNorms and feed-forward run on num_queries rows
            instead of seq_len. The values equal the full output gathered at those positions.
        doc_ids: optional int [batch, seq_len] of a packed batch: queries attend only to keys
            of their own document (`bert_tf.modeling.packing`; it masks padding too).

    Returns:
        [batch, seq_len, hidden], or [batch, num_queries, hidden] with query_positions.
    """

    def __init__(self, *, attention_dropout: Optional[float] = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.attention_dropout = self.dropout if attention_dropout is None else attention_dropout

    def build(self, inputs_shape) -> None:
        hidden, attention = self.dropout, self.attention_dropout
        if hidden == attention:
            super().build(inputs_shape)
            return
        # The parent gives MultiHeadAttention and both residual Dropouts the same rate.
        # Build them all with the larger rate: Keras gives a Dropout its seed generator only
        # when its rate is positive, and a built layer cannot add state later. Then set the
        # real rates; a Dropout with rate 0 is the identity.
        self.dropout = max(hidden, attention)
        try:
            super().build(inputs_shape)
        finally:
            self.dropout = hidden
        # MultiHeadAttention reads `_dropout` in call (to choose its fused path) and applies
        # `_dropout_layer` to the attention probabilities.
        self._self_attention_layer._dropout = attention
        self._self_attention_layer._dropout_layer.rate = attention
        self._self_attention_dropout.rate = hidden
        self._feedforward_dropout.rate = hidden

    def call(self, inputs, padding_mask=None, attention_mask=None, training=None,
             return_attention_scores=False, query_positions=None, doc_ids=None):
        if attention_mask is not None or return_attention_scores or self.normalize_first:
            if query_positions is not None or doc_ids is not None:
                raise ValueError("query_positions supports a padding mask and post-LN blocks only")
            return super().call(inputs, padding_mask=padding_mask, attention_mask=attention_mask,
                                training=training,
                                return_attention_scores=return_attention_scores)
        # The parent's post-LN block, written out so that attention runs as batched matmuls
        # (see `_self_attention`) and, with query_positions, only for the query rows: keys
        # and values still come from every position, so the result is exactly the full
        # block's output at those rows.
        if query_positions is None:
            residual = inputs  # [batch, seq_len, hidden]
        else:
            residual = gather_positions(inputs, query_positions)  # [batch, queries, hidden]
        bias = None if doc_ids is None else packing.document_bias(
            doc_ids, query_positions, self.compute_dtype)
        x = self._self_attention(residual, inputs, padding_mask, training, bias)
        x = self._self_attention_dropout(x, training=training)
        x = self._self_attention_layer_norm(x + residual)
        residual = x
        x = self._feedforward_intermediate_dense(x)  # [batch, queries, intermediate]
        x = self._feedforward_output_dense(x)
        x = self._feedforward_dropout(x, training=training)
        return self._feedforward_layer_norm(x + residual)

    def _self_attention(self, queries, inputs, padding_mask, training, bias=None):
        """Multi-head attention of `queries` over `inputs`, with the parent's weights.

        The same arithmetic as the parent's `keras.layers.MultiHeadAttention` (its dense
        projections, 1/sqrt(head_size) scaling, softmax, dropout layer), laid out heads-first
        so both products are plain batched matmuls. Keras writes them as einsums over
        [batch, seq, heads, head_size], which TensorFlow runs with a transpose around every
        product, several times slower on CPU (docs/results/pretraining.md).
        Padding is masked as the original BERT did, by adding a large negative number to the
        scores of padded keys (Keras replaces them by one: the probabilities are the same).

        Args:
            queries: [batch, queries, hidden], the rows that attend.
            inputs: [batch, seq_len, hidden], the rows attended to (keys and values).
            padding_mask: int or bool [batch, seq_len], 1 for real tokens, or None.
            training: enables dropout on the attention probabilities.
            bias: [batch, 1, queries, seq_len] added to the scores instead of the padding
                mask's (a packed batch's `packing.document_bias`), or None.

        Returns:
            [batch, queries, hidden].
        """
        layer = self._self_attention_layer
        heads_first = [0, 2, 1, 3]  # [batch, len, heads, size] <-> [batch, heads, len, size]
        q = tf.transpose(layer._query_dense(queries), heads_first)  # [batch, heads, queries, size]
        k = tf.transpose(layer._key_dense(inputs), heads_first)  # [batch, heads, seq_len, size]
        v = tf.transpose(layer._value_dense(inputs), heads_first)  # [batch, heads, seq_len, size]
        q = q * tf.cast(1.0 / math.sqrt(layer.key_dim), q.dtype)
        scores = tf.matmul(q, k, transpose_b=True)  # [batch, heads, queries, seq_len]
        if bias is not None:
            scores += tf.cast(bias, scores.dtype)
        elif padding_mask is not None:
            padded = 1.0 - tf.cast(padding_mask, scores.dtype)[:, None, None, :]
            scores += padded * _large_negative(scores.dtype)
        probs = layer._dropout_layer(tf.nn.softmax(scores), training=training)
        context = tf.transpose(tf.matmul(probs, v), heads_first)  # [batch, queries, heads, size]
        return layer._output_dense(context)  # [batch, queries, hidden]

    def get_config(self) -> Dict[str, Any]:
        config = super().get_config()
        config["attention_dropout"] = self.attention_dropout
        return config


def _large_negative(dtype: tf.DType) -> float:
    """Added to masked attention scores: exp() of it is 0; -3e4 still fits in float16."""
    return -3e4 if dtype == tf.float16 else -1e9


def gather_positions(sequence: Any, positions: Any) -> Any:
    """sequence [batch, seq_len, width] at int positions [batch, n] -> [batch, n, width]."""
    return keras.ops.take_along_axis(sequence, keras.ops.expand_dims(positions, -1), axis=1)


@keras.saving.register_keras_serializable(package="bert_tf")
class BertEncoder(keras.Model):
    """The BERT encoder: embeddings, `num_hidden_layers` post-LN blocks, tanh pooler.

    Args:
        config: the model hyper-parameters.
        name: the model name.
        dtype: a dtype or `keras.DTypePolicy` for all layers; None uses the global policy
            (e.g. `keras.mixed_precision.set_dtype_policy("mixed_bfloat16")`).
        shared_embeddings: another `BertEncoder` whose word, position and segment tables and
            embedding LayerNorm this one uses (the same variables; ELECTRA's generator
            shares the discriminator's). Its `config.embedding_width` and table sizes must
            equal this config's. Not serialized: `get_config` rebuilds unshared layers.

    Call args:
        inputs: {"input_ids": int32 [batch, seq_len], "input_mask": int32 [batch, seq_len]
            (1 for real tokens, 0 for padding), "segment_ids": int32 [batch, seq_len]};
            seq_len may vary between calls up to `max_position_embeddings`.
        training: enables dropout.

    Returns:
        {"sequence_output": [batch, seq_len, hidden], "pooled_output": [batch, hidden]},
        in the compute dtype of the policy.

    Attributes:
        config: the BertConfig.
        token_embedding: the word-embedding `WordEmbedding` (tied to the MLM output).
        position_embedding, segment_embedding, embeddings_layer_norm, embeddings_dropout,
        transformer_layers (list of BertTransformerBlock), pooler: the sublayers.
        embeddings_project: Dense E -> hidden when embedding_size differs from hidden_size,
            else None.
    """

    def __init__(
        self,
        config: BertConfig,
        name: str = "bert_encoder",
        dtype: Optional[Any] = None,
        shared_embeddings: Optional["BertEncoder"] = None,
        **kwargs: Any,
    ) -> None:
        if isinstance(config, dict):  # from_config
            config = BertConfig.from_dict(config)
        if modern_config.is_modern(config):  # else BERT's block would ignore those keys
            raise UserError(f"this model does not support the modern encoder's bert_config "
                            f"keys yet: {', '.join(modern_config.modern_keys(config))}")
        activation = get_activation(config.hidden_act)
        width = config.embedding_width

        # === Layers ===
        embeddings = (shared_embedding_layers(shared_embeddings, config)
                      if shared_embeddings is not None else None)
        token_embedding = embeddings[0] if embeddings else WordEmbedding(
            input_dim=config.vocab_size,
            output_dim=width,
            embeddings_initializer=bert_initializer(config),
            # The reverse projection produces MLM logits: keep them in float32 under mixed
            # precision (bfloat16 logits lose the resolution a softmax over 30k ids needs).
            reverse_dtype="float32",
            dtype=dtype,
            name="word_embeddings",
        )
        position_embedding = embeddings[1] if embeddings else keras_hub.layers.PositionEmbedding(
            sequence_length=config.max_position_embeddings,
            initializer=bert_initializer(config),
            dtype=dtype,
            name="position_embeddings",
        )
        segment_embedding = embeddings[2] if embeddings else keras.layers.Embedding(
            input_dim=config.type_vocab_size,
            output_dim=width,
            embeddings_initializer=bert_initializer(config),
            dtype=dtype,
            name="token_type_embeddings",
        )
        embeddings_add = keras.layers.Add(dtype=dtype, name="embeddings_add")
        embeddings_layer_norm = embeddings[3] if embeddings else keras.layers.LayerNormalization(
            epsilon=LAYER_NORM_EPSILON, dtype=dtype, name="embeddings_layer_norm"
        )
        embeddings_dropout = keras.layers.Dropout(
            config.hidden_dropout_prob, dtype=dtype, name="embeddings_dropout"
        )
        embeddings_project = None if width == config.hidden_size else keras.layers.Dense(
            config.hidden_size, kernel_initializer=bert_initializer(config), dtype=dtype,
            name="embeddings_project")
        transformer_layers = [
            BertTransformerBlock(
                intermediate_dim=config.intermediate_size,
                num_heads=config.num_attention_heads,
                dropout=config.hidden_dropout_prob,
                attention_dropout=config.attention_probs_dropout_prob,
                activation=activation,
                layer_norm_epsilon=LAYER_NORM_EPSILON,
                kernel_initializer=bert_initializer(config),
                normalize_first=False,
                dtype=dtype,
                name=f"transformer_layer_{i}",
            )
            for i in range(config.num_hidden_layers)
        ]
        pooler = keras.layers.Dense(
            config.hidden_size,
            activation="tanh",
            kernel_initializer=bert_initializer(config),
            dtype=dtype,
            name="pooler",
        )

        # === Functional graph ===
        input_ids = keras.Input(shape=(None,), dtype="int32", name="input_ids")
        input_mask = keras.Input(shape=(None,), dtype="int32", name="input_mask")
        segment_ids = keras.Input(shape=(None,), dtype="int32", name="segment_ids")

        x = embed(token_embedding, position_embedding, segment_embedding, embeddings_add,
                   embeddings_layer_norm, embeddings_dropout, input_ids, segment_ids,
                   project=embeddings_project)
        for block in transformer_layers:
            x = block(x, padding_mask=input_mask)
        sequence_output = x
        # [CLS] is always position 0; the pooler feeds NSP and sentence-level fine-tuning.
        pooled_output = pooler(x[:, 0, :])  # [batch, hidden]

        super().__init__(
            inputs={"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids},
            outputs={"sequence_output": sequence_output, "pooled_output": pooled_output},
            name=name,
            dtype=dtype,
            **kwargs,
        )

        # Assigned after super().__init__ (Keras tracks layers only from then on).
        self.config = config
        self.token_embedding = token_embedding
        self.position_embedding = position_embedding
        self.segment_embedding = segment_embedding
        self.embeddings_add = embeddings_add
        self.embeddings_layer_norm = embeddings_layer_norm
        self.embeddings_dropout = embeddings_dropout
        self.transformer_layers = transformer_layers
        self.pooler = pooler
        # Only when present: a BERT encoder keeps exactly its checkpoint's object graph.
        self.embeddings_project = embeddings_project

    def encode_at(self, inputs: Dict[str, Any], query_positions: Any,
                  training: Optional[bool] = None) -> Any:
        """The final hidden states at `query_positions` only, for less compute than `call`.

        Pre-training reads the last layer only at [CLS] and the masked positions (21 of 128
        rows with 20 predictions): every block but the last runs over all tokens, since they
        make the last block's keys and values, and the last block computes only the
        requested rows. With 20 predictions at seq 128 that removes about 15% of the training
        FLOPs of BERT-Small (4 layers) and 6% of BERT-Base (12), with the same values as `call`.

        Args:
            inputs: as for `call`, or a packed batch with `doc_ids` and `position_ids`
                (`bert_tf.modeling.packing`: attention within each document, its positions);
                other keys are ignored.
            query_positions: int32 [batch, num_queries], positions in [0, seq_len); None:
                every position.
            training: enables dropout.

        Returns:
            [batch, num_queries, hidden]: `call(inputs)["sequence_output"]` at those positions.
        """
        doc_ids, position_ids = packing.packed_features(inputs) or (None, None)
        x = embed(self.token_embedding, self.position_embedding, self.segment_embedding,
                   self.embeddings_add, self.embeddings_layer_norm, self.embeddings_dropout,
                   inputs["input_ids"], inputs["segment_ids"], training=training,
                   project=self.embeddings_project, position_ids=position_ids)
        mask = inputs["input_mask"]
        for block in self.transformer_layers[:-1]:  # [batch, seq_len, hidden]
            x = block(x, padding_mask=mask, doc_ids=doc_ids, training=training)
        return self.transformer_layers[-1](x, padding_mask=mask, query_positions=query_positions,
                                           doc_ids=doc_ids, training=training)

    def get_config(self) -> Dict[str, Any]:
        # The whole graph is a function of the BertConfig; serialize that, not the graph.
        return {
            "config": self.config.to_dict(),
            "name": self.name,
            "trainable": self.trainable,
            "dtype": keras.dtype_policies.serialize(self.dtype_policy),
        }

    @classmethod
    def from_config(cls, config: Dict[str, Any]) -> "BertEncoder":
        return cls(**constructor_args(config))


def constructor_args(config: Dict[str, Any]) -> Dict[str, Any]:
    """A model's `get_config()` back to constructor arguments (the dtype policy revived).

    Shared by the models of this package, whose configs hold a BertConfig dict and a
    serialized dtype policy.
    """
    config = dict(config)
    if isinstance(config.get("dtype"), dict):
        config["dtype"] = keras.dtype_policies.deserialize(config["dtype"])
    return config


def dummy_inputs(batch_size: int = 2, seq_len: int = 8) -> Dict[str, Any]:
    """All-[PAD] int32 inputs of the given shape, e.g. to build a model before loading weights."""
    zeros = np.zeros((batch_size, seq_len), dtype=np.int32)
    return {"input_ids": zeros, "input_mask": np.ones_like(zeros), "segment_ids": zeros}
