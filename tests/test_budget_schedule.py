"""Tests of the training-time budget (`bert_tf.training.budget`) that the schedules follow.

- `HostLoop` counts each call's time into the training clock: the first (tracing) call at
  the second call's pace, and a spent budget ends the loop in progress (fake clock);
- with two replicas the agreement hands every worker the chief's call time (a process
  of its own);
- end to end, run_pretraining's flags and `run` with `--lr_schedule=wsd --max_train_minutes`
  on a fake wall clock (every train call takes 0.4375 s): a run stopped by
  --max_steps_per_run saves the clock in its checkpoint, the rerun resumes the clock from it
  and stops at the step where the budget is spent, computed by hand, and its last learning
  rate is end_lr (console and TensorBoard); a third run finds the budget spent;
- configs/budget.flags parses.

The schedule's values for given clock readings are in tests/test_optimization.py.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import tensorflow as tf
from _pretraining_helpers import (
    FAKE_CLOCK_RUN,
    error_lines,
    progress_steps,
    run_module,
    summary_scalars,
    synthetic_examples,
    write_bert_config,
    write_tfrecords,
)

from bert_tf.training import budget, preemption

MODULE = "bert_tf.run_pretraining"


class FakeTraining:
    """Train calls on a fake clock: the first call traces (10 s), then 0.5 s per step."""

    def __init__(self):
        self.now, self.sizes, self.step = 0.0, [], 0

    def __call__(self, steps):
        self.now += (10.0 if not self.sizes else 0.0) + 0.5 * steps
        self.sizes.append(steps)
        losses = [float(self.step + i + 1) for i in range(steps)]
        self.step += steps
        return tf.constant(losses, tf.float32), {"n": tf.constant(float(steps))}


def test_host_loop_counts_train_calls_into_the_clock_and_stops_when_it_is_spent():
    fake = FakeTraining()
    clock = budget.TrainingClock(0.125)  # 7.5 s
    added = []

    def count(seconds):
        added.append(seconds)
        return clock.add(seconds)

    loop = preemption.HostLoop(tf.distribute.get_strategy(), 1, lambda: False,
                               clock=lambda: fake.now, count_seconds=count)
    losses, _, seconds = loop.run(fake, 1000)
    # Calls of 1 (traces: 10.5 s, counted 0), 1, 2, 4, 4, 4 steps at 0.5 s per step; the
    # second call also counts the first call's step at its pace (2 x 0.5 s).
    assert fake.sizes == [1, 1, 2, 4, 4, 4]
    assert added == [0.0, 1.0, 1.0, 2.0, 2.0, 2.0]
    assert clock.seconds == 8.0 and float(clock.variable.numpy()) == 8.0
    # 8 s >= 7.5 s: the loop of 1000 steps ended after 16, with the limit reported.
    assert loop.budget_spent and loop.time_up and not loop.stopped
    np.testing.assert_array_equal(losses, np.arange(1, 17))
    assert seconds == pytest.approx(10.5 + 15 * 0.5)  # what progress reports: wall time
    assert loop.run(fake, 10)[0].size == 0  # spent: no further call


def test_the_clock_reads_1_exactly_once_spent_and_resyncs_from_its_variable():
    clock = budget.TrainingClock(0.1)  # 6 s (60 * 0.1 = 6.000000000000001 in float64)
    assert not clock.add(5.0) and float(clock.fraction()) == pytest.approx(5 / 6)
    assert clock.add(1.0)  # the float32 value 6.0 reaches the budget the schedule sees
    assert float(clock.fraction()) == 1.0
    clock.variable.assign(2.5)  # as a restore does
    clock.sync()
    assert clock.seconds == 2.5 and not clock.spent


_AGREEMENT_SCRIPT = """
import json
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from bert_tf.training import preemption
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
loop = preemption.HostLoop(strategy, 2, lambda: False)
# Replica r proposes size 7 + r and measured 2.5 + 10 r seconds; replica 1 asks to stop.
local = strategy.experimental_distribute_values_from_function(lambda ctx: tf.constant(
    [1.0, 7.0, 0.0, 2.5]) + tf.cast(ctx.replica_id_in_sync_group, tf.float32) * tf.constant(
    [1.0, 1.0, 1.0, 10.0]) - tf.constant([1.0, 0.0, 0.0, 0.0]))
print(json.dumps(loop.agree(local).numpy().tolist()))
"""


def test_the_agreement_gives_every_worker_the_chiefs_call_time(cli):
    # Replica 0 (the chief's) contributes (0, 7, 0, 2.5), replica 1 (1, 8, 1, 12.5): stop
    # requests add up, the rest is the chief's, so every worker adds 2.5 s to its clock.
    proc = cli.run_code(_AGREEMENT_SCRIPT, [], timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [1.0, 7.0, 0.0, 2.5]


# ----------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    write_tfrecords(root / "train.tfrecord", synthetic_examples(64, seed=21))
    write_bert_config(root / "bert_config.json")
    return root


def flags(data, output_dir, **overrides):
    values = {
        "bert_config_file": data / "bert_config.json", "input_file": data / "train.tfrecord",
        "output_dir": output_dir, "max_seq_length": 16, "max_predictions_per_seq": 4,
        "train_batch_size": 8, "learning_rate": 1e-3, "end_lr": 1e-5, "num_warmup_steps": 2,
        "lr_schedule": "wsd", "decay_proportion": 0.5, "max_train_minutes": 0.05,  # 3 s
        "num_train_steps": 1_000_000, "save_checkpoints_steps": 1_000_000,
        "do_train": "true", "do_eval": "false",
    }
    values.update(overrides)
    return [f"--{k}={v}" for k, v in values.items()]


def trained_seconds(prefix) -> float:
    return float(tf.train.load_checkpoint(os.fspath(prefix)).get_tensor(
        f"{budget.CHECKPOINT_KEY}/.ATTRIBUTES/VARIABLE_VALUE"))






def test_a_budget_run_resumes_its_clock_and_ends_at_end_lr_when_the_time_is_spent(
        cli, data, tmp_path):
    # Stopped after 3 steps by --max_steps_per_run, one step per call: the first call (it
    # traces) counts 0 s and its step is counted at the second call's pace, so the clock
    # reads 0 + 2 x 0.4375 + 0.4375 = 1.3125 s of the 3 s budget; it is in the checkpoint.
    first = cli.run_code(FAKE_CLOCK_RUN, flags(data, tmp_path, max_steps_per_run=3,
                                                steps_per_loop=1, log_every_n_steps=1))
    assert first.returncode == 0, first.stderr[-3000:]
    assert progress_steps(first.stderr) == [1, 2, 3]
    assert trained_seconds(tmp_path / "ckpt-3") == 1.3125
    # The peak rate after the 2 warmup steps: 1.3125 / 3 of the budget is before the decay
    # phase (the last half).
    assert ("training clock 1.31 s of the 3 s budget at step 3; learning rate 1.000000e-03"
            in first.stderr), first.stderr[-3000:]

    # The rerun continues the clock from the checkpoint. Its calls of a 1000-step loop grow
    # from 1 step, at most doubling: 1 (counted 0), 2 (3 steps at its pace: 0.65625 s), 4, 8
    # and 16 steps (0.4375 s each): 1.3125 -> 1.96875 -> 2.40625 -> 2.84375 -> 3.28125 s,
    # past 3 s at the end of the 16-step call, step 3 + 31 = 34.
    second = cli.run_code(FAKE_CLOCK_RUN, flags(data, tmp_path, steps_per_loop=1000,
                                                 log_every_n_steps=1_000_000))
    assert second.returncode == 0, second.stderr[-3000:]
    assert "training clock resumed at 1.312 s of 3 s" in second.stderr, second.stderr[-3000:]
    assert ("--max_train_minutes=0.05 reached at step 34: saving a checkpoint and stopping "
            "training (3.28 s trained)") in second.stderr, second.stderr[-3000:]
    assert tf.train.latest_checkpoint(os.fspath(tmp_path)).endswith("ckpt-34")
    assert trained_seconds(tmp_path / "ckpt-34") == 3.28125
    # The decay is complete: the last report and the run's end give end_lr.
    assert progress_steps(second.stderr)[-1] == 34
    last_line = [line for line in second.stderr.splitlines() if "step 34/" in line][-1]
    assert "| lr 1.000e-05 |" in last_line
    assert ("training clock 3.28 s of the 3 s budget at step 34; learning rate 1.000000e-05"
            in second.stderr)
    rates = summary_scalars(tmp_path, "learning_rate")
    assert rates[3] == pytest.approx(1e-3, rel=1e-6)
    assert rates[34] == pytest.approx(1e-5, rel=1e-6)

    # A third run finds the budget spent and trains nothing.
    third = cli.run(MODULE, flags(data, tmp_path))
    assert third.returncode == 0, third.stderr[-3000:]
    assert "--max_train_minutes=0.05 already spent" in third.stderr
    assert progress_steps(third.stderr) == []


def test_decay_proportion_without_wsd_is_a_one_line_error(cli, data, tmp_path):
    proc = cli.run(MODULE, flags(data, tmp_path, lr_schedule="linear"))
    assert proc.returncode == 2
    assert error_lines(proc.stderr) == [
        "error: --decay_proportion applies only with --lr_schedule=wsd"]


def test_the_budget_flagfile_parses():
    # Every flag in the file is known (else absl fails first); the run stops at the first
    # check instead of starting a job.
    proc = run_module(MODULE, ["--flagfile=configs/budget.flags", "--do_train=false",
                               "--do_eval=false"])
    assert error_lines(proc.stderr) == [
        "error: at least one of --do_train or --do_eval must be true"]
