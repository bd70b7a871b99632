"""Tests for bert_tf.finetune.label_list: the label list saved with a fine-tuned model."""

from __future__ import annotations

import os

import pytest

from bert_tf.core.errors import UserError
from bert_tf.finetune import label_list


def test_round_trip_and_regression(tmp_path):
    path = str(tmp_path / label_list.LABEL_LIST_FILE)
    label_list.save_label_list(path, ("O", "B-LOC", "ü"))
    with open(path, encoding="utf-8") as f:
        assert f.read() == '["O", "B-LOC", "ü"]\n'
    assert label_list.load_label_list(path) == ["O", "B-LOC", "ü"]
    label_list.save_label_list(path, None)
    assert label_list.load_label_list(path) is None
    assert os.listdir(tmp_path) == ["label_list.json"]  # written atomically, no leftovers


@pytest.mark.parametrize("content, problem", [
    ('["a", "a"]', "expected a JSON list of distinct label strings, or null"),
    ("[]", "expected a JSON list of distinct label strings, or null"),
    ('["a", 1]', "expected a JSON list of distinct label strings, or null"),
    ('{"labels": ["a"]}', "expected a JSON list of distinct label strings, or null"),
    ("[\"a\",", "not a JSON label list (Expecting value: line 1 column 6 (char 5))"),
])
def test_bad_files(tmp_path, content, problem):
    path = tmp_path / "label_list.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(UserError) as e:
        label_list.load_label_list(str(path))
    assert str(e.value) == f"{path}: {problem}"


def test_missing_file(tmp_path):
    with pytest.raises(UserError, match="no such file"):
        label_list.load_label_list(str(tmp_path / "label_list.json"))
