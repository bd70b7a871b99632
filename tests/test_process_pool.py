"""Tests for data_tools.runtime.process_pool: order, bounded hand-out, errors, dead workers, no
hang."""

import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from bert_tf.core.errors import UserError
from data_tools.runtime import process_pool

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _square(x):
    return x * x


def _die(x):
    os._exit(3)


def _fail(x):
    if x == 3:
        raise ValueError(f"bad item {x}")
    if x == 4:
        raise UserError(f"--flag: item {x} is wrong")
    return x


def test_results_come_in_order_for_any_worker_count():
    for workers in (1, 2, 3):
        assert list(process_pool.map_ordered(_square, ((i,) for i in range(25)), workers)) == \
            [i * i for i in range(25)]
    assert list(process_pool.map_ordered(_square, [], 2)) == []


def test_calls_are_consumed_lazily_within_the_window():
    drawn = []

    def calls():
        for i in range(100):
            drawn.append(i)
            yield (i,)

    results = process_pool.map_ordered(_square, calls(), 2)
    assert next(results) == 0
    # At most num_workers + 1 calls beyond the one consumed, plus the draw that found none free.
    assert len(drawn) <= 2 + 1 + 1
    assert list(results) == [i * i for i in range(1, 100)]
    assert len(drawn) == 100


def test_errors_in_a_worker_reach_the_caller():
    with pytest.raises(ValueError, match="bad item 3") as info:
        list(process_pool.map_ordered(_fail, ((i,) for i in range(10)), 2))
    assert isinstance(info.value.__cause__, process_pool.WorkerTraceback)
    assert "_fail" in str(info.value.__cause__)  # the worker's own traceback
    with pytest.raises(UserError, match=r"^--flag: item 4 is wrong$"):
        list(process_pool.map_ordered(_fail, ((i,) for i in range(4, 10)), 2))


def test_a_dead_worker_is_reported():
    with pytest.raises(UserError, match=r"^a worker process died"):
        list(process_pool.map_ordered(_die, [(1,)], 2))


# A worker SIGKILLed while it is sending a result larger than the pipe holds. The parent
# reads a worker's pipe only when it wants a result, so here the kill surely lands mid-send
# and half a message stays in the pipe: it must give a UserError, not a hang or a result.
# (ProcessPoolExecutor's reader thread hung on exactly that, 1 run in 10 of the killed-worker
# test of create_pretraining_data under load.) No sleeps: call 1 starts its result only once
# the consumer has call 0's (else the parent could read both while it waits), and the kill
# waits until the start of that result is in the parent's end of the pipe.
KILLED_MID_SEND = textwrap.dedent("""
    import fcntl, os, signal, stat, struct, sys, termios, time
    from bert_tf.core.errors import UserError
    from data_tools.runtime import process_pool

    def call(i, folder):
        if i == 0:
            return "small"
        while not os.path.exists(os.path.join(folder, "go")):  # call 0's result is taken
            time.sleep(0.01)
        with open(os.path.join(folder, "pid.tmp"), "w") as f:
            f.write(str(os.getpid()))
        os.replace(os.path.join(folder, "pid.tmp"), os.path.join(folder, "pid"))
        return b"x" * (64 << 20)  # blocks in send: the parent is not reading

    def waiting_bytes():
        # Bytes ready to read on this process's pipes and sockets (FIONREAD).
        total = 0
        for fd in range(3, 256):
            try:
                mode = os.fstat(fd).st_mode
                if stat.S_ISSOCK(mode) or stat.S_ISFIFO(mode):
                    total += struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\\0" * 4))[0]
            except OSError:  # not an open file
                continue
        return total

    def wait_for(condition, what):
        deadline = time.monotonic() + 60
        while not condition():
            assert time.monotonic() < deadline, what
            time.sleep(0.01)

    folder = sys.argv[1]
    results = process_pool.map_ordered(call, [(0, folder), (1, folder)], 2)
    assert next(results) == "small"
    assert waiting_bytes() == 0  # nothing of call 1 is sent yet
    open(os.path.join(folder, "go"), "w").close()
    pid_file = os.path.join(folder, "pid")
    wait_for(lambda: os.path.exists(pid_file), "call 1 never started")
    wait_for(lambda: waiting_bytes() > 0, "call 1's result never started")  # mid-send now
    os.kill(int(open(pid_file).read()), signal.SIGKILL)
    try:
        next(results)
    except UserError as e:
        print("error:", e)
""")


def test_a_worker_killed_while_sending_is_an_error_not_a_hang(tmp_path):
    proc = subprocess.run([sys.executable, "-c", KILLED_MID_SEND, str(tmp_path)],
                          cwd=REPO, env={**os.environ, "PYTHONPATH": REPO},
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("error: a worker process died"), proc.stdout


def test_the_workers_are_gone_after_an_early_stop():
    results = process_pool.map_ordered(_square, ((i,) for i in range(1000)), 2)
    assert next(results) == 0
    pids = [p.pid for p in multiprocessing.active_children()]
    assert len(pids) >= 2
    results.close()  # the consumer stops early: the workers are terminated and joined
    alive = [p.pid for p in multiprocessing.active_children()]
    assert not set(pids) & set(alive)


# The parent stops its workers at once when the first call fails, often while they are still
# starting. Until a forked worker has set its own handlers it would run the parent's (the
# entry points turn SIGTERM into KeyboardInterrupt), print a traceback and could hang: 1
# prepare_corpus bad-input run in 20 did. So SIGINT/SIGTERM are blocked from the fork until
# the worker's handlers are in place, then unblocked.
def _mask_in_call(i):
    return sorted(signal.pthread_sigmask(signal.SIG_BLOCK, []))


def test_stop_signals_stay_blocked_until_the_worker_set_its_handlers(tmp_path, monkeypatch):
    # The window exists for forked workers (Linux before TensorFlow is imported): fork here
    # even if another test of this process imported TensorFlow (the worker never touches it).
    monkeypatch.setattr(process_pool, "start_method", lambda: "fork")
    seen = tmp_path / "mask"
    original = process_pool.start_worker

    def recording_start(initializer, initargs):  # runs in the forked worker, first thing
        seen.write_text(" ".join(str(int(s)) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])))
        original(initializer, initargs)

    monkeypatch.setattr(process_pool, "start_worker", recording_start)
    parent_sigint = signal.getsignal(signal.SIGINT)  # SIG_IGN when pytest ran in background
    masks = list(process_pool.map_ordered(_mask_in_call, [(0,)], 1))
    at_start = {int(s) for s in seen.read_text().split()}
    assert {signal.SIGINT, signal.SIGTERM} <= set(at_start)
    assert not {signal.SIGINT, signal.SIGTERM} & set(masks[0])  # unblocked for the calls
    assert signal.getsignal(signal.SIGINT) is parent_sigint  # the parent's are untouched
