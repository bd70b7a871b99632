"""Tests of bert_tf.modeling.packing in both encoders: a packed row of two documents gives
each document the hidden states (and MLM logits) it gets alone in a row of its own, for BERT's
absolute positions and the modern encoder's rotary positions with a sliding window narrower
than the documents; without the packed features the same row gives other states (the mask
and the positions are what makes them equal)."""

import numpy as np
import pytest
import tensorflow as tf
from _pretraining_helpers import TINY_BERT

from bert_tf.modeling import packing
from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.modern_encoder import build_encoder
from bert_tf.modeling.pretraining_model import BertPretrainingModel

SEQ = 24
LENGTHS = (9, 11)  # two documents, [CLS] and [SEP] included; 4 padding slots
MODERN = {**TINY_BERT, "num_hidden_layers": 3, "hidden_act": "geglu", "type_vocab_size": 0,
          "position_embedding_type": "rope", "rope_theta": 160000.0,
          "local_rope_theta": 10000.0, "pre_layer_norm": True, "norm_eps": 1e-5,
          "use_bias": False, "global_attn_every_n_layers": 3, "local_attention_window": 4}
CONFIGS = {
    "bert_absolute": {**TINY_BERT, "num_hidden_layers": 2},
    "modern_rope": MODERN,
    "modern_absolute": {**MODERN, "position_embedding_type": "absolute", "rope_theta": 10000.0,
                        "local_rope_theta": None},
}


def _rows():
    """(packed: one row holding both documents, alone: one row per document, padded)."""
    rng = np.random.default_rng(0)
    docs = [np.concatenate([[2], rng.integers(5, TINY_BERT["vocab_size"], n - 2), [3]])
            for n in LENGTHS]
    ids = np.zeros((1, SEQ), np.int32)
    doc_ids = np.zeros((1, SEQ), np.int32)
    position_ids = np.zeros((1, SEQ), np.int32)
    alone = np.zeros((2, SEQ), np.int32)
    start = 0
    for k, doc in enumerate(docs):
        n = len(doc)
        ids[0, start:start + n] = doc
        doc_ids[0, start:start + n] = k + 1
        position_ids[0, start:start + n] = np.arange(n)
        alone[k, :n] = doc
        start += n
    packed = {"input_ids": ids, "input_mask": (doc_ids > 0).astype(np.int32),
              "segment_ids": np.zeros_like(ids), packing.DOC_IDS: doc_ids,
              packing.POSITION_IDS: position_ids}
    single = {"input_ids": alone, "input_mask": (alone > 0).astype(np.int32),
              "segment_ids": np.zeros_like(alone)}
    return packed, single


def _build(name):
    tf.keras.utils.set_random_seed(1)
    return build_encoder(BertConfig.from_dict(CONFIGS[name]))


@pytest.mark.parametrize("name", list(CONFIGS))
def test_a_packed_row_gives_each_document_its_own_hidden_states(name):
    encoder = _build(name)
    packed, single = _rows()
    alone = encoder(single)["sequence_output"].numpy()  # the functional graph, unpacked
    rows = encoder.encode_at(packed, None).numpy()[0]
    a, b = LENGTHS
    np.testing.assert_allclose(rows[:a], alone[0, :a], atol=1e-5, rtol=0)
    np.testing.assert_allclose(rows[a:a + b], alone[1, :b], atol=1e-5, rtol=0)
    # The last block at some rows only: the same values.
    queries = np.array([[0, 4, a, a + b - 1]], np.int32)
    np.testing.assert_allclose(encoder.encode_at(packed, queries).numpy()[0], rows[queries[0]],
                               atol=1e-6, rtol=0)
    # The same row without doc_ids and position_ids: the second document sees the first.
    plain = {k: v for k, v in packed.items() if k not in (packing.DOC_IDS, packing.POSITION_IDS)}
    crossed = encoder.encode_at(plain, None).numpy()[0]
    assert np.abs(crossed[a:a + b] - alone[1, :b]).max() > 1e-3


def test_the_pretraining_model_scores_packed_masks_as_unpacked_ones():
    tf.keras.utils.set_random_seed(1)
    model = BertPretrainingModel(BertConfig.from_dict(MODERN), use_nsp=False)
    packed, single = _rows()
    a = LENGTHS[0]
    # Masked positions 2 and 5 of each document: rows 2, 5, a + 2, a + 5 of the packed row.
    packed["masked_lm_positions"] = np.array([[2, 5, a + 2, a + 5]], np.int32)
    single["masked_lm_positions"] = np.array([[2, 5], [2, 5]], np.int32)
    alone = model(single)["mlm_logits"].numpy().reshape(4, -1)
    heads = model.head_logits(packed)["mlm_logits"].numpy()[0]
    np.testing.assert_allclose(heads, alone, atol=1e-5, rtol=0)
    called = model(packed)  # call routes a packed batch through encode_at too
    np.testing.assert_allclose(called["mlm_logits"].numpy()[0], alone, atol=1e-5, rtol=0)
    assert called["sequence_output"].shape == (1, SEQ, TINY_BERT["hidden_size"])


def test_electra_s_generator_and_discriminator_read_packed_rows():
    from bert_tf.modeling.electra import ElectraPretrainingModel

    tf.keras.utils.set_random_seed(1)
    model = ElectraPretrainingModel(BertConfig.from_dict(CONFIGS["bert_absolute"]))
    packed, single = _rows()
    a, b = LENGTHS
    packed["masked_lm_positions"] = np.array([[2, 5, a + 2, a + 5]], np.int32)
    single["masked_lm_positions"] = np.array([[2, 5], [2, 5]], np.int32)
    alone, together = model(single), model(packed)
    np.testing.assert_allclose(together["mlm_logits"].numpy()[0],
                               alone["mlm_logits"].numpy().reshape(4, -1), atol=1e-5, rtol=0)
    disc = together["disc_logits"].numpy()[0]
    np.testing.assert_allclose(disc[:a], alone["disc_logits"].numpy()[0, :a], atol=1e-5, rtol=0)
    np.testing.assert_allclose(disc[a:a + b], alone["disc_logits"].numpy()[1, :b], atol=1e-5,
                               rtol=0)


def test_masks_and_positions_by_hand():
    doc_ids = tf.constant([[1, 1, 2, 2, 2, 0]])
    same = packing.same_document(doc_ids).numpy()[0, 0].astype(int)
    assert same.tolist() == [[1, 1, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0], [0, 0, 1, 1, 1, 0],
                             [0, 0, 1, 1, 1, 0], [0, 0, 1, 1, 1, 0], [0] * 6]
    rows = packing.same_document(doc_ids, tf.constant([[3, 0]])).numpy()[0, 0].astype(int)
    assert rows.tolist() == [same[3].tolist(), same[0].tolist()]
    bias = packing.document_bias(doc_ids, None, tf.float32).numpy()[0, 0]
    assert bias[0, 1] == 0 and bias[0, 2] == -1e9 and bias[2, 5] == -1e9
    with pytest.raises(ValueError, match="needs both doc_ids and position_ids"):
        packing.packed_features({packing.DOC_IDS: doc_ids})
    assert packing.packed_features({"input_ids": doc_ids}) is None
