"""Tests for bert_tf.finetune.retrieval.features: `[CLS] text [SEP]` rows with Google's
vocabulary, truncation to each kind's length, and the passages' [example, 1 + n] layout."""

from __future__ import annotations

import numpy as np
import pytest

from bert_tf.core.errors import UserError
from bert_tf.core.tokenization import FullTokenizer
from bert_tf.finetune.retrieval import features
from bert_tf.finetune.retrieval.beir_data import TrainingExample


@pytest.fixture(scope="module")
def tokenizer(google_vocab_path):
    return FullTokenizer(str(google_vocab_path), do_lower_case=True)


def test_encodes_truncates_and_pads(tokenizer):
    encoded = features.encode_texts(["Cats sleep.", "the quick brown fox jumps"], tokenizer, 5)
    cats = tokenizer.convert_tokens_to_ids(["[CLS]", "cats", "sleep", ".", "[SEP]"])
    fox = tokenizer.convert_tokens_to_ids(["[CLS]", "the", "quick", "brown", "[SEP]"])
    np.testing.assert_array_equal(encoded.arrays["input_ids"], [cats, fox])
    np.testing.assert_array_equal(encoded.arrays["input_mask"], np.ones((2, 5)))
    assert encoded.num_truncated == 1
    short = features.encode_texts(["Hi"], tokenizer, 6).arrays
    assert short["input_ids"].tolist() == [[101, 7632, 102, 0, 0, 0]]
    assert short["input_mask"].tolist() == [[1, 1, 1, 0, 0, 0]]
    assert short["segment_ids"].tolist() == [[0] * 6]
    with pytest.raises(UserError, match=r"^--max_query_length=2 leaves no room for text"):
        features.encode_texts(["x"], tokenizer, 2, "max_query_length")


def test_training_features_layout(tokenizer):
    examples = [TrainingExample("what purrs", "Cats purr.", ("Dogs bark.",)),
                TrainingExample("who barks", "Dogs bark.", ("Cats purr.",))]
    arrays = features.training_features(examples, tokenizer, max_query_length=4,
                                        max_passage_length=6)
    assert {k: v.shape for k, v in arrays.items()} == {
        **{f"query_{n}": (2, 4) for n in features.INPUT_NAMES},
        **{f"passage_{n}": (2, 2, 6) for n in features.INPUT_NAMES}}
    cats = features.encode_texts(["Cats purr."], tokenizer, 6).arrays["input_ids"][0]
    dogs = features.encode_texts(["Dogs bark."], tokenizer, 6).arrays["input_ids"][0]
    np.testing.assert_array_equal(arrays["passage_input_ids"][0], [cats, dogs])
    np.testing.assert_array_equal(arrays["passage_input_ids"][1], [dogs, cats])
    np.testing.assert_array_equal(arrays["query_input_ids"][1],
                                  features.encode_texts(["who barks"], tokenizer, 4)
                                  .arrays["input_ids"][0])
    with pytest.raises(UserError, match="same number of negatives"):
        features.training_features(examples + [TrainingExample("q", "p")], tokenizer, 4, 6)
