"""One line describing this machine for benchmark output: CPU model, cores, vector ISA.

Figures from an AVX512-BF16 CPU and from an AVX2-only one differ by about 5x for training, so
every benchmark prints this line beside its figures (and `ONEDNN_MAX_CPU_ISA`, which caps the
ISA oneDNN uses: `ONEDNN_MAX_CPU_ISA=AVX2` imitates an ordinary CPU on a newer one).
"""

from __future__ import annotations

import os
import sys
from typing import List, Optional

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # bert_tf
from bert_tf.install_check import describe_cpu  # noqa: E402 (pure Python, no TensorFlow)


def describe() -> str:
    return f"machine: {describe_cpu()}"


def cpu_ticks() -> Optional[List[int]]:
    """The machine's CPU time counters (/proc/stat's first line: user, nice, system, idle,
    iowait, irq, softirq, steal), or None where there is none."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            return [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None


def steal_percent(before: Optional[List[int]], after: Optional[List[int]]) -> Optional[float]:
    """The share of CPU time the hypervisor gave to other machines between two `cpu_ticks`
    (a virtual machine's "steal"). A timed run with steal trains less in its minutes than the
    same run on the same machine without it (docs/results/pretraining.md has a measured
    case)."""
    if before is None or after is None:
        return None
    delta = [b - a for a, b in zip(before, after)]
    total = sum(delta)
    return 100.0 * delta[7] / total if total > 0 else 0.0


if __name__ == "__main__":
    print(describe())
