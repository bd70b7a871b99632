"""Packed rows in the encoders: attention within each document, positions per document.

A packed batch (`create_pretraining_data --feature_set=packed_mlm`, `bert_tf.core.schema`)
holds several documents per row and two more features:

    doc_ids       int32 [batch, seq_len]  1..k: the document of each token in its row; 0 pad
    position_ids  int32 [batch, seq_len]  position within its document, from 0 at its [CLS]

Both encoders read them in `encode_at` (what pretraining differentiates) and the pretraining
model in `call` too: a query attends only to the keys of its own document (a block-diagonal
mask, which also masks padding, whose id 0 no query has; combined with the sliding window
of the modern encoder's local layers, whose distances within a document are the rows'), and
positions come from `position_ids` (the absolute table's rows, or the rotary angles). So each
document of a packed row gets the hidden states it would get alone in a row of its own, up
to float rounding (tests/test_packed_encoder.py: 1e-5).

The mask costs what the padding mask did: one [batch, 1, queries, seq_len] bias added to
every layer's scores. Attention still computes every query-key pair of the row, so a packed
row of k documents costs as much attention as any row of seq_len tokens.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Tuple

import tensorflow as tf

from bert_tf.core import schema
from bert_tf.modeling.rotary import large_negative

DOC_IDS = schema.DOC_IDS
POSITION_IDS = schema.POSITION_IDS
PACKED_NAMES = (DOC_IDS, POSITION_IDS)


def packed_features(inputs: Any) -> Optional[Tuple[tf.Tensor, tf.Tensor]]:
    """(doc_ids, position_ids) int32 [batch, seq_len] of a packed batch, else None.

    Raises:
        ValueError: a batch with one of the two features but not the other.
    """
    if not isinstance(inputs, Mapping) or (DOC_IDS not in inputs and POSITION_IDS not in inputs):
        return None
    if DOC_IDS not in inputs or POSITION_IDS not in inputs:
        raise ValueError(f"a packed batch needs both {DOC_IDS} and {POSITION_IDS}")
    return (tf.cast(inputs[DOC_IDS], tf.int32), tf.cast(inputs[POSITION_IDS], tf.int32))


def at_rows(values: tf.Tensor, rows: Optional[tf.Tensor]) -> tf.Tensor:
    """values [batch, seq_len] at int rows [batch, n] -> [batch, n] (rows None: all)."""
    return values if rows is None else tf.gather(values, tf.cast(rows, tf.int32), batch_dims=1)


def same_document(doc_ids: tf.Tensor, query_positions: Optional[tf.Tensor] = None
                  ) -> tf.Tensor:
    """bool [batch, 1, queries, seq_len]: the key is a real token of the query's document.

    Args:
        doc_ids: int [batch, seq_len], 0 for padding.
        query_positions: int [batch, queries], the query rows; None: every row.
    """
    queries = at_rows(doc_ids, query_positions)
    same = tf.equal(queries[:, :, None], doc_ids[:, None, :]) & (doc_ids > 0)[:, None, :]
    return same[:, None]


def document_bias(doc_ids: tf.Tensor, query_positions: Optional[tf.Tensor],
                  dtype: tf.DType) -> tf.Tensor:
    """What to add to attention scores [batch, heads, queries, seq_len]: 0 within the
    query's document, a large negative number elsewhere (padding included).

    Returns:
        [batch, 1, queries, seq_len] of `dtype`.
    """
    outside = tf.logical_not(same_document(doc_ids, query_positions))
    return tf.cast(outside, dtype) * large_negative(dtype)
