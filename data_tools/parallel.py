"""An ordered map over a pool of worker processes, with few tasks in flight.

Results come back in task order whatever the number of workers, which is what makes the data
jobs' outputs independent of --num_workers; at most `num_workers + 1` tasks are submitted
ahead of the one being consumed, so memory stays bounded however long the input is.
"""

from __future__ import annotations

import collections
import concurrent.futures
import concurrent.futures.process
import multiprocessing
import signal
import sys
from typing import Any, Callable, Deque, Iterable, Iterator, Optional, Sequence, TypeVar

from bert_tf.errors import UserError

R = TypeVar("R")


def _start_worker(initializer: Optional[Callable[..., None]], initargs: Sequence[Any]) -> None:
    # Ctrl-C reaches the whole process group; the parent alone handles it and terminates us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Entry points turn SIGTERM into KeyboardInterrupt; the parent ends workers with
    # SIGTERM, which must simply end a worker.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if initializer is not None:
        initializer(*initargs)


def start_method() -> str:
    """"fork" on Linux before TensorFlow is imported, else "spawn".

    fork shares what the parent loaded (a tokenizer) for free; after TensorFlow was imported
    (remote paths) forking is unsafe, as it is on macOS, so workers are spawned and their
    initializer's arguments pickled.
    """
    return ("fork" if sys.platform.startswith("linux") and "tensorflow" not in sys.modules
            else "spawn")


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
        UserError: a worker process died (killed, or out of memory).
    """
    executor = concurrent.futures.ProcessPoolExecutor(
        num_workers, mp_context=multiprocessing.get_context(start_method()),
        initializer=_start_worker, initargs=(initializer, tuple(initargs)))
    pending: Deque[concurrent.futures.Future] = collections.deque()
    try:
        for call in calls:
            pending.append(executor.submit(fn, *call))
            while len(pending) > num_workers + 1:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    except concurrent.futures.process.BrokenProcessPool:
        raise UserError("a worker process died (killed, or out of memory?); no output "
                        "was written") from None
    finally:
        # On Ctrl-C or an error: cancel the queued tasks and let each worker finish the one it
        # holds (at most `num_workers + 1` chunks, seconds). Terminating the workers instead
        # can cut a result message in half inside the executor's pipe, and the executor's
        # thread then waits for the rest of it forever (seen as a hang on SIGTERM).
        executor.shutdown(wait=True, cancel_futures=True)
