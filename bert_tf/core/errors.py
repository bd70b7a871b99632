"""User-facing errors: bad input is reported as one line, with no traceback.

Library code raises `UserError` with a message that names the problem (which file, which
flag, which feature). The entry points wrap their main function with `cli_main`, which
prints `error: <message>` to stderr and exits non-zero, and start it with `run_app` (both the
`python -m` form and the installed `bert-tf-*` console scripts). Anything else is a bug and keeps
its traceback.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
from typing import Any, Callable, List, NoReturn, Optional

# Exit codes of the entry points.
EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130
# 128 + SIGTERM, the conventional status of a process ended by SIGTERM: schedulers see "not
# finished" and restart it (a preempted run, after its checkpoint).
EXIT_TERMINATED = 143


class UserError(Exception):
    """Bad input or configuration: a one-line message for the user, no traceback."""


def exit_at_once(message: str, code: int) -> NoReturn:
    """Prints `message` (one line) and ends the process now, without the interpreter teardown.

    For a run stopped by SIGTERM after its checkpoint and summaries were written and closed:
    a preempted VM has about 30 s, and TensorFlow's teardown can take longer (the tf.data
    iterator's destructor waits for its autotuning thread, which sleeps up to a minute, and
    workers of a cluster wait for each other; see docs/results/pretraining.md).
    """
    from absl import logging

    print(message, file=sys.stderr, flush=True)
    logging.flush()
    sys.stdout.flush()
    os._exit(code)


def reason(e: BaseException) -> str:
    """One line (at most 300 characters) saying why an operation failed, for a UserError.

    OSError gives its strerror, TensorFlow's OpError its message without the op details,
    anything else the first line of its text, or its type name when it has no text.
    """
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    text = (getattr(e, "message", None) or str(e)).strip()
    return text.splitlines()[0][:300] if text else type(e).__name__


def cli_main(main: Callable[..., Any]) -> Callable[..., Any]:
    """Wraps an absl `main(argv)` so that user errors print one line and exit non-zero.

    Args:
        main: the entry point's main function, as passed to `absl.app.run`.

    Returns:
        A function with the same signature for `absl.app.run`.
    """

    @functools.wraps(main)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        try:
            return main(*args, **kwargs)
        except UserError as e:
            print(f"error: {e}", file=sys.stderr, flush=True)
            sys.exit(EXIT_USER_ERROR)
        except KeyboardInterrupt:
            # Outputs are written under temporary names, so nothing partial is left behind.
            print("error: interrupted", file=sys.stderr, flush=True)
            sys.exit(EXIT_INTERRUPTED)

    return wrapped


def parse_flags(argv: List[str]) -> List[str]:
    """`flags_parser` for `absl.app.run`: a bad flag is reported as one `error:` line (exit 2).

    absl's own parser prints "FATAL Flags parsing error" plus a hint and exits 1; every entry
    point uses this one instead, so all user errors look and exit alike.
    """
    from absl import flags

    try:
        return flags.FLAGS(argv)
    except flags.Error as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        sys.exit(EXIT_USER_ERROR)


def run_app(main: Callable[[List[str]], Any],
            preflight: Optional[Callable[[], List[str]]] = None) -> None:
    """Runs an entry point's `main(argv)` with absl, parsing flags with `parse_flags`.

    Each entry module calls it from `console_main()`, the zero-argument function its
    console script (setup.cfg `console_scripts`) and its `python -m` form both run.

    Args:
        main: the entry point's main function.
        preflight: called before anything else; the problems it returns (one line each)
            stop the program with the first of them. bert_tf's entry points, which all load
            TensorFlow, pass `bert_tf.install_check.problems`, so an install whose
            TensorFlow, tensorflow-text and Keras do not fit together stops with one line
            rather than a crash inside TensorFlow; data_tools' jobs, which never load
            TensorFlow, pass nothing.
    """
    from absl import app, flags

    if preflight is not None:
        problems = preflight()
        if problems:
            print(f"error: {problems[0]}", file=sys.stderr, flush=True)
            sys.exit(EXIT_USER_ERROR)
    if main.__module__ != "__main__":
        # A console script's own __main__ defines no flags, so absl's --help/--helpshort
        # (the flags of the program named by argv[0]) would list none: declare the package's
        # flags as the program's. `python -m` needs nothing (its module is __main__).
        for module, module_flags in flags.FLAGS.flags_by_module_dict().items():
            if module.split(".")[0] in ("bert_tf", "data_tools"):
                for flag in module_flags:
                    flags.FLAGS.register_key_flag_for_module(sys.argv[0], flag)
        main_module = sys.modules.get("__main__")
        if main_module is not None and not main_module.__doc__:
            main_module.__doc__ = sys.modules[main.__module__].__doc__  # the usage text
    # Ctrl-C is answered even when the program was started with SIGINT ignored (a shell
    # without job control starts `cmd &` that way, and Python then installs no handler): a
    # job must not silently run on after an interrupt (it did: the interrupt test of
    # create_pretraining_data exited 0 when the test run was started in the background).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    app.run(main, flags_parser=parse_flags)
