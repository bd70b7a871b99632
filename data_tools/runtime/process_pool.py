"""An ordered map over a pool of worker processes, with few calls in flight.

Results come back in call order whatever the number of workers, which is what makes the data
jobs' outputs independent of --num_workers; at most `num_workers + 1` calls are handed out
ahead of the result being consumed, so memory stays bounded however long the input is.

Each worker has its own pipe to the parent, read by the parent's own thread. The standard
pools (concurrent.futures, multiprocessing.Pool) share one result pipe between all workers
and read it from a helper thread: a worker killed while it sends a result (out of memory,
or stopped on Ctrl-C) leaves half a message in it, and that thread then waits for the rest
forever, so the job hangs instead of failing (seen with ProcessPoolExecutor: in CI on
SIGTERM, and here in 1 run in 10 of the killed-worker test under load). Here a worker's death
closes only its own pipe, the parent sees the end of the file or the process sentinel and
reports it, and stopping the workers is a plain kill.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import traceback
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, TypeVar

from bert_tf.core.errors import UserError

R = TypeVar("R")
_END = object()

_DIED = "a worker process died (killed, or out of memory?); no output was written"


class WorkerTraceback(Exception):
    """The traceback of an exception raised in a worker (the `__cause__` of its re-raise)."""


# Blocked while a worker starts: until it has set its own handlers, a forked worker would
# run the parent's (KeyboardInterrupt), print a traceback, and could hang in its bootstrap.
_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}
_CAN_MASK = hasattr(signal, "pthread_sigmask")


def start_worker(initializer: Optional[Callable[..., None]], initargs: Sequence[Any]) -> None:
    """What a worker process does first: leaves Ctrl-C and SIGTERM to the parent's handling,
    unblocks them, then runs `initializer(*initargs)`."""
    # Ctrl-C reaches the whole process group; the parent alone handles it and stops us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Entry points turn SIGTERM into KeyboardInterrupt; in a worker it must simply end it.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if _CAN_MASK:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
    if initializer is not None:
        initializer(*initargs)


def _worker_main(conn, inherited, initializer, initargs) -> None:
    """A worker: runs `(fn, args)` calls from `conn` and sends `(ok, value, traceback)` back,
    until it receives None or the parent dies."""
    for other in inherited:  # (fork) the parent's ends of the earlier workers' pipes
        other.close()
    start_worker(initializer, initargs)
    parent = multiprocessing.parent_process()
    watched = [conn] + ([parent.sentinel] if parent is not None else [])
    while True:
        if conn not in multiprocessing.connection.wait(watched):
            return  # the parent died
        try:
            call = conn.recv()
        except (EOFError, OSError):
            return
        if call is None:
            return
        fn, args = call
        try:
            reply = (True, fn(*args), None)
        except Exception as e:
            reply = (False, e, traceback.format_exc())
        try:
            conn.send(reply)  # pickled whole before anything is written
        except OSError:
            return
        except Exception as e:  # the result or exception did not pickle: say so instead
            what = "result" if reply[0] else f"exception {type(reply[1]).__name__}"
            conn.send((False, RuntimeError(f"a worker's {what} could not be sent: {e}"),
                       reply[2] or traceback.format_exc()))


def default_num_workers() -> int:
    """The data jobs' default --num_workers: the cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def start_method() -> str:
    """"fork" on Linux before TensorFlow is imported, else "spawn".

    fork shares what the parent loaded (a tokenizer) for free; after TensorFlow was imported
    (remote paths) forking is unsafe, as it is on macOS, so workers are spawned and their
    initializer's arguments pickled.
    """
    return ("fork" if sys.platform.startswith("linux") and "tensorflow" not in sys.modules
            else "spawn")


class _Worker:
    def __init__(self, context, others: List["_Worker"], initializer, initargs) -> None:
        self.conn, child_end = context.Pipe()
        inherited = [w.conn for w in others] if context.get_start_method() == "fork" else []
        self.process = context.Process(target=_worker_main, daemon=True,
                                       args=(child_end, inherited, initializer, initargs))
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS) if _CAN_MASK else None
        try:
            self.process.start()
        finally:
            if mask is not None:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a pending Ctrl-C lands now
        # Only the worker holds its end now: its death is an end of file here.
        child_end.close()


def _receive(worker: _Worker) -> Tuple[bool, Any, Optional[str]]:
    try:
        return worker.conn.recv()
    except (EOFError, OSError):  # died before or while sending its result
        raise UserError(_DIED) from None


def _unwrap(ok: bool, value: Any, remote_traceback: Optional[str]) -> Any:
    """The result, or the worker's exception raised here (in call order, like results)."""
    if ok:
        return value
    if isinstance(value, UserError):
        raise value
    raise value from WorkerTraceback(remote_traceback)


def _run(fn: Callable[..., R], calls: Iterator[Sequence[Any]], workers: List[_Worker],
         window: int) -> Iterator[R]:
    results: Dict[int, Tuple[bool, Any, Optional[str]]] = {}  # received ahead of their turn
    busy: Dict[_Worker, int] = {}  # worker -> index of its call
    idle = list(reversed(workers))
    handed_out = next_out = 0
    exhausted = False
    while True:
        while idle and not exhausted and handed_out < next_out + window:
            call = next(calls, _END)
            if call is _END:
                exhausted = True
                break
            worker = idle.pop()
            try:
                worker.conn.send((fn, tuple(call)))
            except OSError:  # died while idle
                raise UserError(_DIED) from None
            busy[worker] = handed_out
            handed_out += 1
        if next_out in results:
            yield _unwrap(*results.pop(next_out))
            next_out += 1
            continue
        if not busy:
            return
        waiting = {}
        for worker in busy:
            waiting[worker.conn] = waiting[worker.process.sentinel] = worker
        for ready in multiprocessing.connection.wait(list(waiting)):
            worker = waiting[ready]
            if worker in busy:  # its pipe and its sentinel can both be ready
                results[busy.pop(worker)] = _receive(worker)
                idle.append(worker)


def map_ordered(fn: Callable[..., R], calls: Iterable[Sequence[Any]], num_workers: int,
                initializer: Optional[Callable[..., None]] = None,
                initargs: Sequence[Any] = ()) -> Iterator[R]:
    """Yields `fn(*call)` for every call, in order, computed by `num_workers` processes.

    Args:
        fn: a module-level function (it is pickled by name).
        calls: the argument tuples, consumed lazily.
        num_workers: worker processes (>= 1).
        initializer: run once in each worker with `initargs` (e.g. to set module globals
            that `fn` reads).
        initargs: the initializer's arguments.

    Raises:
        UserError: a worker process died (killed, or out of memory), or `fn` raised one.
        Exception: what `fn` raised in a worker, with the worker's traceback as its cause.
    """
    context = multiprocessing.get_context(start_method())
    workers: List[_Worker] = []
    finished = False
    try:
        for _ in range(num_workers):
            workers.append(_Worker(context, workers, initializer, tuple(initargs)))
        yield from _run(fn, iter(calls), workers, num_workers + 1)
        finished = True
    finally:
        for worker in workers:
            if finished:
                try:
                    worker.conn.send(None)
                except OSError:
                    pass
            else:  # Ctrl-C, an error, or the consumer stopped early: stop now. SIGKILL is
                # safe (each worker has its own pipe) and cannot be caught or delayed.
                worker.process.kill()
        for worker in workers:
            worker.process.join(timeout=10 if finished else None)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join()
            worker.conn.close()
