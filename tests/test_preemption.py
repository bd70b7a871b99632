"""Tests of bert_tf.training.preemption: SIGTERM is answered between the host calls of a loop.

- the size of the host calls aims at 2 s and at most doubles (hand-computed values);
- `HostLoop` with a fake clock: the calls it makes, a stop between calls, a non-finite loss;
- end to end, `python -m bert_tf.run_pretraining --steps_per_loop=1000`, SIGTERM once the
  first call is done: exit 143 with one line, a checkpoint below step 1000 (inside the loop,
  not at its end), and the rerun follows the uninterrupted run's losses;
- the same under MultiWorkerMirroredStrategy with 2 workers on loopback, the signal sent to
  ONE worker: both save the same step and exit 143, and both resume from it;
- SIGTERM during the first call (tracing) ends the run at once, with nothing to save.

No test times anything: how fast a run saves and exits after the signal, beside how long one
1000-step call would take, is what benchmarks/pretraining/bench_preemption.py prints.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time

import numpy as np
import pytest
import tensorflow as tf
from _pretraining_helpers import (
    error_lines,
    loopback_cluster_configs,
    loopback_clusters,
    progress_losses,
    progress_steps,
    synthetic_examples,
    write_bert_config,
    write_tfrecords,
)

from bert_tf.training import preemption

MODULE = "bert_tf.run_pretraining"
# A guard against a hang, far above what any run here needs: not a measurement.
EXIT_DEADLINE = 300
STOPPED = re.compile(r"^stopped by SIGTERM at step (\d+) with checkpoint (\S+); rerun", re.M)


def test_next_call_steps_aims_at_the_target_and_at_most_doubles():
    assert preemption.next_call_steps(1, 15.0, 1) == 1  # the first call traced: stay at 1
    assert preemption.next_call_steps(1, 0.01, 1) == 2  # 200 would fit; doubling only
    assert preemption.next_call_steps(64, 1.28, 64) == 100  # 2 s / 20 ms
    assert preemption.next_call_steps(100, 4.0, 100) == 50  # slower steps: smaller calls
    assert preemption.next_call_steps(3, 0.003, 1000) == 2000  # a loop's short tail call
    assert preemption.next_call_steps(1000, 1e-9, 1 << 30) == 1 << 20  # float32-exact cap
    assert preemption.next_call_steps(10, 2.0, 10, target_seconds=0.5) == 2


class FakeTraining:
    """A train call that takes `seconds_per_step` on a fake clock (the first call traces)."""

    def __init__(self, seconds_per_step=0.5, trace_seconds=10.0, bad_step=None):
        self.now, self.sizes, self.step, self.calls = 0.0, [], 0, 0
        self.seconds_per_step, self.trace_seconds, self.bad_step = (
            seconds_per_step, trace_seconds, bad_step)

    def __call__(self, steps):
        self.now += (self.trace_seconds if not self.calls else 0.0) + steps * self.seconds_per_step
        self.sizes.append(steps)
        self.calls += 1
        losses = []
        for _ in range(steps):
            self.step += 1
            losses.append(np.nan if self.step == self.bad_step else float(self.step))
            if self.step == self.bad_step:
                break  # as train_loop does after a non-finite loss
        return tf.constant(losses, tf.float32), {"n": tf.constant(float(len(losses)))}


def test_host_loop_splits_a_loop_into_calls_of_the_target_time_and_stops_between_them():
    fake = FakeTraining()
    requests = []
    loop = preemption.HostLoop(tf.distribute.get_strategy(), 1, lambda: bool(requests),
                               clock=lambda: fake.now)
    losses, sums, seconds = loop.run(fake, 20)
    # Trace + 1 step, then 1 step (0.5 s: 4 would fit in 2 s, doubling allows 2), 2, 4 (2 s).
    assert fake.sizes == [1, 1, 2, 4, 4, 4, 4]
    np.testing.assert_array_equal(losses, np.arange(1, 21))
    assert sums == {"n": 20.0} and seconds == pytest.approx(10.0 + 20 * 0.5)
    assert not loop.stopped
    # The next loop goes on with calls of 4; a request during a call stops after it.
    fake.sizes.clear()
    original = fake.__call__

    def requested_during_second_call(steps):
        if len(fake.sizes) == 1:
            requests.append(signal.SIGTERM)
        return original(steps)

    losses, _, _ = loop.run(requested_during_second_call, 1000)
    assert fake.sizes == [4, 4] and loop.stopped
    np.testing.assert_array_equal(losses, np.arange(21, 29))
    assert loop.run(fake, 1000)[0].size == 0  # stopped: no further call


def test_host_loop_returns_at_a_non_finite_loss():
    fake = FakeTraining(bad_step=6)
    loop = preemption.HostLoop(tf.distribute.get_strategy(), 1, lambda: False,
                               clock=lambda: fake.now)
    losses, sums, _ = loop.run(fake, 100)
    assert fake.sizes == [1, 1, 2, 4]  # the last call ran 2 of its 4 steps
    assert losses.size == 6 and np.isnan(losses[-1]) and sums == {"n": 6.0}
    assert not loop.stopped


_AGREEMENT_SCRIPT = """
import json
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from bert_tf.training import preemption
loop = preemption.HostLoop(tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]), 2,
                           lambda: True, lambda: True)
print(json.dumps(loop.agree(tf.constant([1.0, 7.0, 1.0])).numpy().tolist()))
"""


def test_the_agreement_sums_stop_requests_and_takes_the_chiefs_size_and_time_limit(cli):
    # Two replicas, each contributing (stop 1, size 7, time up 1): stop requests add up (any
    # worker stops all); the size and the time limit are replica 0's (the chief's) only, so
    # workers whose clocks differ still end their loops at the same step.
    proc = cli.run_code(_AGREEMENT_SCRIPT, [], timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [2.0, 7.0, 1.0]


def test_host_loop_reports_the_time_limit_after_each_call():
    fake = FakeTraining()
    loop = preemption.HostLoop(tf.distribute.get_strategy(), 1, lambda: False,
                               lambda: fake.now >= 12.0, clock=lambda: fake.now)
    loop.run(fake, 2)  # trace (10 s) + 1 step, then 1 step: 11 s
    assert not loop.time_up
    loop.run(fake, 2)  # 12 s and more: the limit is seen, and the loop still runs its steps
    assert loop.time_up and not loop.stopped and fake.step == 4


# ----------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    examples = synthetic_examples(96, seed=11, uneven_weights=False)
    write_tfrecords(root / "train-0.tfrecord", {k: v[:48] for k, v in examples.items()})
    write_tfrecords(root / "train-1.tfrecord", {k: v[48:] for k, v in examples.items()})
    write_bert_config(root / "bert_config.json", hidden_dropout_prob=0.1,
                      attention_probs_dropout_prob=0.1)  # the dropout RNG must resume too
    return root


def flags(data, output_dir, **overrides):
    values = {
        "bert_config_file": data / "bert_config.json", "input_file": data / "train-*.tfrecord",
        "output_dir": output_dir, "max_seq_length": 16, "max_predictions_per_seq": 4,
        "learning_rate": 1e-3, "num_warmup_steps": 2, "num_train_steps": 100000,
        "steps_per_loop": 1000, "save_checkpoints_steps": 1000, "log_every_n_steps": 1,
        "do_train": "true", "do_eval": "false",
    }
    values.update(overrides)
    return [f"--{k}={v}" for k, v in values.items()]


def start(cli, args, log_path, tf_config=None):
    """`python -m MODULE args`, forked by the module's `cli` server; `log_path` shows its
    stderr as it is written."""
    run = cli.start(MODULE, args, env={"TF_CONFIG": json.dumps(tf_config)} if tf_config else None)
    log_path.symlink_to(run.stderr_path)
    return run


def wait_for_line(log_path, pattern, procs, timeout=300):
    """Polls the log until `pattern` appears."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if re.search(pattern, log_path.read_text(), re.M):
            return
        dead = [p for p in procs if p.poll() is not None]
        assert not dead, f"exited {dead[0].returncode}:\n{log_path.read_text()[-3000:]}"
        time.sleep(0.02)
    raise AssertionError(f"{pattern!r} not seen in time:\n{log_path.read_text()[-3000:]}")


def _tail(path):
    """A log's last 3,000 characters, without TensorFlow's start-up lines."""
    with open(path, errors="replace") as f:
        return "\n".join(line for line in f.read().splitlines()
                         if not line.startswith(("I0000", "WARNING: All")))[-3000:]


def finish(procs, timeout=EXIT_DEADLINE):
    """Waits for every process to exit (killing them all after `timeout` s: a hang)."""
    deadline = time.monotonic() + timeout
    try:
        while any(proc.poll() is None for proc in procs):
            if time.monotonic() >= deadline:
                # Which process, and where it was: the logs are gone once the test ends.
                running = [(i, proc) for i, proc in enumerate(procs) if proc.poll() is None]
                raise AssertionError(f"{len(running)} of {len(procs)} process(es) did not exit "
                                     f"in {timeout} s:\n" + "\n".join(
                                         f"--- process {i}:\n{_tail(proc.stderr_path)}"
                                         for i, proc in running))
            time.sleep(0.05)
    finally:
        for proc in procs:
            proc.kill()


def preempt(cli, data, out, logs, signalled, tf_configs, **overrides):
    """Starts the run(s) and SIGTERMs process `signalled` once its first train call is done
    (the step traced): the signal lands in the first 1000-step loop, whatever the machine's
    speed, since the calls after the first at most double in size.

    Returns:
        (the logs' text, the processes).
    """
    procs = [start(cli, flags(data, out, **overrides), log, cfg)
             for log, cfg in zip(logs, tf_configs)]
    try:
        wait_for_line(logs[signalled], r"first train call", procs)
        procs[signalled].send_signal(signal.SIGTERM)
        finish(procs)
    finally:
        for proc in procs:
            proc.kill()
    texts = [log.read_text() for log in logs]
    assert STOPPED.search(texts[signalled]), texts[signalled][-3000:]
    return texts, procs


def check_stopped(text, proc, out):
    """The run exited 143 with one line, its last, naming the step and the chief's checkpoint."""
    assert proc.returncode == 143, text[-3000:]
    assert "Traceback" not in text and not error_lines(text), text[-3000:]
    assert text.rstrip().splitlines()[-1].startswith("stopped by SIGTERM"), text[-3000:]
    match = STOPPED.search(text)
    stopped = int(match.group(1))
    assert match.group(2) == os.path.join(os.fspath(out), f"ckpt-{stopped}")
    return stopped


def resume_and_reference(cli, data, out, reference_out, stopped, tf_configs_pair, logs,
                         **overrides):
    """Reruns from the checkpoint for 2 steps, beside an uninterrupted run to stopped + 2.

    Both log every step (steps_per_loop=1), so their losses can be compared one by one.
    """
    per_step = dict(overrides, steps_per_loop=1)
    procs = [start(cli, flags(data, out, max_steps_per_run=2, **per_step), log, cfg)
             for log, cfg in zip(logs[0], tf_configs_pair[0])]
    procs += [start(cli, flags(data, reference_out, max_steps_per_run=stopped + 2, **per_step),
                    log, cfg) for log, cfg in zip(logs[1], tf_configs_pair[1])]
    finish(procs)
    texts = [log.read_text() for log in logs[0] + logs[1]]
    for proc, text in zip(procs, texts):
        assert proc.returncode == 0, text[-3000:]
    return texts


@pytest.mark.slow  # three runs, two of them side by side
def test_sigterm_during_a_1000_step_loop_saves_inside_it_and_resumes(cli, data, tmp_path):
    out = tmp_path / "run"
    logs = [tmp_path / "run.log"]
    # Batch 1024 of the tiny BERT: ~0.15 s per step on 2 cores, a 1000-step loop in minutes.
    run = dict(train_batch_size=1024)
    texts, procs = preempt(cli, data, out, logs, 0, [None], **run)
    stopped = check_stopped(texts[0], procs[0], out)
    assert 1 <= stopped < 1000  # after the first call, inside the loop: not at its end
    assert tf.train.latest_checkpoint(os.fspath(out)) == os.path.join(out, f"ckpt-{stopped}")
    rerun, reference = resume_and_reference(
        cli, data, out, tmp_path / "reference", stopped, ([None], [None]),
        ([tmp_path / "rerun.log"], [tmp_path / "reference.log"]), **run)
    assert re.search(rf"resuming from .*ckpt-{stopped} at step {stopped}", rerun)
    assert progress_steps(rerun) == [stopped + 1, stopped + 2]
    assert progress_steps(reference) == list(range(1, stopped + 3))
    np.testing.assert_allclose(progress_losses(rerun), progress_losses(reference)[stopped:],
                               rtol=2e-6)


@pytest.mark.slow  # three 2-worker runs, two of them side by side
def test_sigterm_to_one_of_two_workers_stops_both_at_the_same_step(cli, data, tmp_path):
    out = tmp_path / "run"
    logs = [tmp_path / "worker0.log", tmp_path / "worker1.log"]
    run = dict(train_batch_size=512, distribution_strategy="multi_worker_mirrored")
    texts, procs = preempt(cli, data, out, logs, 1, loopback_cluster_configs(2), **run)
    # Only worker 1 got the signal; both stop at the step it stopped at, with one checkpoint.
    steps = [check_stopped(text, proc, out) for text, proc in zip(texts, procs)]
    assert steps[0] == steps[1], steps
    stopped = steps[0]
    assert 1 <= stopped < 1000
    assert tf.train.latest_checkpoint(os.fspath(out)) == os.path.join(out, f"ckpt-{stopped}")
    assert not list((out / "tmp_worker_checkpoints").glob("worker-1/ckpt-*"))
    for text in texts:
        assert re.search(r"train calls; cross-worker stop agreement [\d.]+ ms per call", text)
    worker_logs = [[tmp_path / f"rerun{i}.log" for i in range(2)],
                   [tmp_path / f"reference{i}.log" for i in range(2)]]
    rerun0, rerun1, reference0, _ = resume_and_reference(
        cli, data, out, tmp_path / "reference", stopped,
        tuple(loopback_clusters(2, 2)), worker_logs, **run)
    for text in (rerun0, rerun1):
        assert re.search(rf"resuming from .*ckpt-{stopped} at step {stopped}", text)
        assert progress_steps(text) == [stopped + 1, stopped + 2]
    np.testing.assert_allclose(progress_losses(rerun0), progress_losses(reference0)[stopped:],
                               rtol=2e-6)


@pytest.mark.slow
def test_sigterm_during_the_first_call_ends_the_run_at_once(cli, data, tmp_path):
    # The signal is sent as soon as the run says its first call starts: that call traces the
    # step (seconds on any CPU; on a TPU, XLA's compilation takes minutes) and runs one step
    # of batch 1024 (hidden 512, 4 layers), so it is still inside the call.
    config = write_bert_config(tmp_path / "bert_config.json", hidden_size=512,
                               num_hidden_layers=4, num_attention_heads=8,
                               intermediate_size=2048)
    out, log = tmp_path / "run", tmp_path / "run.log"
    proc = start(cli, flags(data, out, bert_config_file=config, train_batch_size=1024), log)
    try:
        wait_for_line(log, r"training steps 1 to 100000", [proc])
        proc.send_signal(signal.SIGTERM)
        finish([proc])
    finally:
        proc.kill()
    text = log.read_text()
    assert proc.returncode == 143, text[-3000:]
    assert "first train call (graph tracing" not in text  # it exited inside the call
    assert text.rstrip().splitlines()[-1] == (
        "stopped by SIGTERM at step 0 before its first train call ended: nothing to save "
        "since the start; rerun with the same output_dir to continue")
    assert tf.train.latest_checkpoint(os.fspath(out)) is None
