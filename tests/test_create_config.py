"""Tests of data_tools.pretraining_data.create_config: defaults are the original script's, the
config is frozen."""

import dataclasses

import pytest

from bert_tf.core.errors import UserError
from data_tools.pretraining_data.create_config import CreateConfig
from data_tools.pretraining_data.instances import PackingConfig


def test_defaults_are_the_originals():
    config = CreateConfig(input_files=("a",), output_files=("b",), vocab_file="v")
    assert (config.packing.max_seq_length, config.max_predictions_per_seq,
            config.random_seed, config.dupe_factor, config.masked_lm_prob,
            config.packing.short_seq_prob, config.do_lower_case,
            config.do_whole_word_mask) == (128, 20, 12345, 10, 0.15, 0.1, True, False)
    assert config.packing.nsp and config.packing.max_num_tokens == 125
    assert config.whole_word_mask_mode == "fixed" and config.max_ngram_size == 1


def test_config_is_frozen():
    config = CreateConfig(input_files=("a",), output_files=("b",), vocab_file="v")
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.dupe_factor = 3


@pytest.mark.parametrize("change,message", [
    (dict(packing=PackingConfig(max_seq_length=4)), "--max_seq_length=4: must be >= 5"),
    (dict(max_predictions_per_seq=126), r"--max_predictions_per_seq=126: must be in \[1, 125\]"),
    (dict(masked_lm_prob=0.0), r"--masked_lm_prob=0.0: must be in \(0, 1\]"),
    (dict(packing=PackingConfig(short_seq_prob=1.5)), "--short_seq_prob=1.5"),
    (dict(dupe_factor=0), "--dupe_factor=0: must be >= 1"),
    (dict(max_ngram_size=17), "--max_ngram_size=17"),
    (dict(whole_word_mask_mode="x"), "--whole_word_mask_mode='x': expected one of"),
    (dict(output_compression="zip"), "--output_compression='zip'"),
    (dict(num_workers=0), "--num_workers=0"),
    (dict(shuffle_memory_bytes=0), "--shuffle_memory_mb=0: must be > 0"),
])
def test_config_checks_itself_with_the_flag_names(change, message):
    with pytest.raises(UserError, match=message):
        CreateConfig(input_files=("a",), output_files=("b",), vocab_file="v", **change)
    ok = CreateConfig(input_files=("a",), output_files=("b",), vocab_file="v")
    with pytest.raises(UserError, match=message):  # replace() checks again
        dataclasses.replace(ok, **change)
