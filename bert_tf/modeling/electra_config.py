"""ELECTRA's generator hyper-parameters from the discriminator's config (no TensorFlow).

The generator is as deep as the discriminator and G wide (`--generator_hidden_fraction` of
its hidden size); it reads the discriminator's tables, so its `embedding_size` is their
width E. Its heads are one per 64 units (at least one), as ELECTRA's. Its feed-forward:

* BERT's block: 4 G, ELECTRA's rule (converters read a generator's size from its width
  alone, so a source that breaks the rule is refused);
* a modern config (`modern_config.is_modern`): the discriminator's intermediate_size scaled
  by G / H, which keeps its ratio (a gated "geglu" feed-forward is not 4x wide). Its MLM
  output is always the shared word table (`tie_word_embeddings`), as ELECTRA's.

`bert_tf.modeling.electra` builds the generator from this config and
`bert_tf.interop.electra_layout` derives the converters' shapes from it.
"""

from __future__ import annotations

import dataclasses

from bert_tf.core.errors import UserError
from bert_tf.modeling import modern_config
from bert_tf.modeling.config import BertConfig

HEAD_WIDTH = 64


def generator_config_for_width(config: BertConfig, width: int,
                               source: str = "the checkpoint") -> BertConfig:
    """The generator's config for width G (see the module docstring).

    Args:
        config: the discriminator's config.
        width: the generator's hidden size G.
        source: what gave G (a flag or a checkpoint), named in the error.

    Raises:
        UserError: G is not divisible by its number of heads.
    """
    heads = max(1, width // HEAD_WIDTH)
    if width % heads:
        raise UserError(f"{source} gives a generator hidden size {width}, not divisible by "
                        f"its {heads} heads ({HEAD_WIDTH} units each)")
    changes = dict(hidden_size=width, num_attention_heads=heads, intermediate_size=4 * width,
                   embedding_size=config.embedding_width)
    if modern_config.is_modern(config):
        changes.update(intermediate_size=max(1, round(config.intermediate_size * width
                                                      / config.hidden_size)),
                       tie_word_embeddings=True)
    return dataclasses.replace(config, **changes)
