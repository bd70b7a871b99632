"""Probabilities from a model's logits on the host, in NumPy (eval losses, predictions).

The tasks gather their logits over the whole evaluation set (`runner.predict`) and turn them
into losses and probabilities here, in float64, so no family imports another for them
(softmax over classes; the sigmoid of one logit, for a reranker).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike


def log_softmax(logits: ArrayLike) -> np.ndarray:
    """Log-probabilities over the last axis, computed stably.

    Args:
      logits: [..., num_classes] floats.

    Returns:
      float64 [..., num_classes]: logits - logsumexp(logits) over the last axis.
    """
    logits = np.asarray(logits, dtype=np.float64)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def log_sigmoid(logits: ArrayLike) -> np.ndarray:
    """log(sigmoid(x)) elementwise, computed stably: -log(1 + exp(-x)).

    Args:
      logits: any shape of floats.

    Returns:
      float64 of the same shape (log(1 - sigmoid(x)) is log_sigmoid(-x)).
    """
    return -np.logaddexp(0.0, -np.asarray(logits, dtype=np.float64))
