"""One line describing this machine for benchmark output: CPU model, cores, vector ISA.

Figures from an AVX512-BF16 CPU and from an AVX2-only one differ by about 5x for training, so
every benchmark prints this line beside its figures (and `ONEDNN_MAX_CPU_ISA`, which caps the
ISA oneDNN uses: `ONEDNN_MAX_CPU_ISA=AVX2` imitates an ordinary CPU on a newer one).
"""

from __future__ import annotations

import os
import platform


def describe() -> str:
    model, flags = platform.processor() or "unknown CPU", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and model in ("", "unknown CPU",
                                                                platform.processor()):
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    isa = [name for name, flag in (("AVX2", "avx2"), ("AVX512F", "avx512f"),
                                   ("AVX512-BF16", "avx512_bf16"), ("AMX", "amx_tile"))
           if flag in flags]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA")
    return (f"machine: {model}, {cores} core(s), ISA {'/'.join(isa) or 'unknown'}"
            + (f", ONEDNN_MAX_CPU_ISA={cap}" if cap else ""))


if __name__ == "__main__":
    print(describe())
