"""`ElectraPretrainingModel`: ELECTRA's generator and discriminator, sharing the embeddings.

ELECTRA (Clark et al., 2020) trains a small masked-LM generator and a discriminator that
tells, at every real token, whether the generator replaced it. The discriminator is what a
user keeps: `model.encoder` is a plain `BertEncoder` (the bert_config.json of the run), so
export and fine-tuning take it out exactly as they take BERT's encoder.

The networks (E = `config.embedding_width`, H = hidden_size, G = the generator's width,
`generator_config`):

* discriminator `encoder`: `BertEncoder(config)`: word, position and segment tables of width
  E, their LayerNorm, the projection E -> H when E != H, the blocks, a pooler;
* `generator`: `BertEncoder(generator_config(config, fraction))`, as deep as the
  discriminator, G = round(fraction x H) wide, max(1, G // 64) heads, feed-forward 4 G. It
  uses the discriminator's tables and embedding LayerNorm (one set of variables, trained by
  both losses, as ELECTRA shares its embedding layer) and has its own projection E -> G when
  E != G;
* `generator_head` (ELECTRA's generator_predictions): Dense G -> E with `hidden_act`,
  LayerNorm, then the shared word table transposed plus an output bias: keras-hub's
  `MaskedLMHead`, as BERT's MLM head, whose transform maps to the table's width E;
* `discriminator_head` (discriminator_predictions): Dense H -> H with `hidden_act`, then
  Dense H -> 1: one logit per token ("replaced").

The poolers are built (so that each encoder is a complete `BertEncoder`) but no ELECTRA loss
reads them: they stay at their initial values and get no update.

A modern config (`modern_config.is_modern`: ModernBERT's and Cramming's options) builds both
networks as `ModernEncoder`s (`modern_encoder.build_encoder`), the generator sharing the
tables and embedding LayerNorm in the same way, with its own projection E -> G, and the
generator head as ModernBERT's MLM head (`ModernMaskedLMHead`, tied to the shared table).
Their variables have `modern_layout`'s names and the modern encoder's paths; there are no
poolers.

Variable layout of a training checkpoint (object paths under the checkpoint's `model`, what
restores match; a tensor's key in the files may name another path to the same variable, the
optimizer's list of variables; the shared embedding layers are saved once, under `encoder/`):

    model/encoder/token_embedding, position_embedding, segment_embedding,
        embeddings_layer_norm                   the shared embeddings (E wide)
    model/encoder/embeddings_project            E -> H (only when E != H)
    model/encoder/...                           the discriminator's blocks and pooler: the
                                                paths of a `BertEncoder` of the same config
    model/generator/embeddings_project          E -> G (only when E != G)
    model/generator/...                         the generator's blocks and pooler
    model/generator_head/_intermediate_dense, _intermediate_layer_norm, _bias
    model/discriminator_head/dense, dense_prediction

So `tf.train.Checkpoint(model=tf.train.Checkpoint(encoder=encoder))` (a `BertEncoder` of the
run's bert_config.json) restores the discriminator alone, and a `BertPretrainingModel`-style
partial restore of `model/encoder` reads it as it reads BERT's encoder. The generator alone is
`model/generator` plus the shared embeddings under `model/encoder` (restore a whole
`ElectraPretrainingModel` and take `generator` and `generator_head`). The sampler's seed state
(`sampler`) is not a weight: the trainer saves it with the dropout RNG (`rng/`).

Canonical names (`electra_weight_map`, the layout for converters): the discriminator's are
those of `weight_map.encoder_weight_map` (BERT's, plus `embeddings_project/*`); the generator's
are "generator/" + the same names without the shared `embeddings/*`; the heads are

    generator_predictions/dense/{kernel [G, E], bias [E]}
    generator_predictions/layer_norm/{gamma, beta} [E]
    generator_predictions/output_bias [vocab_size]
    discriminator_predictions/dense/{kernel [H, H], bias [H]}
    discriminator_predictions/dense_prediction/{kernel [H, 1], bias [1]}

The model returns logits only: sampling the replacements, the losses and their reduction over
the global batch are the objective's (`bert_tf.training.electra_objective`).
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import keras

from bert_tf.core.errors import UserError
from bert_tf.modeling import modern_config, packing, weight_map
from bert_tf.modeling.activations import get_activation
from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.electra_config import generator_config_for_width
from bert_tf.modeling.encoder import bert_initializer, constructor_args
from bert_tf.modeling.heads import build_masked_lm_head
from bert_tf.modeling.modern_encoder import build_encoder
from bert_tf.modeling.pretraining_model import MODEL_INPUT_NAMES

DEFAULT_GENERATOR_HIDDEN_FRACTION = 0.25


def generator_config(config: BertConfig, fraction: float) -> BertConfig:
    """The generator's hyper-parameters: `config` with hidden round(fraction x H), heads
    max(1, hidden // 64), its feed-forward and embedding_size (the shared tables' width) by
    `electra_config.generator_config_for_width`.

    Raises:
        UserError: the fraction gives no width, or a width the heads do not divide.
    """
    if not 0 < fraction <= 1:
        raise UserError(f"--generator_hidden_fraction must be in (0, 1], got {fraction}")
    hidden = int(round(config.hidden_size * fraction))
    if hidden < 1:
        raise UserError(f"--generator_hidden_fraction={fraction} of hidden_size "
                        f"{config.hidden_size} leaves the generator no width")
    return generator_config_for_width(config, hidden,
                                      source=f"--generator_hidden_fraction={fraction}")


@keras.saving.register_keras_serializable(package="bert_tf")
class DiscriminatorHead(keras.layers.Layer):
    """ELECTRA's discriminator_predictions: Dense(H, hidden_act), then Dense(1), in float32.

    Call args:
        sequence_output: [batch, seq_len, hidden], any float dtype.

    Returns:
        float32 [batch, seq_len]: the logit that each token was replaced.
    """

    def __init__(self, config: BertConfig, **kwargs: Any) -> None:
        kwargs.setdefault("dtype", "float32")
        super().__init__(**kwargs)
        if isinstance(config, dict):
            config = BertConfig.from_dict(config)
        self.config = config
        self.dense = keras.layers.Dense(
            config.hidden_size,
            # A gated hidden_act ("geglu") is the feed-forward's: the head takes its input
            # half's activation, as ModernBERT's MLM head does.
            activation=get_activation(modern_config.head_activation(config)),
            kernel_initializer=bert_initializer(config), dtype=self.dtype_policy, name="dense")
        self.dense_prediction = keras.layers.Dense(
            1, kernel_initializer=bert_initializer(config), dtype=self.dtype_policy,
            name="dense_prediction")

    def build(self, input_shape) -> None:
        self.dense.build(input_shape)
        self.dense_prediction.build(tuple(input_shape[:-1]) + (self.config.hidden_size,))
        self.built = True

    def call(self, sequence_output):
        logits = self.dense_prediction(self.dense(sequence_output))  # [batch, seq_len, 1]
        return keras.ops.squeeze(logits, axis=-1)

    def get_config(self) -> Dict[str, Any]:
        return {**super().get_config(), "config": self.config.to_dict()}


@keras.saving.register_keras_serializable(package="bert_tf")
class ElectraPretrainingModel(keras.Model):
    """ELECTRA for pretraining: generator + discriminator with shared embeddings.

    Args:
        config: the discriminator's hyper-parameters (the run's bert_config.json).
        generator_hidden_fraction: the generator's width as a fraction of hidden_size.
        sampling_seed: seeds `sampler`, the seed generator the objective draws the training
            replacements from (None: from Keras' global seed, which the trainer sets from
            the run's seed).
        name: the model name.
        dtype: a dtype or policy for both encoders; None uses the global policy. The heads
            always compute in float32.

    Call args:
        inputs: {"input_ids", "input_mask", "segment_ids": int32 [batch, seq_len],
            "masked_lm_positions": int32 [batch, num_predictions]} (+ "doc_ids" and
            "position_ids" of a packed batch: `bert_tf.modeling.packing`); other keys are
            ignored.
        training: enables dropout.

    Returns:
        {"mlm_logits": float32 [batch, num_predictions, vocab_size] (the generator's),
         "disc_logits": float32 [batch, seq_len] (the discriminator's, on input_ids as
         given: `call` does not sample; `bert_tf.training.electra_objective` does)}.

    Attributes:
        encoder: the discriminator `BertEncoder` (export or fine-tune it alone).
        generator: the generator `BertEncoder`; generator_config its config.
        generator_head: keras-hub `MaskedLMHead` tied to the shared word table.
        discriminator_head: `DiscriminatorHead`.
        sampler: `keras.random.SeedGenerator` of the training replacements.
    """

    def __init__(self, config: BertConfig,
                 generator_hidden_fraction: float = DEFAULT_GENERATOR_HIDDEN_FRACTION,
                 sampling_seed: Optional[int] = None, name: str = "electra_pretraining",
                 dtype: Optional[Any] = None, **kwargs: Any) -> None:
        super().__init__(name=name, dtype=dtype, **kwargs)
        if isinstance(config, dict):  # from_config
            config = BertConfig.from_dict(config)
        self.config = config
        self.generator_hidden_fraction = generator_hidden_fraction
        self.generator_config = generator_config(config, generator_hidden_fraction)
        # The discriminator first: the shared layers' checkpoint paths are under encoder/.
        self.encoder = build_encoder(config, name="discriminator", dtype=dtype)
        self.generator = build_encoder(self.generator_config, name="generator", dtype=dtype,
                                       shared_embeddings=self.encoder)
        self.generator_head = build_masked_lm_head(
            self.generator_config, self.encoder.token_embedding, name="generator_predictions")
        self.discriminator_head = DiscriminatorHead(config, name="discriminator_predictions")
        self.sampler = keras.random.SeedGenerator(sampling_seed, name="sampler")
        # Every variable exists from construction (the trainer builds the optimizer next);
        # the encoders are built already, the heads from their input widths.
        self.generator_head.build((None, None, self.generator_config.hidden_size))
        self.discriminator_head.build((None, None, config.hidden_size))
        self.built = True

    def generator_logits(self, inputs: Dict[str, Any], training: Optional[bool] = None):
        """The generator's MLM logits at the masked positions.

        The generator's last block runs only at those positions (`BertEncoder.encode_at`).

        Args:
            inputs: as for `call` (input_ids are the masked inputs).
            training: enables dropout.

        Returns:
            float32 [batch, num_predictions, vocab_size].
        """
        masked = keras.ops.convert_to_tensor(inputs["masked_lm_positions"], "int32")
        hidden = self.generator.encode_at(inputs, masked, training=training)  # [b, P, G]
        rows = keras.ops.broadcast_to(
            keras.ops.arange(keras.ops.shape(masked)[1], dtype="int32"), keras.ops.shape(masked))
        return self.generator_head(hidden, mask_positions=rows)

    def discriminator_logits(self, inputs: Dict[str, Any], training: Optional[bool] = None):
        """The discriminator's logit of "replaced" at every position.

        Args:
            inputs: {"input_ids", "input_mask", "segment_ids"} [batch, seq_len] (input_ids:
                the original tokens with the generator's samples at the masked positions),
                and "doc_ids", "position_ids" of a packed batch.
            training: enables dropout.

        Returns:
            float32 [batch, seq_len].
        """
        if packing.packed_features(inputs) is not None:  # within each document of a row
            return self.discriminator_head(self.encoder.encode_at(inputs, None, training))
        encoded = self.encoder({k: inputs[k] for k in ("input_ids", "input_mask", "segment_ids")},
                               training=training)
        return self.discriminator_head(encoded["sequence_output"])

    def call(self, inputs, training=None):
        inputs = {k: inputs[k] for k in MODEL_INPUT_NAMES + tuple(
            k for k in packing.PACKED_NAMES if k in inputs)}
        return {"mlm_logits": self.generator_logits(inputs, training=training),
                "disc_logits": self.discriminator_logits(inputs, training=training)}

    def get_config(self) -> Dict[str, Any]:
        return {
            "config": self.config.to_dict(),
            "generator_hidden_fraction": self.generator_hidden_fraction,
            "name": self.name,
            "trainable": self.trainable,
            "dtype": keras.dtype_policies.serialize(self.dtype_policy),
        }

    @classmethod
    def from_config(cls, config: Dict[str, Any]) -> "ElectraPretrainingModel":
        return cls(**constructor_args(config))


def electra_weight_map(model: ElectraPretrainingModel) -> Dict[str, weight_map.MappedWeight]:
    """Canonical name -> weight for every variable of an `ElectraPretrainingModel`.

    See the module docstring for the names; each variable appears once (the shared
    embeddings under the discriminator's `embeddings/*` names).
    """
    weights = weight_map.encoder_weight_map(model.encoder)
    for name, weight in weight_map.encoder_weight_map(model.generator).items():
        if not name.startswith("embeddings/"):  # the shared tables, already named
            weights[f"generator/{name}"] = weight
    head, disc = model.generator_head, model.discriminator_head
    if modern_config.is_modern(model.config):  # ModernMaskedLMHead, tied: no decoder
        dense, norm, bias = head.transform, head.transform_layer_norm, head.output_bias
    else:  # keras-hub MaskedLMHead internals, as weight_map reads BERT's MLM head
        dense, norm, bias = head._intermediate_dense, head._intermediate_layer_norm, head._bias
    named = {"generator_predictions/dense/kernel": dense.kernel,
             "generator_predictions/dense/bias": dense.bias,
             "generator_predictions/layer_norm/gamma": norm.gamma,
             "generator_predictions/layer_norm/beta": norm.beta,
             "generator_predictions/output_bias": bias}
    for name, layer in (("dense", disc.dense), ("dense_prediction", disc.dense_prediction)):
        named[f"discriminator_predictions/{name}/kernel"] = layer.kernel
        named[f"discriminator_predictions/{name}/bias"] = layer.bias
    for name, variable in named.items():
        if variable is not None:  # no bias and beta with a modern config's use_bias false
            weights[name] = weight_map.MappedWeight(variable, tuple(variable.shape))
    return weights
