"""Tests of bert_tf.training.progress: when progress lines come, and what they say."""

from __future__ import annotations

import logging

import pytest

from bert_tf.training import progress

BATCH = 32


class FakeClock:
    """Monotonic seconds that move only when the test says so."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def step_sums(step: int) -> dict:
    """Global sums of one step: 100 predictions, 25 + step right; 32 examples, 20 NSP right."""
    return {"mlm_weighted_ce": 600.0, "mlm_weight": 100.0, "mlm_correct": 25.0 + step,
            "num_examples": float(BATCH), "nsp_ce": 16.0, "nsp_correct": 20.0}


def run(logger: progress.ProgressLogger, clock: FakeClock, total: int, steps_per_loop: int,
        seconds_per_step: float, start: int = 0) -> list:
    """Drives the logger as Trainer.train does; returns the steps that were reported."""
    reported = []
    step = start
    while step < total:
        n = min(steps_per_loop, total - step)
        clock.now += n * seconds_per_step
        logger.add([6.5] * n, {k: v * n for k, v in step_sums(step).items()},
                   n * seconds_per_step)
        step += n
        if logger.due(step) or step == total:
            assert logger.report(step, 1e-4) is not None
            reported.append(step)
    return reported


def test_first_step_then_every_n_steps_on_a_fast_machine():
    clock = FakeClock()
    logger = progress.ProgressLogger("unused", 1000, BATCH, write_summaries=False,
                                     log_every_n_steps=100, clock=clock)
    # 0.1 s per step: 100 steps take 10 s, under the 30 s interval.
    assert run(logger, clock, 1000, 1, 0.1) == [1] + list(range(100, 1001, 100))


def test_first_step_then_every_30_seconds_on_a_slow_machine():
    clock = FakeClock()
    logger = progress.ProgressLogger("unused", 100, BATCH, write_summaries=False,
                                     log_every_n_steps=50, clock=clock)
    # 7 s per step: 30 s pass at the 5th step after each report (35 s), 50 steps come at 50.
    assert run(logger, clock, 100, 1, 7.0) == [1, 6, 11, 16, 21, 26, 31, 36, 41, 46, 50, 55,
                                              60, 65, 70, 75, 80, 85, 90, 95, 100]


def test_time_based_reports_can_be_switched_off():
    clock = FakeClock()
    logger = progress.ProgressLogger("unused", 100, BATCH, write_summaries=False,
                                     log_every_n_steps=50, report_seconds=0, clock=clock)
    assert run(logger, clock, 100, 1, 7.0) == [1, 50, 100]


def test_loops_report_at_loop_boundaries_only():
    clock = FakeClock()
    logger = progress.ProgressLogger("unused", 400, BATCH, write_summaries=False,
                                     log_every_n_steps=100, clock=clock)
    # 30 steps per call at 0.5 s per step, 15 s per call: the first line comes after the first
    # loop (step 30), then 30 s later (90) or past a multiple of 100 (120, 210, 300), then 30 s
    # after that, and at the end.
    assert run(logger, clock, 400, 30, 0.5) == [30, 90, 120, 180, 210, 270, 300, 360, 400]
    clock = FakeClock()
    logger = progress.ProgressLogger("unused", 400, BATCH, write_summaries=False,
                                     log_every_n_steps=100, clock=clock)
    # Fast loops: the first boundary at or past each multiple of 100.
    assert run(logger, clock, 400, 30, 0.01) == [30, 120, 210, 300, 400]


def test_resumed_run_reports_its_first_step_then_multiples_of_n():
    clock = FakeClock()
    logger = progress.ProgressLogger("unused", 300, BATCH, write_summaries=False,
                                     log_every_n_steps=100, clock=clock)
    assert run(logger, clock, 300, 1, 0.1, start=137) == [138, 200, 300]


def test_nothing_is_due_or_reported_without_steps():
    logger = progress.ProgressLogger("unused", 10, BATCH, write_summaries=False,
                                     clock=FakeClock())
    assert not logger.due(0)
    assert logger.report(0, 1e-4) is None


def test_report_values_and_line(caplog):
    clock = FakeClock()
    logger = progress.ProgressLogger("unused", 10, BATCH, write_summaries=False,
                                     log_every_n_steps=5, clock=clock)
    caplog.set_level(logging.INFO, logger="absl")  # absl may have been left at WARNING
    logger.add([7.0], step_sums(0), 4.0)  # the first call: includes tracing
    first = logger.report(1, 1e-4)
    logger.add([6.0, 5.0], {k: 2 * v for k, v in step_sums(1).items()}, 2.0)
    second = logger.report(3, 5e-5)
    assert first["examples_per_second"] == pytest.approx(BATCH / 4.0)
    assert first["masked_lm_accuracy"] == pytest.approx(0.25)
    assert second["loss"] == pytest.approx(5.5)
    assert second["examples_per_second"] == pytest.approx(2 * BATCH / 2.0)
    assert second["masked_lm_loss"] == pytest.approx(6.0, rel=1e-6)
    assert second["masked_lm_accuracy"] == pytest.approx(0.26)
    assert second["next_sentence_accuracy"] == pytest.approx(20 / 32)
    lines = [r.getMessage() for r in caplog.records if "examples/s" in r.getMessage()]
    assert len(lines) == 2
    assert lines[0].startswith("step 1/10 | loss 7.000000 | mlm_loss 6.0000 mlm_acc 0.2500")
    assert "8.0 examples/s (incl. graph tracing) | eta 0:00:36" in lines[0]
    assert "32.0 examples/s | eta 0:00:07" in lines[1]
    assert "tracing" not in lines[1]


def test_eta_ends_at_the_time_budget_when_it_comes_first(caplog):
    # 1,000,000 steps at 1 step/s would take 11 days; 90 s of budget are left.
    logger = progress.ProgressLogger("unused", 1_000_000, BATCH, write_summaries=False,
                                     log_every_n_steps=5, clock=FakeClock(),
                                     seconds_left=lambda: 90.0)
    caplog.set_level(logging.INFO, logger="absl")
    logger.add([7.0], step_sums(0), 1.0)
    logger.report(1, 1e-4)
    (line,) = [r.getMessage() for r in caplog.records if "examples/s" in r.getMessage()]
    assert line.endswith("eta 0:01:30")
