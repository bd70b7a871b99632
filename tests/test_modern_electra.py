"""ELECTRA with the modern encoder's options (`bert_tf.modeling.electra` on a modern config):
both networks are `ModernEncoder`s sharing the tables, the generator with its own projection
E -> G; the canonical weights are `electra_layout`'s; transformers' and Google's ELECTRA
layouts and keras-hub refuse such a model in one line. End to end, `run_pretraining
--objective=electra` on a tiny rotary, pre-LN, GeGLU, bias-free, sliding-window
discriminator trains and evaluates both networks; `bert_tf.export` serves its
discriminator, and fine-tuning's warm start and `convert_checkpoint` read it.
"""

from __future__ import annotations

import math
import os
import types

import keras
import numpy as np
import pytest
import tensorflow as tf
from _pretraining_helpers import (
    TINY_BERT,
    error_lines,
    pretraining_flags,
    progress_losses,
    write_tiny_run_data,
)

from bert_tf.core.errors import UserError
from bert_tf.finetune import warm_start
from bert_tf.interop import electra_layout, formats, hf_modernbert, native_electra
from bert_tf.interop.model_files import ModelFiles
from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.electra import ElectraPretrainingModel, electra_weight_map
from bert_tf.modeling.modern_encoder import ModernEncoder, embed
from bert_tf.modeling.weight_map import encoder_weight_map, get_weights

MODERN = {**TINY_BERT, "num_hidden_layers": 2, "intermediate_size": 48, "hidden_act": "geglu",
          "type_vocab_size": 0, "position_embedding_type": "rope", "pre_layer_norm": True,
          "norm_eps": 1e-5, "use_bias": False, "global_attn_every_n_layers": 2,
          "local_attention_window": 8}
FRACTION = 0.5  # a generator 16 wide under a 32-wide discriminator
STEPS = 6
TEXTS = ["w1 w2 w3 w4 w5", "w7 w8"]


def config(**overrides) -> BertConfig:
    return BertConfig.from_dict({**MODERN, **overrides})


def test_the_networks_share_the_tables_and_map_to_the_layout():
    keras.utils.set_random_seed(0)
    model = ElectraPretrainingModel(config(), FRACTION, sampling_seed=1)
    disc, gen = model.encoder, model.generator
    assert isinstance(disc, ModernEncoder) and isinstance(gen, ModernEncoder)
    assert gen.token_embedding is disc.token_embedding
    assert gen.embeddings_layer_norm is disc.embeddings_layer_norm
    assert disc.embeddings_project is None
    assert tuple(gen.embeddings_project.kernel.shape) == (32, 16)
    g = model.generator_config
    # One head per 64 units (at least one); the feed-forward keeps the discriminator's
    # ratio (48 / 32 x 16 = 24), not BERT's 4 G; the output is the shared table.
    assert (g.hidden_size, g.num_attention_heads, g.intermediate_size, g.embedding_size,
            g.tie_word_embeddings) == (16, 1, 24, 32, True)
    weights = electra_weight_map(model)
    shapes = electra_layout.electra_shapes(config(), 16)
    assert [(n, w.shape) for n, w in weights.items()] == list(shapes.items())
    # use_bias false: no bias or beta but in ELECTRA's discriminator head, which keeps its own.
    assert [n for n in shapes if n.endswith(("/bias", "/beta"))] == [
        "discriminator_predictions/dense/bias", "discriminator_predictions/dense_prediction/bias"]
    # Every variable exactly once, the shared tables among the discriminator's names.
    assert sorted(id(w.variable) for w in weights.values()) == sorted(
        id(v) for v in model.trainable_variables)
    assert "generator/embeddings/word_embeddings" not in weights


def test_the_generator_head_projects_to_the_shared_table_by_hand():
    keras.utils.set_random_seed(1)
    model = ElectraPretrainingModel(config(), FRACTION, sampling_seed=1)
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 128, (2, 16)).astype(np.int32)
    positions = np.array([[1, 5, 9], [0, 2, 15]], np.int32)
    inputs = {"input_ids": ids, "input_mask": np.ones_like(ids), "segment_ids": np.zeros_like(ids),
              "masked_lm_positions": positions}
    logits = model.generator_logits(inputs).numpy()  # [2, 3, 128]
    hidden = model.generator({k: inputs[k] for k in ("input_ids", "input_mask", "segment_ids")}
                             )["sequence_output"].numpy()  # [2, 16, 16]
    w = get_weights(electra_weight_map(model))
    x = np.take_along_axis(hidden, positions[..., None], axis=1) @ \
        w["generator_predictions/dense/kernel"]  # [2, 3, 32]: to the table's width
    x = 0.5 * x * (1 + np.vectorize(math.erf)(x / np.sqrt(2)))  # GELU (erf), geglu's input half
    x = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    x = x * w["generator_predictions/layer_norm/gamma"]
    want = x @ w["embeddings/word_embeddings"].T + w["generator_predictions/output_bias"]
    np.testing.assert_allclose(logits, want, atol=1e-4)


def test_a_modern_encoder_projects_narrow_tables_by_hand():
    keras.utils.set_random_seed(2)
    encoder = ModernEncoder(config(embedding_size=16))
    ids = np.array([[5, 6, 7, 8]], np.int32)
    got = embed((encoder.token_embedding, None, None, encoder.embeddings_layer_norm,
                 encoder.embeddings_dropout, encoder.embeddings_project), ids, None).numpy()
    w = get_weights(encoder_weight_map(encoder))
    x = w["embeddings/word_embeddings"][ids]  # [1, 4, 16]
    x = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    want = (x * w["embeddings/layer_norm/gamma"]) @ w["embeddings_project/kernel"]
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert "embeddings_project/bias" not in w  # use_bias false
    with pytest.raises(UserError, match="and no embedding projection; this config has "
                                        "embedding_size=16$"):
        hf_modernbert.check_writable(config(embedding_size=16, local_attention_window=None,
                                            global_attn_every_n_layers=1))


def test_other_electra_layouts_refuse_a_modern_model(tmp_path):
    model = ElectraPretrainingModel(config(), FRACTION)
    files = ModelFiles(config(), get_weights(electra_weight_map(model)), None, "m")
    for fmt in ("hf", "google"):
        with pytest.raises(UserError, match=rf"^m: an ELECTRA model with the modern encoder's "
                                            rf"options \(.*\) has no {fmt} ELECTRA layout"):
            formats.write_model(fmt, files, os.fspath(tmp_path / fmt))
        assert not (tmp_path / fmt).exists()


@pytest.fixture(scope="module")
def run(cli, tmp_path_factory):
    """(output_dir, vocab.txt, the run's restored ElectraPretrainingModel, its losses)."""
    root = write_tiny_run_data(tmp_path_factory.mktemp("modern_electra"), 32, 16, 31, **MODERN)
    out = root / "run"
    proc = cli.run("bert_tf.run_pretraining", pretraining_flags(
        root, out, objective="electra", num_train_steps=STEPS, dynamic_masking="true",
        vocab_file=root / "vocab.txt", do_eval="true", eval_batch_size=16,
        generator_hidden_fraction=FRACTION))
    assert proc.returncode == 0, proc.stderr[-3000:]
    model = ElectraPretrainingModel(config(), FRACTION)
    tf.train.Checkpoint(model=model).read(tf.train.latest_checkpoint(out)).expect_partial() \
        .assert_existing_objects_matched()
    return out, root / "vocab.txt", model, progress_losses(proc.stderr)


def test_the_run_trains_and_evaluates_both_networks(run):
    out, _, model, losses = run
    assert len(losses) == STEPS and np.isfinite(losses).all()
    results = {k: float(v) for k, v in (line.split(" = ") for line in
                                        (out / "eval_results.txt").read_text().splitlines())}
    assert results["global_step"] == STEPS
    assert 3.5 < results["masked_lm_loss"] < 6.0  # near ln(128) = 4.85 after 6 steps
    assert 0.3 < results["discriminator_loss"] < 1.0
    assert results["loss"] == pytest.approx(
        results["masked_lm_loss"] + 50 * results["discriminator_loss"], rel=1e-5)
    assert 0.05 < results["replaced_fraction"] < 0.2
    # Trained: the discriminator's weights moved from a fresh model's.
    fresh = get_weights(encoder_weight_map(ElectraPretrainingModel(config(), FRACTION).encoder))
    moved = [n for n, w in get_weights(encoder_weight_map(model.encoder)).items()
             if not np.allclose(w, fresh[n])]
    assert "layer_1/attention/qkv/kernel" in moved


def test_the_saved_model_serves_the_discriminator(cli, run, tmp_path):
    out, vocab, model, _ = run
    export_dir = tmp_path / "sm" / "1"
    proc = cli.run("bert_tf.export", [f"--output_dir={out}", f"--vocab_file={vocab}",
                                      "--do_lower_case=true", f"--export_dir={export_dir}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops)

    served = tf.saved_model.load(os.fspath(export_dir)).signatures["serving_default"](
        text_a=tf.constant(TEXTS))
    ours = model.encoder({k: served[k].numpy() for k in ("input_ids", "input_mask",
                                                         "segment_ids")})
    real = served["input_mask"].numpy().astype(bool)
    np.testing.assert_allclose(served["sequence_output"].numpy()[real],
                               ours["sequence_output"].numpy()[real], atol=1e-5)
    proc = cli.run("bert_tf.export", [f"--output_dir={out}", f"--vocab_file={vocab}",
                                      "--do_lower_case=true", "--format=keras_hub",
                                      f"--export_dir={tmp_path / 'preset'}"])
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    [line] = error_lines(proc.stderr)
    assert "no keras-hub backbone computes: export --format=saved_model" in line


def test_fine_tuning_and_conversion_read_the_discriminator(run, tmp_path):
    out, vocab, model, _ = run
    want = get_weights(encoder_weight_map(model.encoder))
    init = warm_start.resolve(os.fspath(out), "", os.fspath(vocab))
    assert init.kind == "modernbert" and electra_layout.has_generator(init.files.weights)
    encoder = ModernEncoder(init.config)
    warm_start.load_encoder_weights(types.SimpleNamespace(encoder=encoder), init.files)
    got = get_weights(encoder_weight_map(encoder))
    assert sorted(got) == sorted(want)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    # bert_tf -> bert_tf keeps both networks, every weight.
    written = formats.convert("bert_tf", "bert_tf", os.fspath(out), os.fspath(tmp_path / "c"))
    again = native_electra.read(written)
    assert sorted(again.weights) == sorted(init.files.weights)
    for name, value in init.files.weights.items():
        np.testing.assert_array_equal(again.weights[name], value, err_msg=name)
