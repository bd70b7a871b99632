"""The trainer's promises under `python -m bert_tf.run_pretraining --objective=electra`
(runs forked from the `cli` server, on tiny records made here):

- SIGTERM inside a 1000-step loop: exit 143 with one line and a checkpoint inside the loop;
  the rerun follows the uninterrupted run's losses (masks, dropout and the generator's
  samples all resume);
- --max_train_minutes (a fake wall clock, --lr_schedule=wsd): the run stops at the step the
  host calls' arithmetic gives, saves it with its training time, and ends at --end_lr;
- a learning rate that blows the loss up stops the run with the one `error:` line, naming
  ELECTRA's uniform-guess bound ln V + disc_weight ln 2, and leaves no checkpoint of the
  blown-up states;
- the discriminator learns: with uniform replacements (the real draw from zeroed generator
  logits) of tokens from a 16-id sub-vocabulary, its held-out AUC (periodic eval) climbs
  from chance to above 0.9 within 20 steps, which a disconnect between the corruption,
  its labels and the discriminator's input would keep at 0.5.

(Distribution strategies: tests/test_electra_distribution.py.)
"""

from __future__ import annotations

import math
import os
import re
import signal
import time

import numpy as np
import pytest
import tensorflow as tf
from _electra_runs import (
    MODULE,
    PATCHED_RUN,
    checkpoint_tensors,
    electra_flags,
    write_electra_data,
)
from _pretraining_helpers import (
    FAKE_CLOCK_RUN,
    error_lines,
    progress_losses,
    progress_steps,
    summary_scalars,
)

from bert_tf.training import budget
from bert_tf.training.eval_history import read_eval_history

# A guard against a hang, far above what any run here needs: not a measurement.
DEADLINE = 300
STOPPED = re.compile(r"^stopped by SIGTERM at step (\d+) with checkpoint (\S+); rerun", re.M)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_electra_data(tmp_path_factory.mktemp("electra_data"))


# ----------------------------------------------------------------------- preemption


def wait_for_line(run, pattern, timeout=DEADLINE):
    """Polls the run's stderr until `pattern` appears."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if re.search(pattern, run.stderr_so_far(), re.M):
            return
        assert run.poll() is None, f"exited {run.returncode}:\n{run.stderr_so_far()[-3000:]}"
        time.sleep(0.02)
    raise AssertionError(f"{pattern!r} not seen in time:\n{run.stderr_so_far()[-3000:]}")


def test_sigterm_inside_a_1000_step_loop_saves_and_the_rerun_continues_exactly(
        cli, data, tmp_path):
    out = tmp_path / "run"
    loop = dict(num_train_steps=100000, steps_per_loop=1000, save_checkpoints_steps=1000)
    run = cli.start(MODULE, electra_flags(data, out, **loop))
    try:
        # After the first call (it traced the step) the calls at most double from 1 step:
        # the signal lands inside the first 1000-step loop, whatever the machine's speed.
        wait_for_line(run, r"first train call")
        run.send_signal(signal.SIGTERM)
        proc = run.wait(DEADLINE)
    finally:
        run.kill()
    assert proc.returncode == 143, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and not error_lines(proc.stderr), proc.stderr[-3000:]
    assert proc.stderr.rstrip().splitlines()[-1].startswith("stopped by SIGTERM")
    match = STOPPED.search(proc.stderr)
    stopped = int(match.group(1))
    assert 1 <= stopped < 1000  # inside the loop, not at its end
    assert match.group(2) == os.fspath(out / f"ckpt-{stopped}")
    assert tf.train.latest_checkpoint(os.fspath(out)) == os.fspath(out / f"ckpt-{stopped}")
    # The rerun's 2 steps beside the uninterrupted run to stopped + 2, both logging each step.
    per_step = dict(loop, steps_per_loop=1)
    rerun = cli.start(MODULE, electra_flags(data, out, max_steps_per_run=2, **per_step))
    reference = cli.start(MODULE, electra_flags(data, tmp_path / "reference",
                                                max_steps_per_run=stopped + 2, **per_step))
    rerun, reference = rerun.wait(DEADLINE), reference.wait(DEADLINE)
    for done in (rerun, reference):
        assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(rf"resuming from .*ckpt-{stopped} at step {stopped}", rerun.stderr)
    assert progress_steps(rerun.stderr) == [stopped + 1, stopped + 2]
    assert progress_steps(reference.stderr) == list(range(1, stopped + 3))
    np.testing.assert_allclose(progress_losses(rerun.stderr),
                               progress_losses(reference.stderr)[stopped:], rtol=2e-6)
    # And both end with the same weights, optimizer slots and RNG states (dropout's, the
    # sampler's).
    ours = checkpoint_tensors(out / f"ckpt-{stopped + 2}")
    ref = checkpoint_tensors(tmp_path / "reference" / f"ckpt-{stopped + 2}")
    assert sorted(ours) == sorted(ref) and any(k.startswith("rng/") for k in ref)
    for key in ref:
        if key.startswith("save_counter/"):
            continue
        if isinstance(ref[key], bytes):  # the input's layout
            assert ours[key] == ref[key], key
            continue
        np.testing.assert_allclose(ours[key], ref[key], rtol=1e-5, atol=1e-6, err_msg=key)


# ----------------------------------------------------------------------- time budget



def trained_seconds(prefix) -> float:
    return float(tf.train.load_checkpoint(os.fspath(prefix)).get_tensor(
        f"{budget.CHECKPOINT_KEY}/.ATTRIBUTES/VARIABLE_VALUE"))


def test_max_train_minutes_stops_saves_and_the_wsd_schedule_follows_the_clock(
        cli, data, tmp_path):
    # A 2.4 s budget, the last half of it decaying; loops of 8 steps, each calls of 0.4375 s
    # (fake) that grow from 1 step and at most double. Loop 1: calls of 1 (it traces:
    # counted 0, its step at the next call's pace), 2 (3 x 0.4375 / 2 = 0.65625 s), 4 and the
    # loop's last 1 step: 0.65625 -> 1.09375 -> 1.53125 s. Loop 2: calls of 4 and 4 ->
    # 1.96875 -> 2.40625 s, past 2.4 s at step 16: the run saves there and stops.
    flags = electra_flags(data, tmp_path, lr_schedule="wsd", decay_proportion=0.5,
                          end_lr=1e-5, max_train_minutes=0.04, num_train_steps=1_000_000,
                          steps_per_loop=8, log_every_n_steps=8,
                          save_checkpoints_steps=1_000_000)
    proc = cli.run_code(FAKE_CLOCK_RUN, flags)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert ("--max_train_minutes=0.04 reached at step 16: saving a checkpoint and stopping "
            "training (2.41 s trained)") in proc.stderr, proc.stderr[-3000:]
    assert progress_steps(proc.stderr) == [8, 16]
    assert tf.train.latest_checkpoint(os.fspath(tmp_path)) == os.fspath(tmp_path / "ckpt-16")
    assert trained_seconds(tmp_path / "ckpt-16") == 2.40625
    # The rate follows the clock, not the steps (by steps the run is at 16 / 10**6 of its
    # plan, at the peak): at step 8 the clock reads 1.53125 s, p = 0.638, q = 1 - (1 - p) /
    # 0.5 = 0.276, lr = 1e-5 + (1e-3 - 1e-5)(1 - sqrt q) = 4.7986e-4; the end is end_lr.
    p = 1.53125 / 2.4
    expected = 1e-5 + (1e-3 - 1e-5) * (1 - math.sqrt(1 - (1 - p) / 0.5))
    rates = summary_scalars(tmp_path, "learning_rate")
    assert sorted(rates) == [8, 16]
    assert rates[8] == pytest.approx(expected, rel=1e-5)
    assert rates[16] == pytest.approx(1e-5, rel=1e-6)
    assert "| lr 4.799e-04 |" in [line for line in proc.stderr.splitlines()
                                  if "step 8/" in line][-1]
    # Both networks trained on it: the summaries carry ELECTRA's figures.
    assert set(summary_scalars(tmp_path, "discriminator_auc")) == {8, 16}


# ----------------------------------------------------------------------- divergence

ADVICE = ("try a lower --learning_rate or a longer warmup (--num_warmup_steps; "
          "--warmup_proportion when fine-tuning)")


def test_a_blown_up_learning_rate_stops_with_electras_uniform_bound_and_saves_nothing(
        cli, data, tmp_path):
    out = tmp_path / "out"
    proc = cli.run(MODULE, electra_flags(data, out, learning_rate=50, num_warmup_steps=5,
                                         steps_per_loop=1, save_checkpoints_steps=1,
                                         num_train_steps=40))
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    lines = error_lines(proc.stderr)
    assert len(lines) == 1, proc.stderr[-3000:]
    # ELECTRA's uniform guess: ln 128 for the generator + 50 x ln 2 for the discriminator =
    # 39.51, its bound 3 x 39.51 + 5 = 123.5 (BERT's, MLM + NSP, would be 21.6 here).
    uniform = math.log(128) + 50 * math.log(2)
    bound = "above 124 (3 x 39.51, the loss of a uniform guess, + 5)"
    assert bound == f"above {3 * uniform + 5:.3g} (3 x {uniform:.4g}, the loss of a uniform " \
                    "guess, + 5)"
    # Saving every step: checkpoints were written before the blow-up showed. The loss of
    # step b is that of the state after step b - 1, so ckpt-(b - 1) is condemned.
    match = re.fullmatch(rf"error: loss diverged at step (\d+): (\S+), {re.escape(bound)}; "
                         r"stopped without saving it \(last good checkpoint: (\S+), kept; a "
                         rf"rerun resumes from it\); {re.escape(ADVICE)}", lines[0])
    assert match, lines[0]
    step, good = int(match.group(1)), match.group(3)
    assert 3 <= step <= 5 and float(match.group(2).replace(",", "")) > 3 * uniform + 5
    assert good == os.fspath(out / f"ckpt-{step - 2}")
    # No checkpoint of a blown-up state is left; the index a rerun resumes from names the
    # good one, whose weights (both networks) and optimizer slots are finite.
    saved = sorted(int(p.name[5:-6]) for p in out.glob("ckpt-*.index"))
    assert saved == list(range(1, step - 1)), saved
    assert tf.train.latest_checkpoint(os.fspath(out)) == good
    tensors = checkpoint_tensors(good)
    assert any("generator" in key for key in tensors)
    for key, value in tensors.items():
        if isinstance(value, np.ndarray) and value.dtype.kind == "f":
            assert np.isfinite(value).all(), key


# ----------------------------------------------------------------------- the discriminator learns


def test_the_discriminator_learns_easy_replacements(cli, data, tmp_path):
    # Uniform replacements (_electra_runs.PATCHED_RUN) of tokens from 16 of the 128 ids:
    # 7 in 8 are ids the records never hold, which a discriminator that reads the corrupted
    # tokens learns to flag in a few steps. Fed the original tokens instead (labels and
    # input disconnected), its held-out AUC stayed at 0.53 and 0.50 (measured).
    flags = electra_flags(data, tmp_path, input_file=data / "easy-train.tfrecord",
                          eval_input_file=data / "easy-eval.tfrecord", num_train_steps=20,
                          learning_rate=2e-3, eval_every_n_steps=10, save_checkpoints_steps=20,
                          steps_per_loop=1)
    proc = cli.run_code(PATCHED_RUN, flags, env={"ELECTRA_SAMPLER": "uniform"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    # Step 1's training batch, scored by the initial weights: about chance.
    assert 0.3 < summary_scalars(tmp_path, "discriminator_auc")[1] < 0.7
    history = read_eval_history(os.fspath(tmp_path))
    assert [record["step"] for record in history] == [10, 20]
    # Measured: 0.84 at step 10, 0.96 at step 20; 15 % of the real tokens replaced.
    assert history[0]["discriminator_auc"] > 0.75
    assert history[1]["discriminator_auc"] > 0.9
    assert 0.1 < history[1]["replaced_fraction"] < 0.2
