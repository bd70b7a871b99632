"""`BertPretrainingModel`: the encoder with its MLM and (optional) NSP heads.

The model returns logits only; the losses live in `bert_tf.training.losses` and the reduction
over the global batch in the trainer, so the model runs unchanged under any distribution
strategy.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import keras
import numpy as np

from bert_tf.modeling import packing
from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.encoder import INPUT_NAMES, constructor_args
from bert_tf.modeling.heads import build_masked_lm_head, build_next_sentence_head
from bert_tf.modeling.modern_encoder import build_encoder

MODEL_INPUT_NAMES = INPUT_NAMES + ("masked_lm_positions",)


@keras.saving.register_keras_serializable(package="bert_tf")
class BertPretrainingModel(keras.Model):
    """BERT for pretraining: `BertEncoder` + tied MLM head + NSP head.

    Args:
        config: the model hyper-parameters.
        use_nsp: build the next-sentence head (False for `--no_nsp`, RoBERTa-style MLM only).
        name: the model name.
        dtype: a dtype or policy for the encoder; None uses the global policy. The heads
            always compute in float32.

    Call args:
        inputs: {"input_ids", "input_mask", "segment_ids": int32 [batch, seq_len],
            "masked_lm_positions": int32 [batch, num_predictions]}. Other keys (labels,
            weights of a whole input-pipeline batch) are ignored, but for "doc_ids" and
            "position_ids" of a packed batch (`bert_tf.modeling.packing`), which keep
            attention within each document of a row and restart its positions.
        training: enables dropout.

    Returns:
        {"mlm_logits": float32 [batch, num_predictions, vocab_size],
         "nsp_logits": float32 [batch, 2] (only when use_nsp),
         "sequence_output": [batch, seq_len, hidden], "pooled_output": [batch, hidden]}.

    Attributes:
        encoder: the `BertEncoder` (a `ModernEncoder` for a modern config; export or
            fine-tune it alone).
        mlm_head: the keras-hub `MaskedLMHead`.
        nsp_head: the NSP Dense layer, or None.
    """

    def __init__(
        self,
        config: BertConfig,
        use_nsp: bool = True,
        name: str = "bert_pretraining",
        dtype: Optional[Any] = None,
        **kwargs: Any,
    ) -> None:
        if isinstance(config, dict):  # from_config
            config = BertConfig.from_dict(config)
        # A modern config (ModernBERT's options) gets the modern encoder and MLM head.
        encoder = build_encoder(config, dtype=dtype)
        mlm_head = build_masked_lm_head(config, encoder.token_embedding)
        nsp_head = build_next_sentence_head(config) if use_nsp else None

        inputs = {
            name_: keras.Input(shape=(None,), dtype="int32", name=name_)
            for name_ in MODEL_INPUT_NAMES
        }
        encoded = encoder({k: inputs[k] for k in INPUT_NAMES})
        outputs = {
            "mlm_logits": mlm_head(
                encoded["sequence_output"], mask_positions=inputs["masked_lm_positions"]
            ),
            "sequence_output": encoded["sequence_output"],
            "pooled_output": encoded["pooled_output"],
        }
        if nsp_head is not None:
            outputs["nsp_logits"] = nsp_head(encoded["pooled_output"])
        super().__init__(inputs=inputs, outputs=outputs, name=name, dtype=dtype, **kwargs)

        self.config = config
        self.use_nsp = use_nsp
        self.encoder = encoder
        self.mlm_head = mlm_head
        self.nsp_head = nsp_head

    def call(self, inputs, training=None, mask=None):
        # A pipeline batch carries labels too; pass only what the graph consumes (Keras
        # would otherwise warn on every trace about the unexpected keys).
        if isinstance(inputs, dict):
            if packing.packed_features(inputs) is not None:
                return self.packed_call(inputs, training=training)
            inputs = {k: inputs[k] for k in MODEL_INPUT_NAMES}
        return super().call(inputs, training=training, mask=mask)

    def packed_call(self, inputs: Dict[str, Any], training: Optional[bool] = None
                    ) -> Dict[str, Any]:
        """`call` of a packed batch (`bert_tf.modeling.packing`: with doc_ids and
        position_ids), which the functional graph has no inputs for: the encoder's `encode_at`
        at every position, then the heads as in `call`. The same outputs."""
        sequence = self.encoder.encode_at(inputs, None, training=training)
        pooled = self.encoder.pooler(sequence[:, 0, :])  # [batch, hidden]
        outputs = {"mlm_logits": self.mlm_head(sequence,
                                               mask_positions=inputs["masked_lm_positions"]),
                   "sequence_output": sequence, "pooled_output": pooled}
        if self.nsp_head is not None:
            outputs["nsp_logits"] = self.nsp_head(pooled)
        return outputs

    def head_logits(self, inputs: Dict[str, Any], training: Optional[bool] = None
                    ) -> Dict[str, Any]:
        """The heads' logits alone, computing the last encoder block only where they read it.

        What the trainer differentiates: equal to `call`'s "mlm_logits" and "nsp_logits" (for
        the same dropout draws), without the last block's work at the unmasked positions
        (see `BertEncoder.encode_at`).

        Args:
            inputs: as for `call`.
            training: enables dropout.

        Returns:
            {"mlm_logits": float32 [batch, num_predictions, vocab_size],
             "nsp_logits": float32 [batch, 2] (only when use_nsp)}.
        """
        masked = keras.ops.convert_to_tensor(inputs["masked_lm_positions"], "int32")
        # [CLS] first, then the masked positions: [batch, 1 + num_predictions].
        queries = keras.ops.concatenate([keras.ops.zeros_like(masked[:, :1]), masked], axis=1)
        hidden = self.encoder.encode_at(inputs, queries, training=training)
        # Rows 1.. of `hidden` are the masked positions, in order.
        rows = keras.ops.broadcast_to(
            keras.ops.arange(1, keras.ops.shape(queries)[1], dtype="int32"),
            keras.ops.shape(masked))
        outputs = {"mlm_logits": self.mlm_head(hidden, mask_positions=rows)}
        if self.nsp_head is not None:
            pooled = self.encoder.pooler(hidden[:, 0, :])  # [batch, hidden]
            outputs["nsp_logits"] = self.nsp_head(pooled)
        return outputs

    def get_config(self) -> Dict[str, Any]:
        return {
            "config": self.config.to_dict(),
            "use_nsp": self.use_nsp,
            "name": self.name,
            "trainable": self.trainable,
            "dtype": keras.dtype_policies.serialize(self.dtype_policy),
        }

    @classmethod
    def from_config(cls, config: Dict[str, Any]) -> "BertPretrainingModel":
        return cls(**constructor_args(config))


def dummy_pretraining_inputs(
    batch_size: int = 2, seq_len: int = 8, num_predictions: int = 2
) -> Dict[str, Any]:
    """Zero int32 inputs of the given shapes (input_mask all ones), e.g. to build a model."""
    zeros = np.zeros((batch_size, seq_len), dtype=np.int32)
    return {
        "input_ids": zeros,
        "input_mask": np.ones_like(zeros),
        "segment_ids": zeros,
        "masked_lm_positions": np.zeros((batch_size, num_predictions), dtype=np.int32),
    }
