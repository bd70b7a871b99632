"""The label list saved with a fine-tuned model: class names in class-id order.

Classification and tagging build it from the training labels (see `classification_data.
build_label_list` and `tagging_data.build_tag_list`); the entry points save it beside the
model as `label_list.json` so that prediction maps class ids back to the same names.
The file is a JSON list of strings, or `null` for a regression model (one float output).
"""

from __future__ import annotations

import json
from typing import List, Optional, Sequence

from bert_tf.core import fileio
from bert_tf.core.errors import UserError, reason

LABEL_LIST_FILE = "label_list.json"


def save_label_list(path: str, label_list: Optional[Sequence[str]]) -> None:
    """Writes the label list (None: regression, written as `null`) as JSON, atomically."""
    data = json.dumps(None if label_list is None else list(label_list), ensure_ascii=False)
    with fileio.atomic_output(path, "wb") as f:
        f.write((data + "\n").encode("utf-8"))


def load_label_list(path: str) -> Optional[List[str]]:
    """Reads a file written by `save_label_list`. Returns None for a regression model.

    Raises:
        UserError: missing file, or not `null` nor a non-empty JSON list of distinct strings.
    """
    if not fileio.exists(path):
        raise UserError(f"{path}: no such file (the label list saved with the model)")
    try:
        with fileio.open_file(path, "rb") as f:
            labels = json.loads(f.read().decode("utf-8"))
    except ValueError as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors.
        raise UserError(f"{path}: not a JSON label list ({reason(e)})") from None
    if labels is not None and not (
            isinstance(labels, list) and labels and all(isinstance(x, str) for x in labels)
            and len(set(labels)) == len(labels)):
        raise UserError(f"{path}: expected a JSON list of distinct label strings, or null")
    return labels
