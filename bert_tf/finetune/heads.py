"""Fine-tuning models: the pretraining `BertEncoder` with one task head each.

* `BertClassifier`: dropout + Dense(num_labels) on a sentence vector; num_labels 1 is
  regression (STS-B). The vector is its `readout`: "pooler" (the pooled [CLS] output, the
  original run_classifier's head), "cls" (the [CLS] row of the sequence output, without the
  pooler) or "mean" (the mean of the sequence output over the real tokens). A pooler trains
  only with NSP, so a checkpoint pretrained without it (or a format without one, filled in
  at random) starts fine-tuning from an untrained tanh layer; "cls" and "mean" read what
  pretraining did train. With "pooler" and "cls" the last block computes the [CLS] row only.
* `ElectraClassifier`: ELECTRA's head (transformers' ElectraClassificationHead): dropout,
  Dense(hidden) + erf GELU, dropout, Dense(num_labels) on the [CLS] row of the sequence
  output. An ELECTRA discriminator has no trained pooler, and ELECTRA fine-tunes this way.
* `ModernClassifier`: ModernBERT's head (transformers' ModernBertForSequenceClassification):
  the [CLS] row or the mean over real tokens (its `classifier_pooling`), then Dense(hidden)
  (bias with use_bias), erf GELU, LayerNorm (norm_eps, beta with use_bias), dropout,
  Dense(num_labels). The Dense and LayerNorm are the MLM head's transform in shape and
  name, so a warm start from a modern MLM checkpoint carries them over, as transformers
  does (`head.dense`, `head.norm` in both models).
* `BertTagger`: dropout + Dense(num_labels) on every position of the sequence output.
* `BertSpanExtractor`: Dense(2) on the sequence output -> start and end logits (run_squad's
  head has no dropout of its own).

Heads start from normal(0, `initializer_range`) weights and a zero bias, as transformers'
Bert*For* heads do, not from the original release's truncated normal (cut at 2 sigma, so its
std is 0.88 * `initializer_range`): on WNUT-17 the truncated start cost entity-F1 points
with the same batch order and dropout masks (docs/results/finetuning.md, parity).
They compute in float32 under mixed precision, so the logits keep their resolution. Every
model takes the encoder inputs {"input_ids", "input_mask", "segment_ids": int32
[batch, seq_len]} and ignores other keys of a batch (labels, indices).
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import keras

from bert_tf.modeling import modern_weights
from bert_tf.modeling.activations import gelu_exact
from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.encoder import INPUT_NAMES, BertEncoder, constructor_args
from bert_tf.modeling.modern_encoder import build_encoder

KINDS = ("classifier", "tagger", "span")
READOUTS = ("pooler", "cls", "mean")  # BertClassifier's sentence vectors (module docstring)
CLASSIFIER_HEADS = ("bert", "electra", "modernbert")  # BertClassifier, ElectraClassifier,
# ModernClassifier


def head_initializer(config: BertConfig) -> keras.initializers.Initializer:
    """normal(0, `config.initializer_range`): the task heads' start (module docstring)."""
    return keras.initializers.RandomNormal(stddev=config.initializer_range)


def _inputs() -> Dict[str, Any]:
    return {name: keras.Input(shape=(None,), dtype="int32", name=name) for name in INPUT_NAMES}


class _TaskModel(keras.Model):
    """Shared plumbing: the encoder attribute, input filtering and (de)serialisation."""

    def _finish(self, config: BertConfig, encoder: BertEncoder, num_labels: int) -> None:
        self.config = config
        self.encoder = encoder
        self.num_labels = num_labels

    def call(self, inputs, training=None, mask=None):
        if isinstance(inputs, dict):  # a pipeline batch carries labels and indices too
            inputs = {k: inputs[k] for k in INPUT_NAMES}
        return super().call(inputs, training=training, mask=mask)

    def get_config(self) -> Dict[str, Any]:
        return {
            "config": self.config.to_dict(),
            "num_labels": self.num_labels,
            "name": self.name,
            "trainable": self.trainable,
            "dtype": keras.dtype_policies.serialize(self.dtype_policy),
        }

    @classmethod
    def from_config(cls, config: Dict[str, Any]):
        return cls(**constructor_args(config))


class _DropoutDenseModel(_TaskModel):
    """Encoder -> one of its outputs -> dropout -> float32 Dense(num_labels) -> "logits"."""

    def __init__(self, config: BertConfig, num_labels: int, name: str, dtype: Optional[Any],
                 source: str, head_name: str, **kwargs: Any) -> None:
        if isinstance(config, dict):
            config = BertConfig.from_dict(config)
        encoder = build_encoder(config, dtype=dtype)  # ModernEncoder for a modern config
        dropout = keras.layers.Dropout(config.hidden_dropout_prob, name=f"{head_name}_dropout")
        dense = keras.layers.Dense(num_labels, kernel_initializer=head_initializer(config),
                                   dtype="float32", name=head_name)
        inputs = _inputs()
        logits = dense(dropout(encoder(inputs)[source]))
        super().__init__(inputs=inputs, outputs={"logits": logits}, name=name, dtype=dtype,
                         **kwargs)
        self._finish(config, encoder, num_labels)
        self.head_dropout = dropout
        self.head = dense


def mean_over_tokens(sequence: Any, input_mask: Any) -> Any:
    """The mean of `sequence` over the positions where `input_mask` is 1, in float32.

    Args:
        sequence: [batch, seq_len, hidden] (any float dtype).
        input_mask: int [batch, seq_len], 1 for real tokens.

    Returns:
        float32 [batch, hidden]; a row without real tokens gives zeros.
    """
    weights = keras.ops.cast(input_mask, "float32")[:, :, None]  # [batch, seq_len, 1]
    total = keras.ops.sum(keras.ops.cast(sequence, "float32") * weights, axis=1)
    return total / keras.ops.maximum(keras.ops.sum(weights, axis=1), 1.0)


@keras.saving.register_keras_serializable(package="bert_tf")
class BertClassifier(_DropoutDenseModel):
    """Sentence(-pair) classification or regression on the `readout` sentence vector.

    Args:
        readout: "pooler", "cls" or "mean" (module docstring).

    Returns:
        {"logits": float32 [batch, num_labels]} (num_labels 1: the regression output).
    """

    def __init__(self, config: BertConfig, num_labels: int, name: str = "bert_classifier",
                 dtype: Optional[Any] = None, readout: str = "pooler", **kwargs: Any) -> None:
        if readout not in READOUTS:
            raise ValueError(f"unknown classifier readout {readout!r} (expected one of "
                             f"{', '.join(READOUTS)})")
        super().__init__(config, num_labels, name, dtype, "pooled_output", "classifier",
                         **kwargs)
        self.readout = readout

    def get_config(self) -> Dict[str, Any]:
        return {**super().get_config(), "readout": self.readout}

    def sentence_vector(self, inputs, training=None):
        """The `readout` vector [batch, hidden] of the encoder inputs in `inputs` (other keys,
        such as labels, are ignored)."""
        inputs = {k: inputs[k] for k in INPUT_NAMES}
        if self.readout == "mean":  # every row of the last block is read
            sequence = self.encoder(inputs, training=training)["sequence_output"]
            return mean_over_tokens(sequence, inputs["input_mask"])
        # Only [CLS] is read, so the last block computes that row alone, its keys and values
        # still from every position (`BertEncoder.encode_at`): the same logits as the
        # functional graph with 1/seq_len of the last block's queries, feed-forward and
        # LayerNorms (MiniLM-L6 at seq 128: 14% of the training FLOPs).
        cls_position = keras.ops.zeros_like(inputs["input_ids"][:, :1])  # [batch, 1]
        vector = self.encoder.encode_at(inputs, cls_position, training=training)[:, 0, :]
        return self.encoder.pooler(vector) if self.readout == "pooler" else vector

    def call(self, inputs, training=None, mask=None):
        vector = self.sentence_vector(inputs, training=training)
        return {"logits": self.head(self.head_dropout(vector, training=training))}


@keras.saving.register_keras_serializable(package="bert_tf")
class ElectraClassifier(BertClassifier):
    """ELECTRA's classification head on the [CLS] row (module docstring).

    Variables: `head_hidden` (classifier_dense: [hidden, hidden], [hidden]) and `head`
    (classifier: [hidden, num_labels], [num_labels]), transformers' classifier.dense and
    classifier.out_proj.

    Returns:
        {"logits": float32 [batch, num_labels]}.
    """

    def __init__(self, config: BertConfig, num_labels: int, name: str = "electra_classifier",
                 dtype: Optional[Any] = None, readout: str = "cls", **kwargs: Any) -> None:
        if readout != "cls":
            raise ValueError(f"ElectraClassifier reads [CLS] only, not readout {readout!r}")
        super().__init__(config, num_labels, name=name, dtype=dtype, readout="cls", **kwargs)
        config = self.config
        self.head_hidden = keras.layers.Dense(
            config.hidden_size, kernel_initializer=head_initializer(config), dtype="float32",
            name="classifier_dense")
        self.head_hidden.build((None, config.hidden_size))

    def call(self, inputs, training=None, mask=None):
        vector = keras.ops.cast(self.sentence_vector(inputs, training=training), "float32")
        # transformers' head uses the erf GELU whatever the encoder's hidden_act.
        hidden = gelu_exact(self.head_hidden(self.head_dropout(vector, training=training)))
        return {"logits": self.head(self.head_dropout(hidden, training=training))}


@keras.saving.register_keras_serializable(package="bert_tf")
class ModernClassifier(BertClassifier):
    """ModernBERT's classification head on the [CLS] row or the token mean (module docstring).

    Args:
        readout: "cls" (transformers' classifier_pooling "cls", its default) or "mean".

    Variables: `head_hidden` (classifier_dense: [hidden, hidden], [hidden] with use_bias),
    `head_norm` (classifier_layer_norm) and `head` (classifier: [hidden, num_labels],
    [num_labels]): transformers' head.dense, head.norm and classifier.

    Returns:
        {"logits": float32 [batch, num_labels]}.
    """

    def __init__(self, config: BertConfig, num_labels: int, name: str = "modern_classifier",
                 dtype: Optional[Any] = None, readout: str = "cls", **kwargs: Any) -> None:
        if readout not in ("cls", "mean"):
            raise ValueError(f"ModernClassifier reads [CLS] or the token mean, not readout "
                             f"{readout!r}")
        super().__init__(config, num_labels, name=name, dtype=dtype, readout=readout,
                         **kwargs)
        config = self.config
        self.head_hidden = keras.layers.Dense(
            config.hidden_size, use_bias=config.use_bias,
            kernel_initializer=head_initializer(config), dtype="float32",
            name="classifier_dense")
        self.head_norm = keras.layers.LayerNormalization(
            epsilon=config.norm_eps, center=config.use_bias, dtype="float32",
            name="classifier_layer_norm")
        self.head_hidden.build((None, config.hidden_size))
        self.head_norm.build((None, config.hidden_size))

    def pretrained_head_map(self) -> Dict[str, Any]:
        """Canonical name -> variable of the weights a modern MLM checkpoint gives this head
        (its mlm/transform/*), for `warm_start.load_encoder_weights`."""
        return modern_weights.transform_weight_map(self.head_hidden, self.head_norm)

    def call(self, inputs, training=None, mask=None):
        vector = keras.ops.cast(self.sentence_vector(inputs, training=training), "float32")
        hidden = self.head_norm(gelu_exact(self.head_hidden(vector)))
        return {"logits": self.head(self.head_dropout(hidden, training=training))}


def classifier(config: BertConfig, num_labels: int, head: str = "bert",
               readout: str = "pooler") -> BertClassifier:
    """The classification model of `head` ("bert": `BertClassifier` of `readout`; "electra":
    `ElectraClassifier`, which reads [CLS] whatever `readout` says; "modernbert":
    `ModernClassifier` of `readout`, "cls" when `readout` is "pooler")."""
    if head == "electra":
        return ElectraClassifier(config, num_labels)
    if head == "modernbert":
        return ModernClassifier(config, num_labels,
                                readout="mean" if readout == "mean" else "cls")
    if head != "bert":
        raise ValueError(f"unknown classifier head {head!r} (expected one of "
                         f"{', '.join(CLASSIFIER_HEADS)})")
    return BertClassifier(config, num_labels, readout=readout)


@keras.saving.register_keras_serializable(package="bert_tf")
class BertTagger(_DropoutDenseModel):
    """Token tagging: one label per position (the data scores the first piece of a word).

    Returns:
        {"logits": float32 [batch, seq_len, num_labels]}.
    """

    def __init__(self, config: BertConfig, num_labels: int, name: str = "bert_tagger",
                 dtype: Optional[Any] = None, **kwargs: Any) -> None:
        super().__init__(config, num_labels, name, dtype, "sequence_output", "tagger",
                         **kwargs)


@keras.saving.register_keras_serializable(package="bert_tf")
class BertSpanExtractor(_TaskModel):
    """Extractive QA: start and end logits over the positions.

    Returns:
        {"start_logits": float32 [batch, seq_len], "end_logits": float32 [batch, seq_len]}.
    """

    def __init__(self, config: BertConfig, num_labels: int = 2, name: str = "bert_span",
                 dtype: Optional[Any] = None, **kwargs: Any) -> None:
        if isinstance(config, dict):
            config = BertConfig.from_dict(config)
        encoder = build_encoder(config, dtype=dtype)  # ModernEncoder for a modern config
        dense = keras.layers.Dense(2, kernel_initializer=head_initializer(config),
                                   dtype="float32", name="span")
        inputs = _inputs()
        logits = dense(encoder(inputs)["sequence_output"])  # [batch, seq_len, 2]
        outputs = {"start_logits": logits[..., 0], "end_logits": logits[..., 1]}
        super().__init__(inputs=inputs, outputs=outputs, name=name, dtype=dtype, **kwargs)
        self._finish(config, encoder, 2)
        self.head = dense


def model_of_kind(kind: str, config: BertConfig, num_labels: int,
                  readout: str = "pooler", head: str = "bert") -> _TaskModel:
    """The task model a fine-tuned directory names in its finetune_task.json ("classifier",
    "tagger" or "span"; a classifier's `readout` and `head` too), for export. A task being
    trained builds its own (`build_model`)."""
    if kind == "classifier":
        return classifier(config, num_labels, head, readout)
    if kind == "tagger":
        return BertTagger(config, num_labels)
    if kind == "span":
        return BertSpanExtractor(config)
    raise ValueError(f"unknown task model {kind!r} (expected one of {KINDS})")
