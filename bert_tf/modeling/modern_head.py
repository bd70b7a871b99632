"""The MLM head of a modern encoder: ModernBERT's `head` + `decoder`.

Gather the hidden states at the masked positions, Dense(E) (E = `embedding_width`, the
tables' width: hidden_size unless embedding_size says; bias with use_bias), the
activation (the input half's of a gated hidden_act: GELU for "geglu", as ModernBERT's
`classifier_activation` "gelu"), LayerNorm (norm_eps, beta with use_bias), then the decoder:
the word-embedding table (tie_word_embeddings, as ModernBERT-base) or an [E, vocab]
matrix of its own, plus a per-id output bias (always present: ModernBERT's decoder_bias).
Built with a float32 dtype policy, as BERT's MLM head (`heads.py`), for accurate logits under
mixed precision.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import keras

from bert_tf.modeling import modern_config
from bert_tf.modeling.activations import get_activation
from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.encoder import gather_positions


@keras.saving.register_keras_serializable(package="bert_tf")
class ModernMaskedLMHead(keras.layers.Layer):
    """ModernBERT's MLM head and decoder.

    Args:
        config: the model's (modern) BertConfig.
        token_embedding: the encoder's `WordEmbedding` (the decoder when tied).

    Call args:
        inputs: [batch, seq_len, hidden].
        mask_positions: int32 [batch, num_predictions].

    Returns:
        float32 logits [batch, num_predictions, vocab_size].

    Attributes:
        transform, transform_layer_norm: the head's Dense and LayerNorm.
        decoder: the untied decoder Dense (no bias), or None when tied.
        output_bias: the [vocab_size] bias variable.
    """

    def __init__(self, config: BertConfig, token_embedding: Optional[keras.layers.Layer] = None,
                 **kwargs: Any) -> None:
        kwargs.setdefault("dtype", "float32")
        super().__init__(**kwargs)
        if isinstance(config, dict):
            config = BertConfig.from_dict(config)
        self.config = config
        self.token_embedding = token_embedding
        init = keras.initializers.TruncatedNormal(stddev=config.initializer_range)
        # To the tied table's width E (an ELECTRA generator's is its discriminator's).
        self.transform = keras.layers.Dense(config.embedding_width, use_bias=config.use_bias,
                                            kernel_initializer=init, dtype=self.dtype_policy,
                                            name="transform")
        self.transform_layer_norm = keras.layers.LayerNormalization(
            epsilon=config.norm_eps, center=config.use_bias, dtype=self.dtype_policy,
            name="transform_layer_norm")
        self.decoder = None if config.tie_word_embeddings else keras.layers.Dense(
            config.vocab_size, use_bias=False, kernel_initializer=init,
            dtype=self.dtype_policy, name="decoder")
        self.act = get_activation(modern_config.head_activation(config))

    def build(self, inputs_shape) -> None:
        width = self.config.embedding_width
        self.transform.build([None, None, self.config.hidden_size])
        self.transform_layer_norm.build([None, None, width])
        if self.decoder is not None:
            self.decoder.build([None, None, width])
        self.output_bias = self.add_weight(name="output_bias", shape=(self.config.vocab_size,),
                                           initializer="zeros")
        self.built = True

    def call(self, inputs, mask_positions):
        x = gather_positions(inputs, mask_positions)  # [batch, num_predictions, hidden]
        x = keras.ops.cast(x, self.compute_dtype)
        x = self.transform_layer_norm(self.act(self.transform(x)))
        if self.decoder is None:
            logits = self.token_embedding(x, reverse=True)  # [batch, n, vocab], float32
        else:
            logits = self.decoder(x)
        return keras.ops.cast(logits, self.compute_dtype) + self.output_bias

    def get_config(self) -> Dict[str, Any]:
        config = super().get_config()
        config["config"] = self.config.to_dict()
        return config


def build_modern_masked_lm_head(config: BertConfig, token_embedding: keras.layers.Layer,
                                name: str = "mlm_head") -> ModernMaskedLMHead:
    """The head for a modern config, called as BERT's (`heads.build_masked_lm_head`)."""
    return ModernMaskedLMHead(config, token_embedding, name=name)
