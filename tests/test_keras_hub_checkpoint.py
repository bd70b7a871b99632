"""Tests for bert_tf.interop.keras_hub_checkpoint: keras-hub BERT models read into bert_tf."""

import os

import keras
import keras_hub
import numpy as np
import pytest

from bert_tf.core.errors import UserError
from bert_tf.interop import keras_hub_checkpoint
from bert_tf.interop.native import load_pretrained, write_native

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(91)]


def _masked_lm(seed: int = 0) -> keras_hub.models.BertMaskedLM:
    """A tiny BertMaskedLM with every weight random (biases and LayerNorms too), so that a
    weight read into the wrong place changes the outputs."""
    keras.utils.set_random_seed(seed)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=len(VOCAB), num_layers=2, num_heads=2, hidden_dim=64,
        intermediate_dim=128, max_sequence_length=32, num_segments=2, dropout=0.1)
    tokenizer = keras_hub.models.BertTokenizer(vocabulary=VOCAB, lowercase=True)
    preprocessor = keras_hub.models.BertMaskedLMPreprocessor(tokenizer, sequence_length=16)
    model = keras_hub.models.BertMaskedLM(backbone, preprocessor=preprocessor)
    rng = np.random.default_rng(seed)
    for w in model.weights:
        base = 1.0 if w.path.endswith("gamma") else 0.0
        w.assign(base + 0.1 * rng.standard_normal(w.shape).astype("float32"))
    return model


def _batch(seed: int = 1):
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, len(VOCAB), (2, 12)).astype("int32")
    mask = np.ones_like(ids)
    mask[1, 8:] = 0
    segments = (np.arange(12)[None] >= 6).astype("int32").repeat(2, 0)
    positions = np.array([[1, 4, 7], [2, 3, 5]], "int32")
    return ids, mask, segments, positions


def test_masked_lm_preset_loads_into_bert_tf_with_the_same_outputs(tmp_path):
    model = _masked_lm()
    preset = str(tmp_path / "preset")
    model.save_to_preset(preset)
    assert keras_hub_checkpoint.is_preset(preset)

    files = keras_hub_checkpoint.read(preset)
    config = files.config
    assert (config.vocab_size, config.hidden_size, config.num_hidden_layers,
            config.num_attention_heads, config.intermediate_size,
            config.max_position_embeddings, config.type_vocab_size) == (96, 64, 2, 2, 128, 32, 2)
    assert config.hidden_act == "gelu" and config.hidden_dropout_prob == pytest.approx(0.1)
    assert files.vocab_file.endswith(keras_hub_checkpoint.VOCAB_PATH)
    assert "mlm/output_bias" in files.weights and "nsp/kernel" not in files.weights

    write_native(files, str(tmp_path / "native"))
    ours = load_pretrained(str(tmp_path / "native"))
    assert ours.has_mlm_head
    ids, mask, segments, positions = _batch()
    out = ours.model({"input_ids": ids, "input_mask": mask, "segment_ids": segments,
                      "masked_lm_positions": positions}, training=False)
    theirs_seq = model.backbone({"token_ids": ids, "padding_mask": mask,
                                 "segment_ids": segments})["sequence_output"]
    real = mask.astype(bool)
    np.testing.assert_allclose(np.asarray(out["sequence_output"])[real],
                               np.asarray(theirs_seq)[real], atol=1e-4)
    theirs_logits = np.asarray(model({"token_ids": ids, "padding_mask": mask,
                                      "segment_ids": segments, "mask_positions": positions}))
    ours_logits = np.asarray(out["mlm_logits"])
    # keras-hub's head uses the erf GELU and LayerNorm epsilon 1e-5, bert_tf's the tanh GELU
    # and 1e-12 (see the module docstring): close (3.4e-4 here), not equal. A misplaced weight
    # (a transposed kernel, a swapped bias) moves logits of this spread by tenths.
    assert np.max(np.abs(ours_logits - theirs_logits)) < 5e-3
    assert np.std(theirs_logits) > 0.5
    np.testing.assert_array_equal(ours_logits.argmax(-1), theirs_logits.argmax(-1))


def test_backbone_alone_has_no_heads_and_checks_the_vocabulary(tmp_path):
    backbone = _masked_lm().backbone
    files = keras_hub_checkpoint.model_files(backbone)
    assert not any(n.startswith(("mlm/", "nsp/")) for n in files.weights)
    np.testing.assert_array_equal(files.weights["pooler/kernel"],
                                  np.asarray(backbone.pooled_dense.kernel))
    short = tmp_path / "vocab.txt"
    short.write_text("\n".join(VOCAB[:50]) + "\n")
    with pytest.raises(UserError, match="has 50 tokens but the word embeddings"):
        keras_hub_checkpoint.model_files(backbone, str(short))


def test_read_refuses_a_directory_that_is_not_a_preset(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "bert"}')
    assert not keras_hub_checkpoint.is_preset(str(tmp_path))
    assert not keras_hub_checkpoint.is_preset(os.path.join(str(tmp_path), "missing"))
    with pytest.raises(UserError, match="is not a keras-hub BERT preset"):
        keras_hub_checkpoint.read(str(tmp_path))
    with pytest.raises(UserError, match="not a keras-hub BertBackbone or BertMaskedLM"):
        keras_hub_checkpoint.model_files(keras.layers.Dense(2))


def test_fine_tuning_starts_from_a_preset_directory(tmp_path):
    """--init_checkpoint=<keras-hub preset>: detected, read, and loaded into the encoder."""
    from bert_tf.finetune import warm_start
    from bert_tf.interop.formats import detect_format
    from bert_tf.modeling.pretraining_model import BertPretrainingModel

    model = _masked_lm(seed=3)
    preset = str(tmp_path / "preset")
    model.save_to_preset(preset)
    assert detect_format(preset) == "keras_hub"
    init = warm_start.resolve(preset, "", "")
    assert init.fmt == "keras_hub" and init.config.hidden_size == 64
    assert init.vocab_file.endswith(keras_hub_checkpoint.VOCAB_PATH)
    ours = BertPretrainingModel(init.config, use_nsp=False)
    warm_start.load_encoder_weights(ours, init.files)
    ids, mask, segments, _ = _batch(seed=4)
    seq = ours.encoder({"input_ids": ids, "input_mask": mask, "segment_ids": segments},
                       training=False)["sequence_output"]
    theirs = model.backbone({"token_ids": ids, "padding_mask": mask,
                             "segment_ids": segments})["sequence_output"]
    real = mask.astype(bool)
    np.testing.assert_allclose(np.asarray(seq)[real], np.asarray(theirs)[real], atol=1e-4)
