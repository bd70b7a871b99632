"""Tests of data_tools.job_config: defaults are the original script's, the config is frozen."""

import dataclasses

import pytest

from data_tools.job_config import PipelineConfig


def test_defaults_are_the_originals():
    config = PipelineConfig(input_files=("a",), output_files=("b",), vocab_file="v")
    assert (config.packing.max_seq_length, config.max_predictions_per_seq,
            config.random_seed, config.dupe_factor, config.masked_lm_prob,
            config.packing.short_seq_prob, config.do_lower_case,
            config.do_whole_word_mask) == (128, 20, 12345, 10, 0.15, 0.1, True, False)
    assert config.packing.nsp and config.packing.max_num_tokens == 125
    assert config.whole_word_mask_mode == "fixed" and config.max_ngram_size == 1


def test_config_is_frozen():
    config = PipelineConfig(input_files=("a",), output_files=("b",), vocab_file="v")
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.dupe_factor = 3
