"""`ModernEncoder`: the encoder of a modern config (ModernBERT's and Cramming's options).

What `bert_tf.modeling.modern_config` lists, in one block (`ModernTransformerBlock`):

* pre-LN (x + f(LN(x)), a final LayerNorm after the last block, no LayerNorm before the
  first block's attention) or BERT's post-LN (x = LN(x + f(x)));
* attention through one fused query/key/value Dense (ModernBERT's `Wqkv`), with rotary
  positions on queries and keys (`rotary`) or a learned absolute table, global or within a
  sliding window (`global_attn_every_n_layers`, `local_attention_window`), each as
  transformers' ModernBERT computes it;
* a plain (act) or gated (`geglu`: gelu(input) * gate, ModernBERT's `Wi` split in two)
  feed-forward;
* Dense biases and LayerNorm betas everywhere or nowhere (`use_bias`), LayerNorm epsilon
  `norm_eps`.

Embeddings are the word table (+ the position table when absolute, + the segment table when
type_vocab_size > 0), then LayerNorm and dropout, as ModernBERT's `tok_embeddings` + `norm`.
There is no pooler: `pooler` is an identity, so `pooled_output` (what NSP and sentence heads
read) is the final hidden state at [CLS]. Dropout: `hidden_dropout_prob` on the embeddings
and each residual branch, `attention_probs_dropout_prob` on the attention probabilities.

`build_encoder` is the factory the models use: a `BertEncoder` for a BERT config (its layers
and checkpoints unchanged), this encoder for a modern one. Canonical weight names:
`bert_tf.modeling.modern_layout`.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Optional

import keras
import keras_hub
import tensorflow as tf

from bert_tf.modeling import modern_config, modern_layout, packing, rotary
from bert_tf.modeling.activations import get_activation
from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.embeddings import shared_embedding_layers
from bert_tf.modeling.encoder import (
    BertEncoder,
    WordEmbedding,
    bert_initializer,
    constructor_args,
    gather_positions,
)


@keras.saving.register_keras_serializable(package="bert_tf")
class ModernTransformerBlock(keras.layers.Layer):
    """One Transformer block with the modern options (see the module docstring).

    Args:
        hidden_size, num_heads, intermediate_size: the block's widths.
        activation: the feed-forward activation's name (of the input half when gated).
        gated: a GLU feed-forward (the first Dense is 2 x intermediate_size wide).
        pre_layer_norm: pre-LN (else post-LN).
        attention_norm: whether a pre-LN block has its LayerNorm before attention.
        use_bias: biases in the Dense layers and LayerNorm betas.
        norm_eps: LayerNorm epsilon.
        dropout: the residual branches' dropout rate.
        attention_dropout: the attention probabilities' dropout rate.
        window: the sliding window (None: global attention).
        rope_theta: the RoPE base (None: no rotary positions).
        initializer_range: stddev of the truncated-normal kernel initializer.

    Call args:
        inputs: [batch, seq_len, hidden].
        padding_mask: int or bool [batch, seq_len], 1 for real tokens.
        query_positions: optional int32 [batch, num_queries]: compute only these rows
            (their queries attend to all positions); equal to the full output gathered there.
        doc_ids, position_ids: optional int [batch, seq_len] of a packed batch
            (`bert_tf.modeling.packing`): queries attend only to their own document's keys,
            and rotary angles come from position_ids instead of the rows.

    Returns:
        [batch, seq_len, hidden], or [batch, num_queries, hidden] with query_positions.
    """

    def __init__(self, *, hidden_size: int, num_heads: int, intermediate_size: int,
                 activation: str, gated: bool, pre_layer_norm: bool, attention_norm: bool,
                 use_bias: bool, norm_eps: float, dropout: float, attention_dropout: float,
                 window: Optional[int], rope_theta: Optional[float],
                 initializer_range: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.hidden_size, self.num_heads = hidden_size, num_heads
        self.head_size = hidden_size // num_heads
        self.intermediate_size, self.activation, self.gated = intermediate_size, activation, gated
        self.pre_layer_norm, self.attention_norm = pre_layer_norm, attention_norm
        self.use_bias, self.norm_eps = use_bias, norm_eps
        self.dropout, self.attention_dropout = dropout, attention_dropout
        self.window, self.rope_theta = window, rope_theta
        self.initializer_range = initializer_range
        self.inv_freq = (None if rope_theta is None
                         else rotary.inverse_frequencies(self.head_size, rope_theta))

        def dense(units: int, name: str) -> keras.layers.Dense:
            return keras.layers.Dense(
                units, use_bias=use_bias, dtype=self.dtype_policy, name=name,
                kernel_initializer=keras.initializers.TruncatedNormal(stddev=initializer_range))

        def norm(name: str) -> keras.layers.LayerNormalization:
            return keras.layers.LayerNormalization(epsilon=norm_eps, center=use_bias,
                                                   dtype=self.dtype_policy, name=name)

        self.attention_layer_norm = norm("attention_layer_norm") if attention_norm else None
        self.qkv_dense = dense(3 * hidden_size, "qkv")
        self.attention_output_dense = dense(hidden_size, "attention_output")
        self.output_layer_norm = norm("output_layer_norm")
        self.intermediate_dense = dense((2 if gated else 1) * intermediate_size, "intermediate")
        self.output_dense = dense(hidden_size, "output")
        self.probs_dropout = keras.layers.Dropout(attention_dropout, dtype=self.dtype_policy)
        self.attention_output_dropout = keras.layers.Dropout(dropout, dtype=self.dtype_policy)
        self.output_dropout = keras.layers.Dropout(dropout, dtype=self.dtype_policy)
        self.act = get_activation(activation)

    def build(self, inputs_shape) -> None:
        hidden = list(inputs_shape)
        inner = list(inputs_shape[:-1]) + [self.intermediate_size]
        if self.attention_layer_norm is not None:
            self.attention_layer_norm.build(hidden)
        self.qkv_dense.build(hidden)
        self.attention_output_dense.build(hidden)
        self.output_layer_norm.build(hidden)
        self.intermediate_dense.build(hidden)
        self.output_dense.build(inner)
        self.built = True

    def call(self, inputs, padding_mask=None, query_positions=None, training=None,
             doc_ids=None, position_ids=None):
        if query_positions is None:
            positions = tf.range(tf.shape(inputs)[1], dtype=tf.int32)[None]  # [1, seq_len]
            residual = inputs
        else:
            positions = tf.cast(query_positions, tf.int32)
            residual = gather_positions(inputs, positions)  # [batch, queries, hidden]
        packed = None
        if doc_ids is not None:  # (same document [batch, 1, q, seq_len], query and key angles)
            keys = tf.cast(position_ids, tf.int32)
            packed = (packing.same_document(doc_ids, query_positions),
                      packing.at_rows(keys, query_positions), keys)
        if self.pre_layer_norm:
            normed = inputs if self.attention_layer_norm is None else \
                self.attention_layer_norm(inputs)
            queries = normed if query_positions is None else gather_positions(normed, positions)
            x = residual + self.attention_output_dropout(
                self._attention(queries, normed, positions, padding_mask, training, packed),
                training=training)
            return x + self.output_dropout(self._feedforward(self.output_layer_norm(x)),
                                           training=training)
        x = self._attention(residual, inputs, positions, padding_mask, training, packed)
        x = self.attention_layer_norm(residual + self.attention_output_dropout(
            x, training=training))
        return self.output_layer_norm(x + self.output_dropout(self._feedforward(x),
                                                              training=training))

    def _heads(self, x):
        """[batch, n, hidden] -> [batch, heads, n, head_size]."""
        shape = tf.shape(x)
        x = tf.reshape(x, [shape[0], shape[1], self.num_heads, self.head_size])
        return tf.transpose(x, [0, 2, 1, 3])

    def _attention(self, queries, inputs, positions, padding_mask, training, packed=None):
        """Attention of `queries` [batch, queries, hidden] at rows `positions` over `inputs`
        [batch, seq_len, hidden] -> [batch, queries, hidden] (after the output Dense);
        `packed`: (same-document mask, query and key position ids) of a packed batch."""
        h = self.hidden_size
        qkv = self.qkv_dense(inputs)  # [batch, seq_len, 3 * hidden]
        q = qkv[..., :h] if queries is inputs else self.qkv_dense(queries)[..., :h]
        q, k, v = self._heads(q), self._heads(qkv[..., h:2 * h]), self._heads(qkv[..., 2 * h:])
        if self.inv_freq is not None:
            if packed is None:
                q_at, k_at = positions, tf.range(tf.shape(inputs)[1], dtype=tf.int32)[None]
            else:
                q_at, k_at = packed[1], packed[2]
            q = rotary.rotate(q, *rotary.cos_sin(q_at, self.inv_freq))
            k = rotary.rotate(k, *rotary.cos_sin(k_at, self.inv_freq))
        q = q * tf.cast(1.0 / math.sqrt(self.head_size), q.dtype)
        scores = tf.matmul(q, k, transpose_b=True)  # [batch, heads, queries, seq_len]
        bias = rotary.attention_bias(positions, padding_mask, self.window, scores.dtype,
                                     None if packed is None else packed[0])
        if bias is not None:
            scores += bias
        probs = self.probs_dropout(tf.nn.softmax(scores), training=training)
        context = tf.transpose(tf.matmul(probs, v), [0, 2, 1, 3])  # [batch, q, heads, size]
        shape = tf.shape(context)
        return self.attention_output_dense(tf.reshape(context, [shape[0], shape[1], h]))

    def _feedforward(self, x):
        hidden = self.intermediate_dense(x)  # [batch, n, F'] with F' = 2F when gated
        if self.gated:
            value, gate = tf.split(hidden, 2, axis=-1)
            return self.output_dense(self.act(value) * gate)
        return self.output_dense(self.act(hidden))

    def get_config(self) -> Dict[str, Any]:
        config = super().get_config()
        config.update({k: getattr(self, k) for k in (
            "hidden_size", "num_heads", "intermediate_size", "activation", "gated",
            "pre_layer_norm", "attention_norm", "use_bias", "norm_eps", "dropout",
            "attention_dropout", "window", "rope_theta", "initializer_range")})
        return config


def _layer_theta(config: BertConfig, index: int) -> Optional[float]:
    if config.position_embedding_type != "rope":
        return None
    if modern_config.is_local_layer(config, index) and config.local_rope_theta is not None:
        return float(config.local_rope_theta)
    return float(config.rope_theta)


def embed(layers, input_ids, segment_ids, training=None, position_ids=None):
    """LN(word (+ position) (+ segment)), dropout -> [batch, seq_len, E], then the
    projection E -> hidden when there is one -> [batch, seq_len, hidden].

    Args:
        layers: (word, position or None, segment or None, LayerNorm, Dropout, projection
            Dense or None) layers.
        input_ids, segment_ids: int32 [batch, seq_len].
        training: enables dropout.
        position_ids: int32 [batch, seq_len], the absolute table's rows (None: 0..seq_len-1).
    """
    tokens, positions, segments, layer_norm, dropout, project = layers
    x = tokens(input_ids)
    if positions is not None:
        x = x + positions(x, positions=position_ids)
    if segments is not None:
        x = x + segments(segment_ids)
    x = dropout(layer_norm(x), training=training)
    return x if project is None else project(x)


@keras.saving.register_keras_serializable(package="bert_tf")
class ModernEncoder(keras.Model):
    """The encoder of a modern config: embeddings, `num_hidden_layers` modern blocks, the
    final LayerNorm (pre-LN), no pooler. The interface of `BertEncoder`.

    Args:
        config: a modern BertConfig (`modern_config.is_modern`).
        name: the model name.
        dtype: a dtype or `keras.DTypePolicy` for all layers; None uses the global policy.
        shared_embeddings: another `ModernEncoder` whose word, position and segment tables
            and embedding LayerNorm this one uses (the same variables: ELECTRA's generator
            shares its discriminator's), as `BertEncoder`'s argument. Not serialized.

    Call args:
        inputs: {"input_ids", "input_mask", "segment_ids": int32 [batch, seq_len]};
            segment_ids are read only when type_vocab_size > 0.
        training: enables dropout.

    Returns:
        {"sequence_output": [batch, seq_len, hidden], "pooled_output": [batch, hidden]
         (the final hidden state at position 0)}.

    Attributes:
        config, token_embedding, position_embedding (None with rope), segment_embedding
        (None without segments), embeddings_layer_norm, embeddings_dropout,
        transformer_layers, final_layer_norm (None with post-LN), pooler (an identity),
        embeddings_project (the Dense E -> hidden, or None when the tables are hidden wide).
    """

    def __init__(self, config: BertConfig, name: str = "bert_encoder",
                 dtype: Optional[Any] = None,
                 shared_embeddings: Optional["ModernEncoder"] = None, **kwargs: Any) -> None:
        if isinstance(config, dict):  # from_config
            config = BertConfig.from_dict(config)
        init = bert_initializer
        h, width = config.hidden_size, config.embedding_width
        if shared_embeddings is not None:
            token_embedding, position_embedding, segment_embedding, embeddings_layer_norm = \
                shared_embedding_layers(shared_embeddings, config)
        else:
            token_embedding = WordEmbedding(
                input_dim=config.vocab_size, output_dim=width,
                embeddings_initializer=init(config), reverse_dtype="float32", dtype=dtype,
                name="word_embeddings")
            position_embedding = None if config.position_embedding_type == "rope" else \
                keras_hub.layers.PositionEmbedding(
                    sequence_length=config.max_position_embeddings, initializer=init(config),
                    dtype=dtype, name="position_embeddings")
            segment_embedding = None if not config.type_vocab_size else keras.layers.Embedding(
                input_dim=config.type_vocab_size, output_dim=width,
                embeddings_initializer=init(config), dtype=dtype, name="token_type_embeddings")
            embeddings_layer_norm = keras.layers.LayerNormalization(
                epsilon=config.norm_eps, center=config.use_bias, dtype=dtype,
                name="embeddings_layer_norm")
        embeddings_dropout = keras.layers.Dropout(config.hidden_dropout_prob, dtype=dtype,
                                                  name="embeddings_dropout")
        embeddings_project = None if width == h else keras.layers.Dense(
            h, use_bias=config.use_bias, kernel_initializer=init(config), dtype=dtype,
            name="embeddings_project")
        gated = config.hidden_act in modern_config.GATED_ACTIVATIONS
        transformer_layers = [
            ModernTransformerBlock(
                hidden_size=h, num_heads=config.num_attention_heads,
                intermediate_size=config.intermediate_size,
                activation=modern_config.head_activation(config), gated=gated,
                pre_layer_norm=config.pre_layer_norm,
                attention_norm=modern_layout.has_attention_norm(config, i),
                use_bias=config.use_bias, norm_eps=config.norm_eps,
                dropout=config.hidden_dropout_prob,
                attention_dropout=config.attention_probs_dropout_prob,
                window=(config.local_attention_window
                        if modern_config.is_local_layer(config, i) else None),
                rope_theta=_layer_theta(config, i),
                initializer_range=config.initializer_range, dtype=dtype,
                name=f"transformer_layer_{i}")
            for i in range(config.num_hidden_layers)
        ]
        final_layer_norm = None if not config.pre_layer_norm else \
            keras.layers.LayerNormalization(epsilon=config.norm_eps, center=config.use_bias,
                                            dtype=dtype, name="final_layer_norm")
        pooler = keras.layers.Identity(dtype=dtype, name="pooler")

        input_ids = keras.Input(shape=(None,), dtype="int32", name="input_ids")
        input_mask = keras.Input(shape=(None,), dtype="int32", name="input_mask")
        segment_ids = keras.Input(shape=(None,), dtype="int32", name="segment_ids")
        x = embed((token_embedding, position_embedding, segment_embedding,
                   embeddings_layer_norm, embeddings_dropout, embeddings_project),
                  input_ids, segment_ids)
        for block in transformer_layers:
            x = block(x, padding_mask=input_mask)
        if final_layer_norm is not None:
            x = final_layer_norm(x)
        super().__init__(
            inputs={"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids},
            outputs={"sequence_output": x, "pooled_output": pooler(x[:, 0, :])},
            name=name, dtype=dtype, **kwargs)

        self.config = config
        self.token_embedding = token_embedding
        self.position_embedding = position_embedding
        self.segment_embedding = segment_embedding
        self.embeddings_layer_norm = embeddings_layer_norm
        self.embeddings_dropout = embeddings_dropout
        self.transformer_layers = transformer_layers
        self.final_layer_norm = final_layer_norm
        self.pooler = pooler
        self.embeddings_project = embeddings_project

    def encode_at(self, inputs: Dict[str, Any], query_positions: Any,
                  training: Optional[bool] = None) -> Any:
        """The final hidden states at `query_positions` only: every block but the last runs
        over all tokens, the last computes only the requested rows (as
        `BertEncoder.encode_at`).

        Args:
            inputs: as for `call`, or a packed batch with `doc_ids` and `position_ids`
                (`bert_tf.modeling.packing`); other keys are ignored.
            query_positions: int32 [batch, num_queries], positions in [0, seq_len); None:
                every position.
            training: enables dropout.

        Returns:
            [batch, num_queries, hidden]: `call(inputs)["sequence_output"]` at those positions.
        """
        doc_ids, position_ids = packing.packed_features(inputs) or (None, None)
        x = embed((self.token_embedding, self.position_embedding, self.segment_embedding,
                   self.embeddings_layer_norm, self.embeddings_dropout,
                   self.embeddings_project),
                  inputs["input_ids"], inputs["segment_ids"], training=training,
                  position_ids=position_ids)
        mask = inputs["input_mask"]
        packed = dict(doc_ids=doc_ids, position_ids=position_ids)
        for block in self.transformer_layers[:-1]:
            x = block(x, padding_mask=mask, training=training, **packed)
        x = self.transformer_layers[-1](x, padding_mask=mask, query_positions=query_positions,
                                        training=training, **packed)
        return x if self.final_layer_norm is None else self.final_layer_norm(x)

    def get_config(self) -> Dict[str, Any]:
        return {
            "config": self.config.to_dict(),
            "name": self.name,
            "trainable": self.trainable,
            "dtype": keras.dtype_policies.serialize(self.dtype_policy),
        }

    @classmethod
    def from_config(cls, config: Dict[str, Any]) -> "ModernEncoder":
        return cls(**constructor_args(config))


def build_encoder(config: BertConfig, name: str = "bert_encoder",
                  dtype: Optional[Any] = None,
                  shared_embeddings: Optional[keras.Model] = None) -> keras.Model:
    """The encoder for `config`: `ModernEncoder` for a modern config, else `BertEncoder`
    (`shared_embeddings`: another encoder of the same kind, as their argument)."""
    if modern_config.is_modern(config):
        return ModernEncoder(config, name=name, dtype=dtype,
                             shared_embeddings=shared_embeddings)
    return BertEncoder(config, name=name, dtype=dtype, shared_embeddings=shared_embeddings)
