"""The embedding step of `bert_tf.modeling.encoder.BertEncoder`, and sharing its tables.

`embed` is BERT's LN(word + position + segment) and dropout, followed by ELECTRA's projection
E -> hidden when the config's `embedding_size` E differs from hidden_size. One function for
the encoder's functional graph (symbolic inputs) and its `encode_at` (tensors).
`shared_embedding_layers` lends one encoder's tables and LayerNorm to another (ELECTRA's
generator uses the discriminator's).
"""

from __future__ import annotations

from typing import Any, Tuple

from bert_tf.modeling.config import BertConfig


def embed(token_embedding, position_embedding, segment_embedding, add, layer_norm, dropout,
          input_ids, segment_ids, training=None, project=None):
    """LN(word + position + segment), dropout -> [batch, seq_len, E], then the projection
    E -> hidden when there is one (`project`) -> [batch, seq_len, hidden].

    Args:
        token_embedding, position_embedding, segment_embedding, add, layer_norm, dropout:
            the encoder's layers.
        input_ids, segment_ids: int32 [batch, seq_len].
        training: enables dropout.
        project: the Dense E -> hidden, or None.
    """
    tokens = token_embedding(input_ids)  # [batch, seq_len, E]
    positions = position_embedding(tokens)  # [batch, seq_len, E]
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
