"""Tests of run health: bert_tf.training.health (divergence stop) and
bert_tf.training.eval_history (evaluation during training, eval_history.jsonl).

- the spike detector on hand-made loss sequences: no trip during warmup or on ordinary
  noise, a trip on a 3x jump after warmup and on NaN/Inf, the last good checkpoint chosen;
- the absolute bound (3 x the uniform-guess loss + 5, hand-computed): a trip from step 2 on,
  warmup or not, history or not (a resumed run's first loss), never on a healthy start;
- eval_history.jsonl: append, torn lines, a step evaluated twice, the schedule and timing;
- in-process: periodic evaluation leaves the trajectory (losses and final weights, dropout
  on) exactly as without it, lands on multiples of N and agrees with `Trainer.evaluate`;
- end to end (`python -m bert_tf.run_pretraining`): the learning rate 50 of the issue's
  run stops in its first loop with one `error:` line that names no checkpoint good, and a
  rerun of the same command starts from the initial weights and stops with the same line; a
  healthy run whose learning rate is raised at a resume stops naming its last good
  checkpoint (which restores, and which a rerun at a sane learning rate resumes from);
  `--eval_every_n_steps` with `--dynamic_masking --masked_lm_prob=0.4` writes the history,
  console lines and summaries, and evaluates masks drawn at 15%.
"""

from __future__ import annotations

import glob
import json
import math
import os
import re

import numpy as np
import pytest
import tensorflow as tf
from _pretraining_helpers import (
    blocks_dataset_fn,
    error_lines,
    pretraining_flags,
    progress_steps,
    synthetic_examples,
    tiny_bert_config,
    write_bert_config,
    write_tfrecords,
    write_tiny_vocab,
)

from bert_tf.core import masking_rules
from bert_tf.core.errors import UserError
from bert_tf.modeling.pretraining_model import BertPretrainingModel
from bert_tf.training import (
    checkpoint_health,
    checkpoint_paths,
    eval_history,
    health,
    optimization,
    trainer,
)
from bert_tf.training.health import Divergence, DivergenceDetector

MODULE = "bert_tf.run_pretraining"
ADVICE = re.escape(health.ADVICE)


# ----------------------------------------------------------------- the spike detector


def feed(detector, losses, steps_per_loop=1, first_step=1):
    """Feeds per-step losses loop by loop; returns the first Divergence (or None)."""
    for start in range(0, len(losses), steps_per_loop):
        found = detector.observe(first_step + start, losses[start:start + steps_per_loop])
        if found:
            return found
    return None


def test_no_trip_during_warmup_even_on_a_3x_jump():
    detector = DivergenceDetector(threshold=2.0, warmup_steps=10)
    assert feed(detector, [6.0] * 6 + [18.0] * 4) is None  # steps 7-10: inside the warmup
    assert detector.level() == 6.0  # the median ignores the four jumps among ten


def test_trips_on_a_3x_jump_after_warmup_at_its_first_step():
    detector = DivergenceDetector(threshold=2.0, warmup_steps=5)
    losses = [7.0, 6.0, 5.0, 4.0, 3.5, 3.0, 3.0, 3.2, 9.0, 9.5, 30.0]
    # One-step loops: step 9 alone does not trip (the median of steps 7-9 is 3.2); step 10
    # does (median of steps 8-10: 9.0, above 2 x 4.0, the median of steps 1-9), and the
    # divergence is dated at the first step above the bar by itself.
    found = feed(detector, losses)
    assert found == Divergence(step=9, loss=9.0, level=4.0)
    # A loop of 4 steps whose mean is above the bar: the first step above it by itself (6.0
    # is not above 2 x 3.0).
    detector = DivergenceDetector(threshold=2.0, warmup_steps=0)
    assert feed(detector, [3.0] * 12 + [3.1, 6.0, 12.0, 12.0], steps_per_loop=4) == Divergence(
        step=15, loss=12.0, level=3.0)


def test_ordinary_noise_and_falling_losses_do_not_trip():
    rng = np.random.default_rng(0)
    steps = np.arange(1, 20001)
    # A pretraining-like curve (10.4 -> ~2) with 5% per-step noise, more than small batches
    # give.
    curve = (2.0 + 8.4 * np.exp(-steps / 3000)) * (1 + 0.05 * rng.standard_normal(steps.size))
    assert feed(DivergenceDetector(warmup_steps=100), curve.tolist()) is None
    assert feed(DivergenceDetector(warmup_steps=100), curve.tolist(), steps_per_loop=50) is None
    # Fine-tuning: a loss near 0.05 that reads up to 0.6 on hard batches is 12x its level
    # but under 1 nat above it.
    small = np.abs(0.05 + 0.02 * rng.standard_normal(3000))
    small[::97] = 0.6
    assert feed(DivergenceDetector(), small.tolist()) is None
    # The same jump above 1 nat, held for two steps, does stop it.
    found = feed(DivergenceDetector(), small[:200].tolist() + [1.2, 1.2])
    assert (found.step, found.loss) == (201, 1.2) and 0.03 < found.level < 0.1


def test_one_hard_batch_does_not_stop_a_one_step_loop_run_but_two_of_three_do():
    # An STS-B fine-tuning (MSE loss ~1.13, one step per loop) was stopped by one batch at
    # 2.4: 2.1x its level and 1.27 above it.
    level = [1.13, 1.10, 1.16, 1.12, 1.13] * 4  # median 1.13
    assert feed(DivergenceDetector(), level + [2.4] + level) is None
    assert feed(DivergenceDetector(), level + [2.4, 1.1, 2.5] + level) == Divergence(
        step=21, loss=2.4, level=1.13)
    # spike_steps=1 is the single-step rule: the one batch trips it.
    assert feed(DivergenceDetector(spike_steps=1), level + [2.4]) == Divergence(
        step=21, loss=2.4, level=1.13)
    # A loop of 3 steps or more is judged by its own mean, as before.
    assert feed(DivergenceDetector(), [1.13] * 18 + [2.4, 2.5, 2.6], steps_per_loop=3) == \
        Divergence(step=19, loss=2.4, level=1.13)
    with pytest.raises(ValueError, match="spike_steps"):
        DivergenceDetector(spike_steps=0)


def test_a_step_above_the_bar_withholds_the_vouch_until_it_leaves_the_window():
    detector = DivergenceDetector()
    assert feed(detector, [1.13] * 20) is None and detector.vouches()
    # Step 21 could still be the first step of a spike that steps 22-23 confirm: the
    # checkpoint saved after step 20 is not yet vouched for, nor after step 22.
    assert [(detector.observe(step, [loss]), detector.vouches())
            for step, loss in [(21, 2.4), (22, 1.1), (23, 1.1)]] == [
        (None, False), (None, False), (None, True)]


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_non_finite_loss_trips_at_once_warmup_or_not(bad):
    detector = DivergenceDetector(threshold=0, warmup_steps=1000)  # spike rule off
    assert feed(detector, [5.0, 5.0]) is None
    found = detector.observe(3, [5.0, bad, 5.0])
    assert found.step == 4 and found.non_finite and (found.loss == bad or math.isnan(bad))


def test_the_spike_rule_waits_for_history_and_can_be_turned_off():
    # A resumed run starts without history: three loops before the rule acts.
    assert feed(DivergenceDetector(), [3.0, 3.0, 50.0]) is None
    assert feed(DivergenceDetector(), [3.0, 3.0, 3.0, 50.0, 50.0]) == Divergence(
        step=4, loss=50.0, level=3.0)
    assert feed(DivergenceDetector(threshold=0), [3.0] * 10 + [1e6]) is None
    for bad in (0.5, 1.0, -2.0):
        with pytest.raises(UserError, match=rf"^--divergence_threshold must be 0 \(off\) or "
                                            rf"above 1, got {bad}$"):
            DivergenceDetector(threshold=bad)


def test_the_last_good_checkpoint_is_the_newest_whose_next_loss_was_healthy():
    saved = ["/run/ckpt-2", "/run/ckpt-4", "/run/ckpt-6"]
    # The loss of step 7 comes from the state saved at step 6: ckpt-6 is condemned.
    spike = Divergence(step=7, loss=30.0, level=3.0)
    assert spike.last_good_checkpoint(saved) == "/run/ckpt-4"
    assert spike.message(saved) == (
        "loss diverged at step 7: 30, 10.0x its recent level 3; stopped without saving it "
        f"(last good checkpoint: /run/ckpt-4, kept; a rerun resumes from it); {health.ADVICE}")
    assert Divergence(step=8, loss=30.0, level=3.0).last_good_checkpoint(saved) == "/run/ckpt-6"
    # Only checkpoints whose next loss was seen healthy (the record's vouched step) are good.
    assert spike.last_good_checkpoint(saved, vouched_step=2) == "/run/ckpt-2"
    assert spike.last_good_checkpoint(saved, vouched_step=-1) is None
    nan = Divergence(step=3, loss=math.nan)
    assert nan.condemned(["/run/ckpt-1", "/run/ckpt-2"]) == ["/run/ckpt-2"]
    assert nan.message(["/run/ckpt-2"]) == (
        "non-finite loss (nan) at step 3; stopped without saving it (no good checkpoint: "
        "ckpt-2 held diverged states, deleted; a rerun starts from the initial weights); "
        f"{health.ADVICE}")
    assert nan.message([]) == (
        "non-finite loss (nan) at step 3; stopped without saving it (no good checkpoint: it "
        "diverged before any checkpoint; a rerun starts from the initial weights); "
        f"{health.ADVICE}")


# BERT-base's heads: ln 30522 + ln 2 = 10.32620 + 0.69315 = 11.01935.
BERT_UNIFORM = math.log(30522) + math.log(2)


def test_the_absolute_bound_is_three_times_the_uniform_loss_plus_five():
    assert BERT_UNIFORM == pytest.approx(11.01935, abs=1e-5)
    assert health.absolute_bound(BERT_UNIFORM) == pytest.approx(38.05805, abs=1e-5)
    assert health.absolute_bound(math.log(2)) == pytest.approx(7.07944, abs=1e-5)  # binary
    with pytest.raises(ValueError, match="uniform_loss"):
        DivergenceDetector(uniform_loss=0.0)


def test_the_absolute_bound_trips_in_the_first_loop_warmup_or_not():
    # The issue's run: 17,651 at step 5 of a 5-step loop, inside a 5-step warmup, no
    # history. The first step above 38.06 is the divergence (step 1 is never judged).
    detector = DivergenceDetector(warmup_steps=5, uniform_loss=BERT_UNIFORM)
    found = detector.observe(1, [11.1, 12.0, 39.0, 900.0, 17651.0])
    assert found == Divergence(step=3, loss=39.0, uniform=BERT_UNIFORM)
    assert found.message([]) == (
        "loss diverged at step 3: 39, above 38.1 (3 x 11.02, the loss of a uniform guess, + 5);"
        " stopped without saving it (no good checkpoint: it diverged before any checkpoint; a "
        f"rerun starts from the initial weights); {health.ADVICE}")
    assert Divergence(5, 17651.0, uniform=BERT_UNIFORM).message([]).startswith(
        "loss diverged at step 5: 17,651, above 38.1 ")
    # Step 1's loss is the starting weights', which the run did not make.
    assert DivergenceDetector(uniform_loss=BERT_UNIFORM).observe(1, [500.0]) is None
    # Just under the bound, a healthy start (and a high one) does not trip, with the spike
    # rule off or on.
    for threshold in (0, 2.0):
        detector = DivergenceDetector(threshold, warmup_steps=3, uniform_loss=BERT_UNIFORM)
        assert feed(detector, [11.2, 11.5, 38.0, 10.9, 10.5, 10.0]) is None
    # The first bad step wins, whichever rule.
    assert DivergenceDetector(uniform_loss=BERT_UNIFORM).observe(1, [11.0, math.nan]).non_finite
    assert DivergenceDetector(uniform_loss=BERT_UNIFORM).observe(
        1, [11.0, 40.0, math.nan]).step == 2


def test_a_resumed_run_is_judged_by_its_first_loss():
    # The rerun of the issue: resumed from ckpt-40, whose state gives about 200,000; no
    # history, and the recent level would be as high anyway.
    detector = DivergenceDetector(uniform_loss=BERT_UNIFORM)
    found = detector.observe(41, [2.0e5, 1.9e5, 2.1e5])
    assert (found.step, found.loss) == (41, 2.0e5)
    assert found.last_good_checkpoint(["/run/ckpt-20", "/run/ckpt-40"], vouched_step=-1) is None
    assert found.condemned(["/run/ckpt-20", "/run/ckpt-40"]) == ["/run/ckpt-40"]
    # A healthy resumed loop vouches for the state it resumed from.
    detector = DivergenceDetector(uniform_loss=BERT_UNIFORM)
    assert detector.observe(41, [2.5, 2.4]) is None and detector.vouches()


# ----------------------------------------------------------------- eval_history.jsonl


def test_history_appends_lines_and_reads_past_a_torn_one(tmp_path):
    path = os.fspath(tmp_path / eval_history.EVAL_HISTORY_FILE)
    assert eval_history.read_eval_history(os.fspath(tmp_path)) == []
    eval_history.append_record(path, {"step": 2, "loss": 5.0})
    eval_history.append_record(path, {"step": 4, "loss": 4.0})
    with open(path, "a") as f:
        f.write('{"step": 6, "lo')  # a crash in the middle of a line
    assert [r["step"] for r in eval_history.read_eval_history(path)] == [2, 4]
    # A resumed run evaluates step 4 again, then goes on: the torn line stays on its own.
    eval_history.append_record(path, {"step": 4, "loss": 3.9})
    eval_history.append_record(path, {"step": 6, "loss": 3.5})
    lines = open(path).read().splitlines()
    assert lines[2] == '{"step": 6, "lo' and len(lines) == 5
    assert eval_history.read_eval_history(os.fspath(tmp_path)) == [
        {"step": 2, "loss": 5.0}, {"step": 4, "loss": 3.9}, {"step": 6, "loss": 3.5}]


def test_periodic_eval_schedule_and_training_seconds(tmp_path):
    now = [100.0]
    periodic = eval_history.PeriodicEval(os.fspath(tmp_path), 5, start_step=5, write=True,
                                         clock=lambda: now[0])
    assert [periodic.steps_to_next(s) for s in (5, 7, 9, 10)] == [5, 3, 1, 5]
    assert [s for s in range(5, 21) if periodic.due(s)] == [10, 15, 20]  # not the start

    def evaluate():
        now[0] += 30.0  # an evaluation of 30 s
        return {"loss": 3.0, "masked_lm_loss": 2.5, "global_step": 10}, {"num_examples": 8}, 1

    now[0] = 112.0
    assert periodic.run(10, evaluate) == {"loss": 3.0, "masked_lm_loss": 2.5}
    now[0] = 150.0
    periodic.run(15, evaluate)
    periodic.close()
    records = eval_history.read_eval_history(os.fspath(tmp_path))
    # Training time without the evaluations: 12 s, then 12 + (150 - 142) = 20 s.
    assert [(r["step"], r["train_seconds"]) for r in records] == [(10, 12.0), (15, 20.0)]
    assert records[0] == {"step": 10, "loss": 3.0, "masked_lm_loss": 2.5, "train_seconds": 12.0,
                          "start_step": 5, "sums": {"num_examples": 8.0}}
    off = eval_history.PeriodicEval(os.fspath(tmp_path), 0, 0, write=True)
    assert not any(off.due(s) for s in range(1, 100)) and off.steps_to_next(3) > 10**12


# ----------------------------------------------------------------- in the trainer

STEPS = 6
BATCH = 8


def make_trainer(output_dir, **overrides):
    config = dict(output_dir=os.fspath(output_dir), train_batch_size=BATCH, eval_batch_size=8,
                  num_train_steps=STEPS, save_checkpoints_steps=3, log_every_n_steps=100,
                  steps_per_loop=4, use_xla=False)
    config.update(overrides)
    # Dropout on: an evaluation that drew from the dropout RNG would move the trajectory.
    bert = tiny_bert_config(hidden_dropout_prob=0.2, attention_probs_dropout_prob=0.2)
    opt = optimization.OptimizerConfig(learning_rate=1e-3, num_train_steps=STEPS,
                                       num_warmup_steps=1)
    return trainer.Trainer(
        trainer.TrainerConfig(**config), tf.distribute.OneDeviceStrategy("/cpu:0"),
        model_fn=lambda: BertPretrainingModel(bert),
        optimizer_fn=lambda: optimization.create_optimizer(opt))


def summary_scalars(directory):
    """{tag: [(step, value), ...]} over every event file of `directory`, in the order they
    were written (wall time: file names do not sort by it, their writer counter is not
    zero-padded)."""
    events = []
    for path in glob.glob(os.path.join(directory, "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                events.append((event.wall_time, value.tag, event.step,
                               float(tf.make_ndarray(value.tensor))))
    scalars = {}
    for _, tag, step, value in sorted(events, key=lambda e: e[0]):
        scalars.setdefault(tag, []).append((step, value))
    return scalars


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """A run without periodic evaluation, saving after every step with keep_checkpoint_max=1
    (one step per loop); the checkpoint files on disk at every save."""
    output_dir = tmp_path_factory.mktemp("plain")
    seen = []
    original = checkpoint_health.CheckpointRetention.saved

    def record(retention, step):  # the files on disk at every save
        seen.append(sorted(p.name for p in output_dir.glob("ckpt-*.index")))
        original(retention, step)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(checkpoint_health.CheckpointRetention, "saved", record)
        t = make_trainer(output_dir, keep_checkpoint_max=1, save_checkpoints_steps=1,
                         steps_per_loop=1)
        result = t.train(blocks_dataset_fn(synthetic_examples(64, seed=3)))
    return {"trainer": t, "result": result, "seen": seen, "output_dir": output_dir}


def test_periodic_eval_leaves_the_trajectory_unchanged(tmp_path, caplog, plain):
    # The reference saves after every step in loops of one step; here loops of 2 (to the
    # evaluations), cut at the checkpoints every 3 steps: the same trajectory, exactly.
    examples = synthetic_examples(64, seed=3)
    held_out = blocks_dataset_fn(synthetic_examples(20, seed=4), repeat=False)
    plain_result = plain["result"]
    caplog.set_level("INFO", logger="absl")
    evaluated = make_trainer(tmp_path / "eval", eval_every_n_steps=2)
    result = evaluated.train(blocks_dataset_fn(examples), held_out)
    np.testing.assert_array_equal(result.losses, plain_result.losses)
    for ours, ref in zip(evaluated.model.weights, plain["trainer"].model.weights):
        np.testing.assert_array_equal(ours.numpy(), ref.numpy(), err_msg=ours.path)
    assert evaluated.optimizer.iterations.numpy() == plain["trainer"].optimizer.iterations.numpy()

    history = eval_history.read_eval_history(os.fspath(tmp_path / "eval"))
    assert [r["step"] for r in history] == [2, 4, 6]
    assert all(r["sums"]["num_examples"] == 20 for r in history)
    assert history[0]["masked_lm_loss"] != history[2]["masked_lm_loss"]  # it trained
    # The last periodic evaluation is the end-of-training eval of the same weights.
    final = evaluated.evaluate(held_out)
    for key in ("loss", "masked_lm_loss", "masked_lm_accuracy", "next_sentence_loss",
                "next_sentence_accuracy"):
        assert history[2][key] == pytest.approx(final[key], rel=1e-6), key
    lines = re.findall(r"eval at step (\d+) \(20 examples\): masked_lm_accuracy \S+ \| "
                       r"masked_lm_loss \S+ \| next_sentence_accuracy \S+ \| "
                       r"next_sentence_loss \S+ \| loss \S+ \(3 batches", caplog.text)
    assert lines == ["2", "4", "6"]
    scalars = summary_scalars(os.fspath(tmp_path / "eval" / "eval"))
    # Periodic evaluations at 2, 4, 6, then the final one at 6, in the same run directory.
    assert [s for s, _ in scalars["masked_lm_accuracy"]] == [2, 4, 6, 6]
    np.testing.assert_allclose([v for _, v in scalars["masked_lm_loss"]][:3],
                               [r["masked_lm_loss"] for r in history], rtol=1e-6)


def test_one_checkpoint_more_is_kept_only_until_the_next_loss_vouches_for_the_newest(plain):
    output_dir = plain["output_dir"]
    # Just after saving step s: s and s - 1 (not yet vouched for by step s + 1's loss).
    assert plain["seen"] == [["ckpt-1.index"]] + [[f"ckpt-{s - 1}.index", f"ckpt-{s}.index"]
                                                  for s in range(2, STEPS + 1)]
    # At the end, keep_checkpoint_max again, in the files and the index.
    assert sorted(p.name for p in output_dir.glob("ckpt-*")) == [
        f"ckpt-{STEPS}.data-00000-of-00001", f"ckpt-{STEPS}.index"]
    assert list(tf.train.get_checkpoint_state(os.fspath(output_dir)).all_model_checkpoint_paths
                ) == [os.fspath(output_dir / f"ckpt-{STEPS}")]


# ----------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    write_tfrecords(root / "train.tfrecord", synthetic_examples(96, seed=11,
                                                                uneven_weights=False))
    write_tfrecords(root / "eval.tfrecord", synthetic_examples(24, seed=12))
    write_bert_config(root / "bert_config.json")
    return root


def cli_flags(data, output_dir, **overrides):
    # do_eval is left to the flags' default (false) by dropping it.
    return pretraining_flags(data, output_dir, input_file="train.tfrecord",
                             **dict({"do_eval": None}, **overrides))


def test_the_learning_rate_of_the_issue_stops_in_the_first_loop_with_no_good_checkpoint(
        data, tmp_path, cli):
    # The issue's flags: lr 50, 5 warmup steps, loops of 5 steps, a save every 20. Before the
    # absolute bound this run trained on, saving checkpoints at losses in the thousands and
    # calling them good; now it stops in its first loop and saves nothing.
    out = tmp_path / "out"
    flags = cli_flags(data, out, learning_rate=50, num_warmup_steps=5, steps_per_loop=5,
                      save_checkpoints_steps=20, num_train_steps=40)
    proc = cli.run(MODULE, flags)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    lines = error_lines(proc.stderr)
    assert len(lines) == 1, proc.stderr[-3000:]
    # Tiny model: 3 x (ln 128 + ln 2) + 5 = 21.6.
    match = re.fullmatch(r"error: loss diverged at step (\d+): (\S+), above 21\.6 \(3 x 5\.545, "
                         r"the loss of a uniform guess, \+ 5\); stopped without saving it \(no "
                         r"good checkpoint: it diverged before any checkpoint; a rerun starts "
                         rf"from the initial weights\); {ADVICE}", lines[0])
    assert match, lines[0]
    assert 2 <= int(match.group(1)) <= 5 and float(match.group(2).replace(",", "")) > 21.6
    assert not list(out.glob("ckpt-*")) and not (out / "checkpoint").exists()
    # The same command again: nothing to resume from, so it starts from the initial weights
    # and stops on the same step with the same line.
    rerun = cli.run(MODULE, flags)
    assert rerun.returncode == 2 and error_lines(rerun.stderr) == lines, rerun.stderr[-3000:]
    assert "resuming from" not in rerun.stderr
    assert not list(out.glob("ckpt-*"))


def test_a_spike_after_a_resume_names_the_last_good_checkpoint_which_a_rerun_resumes_from(
        data, tmp_path, cli):
    out = tmp_path / "out"
    # A healthy run to step 4 (checkpoints 2 and 4; the loss of step 3 vouched for ckpt-2).
    healthy = cli.run(MODULE, cli_flags(data, out, num_train_steps=4, save_checkpoints_steps=2))
    assert healthy.returncode == 0, healthy.stderr[-3000:]
    assert checkpoint_health.read_vouched_step(os.fspath(out)) == 2
    # The learning rate raised to 50 at the resume, saving every step: step 5's loss (of
    # ckpt-4's weights) is healthy and vouches for ckpt-4; the updates from step 5 on blow
    # the loss up within a few steps.
    proc = cli.run(MODULE, cli_flags(data, out, learning_rate=50, num_warmup_steps=0,
                                     clip_norm=0, num_train_steps=12, save_checkpoints_steps=1))
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "resuming from " + os.fspath(out / "ckpt-4") in proc.stderr
    lines = error_lines(proc.stderr)
    assert len(lines) == 1, proc.stderr[-3000:]
    match = re.fullmatch(r"error: (?:loss diverged|non-finite loss \(\S+\)) at step (\d+)\b.*; "
                         r"stopped without saving it \(last good checkpoint: (\S+), kept; a "
                         rf"rerun resumes from it\); {ADVICE}", lines[0])
    assert match, lines[0]
    step, good = int(match.group(1)), match.group(2)
    assert step >= 6 and good == os.fspath(out / f"ckpt-{step - 2}")
    # Nothing of a diverged state is left: the checkpoints of steps step - 1 and later
    # (saved before the loss that condemned them) are deleted, the good one is the latest
    # of the index, and the record vouches for it.
    saved = sorted(int(p.name[5:-6]) for p in out.glob("ckpt-*.index"))
    assert saved[-1] == step - 2 and set(range(4, step - 1)) <= set(saved)
    assert tf.train.latest_checkpoint(os.fspath(out)) == good
    assert checkpoint_health.read_vouched_step(os.fspath(out)) == step - 2
    # The good checkpoint restores into the model (every variable), at its step, with
    # finite weights.
    model = BertPretrainingModel(tiny_bert_config())
    step_var = tf.Variable(0, dtype=tf.int64)
    checkpoint_paths.read_strictly(good, {"model": model, "step": step_var})
    assert int(step_var.numpy()) == step - 2
    assert all(np.isfinite(w.numpy()).all() for w in model.weights)
    # The advice taken: a rerun at a sane learning rate resumes from it and trains on.
    rerun = cli.run(MODULE, cli_flags(data, out, num_train_steps=step + 1,
                                      save_checkpoints_steps=1))
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert f"resuming from {good} at step {step - 2}" in rerun.stderr
    assert progress_steps(rerun.stderr) == list(range(step - 1, step + 2))


def expected_predictions(examples, masking):
    """The masked positions the count rule gives each record (masking_rules' reference)."""
    ids = examples["input_ids"].copy()
    for row, (positions, labels, weights) in enumerate(zip(
            examples["masked_lm_positions"], examples["masked_lm_ids"],
            examples["masked_lm_weights"])):
        ids[row, positions[weights > 0]] = labels[weights > 0]  # the unmasked tokens
    total = 0
    specials = (masking.cls_token_id, masking.sep_token_id, masking.pad_token_id)
    for row_ids, row_mask in zip(ids, examples["input_mask"]):
        real = row_mask > 0
        candidates = int((real & ~np.isin(row_ids, specials)).sum())
        total += min(masking_rules.num_to_predict(int(real.sum()), masking), candidates)
    return total


def test_eval_every_n_steps_with_dynamic_masking_evaluates_15_percent_masks(data, tmp_path,
                                                                            cli):
    vocab = write_tiny_vocab(tmp_path / "vocab.txt")
    out = tmp_path / "out"
    proc = cli.run(MODULE, cli_flags(data, out, dynamic_masking="true", vocab_file=vocab,
                                     masked_lm_prob=0.4, eval_every_n_steps=2,
                                     steps_per_loop=5, do_eval="true"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    history = eval_history.read_eval_history(os.fspath(out))
    assert [r["step"] for r in history] == [2, 4, 6]
    assert [r["start_step"] for r in history] == [0, 0, 0]
    assert 0 < history[0]["train_seconds"] < history[1]["train_seconds"]
    # Every evaluation scores the same masks, drawn at 15% whatever --masked_lm_prob says.
    eval_examples = synthetic_examples(24, seed=12)
    rule = masking_rules.MaskingConfig.from_vocab_file(os.fspath(vocab), 4, 0.15)
    at_15 = expected_predictions(eval_examples, rule)
    at_40 = expected_predictions(eval_examples, masking_rules.MaskingConfig.from_vocab_file(
        os.fspath(vocab), 4, 0.4))
    assert at_15 < at_40
    assert [r["sums"]["mlm_weight"] for r in history] == [at_15] * 3
    assert all(r["sums"]["num_examples"] == 24 for r in history)
    # One console line per evaluation.
    lines = re.findall(r"eval at step (\d+) \(24 examples\): masked_lm_accuracy [0-9.]+ \| "
                       r"masked_lm_loss [0-9.]+ \| next_sentence_accuracy [0-9.]+",
                       proc.stderr)
    assert lines == ["2", "4", "6"]
    # --do_eval at the end: the same masks and weights as the evaluation at step 6.
    results = dict(line.split(" = ") for line in (out / "eval_results.txt").read_text()
                   .splitlines())
    assert float(results["masked_lm_loss"]) == pytest.approx(history[2]["masked_lm_loss"],
                                                             rel=1e-5)
    scalars = summary_scalars(os.fspath(out / "eval"))
    assert {"masked_lm_accuracy", "masked_lm_loss", "next_sentence_accuracy", "loss"} <= set(
        scalars)
    assert [s for s, _ in scalars["masked_lm_accuracy"]] == [2, 4, 6, 6]
    json.dumps(history, allow_nan=False)  # strict JSON (no NaN) as written
