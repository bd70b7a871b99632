"""One job in a fresh process, with its wall time, CPU time and peak RSS; or a call in this
process, with its wall and CPU time (`timed`).

A tiny wrapper process runs the job, so that `RUSAGE_CHILDREN` covers that job only (its
workers included: ru_maxrss is the largest of them, not their sum).
"""

from __future__ import annotations

import dataclasses
import json
import resource
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

_WRAPPER = (
    "import json, resource, subprocess, sys, time\n"
    "t = time.monotonic()\n"
    "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
    "dt = time.monotonic() - t\n"
    "r = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "sys.stderr.write(p.stderr)\n"
    "print(json.dumps({'wall': dt, 'maxrss_kb': r.ru_maxrss, 'rc': p.returncode,\n"
    "                  'cpu': r.ru_utime + r.ru_stime, 'stdout': p.stdout}))\n"
)


@dataclasses.dataclass(frozen=True)
class Measured:
    """wall and cpu in seconds; peak_mb: the largest process's peak RSS (MB)."""
    wall: float
    cpu: float
    peak_mb: float
    stdout: str
    stderr: str


def run_job(cmd: List[str], cwd: str, env: Optional[Dict[str, str]] = None) -> Measured:
    """Runs `cmd`; exits the benchmark with the job's last stderr when it fails."""
    p = subprocess.run([sys.executable, "-c", _WRAPPER] + cmd, capture_output=True, text=True,
                       cwd=cwd, env=env)
    try:
        r = json.loads(p.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        sys.exit(f"job wrapper failed ({' '.join(cmd[:4])} ...):\n{p.stderr[-3000:]}")
    if r["rc"] != 0:
        sys.exit(f"job failed ({' '.join(cmd[:4])} ...) in {cwd}:\n{p.stderr[-3000:]}")
    return Measured(r["wall"], r["cpu"], r["maxrss_kb"] * 1024 / 1e6, r["stdout"], p.stderr)


def cpu_seconds() -> float:
    """CPU time of this process (all its threads) and its finished children, user + system."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def timed(fn: Callable[[], Any]) -> Tuple[Any, float, float]:
    """(fn's result, wall seconds, CPU seconds of this process and the children it waited
    for) of one call of `fn` in this process."""
    wall, cpu = time.perf_counter(), cpu_seconds()
    result = fn()
    return result, time.perf_counter() - wall, cpu_seconds() - cpu


def child_json(cmd: List[str], env: Dict[str, str], cwd: str) -> Dict[str, Any]:
    """Runs a benchmark's child process; returns the JSON object on its last stdout line."""
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True,
                         cwd=cwd).stdout
    return json.loads(out.strip().splitlines()[-1])
