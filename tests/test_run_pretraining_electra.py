"""End-to-end tests of `python -m bert_tf.run_pretraining --objective=electra` on tiny
TFRecords made here (runs forked from the `cli` server):

- train with --dynamic_masking and dropout, --eval_every_n_steps, then --do_eval:
  eval_results.txt and eval_history.jsonl have the generator's and the discriminator's keys
  with sane values (the AUC's histograms as lists), the checkpoint holds both
  networks apart (`model/encoder`, `model/generator`) and the sampler's RNG state;
- a run stopped half-way and resumed in a new process follows the uninterrupted run's
  per-step losses and ends with the same weights, optimizer state and RNG states;
- `--init_discriminator_only` from a BERT masked-LM run's checkpoint: the discriminator's
  encoder is that encoder, weight for weight, and the generator starts from scratch;
- flags that do not apply give one `error:` line;
- the ELECTRA flagfiles in configs/ parse.
"""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
import tensorflow as tf
from _pretraining_helpers import (
    REPO_ROOT,
    error_lines,
    pretraining_flags,
    progress_losses,
    progress_steps,
    write_tiny_run_data,
)

from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.encoder import BertEncoder
from bert_tf.modeling.weight_map import encoder_weight_map, get_weights
from bert_tf.training.checkpoint_paths import SavedObjectGraph
from bert_tf.training.eval_history import read_eval_history

MODULE = "bert_tf.run_pretraining"
STEPS = 6
EVAL_KEYS = ["discriminator_accuracy", "discriminator_auc", "discriminator_loss", "global_step",
             "loss", "masked_lm_accuracy", "masked_lm_loss", "replaced_fraction"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_tiny_run_data(tmp_path_factory.mktemp("electra_data"), 64, 16, 21,
                               embedding_size=16, hidden_dropout_prob=0.1,
                               attention_probs_dropout_prob=0.1)


def electra_flags(data, output_dir, **overrides):
    return pretraining_flags(data, output_dir, **dict(
        {"objective": "electra", "num_train_steps": STEPS, "dynamic_masking": "true",
         "vocab_file": data / "vocab.txt", "eval_batch_size": 16}, **overrides))


def checkpoint_tensors(prefix):
    reader = tf.train.load_checkpoint(os.fspath(prefix))
    return {k: reader.get_tensor(k) for k, dtype in reader.get_variable_to_dtype_map().items()
            if k != "_CHECKPOINTABLE_OBJECT_GRAPH" and dtype != tf.variant}


@pytest.fixture(scope="module")
def straight(cli, data, tmp_path_factory):
    out = tmp_path_factory.mktemp("electra_straight")
    # Periodic eval too; the resumed runs below go without it: it must not move the
    # trajectory (eval samples with its own fixed seed, not the training sampler).
    proc = cli.run(MODULE, electra_flags(data, out, do_eval="true", eval_every_n_steps=3))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, proc


def test_train_and_eval_report_both_networks(straight):
    out, proc = straight
    assert progress_steps(proc.stderr) == list(range(1, STEPS + 1))
    assert re.search(r"step 6/6 \| loss \S+ \| mlm_loss \S+ mlm_acc \S+ \| disc_loss \S+ "
                     r"disc_acc \S+ \|", proc.stderr)
    results = dict(line.split(" = ") for line in (out / "eval_results.txt").read_text()
                   .splitlines())
    assert sorted(results) == EVAL_KEYS
    values = {k: float(v) for k, v in results.items()}
    assert values["global_step"] == STEPS
    # Barely trained: the generator near ln(128) = 4.85, the discriminator near ln 2.
    assert 3.5 < values["masked_lm_loss"] < 6.0
    assert 0.3 < values["discriminator_loss"] < 1.0
    assert values["loss"] == pytest.approx(
        values["masked_lm_loss"] + 50 * values["discriminator_loss"], rel=1e-5)
    # 15 % of the real tokens are masked, and most samples of a near-uniform generator differ.
    assert 0.05 < values["replaced_fraction"] < 0.2
    for key in ("discriminator_accuracy", "discriminator_auc", "masked_lm_accuracy"):
        assert 0.0 <= values[key] <= 1.0, key
    assert '"embedding_size": 16' in (out / "bert_config.json").read_text()
    history = read_eval_history(os.fspath(out))
    assert [record["step"] for record in history] == [3, 6]
    assert history[-1]["discriminator_auc"] == pytest.approx(values["discriminator_auc"],
                                                             rel=1e-6)
    assert len(history[-1]["sums"]["auc_positive"]) == 1000  # a vector sum, as a list
    assert sum(history[-1]["sums"]["auc_positive"]) == history[-1]["sums"]["disc_replaced"]
    # The object graph (what restores match; tensors' keys may name the optimizer's path):
    # both networks apart, the shared tables once, under the discriminator.
    prefix = os.fspath(out / f"ckpt-{STEPS}")
    paths = SavedObjectGraph(prefix).variables("model")
    for path in ("model/encoder/token_embedding/_embeddings",
                 "model/encoder/embeddings_project/_kernel",
                 "model/generator/embeddings_project/_kernel", "model/generator_head/_bias",
                 "model/discriminator_head/dense_prediction/_kernel"):
        assert path in paths, path
    assert not any(p.startswith("model/generator/token_embedding") for p in paths)
    assert any(k.startswith("rng/") for k in checkpoint_tensors(prefix))  # the sampler too
    # The trained discriminator loads alone into a BertEncoder of the run's bert_config.json.
    config = BertConfig.from_json_file(os.fspath(out / "bert_config.json"))
    encoder = BertEncoder(config)
    fresh = get_weights(encoder_weight_map(encoder))
    tf.train.Checkpoint(model=tf.train.Checkpoint(encoder=encoder)).read(prefix).expect_partial()
    trained = get_weights(encoder_weight_map(encoder))
    table = checkpoint_tensors(prefix)[paths["model/encoder/token_embedding/_embeddings"][0]]
    np.testing.assert_array_equal(trained["embeddings/word_embeddings"], table)
    assert not np.allclose(trained["layer_0/output/kernel"], fresh["layer_0/output/kernel"])


def test_a_resumed_run_follows_the_uninterrupted_trajectory(cli, straight, data, tmp_path):
    reference_dir, reference = straight
    first = cli.run(MODULE, electra_flags(data, tmp_path, max_steps_per_run=4))
    assert first.returncode == 0, first.stderr[-3000:]
    second = cli.run(MODULE, electra_flags(data, tmp_path))
    assert second.returncode == 0, second.stderr[-3000:]
    assert re.search(r"resuming from .*ckpt-4 at step 4", second.stderr)
    assert progress_steps(second.stderr) == [5, 6]
    # Masks, dropout and the generator's samples all continue where they were.
    np.testing.assert_allclose(progress_losses(first.stderr) + progress_losses(second.stderr),
                               progress_losses(reference.stderr), rtol=2e-6)
    ours = checkpoint_tensors(tmp_path / f"ckpt-{STEPS}")
    ref = checkpoint_tensors(reference_dir / f"ckpt-{STEPS}")
    assert sorted(ours) == sorted(ref)
    for key in ref:
        if key.startswith("save_counter/"):
            continue
        if isinstance(ref[key], bytes):
            assert ours[key] == ref[key], key
            continue
        np.testing.assert_allclose(ours[key], ref[key], rtol=1e-5, atol=1e-6, err_msg=key)


def test_the_discriminator_starts_from_a_bert_masked_lm_run(cli, data, tmp_path):
    bert = cli.run(MODULE, pretraining_flags(data, tmp_path / "bert", num_train_steps=2,
                                             save_checkpoints_steps=2))
    assert bert.returncode == 0, bert.stderr[-3000:]
    # One step at a vanishing rate: what the checkpoint holds is what the warm start set.
    proc = cli.run(MODULE, electra_flags(data, tmp_path / "electra", num_train_steps=1,
                                         learning_rate=1e-12, save_checkpoints_steps=1,
                                         init_checkpoint=tmp_path / "bert",
                                         init_discriminator_only="true"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "the generator from scratch" in proc.stderr
    config = BertConfig.from_json_file(os.fspath(data / "bert_config.json"))

    def encoder_of(prefix, graph):
        encoder = BertEncoder(config)
        tf.train.Checkpoint(model=tf.train.Checkpoint(**{graph: encoder})).read(
            os.fspath(prefix)).expect_partial()
        return get_weights(encoder_weight_map(encoder))

    mlm = encoder_of(tmp_path / "bert" / "ckpt-2", "encoder")
    disc = encoder_of(tmp_path / "electra" / "ckpt-1", "encoder")
    fresh = get_weights(encoder_weight_map(BertEncoder(config)))
    for name, value in mlm.items():
        if not name.startswith("pooler/"):  # ELECTRA's checkpoint need not carry it
            np.testing.assert_allclose(disc[name], value, atol=1e-9, err_msg=name)
    assert not np.allclose(mlm["layer_0/output/kernel"], fresh["layer_0/output/kernel"])
    # The generator (a quarter of the width: its own layers) is at a fresh initialisation:
    # the scale of the initialiser (a truncated normal of std 0.02), not the MLM run's.
    tensors = checkpoint_tensors(tmp_path / "electra" / "ckpt-1")
    paths = SavedObjectGraph(os.fspath(tmp_path / "electra" / "ckpt-1")).variables("model")
    kernel = tensors[paths["model/generator/embeddings_project/_kernel"][0]]
    assert kernel.shape == (16, 8) and 0.01 < kernel.std() < 0.02


@pytest.mark.parametrize("overrides, message", [
    ({"init_discriminator_only": "true"},
     "error: --init_discriminator_only needs --init_checkpoint (the encoder the discriminator "
     "starts from)"),
    ({"no_nsp": "true"}, "error: --no_nsp does not apply to --objective=electra (it has no "
                         "next-sentence head): leave it out"),
    ({"objective": "bert", "disc_weight": 10},
     "error: --disc_weight applies only with --objective=electra"),
    ({"disc_weight": 0}, "error: --disc_weight must be positive, got 0.0"),
    ({"generator_hidden_fraction": 1.5},
     r"error: --generator_hidden_fraction must be in (0, 1], got 1.5"),
])
def test_flags_that_do_not_apply_give_one_line(cli, data, tmp_path, overrides, message):
    proc = cli.run(MODULE, electra_flags(data, tmp_path / "out", **overrides))
    assert proc.returncode == 2
    assert error_lines(proc.stderr) == [message]
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("flagfile", ["electra_small.flags", "electra_budget.flags"])
def test_electra_flagfiles_parse(cli, flagfile):
    proc = cli.run(MODULE, [f"--flagfile={REPO_ROOT / 'configs' / flagfile}", "--do_train=false",
                            "--do_eval=false"])
    assert error_lines(proc.stderr) == [
        "error: at least one of --do_train or --do_eval must be true"]
