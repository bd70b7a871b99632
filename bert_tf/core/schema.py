"""The pretraining TFRecord schema, shared by the writer (data_tools) and the reader (tf.data).

One `tf.train.Example` per instance, exactly the features of the original BERT release:

    input_ids             int64 [max_seq_length]           token ids, zero-padded
    input_mask            int64 [max_seq_length]           1 for real tokens, 0 for padding
    segment_ids           int64 [max_seq_length]           0 for [CLS] A [SEP], 1 for B [SEP]
    masked_lm_positions   int64 [max_predictions_per_seq]  sorted positions, zero-padded
    masked_lm_ids         int64 [max_predictions_per_seq]  original ids at those positions
    masked_lm_weights     float [max_predictions_per_seq]  1.0 for real predictions, 0.0 pad
    next_sentence_labels  int64 [1]                        0 = B follows A, 1 = B is random

The packed MLM-only feature set (`create_pretraining_data --feature_set=packed_mlm`) has the
same seven features (segment ids and NSP labels all 0) and two more, after them:

    doc_ids               int64 [max_seq_length]           1..k: the document (segment) of
                                                           each token in its row, 0 padding
    position_ids          int64 [max_seq_length]           position within its document,
                                                           from 0 at its [CLS]; 0 padding

A packed row holds several documents, each as [CLS] tokens [SEP], back to back; a reader
that knows the two features keeps attention within each document and restarts positions
(`bert_tf.modeling.packing`); one that does not sees a valid `--no_nsp` record.

`--use_v2_feature_names` renames `input_ids` -> `input_word_ids` and `segment_ids` ->
`input_type_ids` (the names of TF-Hub and tensorflow/models). Inside bert_tf the model and the
trainer always see the original (v1) names; the reader maps v2 names back.

This module does not import TensorFlow at import time; `parsing_spec` imports it on call.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Tuple

INPUT_IDS = "input_ids"
INPUT_MASK = "input_mask"
SEGMENT_IDS = "segment_ids"
MASKED_LM_POSITIONS = "masked_lm_positions"
MASKED_LM_IDS = "masked_lm_ids"
MASKED_LM_WEIGHTS = "masked_lm_weights"
NEXT_SENTENCE_LABELS = "next_sentence_labels"
DOC_IDS = "doc_ids"
POSITION_IDS = "position_ids"

# The feature sets a writer can produce (`create_pretraining_data --feature_set`).
FEATURE_SET_BERT = "bert"
FEATURE_SET_PACKED_MLM = "packed_mlm"
FEATURE_SETS = (FEATURE_SET_BERT, FEATURE_SET_PACKED_MLM)

# v1 name -> v2 name, for the features that differ.
V2_NAMES: Dict[str, str] = {INPUT_IDS: "input_word_ids", SEGMENT_IDS: "input_type_ids"}
V1_NAMES: Dict[str, str] = {v: k for k, v in V2_NAMES.items()}

# NSP labels, as in the original: 0 means B is the actual next segment.
IS_NEXT = 0
IS_RANDOM_NEXT = 1


@dataclasses.dataclass(frozen=True)
class Feature:
    """One feature of the schema.

    Attributes:
        name: the v1 (original) feature name.
        dtype: "int64" or "float32".
        length: "seq" (max_seq_length), "pred" (max_predictions_per_seq) or a fixed int.
    """

    name: str
    dtype: str
    length: object


# In the order the original writer used.
FEATURES: Tuple[Feature, ...] = (
    Feature(INPUT_IDS, "int64", "seq"),
    Feature(INPUT_MASK, "int64", "seq"),
    Feature(SEGMENT_IDS, "int64", "seq"),
    Feature(MASKED_LM_POSITIONS, "int64", "pred"),
    Feature(MASKED_LM_IDS, "int64", "pred"),
    Feature(MASKED_LM_WEIGHTS, "float32", "pred"),
    Feature(NEXT_SENTENCE_LABELS, "int64", 1),
)
# What the packed MLM-only feature set adds to FEATURES.
PACKED_FEATURES: Tuple[Feature, ...] = (
    Feature(DOC_IDS, "int64", "seq"),
    Feature(POSITION_IDS, "int64", "seq"),
)


def features_of(packed: bool = False) -> Tuple[Feature, ...]:
    """The features of a record: FEATURES, plus PACKED_FEATURES for packed rows."""
    return FEATURES + PACKED_FEATURES if packed else FEATURES


def feature_length(feature: Feature, max_seq_length: int, max_predictions_per_seq: int) -> int:
    if feature.length == "seq":
        return max_seq_length
    if feature.length == "pred":
        return max_predictions_per_seq
    return int(feature.length)


def stored_name(name: str, use_v2_feature_names: bool) -> str:
    """The name a v1 feature has in the file."""
    return V2_NAMES.get(name, name) if use_v2_feature_names else name


def canonical_name(name: str) -> str:
    """Maps a stored feature name (v1 or v2) to its v1 name."""
    return V1_NAMES.get(name, name)


def feature_layout(
    max_seq_length: int, max_predictions_per_seq: int, use_v2_feature_names: bool = False,
    packed: bool = False,
) -> List[Tuple[str, str, int]]:
    """(stored name, dtype, length) for every feature (of packed rows too), in writer order."""
    return [
        (
            stored_name(f.name, use_v2_feature_names),
            f.dtype,
            feature_length(f, max_seq_length, max_predictions_per_seq),
        )
        for f in features_of(packed)
    ]


def parsing_spec(
    max_seq_length: int, max_predictions_per_seq: int, use_v2_feature_names: bool = False,
    packed: bool = False,
) -> dict:
    """The `tf.io.parse_example` spec for the schema (fixed-length features).

    Returns:
        {stored name: tf.io.FixedLenFeature([length], dtype)}.
    """
    import tensorflow as tf

    dtypes = {"int64": tf.int64, "float32": tf.float32}
    return {
        name: tf.io.FixedLenFeature([length], dtypes[dtype])
        for name, dtype, length in feature_layout(
            max_seq_length, max_predictions_per_seq, use_v2_feature_names, packed
        )
    }
