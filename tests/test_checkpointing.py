"""Tests of bert_tf.training.checkpointing: saving/restoring the training state,
interrupt-safe saves,
stale temporaries, and warm-starting model weights with a report of missing/unused ones.
"""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest
import tensorflow as tf
from _pretraining_helpers import tiny_bert_config

from bert_tf.core.errors import UserError
from bert_tf.modeling.pretraining_model import BertPretrainingModel, dummy_pretraining_inputs
from bert_tf.training import checkpointing, optimization


def test_deferred_interrupts_delay_ctrl_c_until_the_block_ends():
    steps = []
    previous = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        with checkpointing.deferred_interrupts():
            os.kill(os.getpid(), signal.SIGINT)
            steps.append("after the signal")  # the block was not cut short
    assert steps == ["after the signal"]
    assert signal.getsignal(signal.SIGINT) is previous
    with checkpointing.deferred_interrupts():  # no signal: no exception
        steps.append("quiet")
    assert steps[-1] == "quiet"


def make_state(hidden=32, use_nsp=True, dropout=0.0):
    model = BertPretrainingModel(
        tiny_bert_config(hidden_size=hidden, hidden_dropout_prob=dropout), use_nsp=use_nsp)
    model(dummy_pretraining_inputs())
    optimizer = optimization.create_optimizer(optimization.OptimizerConfig(
        learning_rate=1e-3, num_train_steps=10, num_warmup_steps=0))
    optimizer.build(model.trainable_variables)
    step = tf.Variable(0, dtype=tf.int64)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step,
                                     rng=checkpointing.seed_state_variables(model))
    return model, optimizer, step, checkpoint


def test_save_and_restore_the_training_state(tmp_path):
    model, optimizer, step, checkpoint = make_state()
    saver = checkpointing.CheckpointSaver(os.fspath(tmp_path), checkpoint, step, max_to_keep=2)
    assert saver.restore_latest() is None  # nothing to resume
    optimizer.iterations.assign(7)
    optimizer._m[0].assign(tf.fill(optimizer._m[0].shape, 0.25))
    saved_weights = [v.numpy() for v in model.weights]
    for s in (1, 2, 3):
        step.assign(s)
        path = saver.save()
    assert path == os.path.join(os.fspath(tmp_path), "ckpt-3")
    assert saver.save() == path  # same step: not written twice
    # max_to_keep=2
    assert sorted(p.name for p in tmp_path.glob("ckpt-*.index")) == ["ckpt-2.index",
                                                                      "ckpt-3.index"]

    model2, optimizer2, step2, checkpoint2 = make_state()
    saver2 = checkpointing.CheckpointSaver(os.fspath(tmp_path), checkpoint2, step2)
    assert saver2.restore_latest() == 3
    assert int(optimizer2.iterations.numpy()) == 7
    np.testing.assert_array_equal(optimizer2._m[0].numpy(), 0.25)
    for a, b in zip(model2.weights, saved_weights):
        np.testing.assert_array_equal(a.numpy(), b)


def test_a_non_chief_worker_names_the_chiefs_checkpoint(tmp_path):
    # Worker 1 only takes part in saves (its copy is deleted at once): its `latest`, which the
    # trainer prints when it resumes or stops, is the chief's checkpoint in output_dir.
    _, _, step, checkpoint = make_state()
    step.assign(5)
    chief = checkpointing.CheckpointSaver(os.fspath(tmp_path), checkpoint, step)
    worker = checkpointing.CheckpointSaver(os.fspath(tmp_path), checkpoint, step, worker_index=1)
    assert worker.latest is None
    assert chief.save() == worker.save() == worker.latest == os.path.join(tmp_path, "ckpt-5")
    assert not list(tmp_path.glob("tmp_worker_checkpoints/worker-1/ckpt-*"))
    _, _, step2, checkpoint2 = make_state()
    resumed = checkpointing.CheckpointSaver(os.fspath(tmp_path), checkpoint2, step2,
                                            worker_index=1)
    assert resumed.restore_latest() == 5
    assert resumed.latest == os.path.join(tmp_path, "ckpt-5")


def test_resume_into_another_model_is_a_user_error(tmp_path):
    _, _, step, checkpoint = make_state()
    step.assign(4)
    checkpointing.CheckpointSaver(os.fspath(tmp_path), checkpoint, step).save()
    _, _, step2, other = make_state(hidden=64)
    saver = checkpointing.CheckpointSaver(os.fspath(tmp_path), other, step2)
    with pytest.raises(UserError, match=r"cannot resume from .*ckpt-4: it does not match this "
                                        r"model and optimizer \(shape mismatch: model/\S+ "
                                        r"\[32, 64\] vs \[64, 64\]"):
        saver.restore_latest()
    # A model without the NSP head: its variables are unexpected in the checkpoint.
    _, _, step3, no_nsp = make_state(use_nsp=False)
    with pytest.raises(UserError, match=r"\(unexpected: model/nsp_head/"):
        checkpointing.CheckpointSaver(os.fspath(tmp_path), no_nsp, step3).restore_latest()


def test_restore_without_leaves_an_optional_root_out_either_way(tmp_path):
    model, _, step, checkpoint = make_state()
    checkpoint.extra = tf.Variable(3.0)
    step.assign(2)
    checkpointing.CheckpointSaver(os.fspath(tmp_path), checkpoint, step).save()
    model2, _, step2, plain = make_state()
    # The checkpoint has "extra", this state has not: strict about everything else.
    assert checkpointing.CheckpointSaver(os.fspath(tmp_path), plain, step2).restore_latest(
        without=("extra",)) == 2
    for a, b in zip(model2.weights, model.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    with pytest.raises(UserError, match=r"\(unexpected: extra\)"):
        checkpointing.CheckpointSaver(os.fspath(tmp_path), plain, step2).restore_latest()


def test_sigterm_requests_record_the_signal_instead_of_ending_the_process():
    previous = signal.getsignal(signal.SIGTERM)
    with checkpointing.sigterm_requests() as received:
        assert not received
        os.kill(os.getpid(), signal.SIGTERM)
        assert received == [signal.SIGTERM]  # still running: the caller decides when to stop
    assert signal.getsignal(signal.SIGTERM) is previous


def test_stale_temporaries_of_a_killed_save_are_removed(tmp_path):
    (tmp_path / "ckpt-7_temp").mkdir()
    (tmp_path / "ckpt-7_temp" / "part-00000-of-00001.data-00000-of-00001").write_bytes(b"x")
    (tmp_path / "checkpoint.tmp1234abcd").write_text("partial")
    (tmp_path / "keep.txt").write_text("unrelated")
    _, _, step, checkpoint = make_state()
    checkpointing.CheckpointSaver(os.fspath(tmp_path), checkpoint, step)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]


def test_dropout_rng_state_is_part_of_the_checkpoint(tmp_path):
    model, _, step, checkpoint = make_state(dropout=0.1)
    states = checkpointing.seed_state_variables(model)
    assert states and all("seed_generator_state" in v.path for v in states)
    path = checkpoint.write(os.fspath(tmp_path / "c"))
    keys = [k for k, _ in tf.train.list_variables(path)]
    assert sum(k.startswith("rng/") for k in keys) == len(states)


def test_model_variable_paths_match_the_checkpoint_object_graph(tmp_path):
    model, _, _, checkpoint = make_state()
    path = checkpoint.write(os.fspath(tmp_path / "c"))
    ours = checkpointing.model_variable_paths("model", model)
    saved = checkpointing.checkpoint_variable_paths(path, "model")
    assert len(ours) == len(model.weights)
    assert set(ours) == set(saved)
    assert "model/encoder/token_embedding/_embeddings" in saved
    assert saved["model/encoder/token_embedding/_embeddings"] == [128, 32]
    # Most tensor keys go through the optimizer (its shortest path), not through "model/",
    # which is why matching uses the object graph.
    keys = [k for k, _ in tf.train.list_variables(path)]
    assert sum(k.startswith("model/") for k in keys) < len(ours)


def test_warm_start_loads_model_weights_only_and_reports_differences(tmp_path, caplog):
    source, source_opt, step, checkpoint = make_state(use_nsp=True)
    for v in source.weights:  # distinguishable from any fresh initialization
        v.assign(v + 0.5)
    step.assign(5)
    checkpointing.CheckpointSaver(os.fspath(tmp_path), checkpoint, step).save()

    target, target_opt, _, _ = make_state(use_nsp=False)
    # A directory means its latest checkpoint.
    report = checkpointing.warm_start(target, os.fspath(tmp_path))
    assert report.checkpoint == os.path.join(os.fspath(tmp_path), "ckpt-5")
    assert report.missing == ()
    assert report.unused == ("model/nsp_head/_kernel", "model/nsp_head/bias")
    assert len(report.restored) == len(target.weights)
    for a, b in zip(target.encoder.weights, source.encoder.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert int(target_opt.iterations.numpy()) == 0  # optimizer untouched
    assert "2 checkpoint variables UNUSED by this model: model/nsp_head/_kernel" in caplog.text

    # The other way round: the NSP head is missing and keeps its initial values.
    plain, _, step2, checkpoint2 = make_state(use_nsp=False)
    prefix = checkpoint2.write(os.fspath(tmp_path / "no_nsp" / "ckpt-1"))
    with_nsp, _, _, _ = make_state(use_nsp=True)
    initial_nsp = with_nsp.nsp_head.kernel.numpy()
    report = checkpointing.warm_start(with_nsp, prefix)
    assert report.missing == ("model/nsp_head/_kernel", "model/nsp_head/bias")
    assert report.unused == ()
    np.testing.assert_array_equal(with_nsp.nsp_head.kernel.numpy(), initial_nsp)
    assert "2 model variables NOT in the checkpoint" in caplog.text


def test_warm_start_errors(tmp_path):
    model, _, step, checkpoint = make_state()
    with pytest.raises(UserError, match="no checkpoint there"):
        checkpointing.warm_start(model, os.fspath(tmp_path / "nothing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="the directory has no checkpoint"):
        checkpointing.warm_start(model, os.fspath(tmp_path / "empty"))
    wide, _, _, wide_checkpoint = make_state(hidden=64)
    prefix = wide_checkpoint.write(os.fspath(tmp_path / "wide" / "ckpt-1"))
    with pytest.raises(UserError, match=r"variable\(s\) have other shapes in the checkpoint"):
        checkpointing.warm_start(model, prefix)
    other = tf.train.Checkpoint(weights=tf.Variable([1.0])).write(os.fspath(tmp_path / "o" / "c"))
    with pytest.raises(UserError, match="no 'model' variables"):
        checkpointing.warm_start(model, other)
