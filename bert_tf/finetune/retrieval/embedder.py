"""The bi-encoder's model: the pretraining `BertEncoder` with a pooling readout.

Queries and passages go through the same weights (a symmetric bi-encoder, as
sentence-transformers' models). The encoder is the `encoder` attribute, as in the
fine-tuning heads, so `bert_tf.finetune.warm_start.load_encoder_weights` fills it from any
checkpoint the fine-tuning commands take. With cls pooling only the [CLS] row of the last
block is computed (`BertEncoder.encode_at`), as `BertClassifier` does.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import keras

from bert_tf.finetune.retrieval.pooling import Pooling
from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.encoder import INPUT_NAMES, BertEncoder, constructor_args


@keras.saving.register_keras_serializable(package="bert_tf")
class BertEmbedder(keras.Model):
    """Text -> one vector.

    Args:
        config: the encoder's hyper-parameters.
        pooling: "mean", "cls" or "max" (`pooling`).
        normalize: L2-normalise the vectors (dot product = cosine).

    Call args:
        inputs: {"input_ids", "input_mask", "segment_ids": int32 [batch, seq_len]}; other
            keys are ignored.

    Returns:
        {"embedding": float32 [batch, hidden]}.
    """

    def __init__(self, config: BertConfig, pooling: str = "mean", normalize: bool = True,
                 name: str = "bert_embedder", dtype: Optional[Any] = None,
                 **kwargs: Any) -> None:
        if isinstance(config, dict):  # from_config
            config = BertConfig.from_dict(config)
        super().__init__(name=name, dtype=dtype, **kwargs)
        self.config = config
        self.encoder = BertEncoder(config, dtype=dtype)
        self.pooling = Pooling(pooling, normalize, name="pooling")

    def call(self, inputs, training=None):
        inputs = {k: inputs[k] for k in INPUT_NAMES}
        if self.pooling.mode == "cls":
            cls_position = keras.ops.zeros_like(inputs["input_ids"][:, :1])  # [batch, 1]
            sequence = self.encoder.encode_at(inputs, cls_position, training=training)
            mask = inputs["input_mask"][:, :1]
        else:
            sequence = self.encoder(inputs, training=training)["sequence_output"]
            mask = inputs["input_mask"]
        return {"embedding": self.pooling(sequence, mask)}

    def get_config(self) -> Dict[str, Any]:
        return {"config": self.config.to_dict(), "pooling": self.pooling.mode,
                "normalize": self.pooling.normalize, "name": self.name,
                "trainable": self.trainable,
                "dtype": keras.dtype_policies.serialize(self.dtype_policy)}

    @classmethod
    def from_config(cls, config: Dict[str, Any]) -> "BertEmbedder":
        return cls(**constructor_args(config))
