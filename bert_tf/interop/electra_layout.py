"""ELECTRA's canonical weights in a `ModelFiles`, for the converters (no TensorFlow).

An ELECTRA model travels between formats as a `ModelFiles` whose `config` is the
discriminator's (the run's bert_config.json) and whose weights have the names of
`bert_tf.modeling.electra.electra_weight_map`:

    embeddings/*, embeddings_project/*, layer_N/*, pooler/*   the discriminator encoder
                                                              (the shared tables E wide)
    generator/embeddings_project/*, generator/layer_N/*,      the generator (it reads the
        generator/pooler/*                                    discriminator's tables)
    generator_predictions/dense/*, .../layer_norm/*, .../output_bias
    discriminator_predictions/dense/*, .../dense_prediction/*

Either network may be absent: a discriminator alone (what fine-tuning needs) has no
`generator*` names. The generator's hyper-parameters are not stored anywhere but in its
weights' shapes: its width G (that of `generator/layer_0/attention/query/bias`) and
ELECTRA's rule (`bert_tf.modeling.electra_config`: max(1, G // 64) heads, feed-forward 4 G,
as deep as the discriminator) give them, so a source whose generator breaks that rule is
refused. A modern discriminator (`modern_config.is_modern`) has `modern_layout`'s names in
both networks, no poolers, and the generator head's bias and beta only with use_bias.

Neither transformers' nor google-research/electra's ELECTRA has a pooler (their "pooled
output" is the [CLS] state, or nothing): the poolers of bert_tf's two `BertEncoder`s are
never trained, and a converted model's are freshly initialised.
"""

from __future__ import annotations

import sys
from typing import Dict, List, Mapping, Optional, Tuple

import numpy as np

from bert_tf.core.errors import UserError
from bert_tf.interop.model_files import ModelFiles, expected_shapes
from bert_tf.modeling import electra_config
from bert_tf.modeling.config import BertConfig

GENERATOR_PREFIX = "generator/"
GENERATOR_HEAD_PREFIX = "generator_predictions/"
DISCRIMINATOR_HEAD_PREFIX = "discriminator_predictions/"
# The generator's heads: one per 64 units of width.
HEAD_WIDTH = electra_config.HEAD_WIDTH
_WIDTH_NAME = "generator/layer_0/attention/query/bias"
generator_config_for_width = electra_config.generator_config_for_width


def is_electra(names) -> bool:
    """Whether canonical `names` are an ELECTRA model's (a generator or ELECTRA's heads)."""
    return any(n.startswith((GENERATOR_PREFIX, GENERATOR_HEAD_PREFIX,
                             DISCRIMINATOR_HEAD_PREFIX)) for n in names)


def has_generator(names) -> bool:
    """Whether canonical `names` include the generator."""
    return any(n.startswith((GENERATOR_PREFIX, GENERATOR_HEAD_PREFIX)) for n in names)


def generator_width(weights: Mapping[str, np.ndarray]) -> Optional[int]:
    """The generator's width G from its weights, or None without a generator."""
    if _WIDTH_NAME in weights:
        return int(np.shape(weights[_WIDTH_NAME])[0])
    if "generator_predictions/dense/kernel" in weights:
        return int(np.shape(weights["generator_predictions/dense/kernel"])[0])
    return None


def generator_fraction(config: BertConfig, width: int) -> float:
    """The `--generator_hidden_fraction` that gives width G (G / hidden: rounds back to G)."""
    return width / config.hidden_size


def _encoder_shapes(config: BertConfig) -> Dict[str, Tuple[int, ...]]:
    return {n: s for n, s in expected_shapes(config, use_nsp=False).items()
            if not n.startswith("mlm/")}


def electra_shapes(config: BertConfig, width: Optional[int]) -> Dict[str, Tuple[int, ...]]:
    """{canonical name: shape} of an ELECTRA model (`electra_weight_map`'s names and order).

    Args:
        config: the discriminator's config.
        width: the generator's width G; None: the discriminator and its head only.
    """
    h, e, v = config.hidden_size, config.embedding_width, config.vocab_size
    shapes = _encoder_shapes(config)
    if width is not None:
        generator = generator_config_for_width(config, width)
        shapes.update({GENERATOR_PREFIX + n: s for n, s in _encoder_shapes(generator).items()
                       if not n.startswith("embeddings/")})
        shapes["generator_predictions/dense/kernel"] = (width, e)
        if config.use_bias:  # a modern config's use_bias false: no bias, no beta
            shapes["generator_predictions/dense/bias"] = (e,)
        shapes["generator_predictions/layer_norm/gamma"] = (e,)
        if config.use_bias:
            shapes["generator_predictions/layer_norm/beta"] = (e,)
        shapes["generator_predictions/output_bias"] = (v,)
    shapes.update({
        "discriminator_predictions/dense/kernel": (h, h),
        "discriminator_predictions/dense/bias": (h,),
        "discriminator_predictions/dense_prediction/kernel": (h, 1),
        "discriminator_predictions/dense_prediction/bias": (1,),
    })
    return shapes


def check_shapes(weights: Mapping[str, np.ndarray], config: BertConfig, source: str,
                 source_name=lambda n: n) -> None:
    """Raises if a weight is unknown to ELECTRA or its shape disagrees with the config.

    Raises:
        UserError: naming the variable (as `source_name` spells it) and both shapes.
    """
    shapes = electra_shapes(config, generator_width(weights))
    for name, value in weights.items():
        want = shapes.get(name)
        if want is None:
            raise UserError(f"{source}: variable {source_name(name)} has no place in an "
                            "ELECTRA model of this config (another depth?)")
        if tuple(np.shape(value)) != want:
            raise UserError(f"{source}: variable {source_name(name)} has shape "
                            f"{list(np.shape(value))} but the config implies {list(want)}")


def missing_weights(files: ModelFiles) -> List[str]:
    """Canonical names of the networks present in `files` that it lacks (poolers included)."""
    shapes = electra_shapes(files.config, generator_width(files.weights))
    return [n for n in shapes if n not in files.weights]


def report_missing(files: ModelFiles, what: str = "freshly initialised") -> List[str]:
    """Prints one line naming the weights `files` lacks, as `model_files.report_missing`.

    The poolers, which ELECTRA never trains and other formats do not store, are named as
    such. Returns the missing names.
    """
    missing = missing_weights(files)
    poolers = [n for n in missing if n.endswith(("pooler/kernel", "pooler/bias"))]
    others = [n for n in missing if n not in poolers]
    parts = []
    if others:
        parts.append(", ".join(others))
    if poolers:
        parts.append("the untrained pooler(s) ELECTRA never reads")
    if missing:
        print(f"note: {files.source} lacks {len(missing)} weight(s), {what}: "
              f"{'; '.join(parts)}", file=sys.stderr, flush=True)
    return missing


def check_same_embeddings(discriminator: Mapping[str, np.ndarray],
                          generator: Mapping[str, np.ndarray], source: str) -> None:
    """Raises unless two networks' embedding tables and LayerNorm are equal (ELECTRA shares
    them; bert_tf keeps one copy).

    Raises:
        UserError: naming the first table that differs and by how much.
    """
    for name in sorted(n for n in discriminator if n.startswith("embeddings/")):
        if name not in generator:
            continue
        a, b = np.asarray(discriminator[name]), np.asarray(generator[name])
        diff = float(np.max(np.abs(a - b))) if a.shape == b.shape else float("inf")
        if diff > 0:
            raise UserError(f"{source}: the generator's {name} differs from the "
                            f"discriminator's (max |diff| {diff:.3g}); bert_tf's ELECTRA shares "
                            "the embeddings, as ELECTRA does")
