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


def test_held_out_flags_are_checked_together():
    with pytest.raises(UserError, match=r"^--heldout_every=1: must be 0 \(none\) or >= 2"):
        PrepareConfig((), ("a",), heldout_file="h", heldout_every=1)
    with pytest.raises(UserError, match=r"^--heldout_file and --heldout_every go together"):
        PrepareConfig((), ("a",), heldout_every=5)
    with pytest.raises(UserError, match=r"^--heldout_file and --heldout_every go together"):
        PrepareConfig((), ("a",), heldout_file="h")
    with pytest.raises(UserError, match=r"^--heldout_file=a is also an --output_file$"):
        PrepareConfig((), ("a", "b"), heldout_file="a", heldout_every=3)


def test_deal_holds_out_every_n_th_document_and_deals_the_rest_in_turn():
    # 2 shards, every 4th kept document held out: documents 3, 7, 11 (from 0).
    config = PrepareConfig((), ("s0", "s1"), heldout_file="h", heldout_every=4)
    assert config.outputs == ("s0", "s1", "h")
    dealt = [config.deal(k) for k in range(12)]
    assert dealt == [(0, True), (1, True), (0, False), (2, True),
                     (1, False), (0, False), (1, False), (2, False),
                     (0, False), (1, False), (0, False), (2, False)]
    # Without held-out documents, document k goes to shard k mod N, as before.
    plain = PrepareConfig((), ("s0", "s1", "s2"))
    assert [plain.deal(k) for k in range(5)] == [(0, True), (1, True), (2, True), (0, False),
                                                 (1, False)]
