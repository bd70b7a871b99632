"""The modern-encoder keys of `BertConfig` (ModernBERT's and Cramming's options), checked.

`bert_config.json` keys, whose defaults are BERT's (a file without them is BERT, unchanged):

    position_embedding_type    "absolute" (a learned table, BERT) | "rope" (rotary positions
                               on queries and keys, no position table)
    rope_theta                 RoPE base of the global-attention layers (10000.0)
    local_rope_theta           RoPE base of the local (sliding-window) layers; null: rope_theta
    pre_layer_norm             false: BERT's post-LN block; true: x + f(LN(x)) for both
                               sublayers, with a final LayerNorm after the last block
                               (ModernBERT, Cramming). The first block's attention LayerNorm is
                               left out, as ModernBERT has it: its input is the embeddings'
                               LayerNorm output.
    norm_eps                   epsilon of every LayerNorm (BERT: 1e-12, ModernBERT: 1e-5)
    use_bias                   false: no bias in any Dense of the blocks and the MLM transform,
                               and no LayerNorm beta (the MLM output bias stays)
    global_attn_every_n_layers 1 (every layer global, BERT); n > 1: layers 0, n, 2n, ... attend
                               globally, the others within local_attention_window
    local_attention_window     the local layers' window W: a query at position i sees the keys
                               j with |i - j| <= W // 2 (transformers' ModernBERT: its
                               `local_attention`, `sliding_window` = W // 2)
    tie_word_embeddings        true: the MLM decoder is the word-embedding table (BERT);
                               false: a decoder matrix of its own
    hidden_act "geglu"         gated GELU (erf): Wi projects to 2 x intermediate_size, split
                               into an input half and a gate half; out = Wo(gelu(input) * gate)

`type_vocab_size` 0 means no segment embedding (ModernBERT has none). A config that sets any
of these away from BERT's values is a *modern* config (`is_modern`): the model is
`bert_tf.modeling.modern_encoder.ModernEncoder` with ModernBERT's MLM head (dense, act, norm,
decoder; no pooler), and its weights have the names of `modern_layout`.

In a modern config, `embedding_size` E != hidden_size makes the tables and their LayerNorm
E wide, with a projection E -> hidden after them, as BERT's encoder has it for ELECTRA.
ModernBERT has no projection, so transformers' layout cannot hold such a model, but an ELECTRA
generator narrower than its discriminator's shared tables needs one.

This module does not import TensorFlow.
"""

from __future__ import annotations

import math
from typing import Any, Dict

from bert_tf.core.errors import UserError

POSITION_EMBEDDING_TYPES = ("absolute", "rope")

# key -> BERT's value. A key equal to its default is left out of a written bert_config.json,
# so a BERT config writes the original release's keys only.
MODERN_DEFAULTS: Dict[str, Any] = {
    "position_embedding_type": "absolute",
    "rope_theta": 10000.0,
    "local_rope_theta": None,
    "pre_layer_norm": False,
    "norm_eps": 1e-12,
    "use_bias": True,
    "global_attn_every_n_layers": 1,
    "local_attention_window": None,
    "tie_word_embeddings": True,
}

GATED_ACTIVATIONS = {"geglu": "gelu_exact"}  # gated name -> the activation of its input half


def is_modern(config: Any) -> bool:
    """True when `config` (a BertConfig) asks for anything BERT's encoder does not compute."""
    return (any(getattr(config, k) != v for k, v in MODERN_DEFAULTS.items())
            or config.hidden_act in GATED_ACTIVATIONS or config.type_vocab_size == 0)


def modern_keys(config: Any) -> list:
    """The names of the keys (and values) that make `config` modern, for messages."""
    keys = [k for k, v in MODERN_DEFAULTS.items() if getattr(config, k) != v]
    if config.hidden_act in GATED_ACTIVATIONS:
        keys.append("hidden_act")
    if config.type_vocab_size == 0:
        keys.append("type_vocab_size")
    return keys


def is_local_layer(config: Any, index: int) -> bool:
    """True for the sliding-window layers: all but every global_attn_every_n_layers-th."""
    return index % config.global_attn_every_n_layers != 0


def inner_size(config: Any) -> int:
    """Output width of the first feed-forward Dense: 2 x intermediate_size when gated."""
    gated = config.hidden_act in GATED_ACTIVATIONS
    return 2 * config.intermediate_size if gated else config.intermediate_size


def head_activation(config: Any) -> str:
    """The MLM transform's activation: the input half's of a gated act, else hidden_act."""
    return GATED_ACTIVATIONS.get(config.hidden_act, config.hidden_act)


def _number(value: Any, name: str, source: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(
            value) or value <= 0:
        raise UserError(f"{source}: {name} must be a positive number, got {value!r}")
    return float(value)


def validate(config: Any, source: str) -> None:
    """Checks the modern keys of `config` and their combinations.

    Raises:
        UserError: one line naming the key (or the two keys that do not go together).
    """
    if config.position_embedding_type not in POSITION_EMBEDDING_TYPES:
        raise UserError(f"{source}: position_embedding_type must be one of "
                        f"{', '.join(POSITION_EMBEDDING_TYPES)}, got "
                        f"{config.position_embedding_type!r}")
    _number(config.rope_theta, "rope_theta", source)
    if config.local_rope_theta is not None:
        _number(config.local_rope_theta, "local_rope_theta", source)
    _number(config.norm_eps, "norm_eps", source)
    for name in ("pre_layer_norm", "use_bias", "tie_word_embeddings"):
        if not isinstance(getattr(config, name), bool):
            raise UserError(f"{source}: {name} must be true or false, got "
                            f"{getattr(config, name)!r}")
    every = config.global_attn_every_n_layers
    if isinstance(every, bool) or not isinstance(every, int) or every <= 0:
        raise UserError(f"{source}: global_attn_every_n_layers must be a positive integer, "
                        f"got {every!r}")
    window = config.local_attention_window
    if window is not None and (isinstance(window, bool) or not isinstance(window, int)
                               or window < 2):
        raise UserError(f"{source}: local_attention_window must be an integer >= 2 or null, "
                        f"got {window!r}")
    if every > 1 and window is None:
        raise UserError(f"{source}: global_attn_every_n_layers={every} needs "
                        "local_attention_window (the other layers' window)")
    if every == 1 and window is not None:
        raise UserError(f"{source}: local_attention_window applies only with "
                        "global_attn_every_n_layers > 1 (with 1 every layer is global)")
    rope = config.position_embedding_type == "rope"
    if not rope and (config.rope_theta != MODERN_DEFAULTS["rope_theta"]
                     or config.local_rope_theta is not None):
        raise UserError(f"{source}: rope_theta and local_rope_theta apply only with "
                        "position_embedding_type \"rope\"")
    if rope and config.head_size % 2:
        raise UserError(f"{source}: position_embedding_type \"rope\" needs an even head size, "
                        f"got hidden_size/num_attention_heads = {config.head_size}")


def drop_defaults(d: Dict[str, Any]) -> Dict[str, Any]:
    """`d` (a config dict) without the modern keys that equal BERT's values."""
    return {k: v for k, v in d.items()
            if not (k in MODERN_DEFAULTS and v == MODERN_DEFAULTS[k])}
