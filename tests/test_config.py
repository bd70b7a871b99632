"""Tests for bert_tf.modeling.config (BertConfig)."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from bert_tf.core.errors import UserError
from bert_tf.modeling.config import BertConfig

# The standard sizes of Google's released checkpoints (BERT-Tiny ... BERT-Large):
# name -> (layers, hidden, heads, intermediate).
STANDARD_SIZES = {
    "tiny": (2, 128, 2, 512),
    "mini": (4, 256, 4, 1024),
    "small": (4, 512, 8, 2048),
    "medium": (8, 512, 8, 2048),
    "base": (12, 768, 12, 3072),
    "large": (24, 1024, 16, 4096),
}

# google-research/bert's uncased_L-12_H-768_A-12/bert_config.json, as released.
GOOGLE_BASE_CONFIG = {
    "attention_probs_dropout_prob": 0.1,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "hidden_size": 768,
    "initializer_range": 0.02,
    "intermediate_size": 3072,
    "max_position_embeddings": 512,
    "num_attention_heads": 12,
    "num_hidden_layers": 12,
    "type_vocab_size": 2,
    "vocab_size": 30522,
}


def write_json(path, obj) -> str:
    path.write_text(json.dumps(obj))
    return os.fspath(path)


def test_defaults_are_the_originals():
    c = BertConfig(vocab_size=100)
    assert c.to_dict() == {
        "vocab_size": 100,
        "hidden_size": 768,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "intermediate_size": 3072,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1,
        "max_position_embeddings": 512,
        "type_vocab_size": 16,
        "initializer_range": 0.02,
    }
    assert c.head_size == 64


@pytest.mark.parametrize("name", sorted(STANDARD_SIZES))
def test_bundled_configs(repo_root, name):
    c = BertConfig.from_json_file(os.fspath(repo_root / "configs" / f"bert_config_{name}.json"))
    layers, hidden, heads, intermediate = STANDARD_SIZES[name]
    assert (c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.intermediate_size) == (
        layers,
        hidden,
        heads,
        intermediate,
    )
    assert (c.vocab_size, c.type_vocab_size, c.max_position_embeddings) == (30522, 2, 512)
    assert c.hidden_act == "gelu"


def test_base_config_file_is_byte_identical_to_googles_layout(repo_root):
    # Same keys, values, order and formatting as the original's to_json_string().
    text = (repo_root / "configs" / "bert_config_base.json").read_text()
    assert text == json.dumps(GOOGLE_BASE_CONFIG, indent=2, sort_keys=True) + "\n"


def test_json_round_trip(tmp_path):
    c = BertConfig(vocab_size=99, hidden_size=64, num_attention_heads=4, hidden_act="relu",
                   hidden_dropout_prob=0.0, initializer_range=0.05)
    path = os.fspath(tmp_path / "bert_config.json")
    c.to_json_file(path)
    assert BertConfig.from_json_file(path) == c
    # Written atomically: nothing else is left in the directory.
    assert os.listdir(tmp_path) == ["bert_config.json"]
    assert json.loads(open(path).read())["hidden_act"] == "relu"


def test_to_json_file_into_missing_directory_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="cannot write"):
        BertConfig(vocab_size=10).to_json_file(os.fspath(tmp_path / "no" / "c.json"))


def test_google_config_loads(tmp_path):
    c = BertConfig.from_json_file(write_json(tmp_path / "c.json", GOOGLE_BASE_CONFIG))
    assert c.to_dict() == GOOGLE_BASE_CONFIG


def test_multilingual_extra_keys_are_accepted_and_dropped(tmp_path):
    # Google's multilingual/Chinese configs carry pooler_* keys the original code never read.
    d = dict(GOOGLE_BASE_CONFIG, directionality="bidi", pooler_fc_size=768,
             pooler_num_attention_heads=12, pooler_num_fc_layers=3, pooler_size_per_head=128,
             pooler_type="first_token_transform", vocab_size=119547)
    c = BertConfig.from_json_file(write_json(tmp_path / "c.json", d))
    assert c.vocab_size == 119547
    assert "pooler_type" not in c.to_dict()


def test_unknown_key_names_key_and_file(tmp_path):
    path = write_json(tmp_path / "typo.json", dict(GOOGLE_BASE_CONFIG, hiden_size=768))
    with pytest.raises(UserError) as e:
        BertConfig.from_json_file(path)
    message = str(e.value)
    assert "'hiden_size'" in message and path in message
    assert "\n" not in message


def test_missing_vocab_size(tmp_path):
    d = {k: v for k, v in GOOGLE_BASE_CONFIG.items() if k != "vocab_size"}
    with pytest.raises(UserError, match="vocab_size is missing"):
        BertConfig.from_json_file(write_json(tmp_path / "c.json", d))


def test_missing_keys_take_defaults():
    c = BertConfig.from_dict({"vocab_size": 7, "hidden_size": 16, "num_attention_heads": 2})
    assert (c.num_hidden_layers, c.type_vocab_size, c.hidden_act) == (12, 16, "gelu")


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("hidden_size", "768", "hidden_size must be an integer"),
        ("hidden_size", 768.0, "hidden_size must be an integer"),
        ("num_hidden_layers", True, "num_hidden_layers must be an integer"),
        ("vocab_size", None, "vocab_size must be an integer"),
        ("hidden_dropout_prob", "0.1", "hidden_dropout_prob must be a number"),
        ("initializer_range", float("nan"), "initializer_range must be finite"),
        ("hidden_act", 3, "unknown hidden_act 3"),
    ],
)
def test_wrong_types(key, value, message):
    with pytest.raises(UserError, match=message):
        BertConfig.from_dict(dict(GOOGLE_BASE_CONFIG, **{key: value}), source="c.json")


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"hidden_size": 100}, "hidden_size 100 is not divisible by num_attention_heads 12"),
        ({"num_hidden_layers": 0}, "num_hidden_layers must be positive"),
        ({"vocab_size": -5}, "vocab_size must be positive"),
        ({"intermediate_size": 0}, "intermediate_size must be positive"),
        ({"max_position_embeddings": 0}, "max_position_embeddings must be positive"),
        ({"hidden_dropout_prob": 1.0}, r"hidden_dropout_prob must be in \[0, 1\)"),
        ({"attention_probs_dropout_prob": -0.1}, "attention_probs_dropout_prob must be in"),
        ({"initializer_range": 0.0}, "initializer_range must be positive"),
        ({"hidden_act": "swish"}, "unknown hidden_act 'swish'"),
    ],
)
def test_impossible_values(changes, message):
    with pytest.raises(UserError, match=message):
        BertConfig.from_dict(dict(GOOGLE_BASE_CONFIG, **changes), source="c.json")


def test_error_names_source_and_constructor_validates():
    with pytest.raises(UserError, match=r"^my.json: unknown hidden_act"):
        BertConfig.from_dict(dict(GOOGLE_BASE_CONFIG, hidden_act="gelu2"), source="my.json")
    with pytest.raises(UserError, match="not divisible"):
        BertConfig(vocab_size=10, hidden_size=30, num_attention_heads=4)


def test_zero_dropout_is_allowed():
    c = BertConfig(vocab_size=10, hidden_dropout_prob=0, attention_probs_dropout_prob=0.0)
    assert c.hidden_dropout_prob == 0


@pytest.mark.parametrize(
    "name, canonical",
    [
        ("gelu", "gelu_approximate"),
        ("gelu_approximate", "gelu_approximate"),
        ("gelu_exact", "gelu_exact"),
        ("gelu_erf", "gelu_exact"),
        ("gelu_new", "gelu_approximate"),
        ("gelu_tanh", "gelu_approximate"),
        ("gelu_pytorch_tanh", "gelu_approximate"),
        ("relu", "relu"),
        ("tanh", "tanh"),
    ],
)
def test_activation_names(name, canonical):
    assert BertConfig(vocab_size=10, hidden_act=name).activation == canonical


def test_not_json_and_not_found(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"vocab_size": 10,')
    with pytest.raises(UserError, match=r"bad.json: not valid JSON .* line 1"):
        BertConfig.from_json_file(os.fspath(bad))
    with pytest.raises(UserError, match="bert_config file not found"):
        BertConfig.from_json_file(os.fspath(tmp_path / "absent.json"))
    with pytest.raises(UserError, match="expected a JSON object"):
        BertConfig.from_json_file(write_json(tmp_path / "list.json", [1, 2]))


def test_frozen():
    c = BertConfig(vocab_size=10)
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.hidden_size = 12  # type: ignore[misc]
    # replace() re-validates.
    with pytest.raises(UserError, match="not divisible"):
        dataclasses.replace(c, hidden_size=100)


def test_check_seq_length():
    c = BertConfig(vocab_size=10, max_position_embeddings=128)
    c.check_seq_length(128)
    with pytest.raises(UserError, match="--max_seq_length=129 exceeds max_position_embeddings=128"):
        c.check_seq_length(129)
