"""The embedding step of `bert_tf.modeling.encoder.BertEncoder`, its word table, and sharing.

`WordEmbedding` is the word table with its tied MLM projection (both encoders use it).
`embed` is BERT's LN(word + position + segment) and dropout, followed by ELECTRA's projection
E -> hidden when the config's `embedding_size` E differs from hidden_size. One function for
the encoder's functional graph (symbolic inputs) and its `encode_at` (tensors).
`shared_embedding_layers` lends one encoder's tables and LayerNorm to another (ELECTRA's
generator uses the discriminator's).
"""

from __future__ import annotations

from typing import Any, Tuple

import keras
import keras_hub
import tensorflow as tf

from bert_tf.modeling.config import BertConfig


@keras.saving.register_keras_serializable(package="bert_tf")
class WordEmbedding(keras_hub.layers.ReversibleEmbedding):
    """keras-hub's tied `ReversibleEmbedding` with a cheaper reverse projection.

    The parent computes `inputs @ transpose(table)`, which copies the [vocab, hidden] table
    into a transposed [hidden, vocab] tensor on every call (and its gradient back again), and
    multiplies a 3-D input by a 2-D matrix as a broadcast batch matmul. Here the rows are
    flattened and multiplied by the table with `transpose_b`, so oneDNN reads the table in
    place: the same values, in float32 when `reverse_dtype` is set, as the parent.

    Call args:
        inputs: int ids [...], or with reverse=True hidden states [..., hidden].
        reverse: project hidden states onto the vocabulary.

    Returns:
        Embeddings [..., hidden], or with reverse=True logits [..., vocab_size].
    """

    def call(self, inputs, reverse=False):
        if not (reverse and self.tie_weights) or self.logit_soft_cap is not None:
            return super().call(inputs, reverse=reverse)
        table = self.embeddings  # [vocab, hidden]
        if self.reverse_dtype is not None:
            inputs = keras.ops.cast(inputs, self.reverse_dtype)
            table = keras.ops.cast(table, self.reverse_dtype)
        rows = tf.reshape(inputs, [-1, self.output_dim])  # [batch * n, hidden]
        logits = tf.matmul(rows, table, transpose_b=True)  # [batch * n, vocab]
        return tf.reshape(logits, tf.concat([tf.shape(inputs)[:-1], [self.input_dim]], 0))


def embed(token_embedding, position_embedding, segment_embedding, add, layer_norm, dropout,
          input_ids, segment_ids, training=None, project=None, position_ids=None):
    """LN(word + position + segment), dropout -> [batch, seq_len, E], then the projection
    E -> hidden when there is one (`project`) -> [batch, seq_len, hidden].

    Args:
        token_embedding, position_embedding, segment_embedding, add, layer_norm, dropout:
            the encoder's layers.
        input_ids, segment_ids: int32 [batch, seq_len].
        training: enables dropout.
        project: the Dense E -> hidden, or None.
        position_ids: int32 [batch, seq_len], the rows of the position table to add (packed
            rows restart them per document); None: 0 .. seq_len - 1.
    """
    tokens = token_embedding(input_ids)  # [batch, seq_len, E]
    positions = position_embedding(tokens, positions=position_ids)  # [batch, seq_len, E]
    segments = segment_embedding(segment_ids)  # [batch, seq_len, E]
    x = add([tokens, positions, segments])
    x = dropout(layer_norm(x), training=training)
    return x if project is None else project(x)


def shared_embedding_layers(other: Any, config: BertConfig) -> Tuple[Any, Any, Any, Any]:
    """`other`'s (word, position, segment, LayerNorm) layers, checked against `config`.

    Raises:
        ValueError: the tables' sizes differ from what `config` asks for.
    """
    theirs, ours = other.config, config
    for key in ("embedding_width", "vocab_size", "max_position_embeddings", "type_vocab_size"):
        if getattr(theirs, key) != getattr(ours, key):
            raise ValueError(f"shared embeddings: {key} {getattr(theirs, key)} != "
                             f"{getattr(ours, key)}")
    return (other.token_embedding, other.position_embedding, other.segment_embedding,
            other.embeddings_layer_norm)
