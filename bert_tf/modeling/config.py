"""`BertConfig`: the model hyper-parameters, with the key names of the original release.

A `bert_config.json` written by google-research/bert loads unchanged, and the files this module
writes load in the original code (same keys, sorted, indent 2). Values are checked when the
config is built, so a typo or an impossible size fails at once with a one-line `UserError`
instead of deep inside Keras.

Activation names (`hidden_act`):

    "gelu"               what the original release computed for "gelu": the tanh approximation
                         0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
    "gelu_approximate", "gelu_new", "gelu_tanh", "gelu_pytorch_tanh"
                         aliases of "gelu" (the last three are Hugging Face spellings).
    "gelu_exact", "gelu_erf"
                         exact GELU, x * Phi(x) with the erf (what Hugging Face's config.json
                         and keras call "gelu"; the checkpoint converter translates).
    "relu", "tanh"
    "geglu"              gated GELU (erf), for the modern encoder (`modern_config`).

Why "gelu" means the tanh form: a `bert_config.json` is the original release's file format,
and google-research/bert's `gelu` function was the tanh approximation, so Google's configs and
checkpoints reproduce the original numerics unchanged here. keras-hub's `BertBackbone` also
uses the tanh approximation, so models built from the standard configs export to keras-hub
exactly. The two GELUs differ by less than 5e-4 for any input (tests/test_activations.py).

This module does not import TensorFlow or Keras.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Dict, Mapping, Optional

from bert_tf.core import fileio
from bert_tf.core.errors import UserError
from bert_tf.modeling import modern_config

# hidden_act name -> canonical name understood by `bert_tf.modeling.activations`.
ACTIVATIONS: Dict[str, str] = {
    "gelu": "gelu_approximate",
    "gelu_approximate": "gelu_approximate",
    "gelu_exact": "gelu_exact",
    "gelu_erf": "gelu_exact",
    "gelu_new": "gelu_approximate",
    "gelu_tanh": "gelu_approximate",
    "gelu_pytorch_tanh": "gelu_approximate",
    "relu": "relu",
    "tanh": "tanh",
    # Gated GELU (ModernBERT, Cramming); only the modern encoder computes it (modern_config).
    "geglu": "geglu",
}

# Keys found in some of Google's released configs (multilingual, Chinese) that the original
# modeling code never read. They are accepted and dropped so those files load unchanged.
IGNORED_KEYS = frozenset(
    {
        "directionality",
        "pooler_fc_size",
        "pooler_num_attention_heads",
        "pooler_num_fc_layers",
        "pooler_size_per_head",
        "pooler_type",
    }
)

_INT_FIELDS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "max_position_embeddings",
    "type_vocab_size",
)
_DROPOUT_FIELDS = ("hidden_dropout_prob", "attention_probs_dropout_prob")


@dataclasses.dataclass(frozen=True)
class BertConfig:
    """Hyper-parameters of a BERT encoder (key names and defaults of the original release).

    Attributes:
        vocab_size: number of WordPiece ids (rows of the word embedding).
        hidden_size: width H of every hidden state.
        num_hidden_layers: number of Transformer blocks.
        num_attention_heads: attention heads per block; must divide hidden_size.
        intermediate_size: width of the feed-forward layer inside each block.
        hidden_act: activation of the feed-forward layer and of the MLM transform; see the
            module docstring for the accepted names.
        hidden_dropout_prob: dropout on embeddings and on every residual branch.
        attention_probs_dropout_prob: dropout on the attention probabilities.
        max_position_embeddings: longest sequence the model accepts (rows of the position
            embedding).
        type_vocab_size: number of segment ids (rows of the token-type embedding).
        initializer_range: stddev of the truncated-normal initializer of all weights.
        embedding_size: width E of the word, position and segment embeddings (ELECTRA's and
            ALBERT's key); None (the default, and absent from files that leave it out)
            means hidden_size. When it differs, a Dense projection E -> hidden follows the
            embeddings' LayerNorm and dropout (`embeddings_project`, as ELECTRA-Small's
            128 -> 256).
        position_embedding_type, rope_theta, local_rope_theta, pre_layer_norm, norm_eps,
            use_bias, global_attn_every_n_layers, local_attention_window,
            tie_word_embeddings: the modern encoder's options (ModernBERT, Cramming),
            documented in `bert_tf.modeling.modern_config`; the defaults are BERT's.
    """

    vocab_size: int
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 16
    initializer_range: float = 0.02
    embedding_size: Optional[int] = None
    # The modern encoder's keys (ModernBERT, Cramming): `bert_tf.modeling.modern_config`
    # documents and checks them; these defaults are BERT's.
    position_embedding_type: str = "absolute"
    rope_theta: float = 10000.0
    local_rope_theta: Optional[float] = None
    pre_layer_norm: bool = False
    norm_eps: float = 1e-12
    use_bias: bool = True
    global_attn_every_n_layers: int = 1
    local_attention_window: Optional[int] = None
    tie_word_embeddings: bool = True

    def __post_init__(self) -> None:
        self.validate()

    # ------------------------------------------------------------------ validation

    def validate(self, source: str = "bert_config") -> None:
        """Checks types and values.

        Args:
            source: where the values came from (a file name), for the error message.

        Raises:
            UserError: a wrong type or an impossible value, naming the key.
        """
        for name in _INT_FIELDS:
            value = getattr(self, name)
            # bool is an int subclass; `true` in a JSON config is a mistake, not 1.
            if isinstance(value, bool) or not isinstance(value, int):
                raise UserError(
                    f"{source}: {name} must be an integer, got {value!r}"
                )
            # type_vocab_size 0: no segment embedding (a modern config, as ModernBERT).
            if value <= 0 and not (name == "type_vocab_size" and value == 0):
                raise UserError(f"{source}: {name} must be positive, got {value}")
        size = self.embedding_size
        if size is not None and (isinstance(size, bool) or not isinstance(size, int)
                                 or size <= 0):
            raise UserError(f"{source}: embedding_size must be a positive integer or null, "
                            f"got {size!r}")
        for name in _DROPOUT_FIELDS + ("initializer_range",):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise UserError(f"{source}: {name} must be a number, got {value!r}")
            if not math.isfinite(value):
                raise UserError(f"{source}: {name} must be finite, got {value}")
        for name in _DROPOUT_FIELDS:
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise UserError(f"{source}: {name} must be in [0, 1), got {value}")
        if self.initializer_range <= 0:
            raise UserError(
                f"{source}: initializer_range must be positive, got {self.initializer_range}"
            )
        if not isinstance(self.hidden_act, str) or self.hidden_act not in ACTIVATIONS:
            raise UserError(
                f"{source}: unknown hidden_act {self.hidden_act!r} "
                f"(supported: {', '.join(sorted(ACTIVATIONS))})"
            )
        if self.hidden_size % self.num_attention_heads:
            raise UserError(
                f"{source}: hidden_size {self.hidden_size} is not divisible by "
                f"num_attention_heads {self.num_attention_heads}"
            )
        modern_config.validate(self, source)

    # ------------------------------------------------------------------ derived values

    @property
    def head_size(self) -> int:
        """Width of one attention head, hidden_size / num_attention_heads."""
        return self.hidden_size // self.num_attention_heads

    @property
    def embedding_width(self) -> int:
        """Width of the embedding tables: embedding_size, or hidden_size when it is None."""
        return self.hidden_size if self.embedding_size is None else self.embedding_size

    @property
    def activation(self) -> str:
        """The canonical activation name ("gelu_approximate", "gelu_exact", "relu", "tanh")."""
        return ACTIVATIONS[self.hidden_act]

    def check_seq_length(self, max_seq_length: int, what: str = "max_seq_length") -> None:
        """Raises UserError if sequences of `max_seq_length` cannot fit the position table.

        Args:
            max_seq_length: the padded length of the input sequences.
            what: the flag name, for the message.
        """
        if max_seq_length > self.max_position_embeddings:
            raise UserError(
                f"--{what}={max_seq_length} exceeds max_position_embeddings="
                f"{self.max_position_embeddings} of the bert_config"
            )

    # ------------------------------------------------------------------ (de)serialization

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = "bert_config") -> "BertConfig":
        """Builds a config from a dict with the original key names.

        Args:
            d: the keys of a `bert_config.json`; missing keys take the original defaults
                (vocab_size has none and is required).
            source: where `d` came from (a file name), for error messages.

        Raises:
            UserError: unknown key, missing vocab_size, wrong type or impossible value.
        """
        if not isinstance(d, Mapping):
            raise UserError(f"{source}: expected a JSON object of hyper-parameters")
        known = {f.name for f in dataclasses.fields(cls)}
        if "model_type" in d or "architectures" in d:
            raise UserError(
                f"{source}: a Hugging Face config.json, not a bert_config.json: give its "
                "directory as --init_checkpoint without --bert_config_file (its config.json "
                "is read from there), or convert it with python -m bert_tf.convert_checkpoint")
        for key in d:
            if key not in known and key not in IGNORED_KEYS:
                raise UserError(
                    f"{source}: unknown key {key!r} in bert_config "
                    f"(known keys: {', '.join(sorted(known))})"
                )
        if "vocab_size" not in d:
            raise UserError(f"{source}: vocab_size is missing from bert_config")
        values = {k: v for k, v in d.items() if k in known}
        # Build without running __post_init__'s check under the wrong source name.
        config = object.__new__(cls)
        for f in dataclasses.fields(cls):
            default = f.default if f.default is not dataclasses.MISSING else None
            object.__setattr__(config, f.name, values.get(f.name, default))
        config.validate(source)
        return config

    def to_dict(self) -> Dict[str, Any]:
        """The original key names and values (a plain, JSON-serializable dict).

        embedding_size appears only when set, and the modern keys only when they differ
        from BERT's, so a BERT config writes the original's keys.
        """
        d = modern_config.drop_defaults(dataclasses.asdict(self))
        if d["embedding_size"] is None:
            del d["embedding_size"]
        return d

    def to_json_string(self) -> str:
        """JSON with sorted keys and indent 2, as the original wrote it."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json_file(cls, path: str) -> "BertConfig":
        """Reads a `bert_config.json` (local or gs://).

        Raises:
            UserError: the file is missing or not valid JSON, or any value is bad.
        """
        if not fileio.exists(path):
            raise UserError(f"bert_config file not found: {path}")
        try:
            with fileio.open_file(path, "r") as f:
                text = f.read()
        except OSError as e:
            raise UserError(f"cannot read {path}: {e.strerror or e}") from None
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        try:
            d = json.loads(text)
        except json.JSONDecodeError as e:
            raise UserError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
        return cls.from_dict(d, source=path)

    def to_json_file(self, path: str) -> None:
        """Writes the config atomically (temporary name, then rename)."""
        with fileio.atomic_output(path, "wb") as f:
            f.write(self.to_json_string().encode("utf-8"))
