"""Runs a test module's `python -m <module> <args>` invocations, each in a process of its own,
without paying TensorFlow's import (~5 s on 2 cores) once per invocation.

A `ForkServer` is one interpreter that imports TensorFlow (and the `preload` modules) once,
without running any TensorFlow op, so no runtime or thread pool exists yet. Per invocation it
forks a child that does what `python -m` (or `python -c`) does: runpy as `__main__` with
argv[0] the module, stdin /dev/null, stdout and stderr into files. The child's exit status
is a real process exit status: SystemExit's code, 1 and a traceback on an uncaught
exception, -N when killed by signal N. Every invocation thus runs the entry point from its
first line (flag definitions, parsing and error handling included), with its own flags and
its own TensorFlow runtime, in a process nothing else ran in.

Preload only modules that define no absl flags: the entry module, which does, must run
fresh in every child. Use `_pretraining_helpers.run_module` (a fresh interpreter) where the
first import itself is the subject, e.g. a process that must not import some module, or
where a variable TensorFlow reads at import time differs between runs.
"""

from __future__ import annotations

import json
import os
import pathlib
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional, Sequence

from _pretraining_helpers import REPO_ROOT, subprocess_env

# What the bert_tf entry points import before their first TensorFlow op: TensorFlow and
# Keras (most of the ~5 s) and the library modules of pretraining, fine-tuning and export,
# none of which defines absl flags (the entry modules and bert_tf.finetune.cli do).
PRELOAD = (
    "numpy",
    "tensorflow",
    "keras",
    "bert_tf.install_check",
    "bert_tf.core.masking_rules",
    "bert_tf.data.input_config",
    "bert_tf.data.input_pipeline",
    "bert_tf.data.input_validation",
    "bert_tf.data.record_positions",
    "bert_tf.interop.continued_pretraining",
    "bert_tf.interop.formats",
    "bert_tf.modeling.pretraining_model",
    "bert_tf.training.budget",
    "bert_tf.training.checkpointing",
    "bert_tf.training.distribution",
    "bert_tf.training.optimization",
    "bert_tf.training.trainer",
    "bert_tf.finetune_main",
    "bert_tf.finetune.scorecard.scorecard",
    "bert_tf.finetune.squad.squad_task",
    "bert_tf.finetune.tagging.tagging_task",
    "bert_tf.export.saved_model",
    "bert_tf.export.keras_hub_preset",
)

# The server reads one JSON request per line: start (fork a child), wait (blocking
# wait4) or poll (wait4 WNOHANG); it answers one JSON line each, a reaped child's CPU
# seconds included.
_SERVER = r"""
import atexit, importlib, json, os, runpy, sys, traceback
for name in sys.argv[1:]:
    importlib.import_module(name)
requests = os.fdopen(0, "r")
replies = os.fdopen(os.dup(1), "w")


def reply(doc):
    replies.write(json.dumps(doc) + "\n")
    replies.flush()


for line in requests:
    request = json.loads(line)
    if request["op"] in ("wait", "poll"):
        flags = 0 if request["op"] == "wait" else os.WNOHANG
        pid, status, usage = os.wait4(request["pid"], flags)
        reply({"returncode": os.waitstatus_to_exitcode(status) if pid else None,
               "cpu_s": usage.ru_utime + usage.ru_stime if pid else 0.0})
        continue
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            replies.close()
            requests.close()
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
                os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
            os.environ.update(request["env"])
            try:
                if "module" in request:
                    sys.argv = [request["module"], *request["args"]]
                    runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
                else:
                    sys.argv = ["-c", *request["args"]]
                    exec(compile(request["code"], "<string>", "exec"), {"__name__": "__main__"})
                code = 0
            except SystemExit as e:
                if e.code is None or isinstance(e.code, int):
                    code = e.code or 0
                else:
                    print(e.code, file=sys.stderr)
            except BaseException:
                traceback.print_exc()
            atexit._run_exitfuncs()
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)
    reply({"pid": pid})
"""


# CPU seconds of reaped runs whose server is still alive. A test process sees a run's CPU
# in its own RUSAGE_CHILDREN only when the server is reaped, at the end of the session
# (conftest.py's fork_servers) or when it is replaced;
# adding this (tests/conftest.py's BERT_TF_TEST_CPU_LOG) gives each run's CPU to the test
# that ran it, and close() takes it back when the server's own reaping counts it.
_forks_cpu = [0.0]


def forked_cpu_seconds() -> float:
    """CPU seconds of the runs reaped so far by fork servers still alive in this process."""
    return _forks_cpu[0]


class ForkedRun:
    """An invocation started by `ForkServer.start`: its pid and the files of its output."""

    def __init__(self, server: "ForkServer", pid: int, args: List[str],
                 stdout: pathlib.Path, stderr: pathlib.Path):
        self.server, self.pid, self.args = server, pid, args
        self.stdout_path, self.stderr_path = stdout, stderr
        self.returncode: Optional[int] = None

    def stderr_so_far(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def poll(self) -> Optional[int]:
        """The exit status if the run has ended (it is then reaped), else None."""
        if self.returncode is None:
            self.returncode = self.server.reaped(self.server.request(
                {"op": "poll", "pid": self.pid}, timeout=60))
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        """SIGKILLs the run if it has not ended, and reaps it."""
        if self.poll() is None:
            self.send_signal(signal.SIGKILL)
            self.wait()

    def wait(self, timeout: float = 300) -> subprocess.CompletedProcess:
        """Waits for the run to end (killing it after `timeout` s); returns it finished."""
        if self.returncode is None:
            self.returncode = self.server.reaped(self.server.request(
                {"op": "wait", "pid": self.pid}, timeout, on_timeout=self.pid))
        return subprocess.CompletedProcess(self.args, self.returncode,
                                           self.stdout_path.read_text(errors="replace"),
                                           self.stderr_path.read_text(errors="replace"))


class ForkServer:
    """Runs `python -m module ...` (or `python -c code ...`) like run_module, each run a
    process of its own, forked from a server that imported `preload` once.

    Args:
        preload: modules imported once by the server (none may define absl flags).
        env: added to the server's environment, so also to every run's; a variable that
            TensorFlow reads at import must be set here, not per run.

    Use as a context manager (or close() it): runs still going are then killed.
    """

    def __init__(self, preload: Sequence[str] = PRELOAD,
                 env: Optional[Dict[str, str]] = None):
        self._dir = pathlib.Path(tempfile.mkdtemp(prefix="fork_server_"))
        self._runs: List[ForkedRun] = []
        self._started = 0
        self._forks_cpu = 0.0
        with open(self._dir / "server.stderr", "w") as log:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _SERVER, *preload], cwd=REPO_ROOT,
                env=subprocess_env(env), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=log, text=True)

    def __enter__(self) -> "ForkServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def alive(self) -> bool:
        """Whether the server process still runs (a module sharing it needs a new one if not)."""
        return self._proc.poll() is None

    def end_runs(self) -> None:
        """Kills and reaps the runs still going: what one test module started does not
        outlive it when the next module uses the same server."""
        for run in self._runs:
            run.kill()
        self._runs = []

    def close(self) -> None:
        for run in self._runs:
            if run.returncode is None:
                try:
                    os.kill(run.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        # Killing the server reparents (and so reaps) its children; nothing of its own is
        # worth a clean exit.
        self._proc.kill()
        self._proc.wait()
        _forks_cpu[0] -= self._forks_cpu  # now in this process's RUSAGE_CHILDREN
        self._forks_cpu = 0.0
        self._proc.stdin.close()
        self._proc.stdout.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def reaped(self, answer: dict) -> Optional[int]:
        """The return code of a wait or poll answer; counts the CPU of a reaped run."""
        if answer["returncode"] is not None:
            self._forks_cpu += answer["cpu_s"]
            _forks_cpu[0] += answer["cpu_s"]
        return answer["returncode"]

    def request(self, request: dict, timeout: float, on_timeout: Optional[int] = None) -> dict:
        """Sends one request and returns the server's answer; after `timeout` s, kills the
        `on_timeout` pid (and reads the answer that follows) and raises TimeoutExpired."""
        self._proc.stdin.write(json.dumps(request) + "\n")
        self._proc.stdin.flush()
        selector = selectors.DefaultSelector()
        selector.register(self._proc.stdout, selectors.EVENT_READ)
        if not selector.select(timeout=timeout):
            if on_timeout is not None:
                os.kill(on_timeout, signal.SIGKILL)
                self._proc.stdout.readline()
            raise subprocess.TimeoutExpired(request, timeout)
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError("the fork server died: "
                               + (self._dir / "server.stderr").read_text()[-3000:])
        return json.loads(line)

    def start(self, module: Optional[str], args: Sequence[str], code: Optional[str] = None,
              env: Optional[Dict[str, str]] = None) -> ForkedRun:
        """Starts `python -m module args...` (or, with code, `python -c code args...`)."""
        self._started += 1
        n = self._started
        out, err = self._dir / f"{n}.stdout", self._dir / f"{n}.stderr"
        out.touch()
        err.touch()  # readable at once (the child opens it after the server answers)
        args = [os.fspath(a) for a in args]
        request = {"op": "start", "args": args, "stdout": os.fspath(out),
                   "stderr": os.fspath(err), "env": dict(env or {})}
        if code is None:
            request["module"] = module
            argv = [sys.executable, "-m", module, *args]
        else:
            request["code"] = code
            argv = [sys.executable, "-c", code, *args]
        # The first request also waits for the server's imports (slow on a busy machine).
        run = ForkedRun(self, self.request(request, timeout=600)["pid"], argv, out, err)
        self._runs.append(run)
        return run

    def run(self, module: str, args: Sequence[str], timeout: float = 300,
            env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
        """Like run_module: runs `python -m module args...`; returns the finished process."""
        return self.start(module, args, env=env).wait(timeout)

    def run_code(self, code: str, args: Sequence[str], timeout: float = 300,
                 env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
        """Runs `python -c code args...`; returns the finished process."""
        return self.start(None, args, code=code, env=env).wait(timeout)
