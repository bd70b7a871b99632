"""eval_results.txt: `key = value` lines, as the original release's scripts wrote them."""

from __future__ import annotations

import os
from typing import Dict

import numpy as np

from bert_tf.core import fileio

EVAL_RESULTS_FILE = "eval_results.txt"


def format_eval_results(results: Dict[str, float]) -> str:
    """`key = value` lines in sorted key order, as the original run_pretraining wrote them."""
    lines = []
    for key in sorted(results):
        value = results[key]
        # str() of a float32, as the original printed its numpy metrics: "0.12", not 0.1199...
        lines.append(f"{key} = {value if isinstance(value, int) else str(np.float32(value))}")
    return "\n".join(lines) + "\n"


def write_eval_results(path: str, results: Dict[str, float]) -> None:
    """Writes eval results atomically and prints them."""
    text = format_eval_results(results)
    fileio.makedirs(os.path.dirname(path) or ".")
    with fileio.atomic_output(path, "wb") as f:
        f.write(text.encode("utf-8"))
    print("***** Eval results *****\n" + text, end="", flush=True)

