"""Tests of data_tools.prepare.prepare_config: the config checks itself with the flags' names."""

import pytest

from bert_tf.core.errors import UserError
from data_tools.prepare.prepare_config import PrepareConfig


@pytest.mark.parametrize("field, message", [
    ("min_sentences", r"^--min_sentences=-1: must be >= 0$"),
    ("min_chars", r"^--min_chars=-1: must be >= 0$"),
    ("num_workers", r"^--num_workers=-1: must be >= 1$"),
])
def test_config_checks_itself(field, message):
    with pytest.raises(UserError, match=message):
        PrepareConfig((), (), **{field: -1})
    with pytest.raises(UserError, match=r"^--input_format='csv': expected one of text, jsonl$"):
        PrepareConfig((), (), input_format="csv")
    with pytest.raises(UserError, match=r"^--document_per='page'"):
        PrepareConfig((), (), document_per="page")
    assert PrepareConfig((), (), language="DE").language == "de"
