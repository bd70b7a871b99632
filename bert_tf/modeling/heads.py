"""The pretraining heads: masked-LM (tied to the word embeddings) and next-sentence.

MLM head (`build_masked_lm_head`): keras-hub's `MaskedLMHead` is exactly BERT's
"cls/predictions" head — gather the hidden states at the masked positions, Dense(hidden) with
`hidden_act`, LayerNorm, then the reverse projection of the shared word-embedding table plus a
per-id output bias (zeros at init). It is built with a float32 dtype policy: the head sees only
`num_predictions` rows per example (a few percent of the tokens), and float32 logits keep the
cross-entropy accurate under mixed precision; the word-embedding layer itself is configured to
do its reverse matmul in float32 (see encoder.py).

NSP head (`build_next_sentence_head`): Dense(2) on the pooled output, float32, as BERT's
"cls/seq_relationship" (whose kernel is stored transposed, [2, hidden], in Google checkpoints).
"""

from __future__ import annotations

import keras
import keras_hub

from bert_tf.modeling import modern_config
from bert_tf.modeling.activations import get_activation
from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.encoder import LAYER_NORM_EPSILON, bert_initializer
from bert_tf.modeling.modern_head import ModernMaskedLMHead

NUM_NSP_CLASSES = 2


def build_masked_lm_head(
    config: BertConfig, token_embedding: keras.layers.Layer, name: str = "mlm_head"
) -> keras_hub.layers.MaskedLMHead:
    """The MLM head, tied to `token_embedding`.

    Args:
        config: the model hyper-parameters (hidden_act, initializer_range).
        token_embedding: the encoder's `WordEmbedding`; its table is the output weight.
        name: the layer name.

    Returns:
        A layer called as `head(sequence_output, mask_positions=masked_lm_positions)` with
        sequence_output [batch, seq_len, hidden] and masked_lm_positions int32
        [batch, num_predictions], returning float32 logits [batch, num_predictions, vocab_size].
        A modern config (`modern_config.is_modern`) gets ModernBERT's head
        (`modern_head.ModernMaskedLMHead`), called the same way.
    """
    if modern_config.is_modern(config):
        return ModernMaskedLMHead(config, token_embedding, name=name)
    return keras_hub.layers.MaskedLMHead(
        token_embedding=token_embedding,
        intermediate_activation=get_activation(config.hidden_act),
        layer_norm_epsilon=LAYER_NORM_EPSILON,
        kernel_initializer=bert_initializer(config),
        bias_initializer="zeros",
        dtype="float32",
        name=name,
    )


def build_next_sentence_head(config: BertConfig, name: str = "nsp_head") -> keras.layers.Dense:
    """The NSP head: float32 Dense(2), pooled_output [batch, hidden] -> logits [batch, 2].

    Logit 0 is "B follows A" (`schema.IS_NEXT`), logit 1 "B is random".
    """
    return keras.layers.Dense(
        NUM_NSP_CLASSES,
        kernel_initializer=bert_initializer(config),
        dtype="float32",
        name=name,
    )
