"""Texts to the bi-encoder's arrays: `[CLS] text [SEP]`, padded with 0. NumPy only.

Queries and passages are encoded alone (segment 0), each kind to its own length
(--max_query_length, --max_passage_length, special tokens included), keeping the first
tokens of a longer text, as sentence-transformers truncates. A text that occurs many times
(a passage relevant to several queries, a negative mined for many) is tokenized once.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Sequence

import numpy as np

from bert_tf.core.errors import UserError
from bert_tf.finetune.retrieval.beir_data import TrainingExample

# bert_tf.modeling.encoder.INPUT_NAMES, spelled out: importing the encoder loads TensorFlow.
INPUT_NAMES = ("input_ids", "input_mask", "segment_ids")


@dataclasses.dataclass(frozen=True)
class EncodedTexts:
    """Encoder inputs for a list of texts.

    Attributes:
        arrays: {"input_ids", "input_mask", "segment_ids"}: int32 [texts, max_length].
        num_truncated: texts longer than max_length - 2 tokens, cut.
    """

    arrays: Dict[str, np.ndarray]
    num_truncated: int


def encode_texts(texts: Sequence[str], tokenizer, max_length: int,
                 what: str = "max_seq_length") -> EncodedTexts:
    """Tokenizes `texts` into `[CLS] text [SEP]` rows of `max_length`.

    Args:
        texts: the texts.
        tokenizer: a `bert_tf.core.tokenization.FullTokenizer`.
        max_length: tokens per row, [CLS] and [SEP] included.
        what: the flag that set max_length, for the error message.

    Raises:
        UserError: max_length below 3 (no room for a token of text).
    """
    if max_length < 3:
        raise UserError(f"--{what}={max_length} leaves no room for text (at least 3)")
    cls_id, sep_id = tokenizer.vocab["[CLS]"], tokenizer.vocab["[SEP]"]
    ids = np.zeros((len(texts), max_length), np.int32)
    lengths = np.zeros(len(texts), np.int64)
    cache: Dict[str, List[int]] = {}
    truncated = 0
    for row, text in enumerate(texts):
        pieces = cache.get(text)
        if pieces is None:
            pieces = cache[text] = tokenizer.encode(text)
        truncated += len(pieces) > max_length - 2
        tokens = [cls_id, *pieces[:max_length - 2], sep_id]
        ids[row, :len(tokens)] = tokens
        lengths[row] = len(tokens)
    mask = (np.arange(max_length)[None, :] < lengths[:, None]).astype(np.int32)
    return EncodedTexts({"input_ids": ids, "input_mask": mask, "segment_ids": np.zeros_like(ids)},
                        truncated)


def training_features(examples: Sequence[TrainingExample], tokenizer, max_query_length: int,
                      max_passage_length: int) -> Dict[str, np.ndarray]:
    """The `contrastive_loss` batch features of every example, in example order.

    Returns:
        {"query_input_ids", "query_input_mask", "query_segment_ids": int32
        [examples, max_query_length]; "passage_input_ids", ...: int32
        [examples, 1 + negatives, max_passage_length] (index 0: the positive)}.

    Raises:
        UserError: no example, examples with different numbers of negatives, or a length
            without room for text.
    """
    if not examples:
        raise UserError("no training example")
    width = 1 + len(examples[0].negatives)
    if any(len(e.negatives) != width - 1 for e in examples):
        raise UserError("every training example needs the same number of negatives")
    queries = encode_texts([e.query for e in examples], tokenizer, max_query_length,
                           "max_query_length")
    passages = encode_texts([t for e in examples for t in (e.positive, *e.negatives)],
                            tokenizer, max_passage_length, "max_passage_length")
    out = {f"query_{name}": queries.arrays[name] for name in INPUT_NAMES}
    for name in INPUT_NAMES:
        out[f"passage_{name}"] = passages.arrays[name].reshape(len(examples), width, -1)
    return out
