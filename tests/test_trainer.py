"""Tests of bert_tf.training.trainer (and the step functions of bert_tf.training.train_loop)
in-process, on one
CPU device with a tiny BERT: the loss reduction against a NumPy reference, gradient
accumulation and steps_per_loop against the plain loop, resume, non-finite losses, eval
results and TensorBoard summaries. Multi-replica runs are in test_distribution.py.
"""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest
import tensorflow as tf
from _pretraining_helpers import (
    blocks_dataset_fn,
    synthetic_examples,
    tiny_bert_config,
    write_tfrecords,
)

from bert_tf.core.errors import UserError
from bert_tf.data import input_config, input_validation
from bert_tf.modeling.pretraining_model import BertPretrainingModel
from bert_tf.training import optimization, resume, train_loop, trainer

STEPS = 4
BATCH = 8


def make_trainer(output_dir, *, use_nsp=True, dropout=0.0, learning_rate=1e-3, bert=None,
                 **overrides):
    config = dict(output_dir=os.fspath(output_dir), train_batch_size=BATCH, eval_batch_size=8,
                  num_train_steps=STEPS, save_checkpoints_steps=2, log_every_n_steps=2,
                  use_xla=False, use_nsp=use_nsp)
    config.update(overrides)
    bert = tiny_bert_config(hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout,
                            **(bert or {}))
    opt = optimization.OptimizerConfig(learning_rate=learning_rate, num_train_steps=STEPS,
                                       num_warmup_steps=1)
    return trainer.Trainer(
        trainer.TrainerConfig(**config), tf.distribute.OneDeviceStrategy("/cpu:0"),
        model_fn=lambda: BertPretrainingModel(bert, use_nsp=use_nsp),
        optimizer_fn=lambda: optimization.create_optimizer(opt))


def weights_of(t):
    return [v.numpy() for v in t.model.trainable_variables]


def log_softmax(x):
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def reference_metrics(model, batch, use_nsp=True):
    """The losses and accuracies of `batch` computed in NumPy from the model's logits."""
    outputs = model({k: tf.constant(v) for k, v in batch.items()}, training=False)
    mlm = log_softmax(outputs["mlm_logits"].numpy().astype(np.float64))
    ids, w = batch["masked_lm_ids"], batch["masked_lm_weights"].astype(np.float64)
    ce = -np.take_along_axis(mlm, ids[..., None], axis=-1)[..., 0]
    correct = (mlm.argmax(-1) == ids) * w
    result = {
        "masked_lm_loss": (ce * w).sum() / (w.sum() + 1e-5),
        "masked_lm_accuracy": correct.sum() / w.sum(),
    }
    result["loss"] = result["masked_lm_loss"]
    if use_nsp:
        nsp = log_softmax(outputs["nsp_logits"].numpy().astype(np.float64))
        labels = batch["next_sentence_labels"][:, 0]
        result["next_sentence_loss"] = -nsp[np.arange(len(labels)), labels].mean()
        result["next_sentence_accuracy"] = (nsp.argmax(-1) == labels).mean()
        result["loss"] += result["next_sentence_loss"]
    return result


def take(examples, start, stop):
    return {k: v[start:stop] for k, v in examples.items()}


@pytest.fixture(scope="module")
def examples():
    return synthetic_examples(64, seed=1)


@pytest.fixture(scope="module")
def baseline(tmp_path_factory, examples):
    """STEPS plain steps (batch 8, no accumulation, one step per call)."""
    t = make_trainer(tmp_path_factory.mktemp("baseline"))
    first_batch_reference = reference_metrics(t.model, take(examples, 0, BATCH))
    result = t.train(blocks_dataset_fn(examples))
    return {"trainer": t, "result": result, "weights": weights_of(t),
            "first_reference": first_batch_reference}


@pytest.fixture(scope="module")
def no_nsp(tmp_path_factory, examples):
    """2 steps of a model without the NSP head; its reference metrics before training."""
    t = make_trainer(tmp_path_factory.mktemp("no_nsp"), use_nsp=False, num_train_steps=2)
    reference = reference_metrics(t.model, take(examples, 0, BATCH), use_nsp=False)
    return {"trainer": t, "reference": reference, "result": t.train(blocks_dataset_fn(examples))}


def test_first_step_loss_is_the_global_batch_objective(baseline):
    # Step 1's loss is computed before its update, so it is the initial model's loss on the
    # first batch: sum(w*CE)/(sum(w)+1e-5) + mean NSP CE, computed independently in NumPy.
    result = baseline["result"]
    assert result.start_step == 0 and result.final_step == STEPS
    assert result.losses.shape == (STEPS,)
    assert result.losses[0] == pytest.approx(baseline["first_reference"]["loss"], rel=1e-5)
    # Training moves the weights (a broken update would leave the later losses identical).
    assert len(set(np.round(result.losses, 6))) == STEPS


def test_gradient_accumulation_equals_one_big_batch(tmp_path, examples, baseline):
    # 2 micro-batches of 4 (one with 16 masked tokens, one with 4) == one batch of 8.
    t = make_trainer(tmp_path, gradient_accumulation_steps=2)
    assert t.micro_batch_size == 4
    result = t.train(blocks_dataset_fn(examples))
    np.testing.assert_allclose(result.losses, baseline["result"].losses, rtol=2e-6)
    for ours, ref in zip(weights_of(t), baseline["weights"]):
        np.testing.assert_allclose(ours, ref, atol=2e-6)


def test_steps_per_loop_and_an_xla_optimizer_follow_the_same_trajectory(tmp_path, examples,
                                                                       baseline):
    # 3 steps per loop: loops of 2 (to the checkpoint at step 2), then 2 (end), each in host
    # calls sized by preemption.HostLoop. The optimizer update is XLA-compiled here, in graph
    # mode in the baseline (a run too short for XLA to pay).
    assert not baseline["trainer"].steps.xla_optimizer
    t = make_trainer(tmp_path, steps_per_loop=3, xla_optimizer=True)
    assert t.steps.xla_optimizer
    result = t.train(blocks_dataset_fn(examples))
    # An explicit choice is kept whatever the length: train() does not undo it for these 4
    # steps, too few for XLA to pay (train_loop.xla_optimizer_pays).
    assert not train_loop.xla_optimizer_pays(STEPS) and t.steps.xla_optimizer
    np.testing.assert_allclose(result.losses, baseline["result"].losses, rtol=1e-6)
    for ours, ref in zip(weights_of(t), baseline["weights"]):
        np.testing.assert_allclose(ours, ref, atol=1e-6)
    assert sorted(os.path.basename(p) for p in glob.glob(str(tmp_path / "ckpt-*.index"))) == [
        "ckpt-2.index", "ckpt-4.index"]


def tfrecord_dataset_fn(path):
    """The real pipeline over one file, in file order (no shuffle, no repeat)."""
    return trainer.pretraining_dataset_fn(input_config.InputConfig(
        input_patterns=os.fspath(path), batch_size=1, max_seq_length=16,
        max_predictions_per_seq=4, vocab_size=128, is_training=False, drop_remainder=True,
        compression="", use_v2_feature_names=False, validate_files=False))


def corrupt_records(path, count):
    """Flips a byte in the data of the first `count` records of a TFRecord file, in place
    (offsets unchanged): reading any of them fails its CRC check."""
    data = bytearray(open(path, "rb").read())
    offset = 0
    for _ in range(count):
        length = int.from_bytes(data[offset:offset + 8], "little")
        data[offset + 12] ^= 0xFF  # the first data byte
        offset += 8 + 4 + length + 4
    open(path, "wb").write(bytes(data))


def test_resume_restores_dropout_rng_and_input_position_without_reading_consumed_records(
        tmp_path, examples):
    # Dropout on: the resumed run must also restore the dropout RNG state. The real
    # pipeline's input position too: the records of steps 1-2 are made unreadable after the
    # checkpoint at step 2 (skipping them, as resume did before, fails). The uninterrupted
    # reference reads the same batches from memory (the file holds the examples in order).
    straight = make_trainer(tmp_path / "straight", dropout=0.2)
    full = straight.train(blocks_dataset_fn(examples))
    split_file = tmp_path / "split.tfrecord"
    write_tfrecords(split_file, examples)
    part1 = make_trainer(tmp_path / "split", dropout=0.2, max_steps_per_run=2).train(
        tfrecord_dataset_fn(split_file))
    assert (part1.start_step, part1.final_step) == (0, 2)
    layout = resume.saved_layout(os.fspath(tmp_path / "split" / "ckpt-2"))
    assert layout.startswith("1 replica(s), per-replica batches "), layout
    corrupt_records(split_file, 2 * BATCH)
    # The file really is unreadable there: the pipeline fails at its first batch with the
    # error the trainer reports (Trainer._call's conversion).
    with pytest.raises(tf.errors.OpError) as raised:
        next(iter(tfrecord_dataset_fn(split_file)(None, BATCH)))
    assert "corrupt" in str(input_validation.user_error_from(raised.value))
    second = make_trainer(tmp_path / "split", dropout=0.2)  # fresh model and optimizer
    part2 = second.train(tfrecord_dataset_fn(split_file))
    assert (part2.start_step, part2.final_step) == (2, STEPS)
    np.testing.assert_allclose(np.concatenate([part1.losses, part2.losses]), full.losses,
                               rtol=1e-6)
    for ours, ref in zip(weights_of(second), weights_of(straight)):
        np.testing.assert_allclose(ours, ref, atol=1e-6)
    # A finished run started again trains no further.
    again = make_trainer(tmp_path / "split", dropout=0.2).train(tfrecord_dataset_fn(split_file))
    assert (again.start_step, again.final_step, again.losses.size) == (STEPS, STEPS, 0)


def test_a_checkpoint_without_input_position_resumes_by_skipping(tmp_path, examples, baseline,
                                                                 caplog, monkeypatch):
    # A checkpoint of a strategy that cannot save the input (or of an older version): the
    # resumed run reads and drops the consumed batches, says so, and stays on the trajectory
    # (the baseline's: the same trainer settings and input, uninterrupted).
    full = baseline["result"]
    monkeypatch.setattr(resume, "unsupported_reason", lambda strategy: "not here")
    part1 = make_trainer(tmp_path / "split", max_steps_per_run=2).train(
        blocks_dataset_fn(examples))
    assert resume.saved_layout(os.fspath(tmp_path / "split" / "ckpt-2")) is None
    monkeypatch.undo()
    caplog.set_level("INFO", logger="absl")  # whatever an earlier test left
    part2 = make_trainer(tmp_path / "split", max_steps_per_run=1).train(
        blocks_dataset_fn(examples))
    assert ("input position not restored (the checkpoint has no input position): skipping "
            "the 2 steps' batches already consumed") in caplog.text
    # The new checkpoints hold the input position again, and the next resume restores it.
    assert resume.saved_layout(os.fspath(tmp_path / "split" / "ckpt-3")) is not None
    caplog.clear()
    part3 = make_trainer(tmp_path / "split").train(blocks_dataset_fn(examples))
    assert "input position not restored" not in caplog.text
    np.testing.assert_allclose(np.concatenate([part1.losses, part2.losses, part3.losses]),
                               full.losses, rtol=1e-6)


def test_non_finite_loss_stops_naming_the_step_without_saving(tmp_path, examples):
    poisoned = {k: v.copy() for k, v in examples.items()}
    poisoned["masked_lm_weights"][3 * BATCH + 3, 0] = np.nan  # in the batch of step 4
    t = make_trainer(tmp_path, num_train_steps=6)
    # Step 3's loss was healthy: ckpt-2 (saved before it) is good.
    with pytest.raises(UserError, match=r"non-finite loss \(nan\) at step 4;.*last good "
                                        r"checkpoint: .*ckpt-2, kept"):
        t.train(blocks_dataset_fn(poisoned))
    assert tf.train.latest_checkpoint(os.fspath(tmp_path)).endswith("ckpt-2")


def test_bad_input_inside_the_graph_becomes_a_user_error(tmp_path, examples):
    def bad_dataset_fn(context, per_replica_batch):
        def check(batch):
            tf.debugging.assert_less(batch["input_ids"], 10, message="bert_tf input: id too big")
            return batch

        return blocks_dataset_fn(examples)(context, per_replica_batch).map(check)

    t = make_trainer(tmp_path)
    with pytest.raises(UserError, match="^id too big"):
        t.train(bad_dataset_fn)


def test_eval_results_match_reference_and_file_format(examples, baseline):
    t = baseline["trainer"]
    eval_examples = take(examples, 0, 24)
    # Two batches of 8 out of 24 examples.
    results = t.evaluate(blocks_dataset_fn(eval_examples, repeat=False), max_steps=2)
    assert results["global_step"] == STEPS
    reference = reference_metrics(t.model, take(eval_examples, 0, 16))
    for key, value in reference.items():
        assert results[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
    text = open(os.path.join(t.config.output_dir, "eval_results.txt")).read()
    keys = [line.split(" = ")[0] for line in text.splitlines()]
    assert keys == ["global_step", "loss", "masked_lm_accuracy", "masked_lm_loss",
                    "next_sentence_accuracy", "next_sentence_loss"]
    assert f"global_step = {STEPS}\n" in text
    assert f"loss = {str(np.float32(results['loss']))}\n" in text
    # More steps than data, a bound beyond int32 ("until the data ends"): the eval stops at
    # the end of the 24 examples.
    everything = t.evaluate(blocks_dataset_fn(eval_examples, repeat=False), max_steps=2**40)
    assert everything["loss"] == pytest.approx(reference_metrics(t.model, eval_examples)["loss"],
                                               rel=1e-5)


def test_eval_only_restores_every_model_variable_or_names_what_is_missing(no_nsp, baseline):
    no_nsp_dir = no_nsp["trainer"].config.output_dir  # its checkpoint: ckpt-2
    # An NSP model from a checkpoint without the NSP head: its weights would stay random.
    with pytest.raises(UserError, match=r"^cannot evaluate .*ckpt-2: it does not match this "
                                        r"model \(missing: model/nsp_head/"):
        make_trainer(no_nsp_dir).restore_for_eval()
    # Another model size: every shape that holds the hidden size differs, 15 in the one
    # layer (q/k/v kernels and biases, attention output kernel and bias, both layer norms,
    # the intermediate kernel, the output kernel and bias) and 12 outside it.
    baseline_dir = baseline["trainer"].config.output_dir
    with pytest.raises(UserError, match=rf"^cannot evaluate .*ckpt-{STEPS}: it does not match "
                                        r"this model \(shape mismatch: model/\S+ \[32, 64\] vs "
                                        r"\[48, 64\], .* \(27 in all\)\); was it trained"):
        make_trainer(baseline_dir, bert={"hidden_size": 48}).restore_for_eval()
    # A checkpoint with more than the model needs (the NSP head, evaluated without NSP) is
    # fine: every model variable gets the trained value.
    t = make_trainer(baseline_dir, use_nsp=False)
    t.restore_for_eval()
    assert int(t.step.numpy()) == STEPS
    trained = {v.path: v.numpy() for v in baseline["trainer"].model.encoder.weights}
    for v in t.model.encoder.weights:
        np.testing.assert_array_equal(v.numpy(), trained[v.path])


def test_no_nsp_trains_the_masked_lm_only(no_nsp, examples):
    t, result = no_nsp["trainer"], no_nsp["result"]
    assert t.model.nsp_head is None
    assert result.losses[0] == pytest.approx(no_nsp["reference"]["masked_lm_loss"], rel=1e-5)
    assert set(result.last_report) == {"loss", "masked_lm_loss", "masked_lm_accuracy",
                                       "learning_rate", "examples_per_second"}
    results = t.evaluate(blocks_dataset_fn(take(examples, 0, 16), repeat=False))
    assert set(results) == {"loss", "masked_lm_loss", "masked_lm_accuracy", "global_step"}
    assert results["loss"] == results["masked_lm_loss"]


def test_progress_is_written_as_tensorboard_scalars(baseline):
    event_files = glob.glob(os.path.join(baseline["trainer"].config.output_dir, "train",
                                         "events.out.tfevents.*"))
    assert len(event_files) == 1
    scalars = {}
    for event in tf.compat.v1.train.summary_iterator(event_files[0]):
        for value in event.summary.value:
            scalars.setdefault(value.tag, []).append(
                (event.step, float(tf.make_ndarray(value.tensor))))
    assert {"loss", "masked_lm_loss", "masked_lm_accuracy", "next_sentence_loss",
            "next_sentence_accuracy", "learning_rate", "examples_per_second"} <= set(scalars)
    losses = baseline["result"].losses
    # Reports after the first step, then at steps 2 and 4, each the mean of its step losses.
    assert [s for s, _ in scalars["loss"]] == [1, 2, 4]
    np.testing.assert_allclose([v for _, v in scalars["loss"]],
                               [losses[0], losses[1], losses[2:].mean()], rtol=1e-6)
    # Warmup of 1 step then linear decay over 4: lr(1) = 1e-3 * (1 - 1/4), lr(2) = 1e-3 *
    # (1 - 2/4), lr(4) = 0.
    np.testing.assert_allclose([v for _, v in scalars["learning_rate"]], [7.5e-4, 5e-4, 0.0],
                               atol=1e-9)


def test_the_optimizer_update_is_xla_compiled_in_runs_long_enough_to_pay_for_it(tmp_path):
    least = train_loop.XLA_OPTIMIZER_MIN_STEPS
    assert train_loop.xla_optimizer_pays(least) and not train_loop.xla_optimizer_pays(least - 1)
    assert make_trainer(tmp_path, num_train_steps=least).steps.xla_optimizer


def test_the_xla_optimizer_choice_counts_the_steps_this_process_runs(tmp_path, examples):
    # Planned long enough, but this process runs 2 steps (a slice; a resume near the end
    # is the same arithmetic, stop - start): the update stays in graph mode.
    least = train_loop.XLA_OPTIMIZER_MIN_STEPS
    t = make_trainer(tmp_path, num_train_steps=least, max_steps_per_run=2)
    assert t.steps.xla_optimizer  # the plan's choice, before train() knows where it starts
    result = t.train(blocks_dataset_fn(examples))
    assert len(result.losses) == 2 and not t.steps.xla_optimizer
    # An explicit choice is kept whatever the length: in
    # test_steps_per_loop_and_an_xla_optimizer_follow_the_same_trajectory.


def test_batch_sizes_must_divide(tmp_path):
    # Checked before anything is built (the arithmetic is in test_distribution.py).
    with pytest.raises(UserError, match=r"--train_batch_size=30 is not divisible by 1 replicas "
                                        r"x 4 accumulation steps \(= 4\)"):
        trainer.Trainer(trainer.TrainerConfig(
            output_dir=os.fspath(tmp_path), train_batch_size=30, gradient_accumulation_steps=4),
            tf.distribute.OneDeviceStrategy("/cpu:0"), None, None)
    with pytest.raises(UserError, match="--steps_per_loop must be positive"):
        trainer.TrainerConfig(output_dir=os.fspath(tmp_path), steps_per_loop=0)


def test_format_eval_results_prints_like_the_original():
    text = trainer.format_eval_results({"loss": 0.12, "global_step": 7,
                                        "masked_lm_accuracy": np.float32(0.5)})
    assert text == "global_step = 7\nloss = 0.12\nmasked_lm_accuracy = 0.5\n"
