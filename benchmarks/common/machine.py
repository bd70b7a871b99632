"""One line describing this machine for benchmark output: CPU model, cores, vector ISA.

Figures from an AVX512-BF16 CPU and from an AVX2-only one differ by about 5x for training, so
every benchmark prints this line beside its figures (and `ONEDNN_MAX_CPU_ISA`, which caps the
ISA oneDNN uses: `ONEDNN_MAX_CPU_ISA=AVX2` imitates an ordinary CPU on a newer one).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # bert_tf
from bert_tf.install_check import describe_cpu  # noqa: E402 (pure Python, no TensorFlow)


def describe() -> str:
    return f"machine: {describe_cpu()}"


if __name__ == "__main__":
    print(describe())
