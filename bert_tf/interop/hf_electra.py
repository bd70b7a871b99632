"""Hugging Face ELECTRA directories (config.json model_type "electra"): read and write.

transformers keeps ELECTRA's two networks as two models, each in its own directory:

* the discriminator, `ElectraForPreTraining` (or the bare `ElectraModel`);
* the generator, `ElectraForMaskedLM`.

A written ELECTRA model is a directory holding `discriminator/` and, when the model has one,
`generator/`, each with config.json, model.safetensors, vocab.txt and the tokenizer files
(as a BERT export). Reading takes either:

* that parent directory: the full pretraining state (both networks and both heads; the
  generator's embeddings must equal the discriminator's, which bert_tf keeps once, as
  ELECTRA shares them), or
* one discriminator directory (e.g. `google/electra-small-discriminator`): the encoder for
  fine-tuning, with its discriminator head. A generator directory alone is refused: without
  the discriminator there is nothing to fine-tune or to pretrain on.

transformers' names (with or without the `electra.` prefix of the pretraining models) and
the canonical ones (`bert_tf.interop.electra_layout`):

    electra.embeddings.{word,position,token_type}_embeddings.weight, .LayerNorm.*
                                                embeddings/* (shared, E wide)
    electra.embeddings_project.*                embeddings_project/* (generator/... in the
                                                generator's directory); only when E != hidden
    electra.encoder.layer.N.* (BERT's names)    layer_N/* (generator/layer_N/*)
    discriminator_predictions.dense.*           discriminator_predictions/dense/*
    discriminator_predictions.dense_prediction.*  discriminator_predictions/dense_prediction/*
    generator_predictions.dense.*               generator_predictions/dense/*
    generator_predictions.LayerNorm.*           generator_predictions/layer_norm/*
    generator_lm_head.bias                      generator_predictions/output_bias
    generator_lm_head.weight                    tied to the word embeddings (not stored)

Linear weights are [out, in], the transpose of the canonical kernels. transformers has no
pooler in ELECTRA. Its generator head always computes the erf GELU (its own "gelu"),
whatever `hidden_act` says; a bert_tf generator computes `hidden_act` there, so a model
trained with another activation gets one note line on export: its generator's MLM logits
differ slightly in transformers, the encoders' outputs do not.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np

from bert_tf.core import fileio, tokenization
from bert_tf.core.errors import UserError
from bert_tf.interop import electra_layout, safetensors_io
from bert_tf.interop.hf_checkpoint import (
    CONFIG_NAME,
    SAFETENSORS_NAME,
    SAME_KEYS,
    VOCAB_NAME,
    load_tensors,
    name_table,
    read_config_dict,
)
from bert_tf.interop.hf_tokenizer_files import write_tokenizer_files
from bert_tf.interop.model_files import (
    ModelFiles,
    activation_meaning,
    activation_name,
    atomic_directory,
    check_vocab,
    copy_file,
    find_beside,
    report_unused,
)
from bert_tf.interop.vocab_resize import infer_do_lower_case
from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.encoder import LAYER_NORM_EPSILON

MODEL_TYPE = "electra"
DISCRIMINATOR_DIR = "discriminator"
GENERATOR_DIR = "generator"
# transformers' ElectraGeneratorPredictions computes this activation, whatever hidden_act is.
HF_GENERATOR_HEAD_ACT = "gelu_erf"

# Keys that change nothing bert_tf computes (the summary_* ones configure transformers'
# multiple-choice head only).
_IGNORED_KEYS = frozenset({
    "_name_or_path", "architectures", "model_type", "transformers_version", "torch_dtype",
    "dtype", "pad_token_id", "bos_token_id", "eos_token_id", "sep_token_id", "cls_token_id",
    "use_cache", "classifier_dropout", "id2label", "label2id", "num_labels", "problem_type",
    "finetuning_task", "tokenizer_class", "tie_word_embeddings", "summary_type",
    "summary_use_proj", "summary_activation", "summary_last_dropout", "output_hidden_states",
    "output_attentions", "return_dict", "gradient_checkpointing", "layer_norm_eps",
    "position_embedding_type", "is_decoder", "add_cross_attention", "chunk_size_feed_forward",
    "embedding_size", "hidden_act",
})
_HEADS = {
    "discriminator_predictions/dense": "discriminator_predictions.dense",
    "discriminator_predictions/dense_prediction": "discriminator_predictions.dense_prediction",
    "generator_predictions/dense": "generator_predictions.dense",
}


def is_electra(d: Mapping[str, Any]) -> bool:
    """Whether a config.json dict is an ELECTRA model's."""
    return d.get("model_type") == MODEL_TYPE


def is_pair_directory(path: str) -> bool:
    """Whether `path` is a directory of the two networks (discriminator/, generator/)."""
    return (fileio.isdir(path) and not fileio.exists(os.path.join(path, CONFIG_NAME))
            and fileio.exists(os.path.join(path, DISCRIMINATOR_DIR, CONFIG_NAME)))


def is_electra_path(path: str) -> bool:
    """Whether `path` is an ELECTRA directory (one network's, or the pair's)."""
    if is_pair_directory(path):
        return True
    directory = path if fileio.isdir(path) else os.path.dirname(path)
    if not fileio.exists(os.path.join(directory, CONFIG_NAME)):
        return False
    try:
        return is_electra(read_config_dict(directory))
    except UserError:
        return False


# ------------------------------------------------------------------ config


def config_from_hf(d: Mapping[str, Any], source: str) -> BertConfig:
    """BertConfig from a transformers ELECTRA config.json dict (one network's).

    Raises:
        UserError: relative positions, another LayerNorm epsilon or a decoder, which bert_tf
            does not compute.
    """
    if d.get("position_embedding_type", "absolute") != "absolute":
        raise UserError(f"{source}: position_embedding_type={d['position_embedding_type']!r}"
                        " is not supported (bert_tf has absolute positions only)")
    eps = d.get("layer_norm_eps", LAYER_NORM_EPSILON)
    if not np.isclose(eps, LAYER_NORM_EPSILON, rtol=1e-6, atol=0):
        raise UserError(f"{source}: layer_norm_eps={eps} is not supported (bert_tf uses "
                        f"{LAYER_NORM_EPSILON})")
    if d.get("is_decoder") or d.get("add_cross_attention"):
        raise UserError(f"{source}: decoder ELECTRA models are not supported")
    unknown = sorted(k for k in d if k not in SAME_KEYS and k not in _IGNORED_KEYS)
    if unknown:
        print(f"note: {source}: ignored config key(s) {', '.join(unknown)}", file=sys.stderr,
              flush=True)
    values = {k: d[k] for k in SAME_KEYS if k in d}
    values["hidden_act"] = activation_name(activation_meaning(d.get("hidden_act", "gelu"), "hf"),
                                           "bert_tf")
    # transformers' default embedding_size is 128: absent means 128, not hidden_size.
    embedding = int(d.get("embedding_size", 128))
    if embedding != int(values.get("hidden_size", 256)):
        values["embedding_size"] = embedding
    return BertConfig.from_dict(values, source=source)


def config_to_hf(config: BertConfig, architecture: str) -> Dict[str, Any]:
    """A transformers ELECTRA config.json dict for one network's `config`."""
    d = config.to_dict()
    d["hidden_act"] = activation_name(activation_meaning(config.hidden_act, "bert_tf"), "hf")
    d.update({
        "architectures": [architecture],
        "model_type": MODEL_TYPE,
        "embedding_size": config.embedding_width,
        "layer_norm_eps": LAYER_NORM_EPSILON,
        "pad_token_id": 0,
        "position_embedding_type": "absolute",
        "tie_word_embeddings": True,
    })
    return dict(sorted(d.items()))


# ------------------------------------------------------------------ names


def network_table(num_layers: int, role: str) -> Dict[str, str]:
    """{canonical name: transformers name} of one network's directory.

    Args:
        num_layers: the encoder's depth.
        role: "discriminator" or "generator": the generator's encoder names carry
            `generator/` (but for the shared embeddings) and its head is
            generator_predictions, the discriminator's discriminator_predictions.
    """
    prefix = electra_layout.GENERATOR_PREFIX if role == GENERATOR_DIR else ""
    table: Dict[str, str] = {}
    for name, hf in name_table(num_layers).items():
        if name.startswith("embeddings/"):
            table[name] = "electra." + hf
        elif name.startswith("layer_"):
            table[prefix + name] = "electra." + hf
        if name == "embeddings/layer_norm/beta":  # the projection follows the embeddings
            for p, q in (("kernel", "weight"), ("bias", "bias")):
                table[f"{prefix}embeddings_project/{p}"] = f"electra.embeddings_project.{q}"
    head = "generator_predictions" if role == GENERATOR_DIR else "discriminator_predictions"
    for ours, theirs in _HEADS.items():
        if ours.startswith(head):
            for p, q in (("kernel", "weight"), ("bias", "bias")):
                table[f"{ours}/{p}"] = f"{theirs}.{q}"
    if role == GENERATOR_DIR:
        table["generator_predictions/layer_norm/gamma"] = "generator_predictions.LayerNorm.weight"
        table["generator_predictions/layer_norm/beta"] = "generator_predictions.LayerNorm.bias"
        table["generator_predictions/output_bias"] = "generator_lm_head.bias"
    return table


def _is_transposed(name: str) -> bool:
    return name.endswith("/kernel")


def _strip(name: str) -> str:
    if name.startswith(("embeddings.", "encoder.", "embeddings_project.")):
        return "electra." + name  # an ElectraModel saved alone
    return name


# ------------------------------------------------------------------ read


def read_config(path: str) -> BertConfig:
    """The discriminator's architecture of an ELECTRA pair or discriminator directory, from
    its config.json (the weights are not read)."""
    directory = path if fileio.isdir(path) else os.path.dirname(path)
    if is_pair_directory(directory):
        directory = os.path.join(directory, DISCRIMINATOR_DIR)
    return config_from_hf(read_config_dict(directory), os.path.join(directory, CONFIG_NAME))


def _read_network(directory: str, role: str) -> Tuple[BertConfig, Dict[str, np.ndarray],
                                                      Dict[str, str]]:
    """One network's config, canonical weights and {canonical: stored name}."""
    d = read_config_dict(directory)
    source = os.path.join(directory, CONFIG_NAME)
    if not is_electra(d):
        raise UserError(f"{source}: model_type is {d.get('model_type')!r}, not 'electra'")
    config = config_from_hf(d, source)
    by_hf = {v: k for k, v in network_table(config.num_hidden_layers, role).items()}
    weights: Dict[str, np.ndarray] = {}
    stored_as: Dict[str, str] = {}
    unused: List[str] = []
    decoder = None
    tensors = load_tensors(directory)
    if role == DISCRIMINATOR_DIR and any(n.startswith(("generator_predictions.",
                                                       "generator_lm_head.")) for n in tensors):
        raise UserError(f"{directory} holds ELECTRA's generator (ElectraForMaskedLM) alone; "
                        "give the discriminator's directory, or a directory holding "
                        f"{DISCRIMINATOR_DIR}/ and {GENERATOR_DIR}/ for the pretraining state")
    for stored, value in tensors.items():
        key = _strip(stored)
        if key == "electra.embeddings.position_ids":
            continue  # a buffer, not a weight
        if key == "generator_lm_head.weight":
            decoder = value
            continue
        name = by_hf.get(key)
        if name is None:
            unused.append(stored)
            continue
        value = np.asarray(value, np.float32)
        weights[name] = np.ascontiguousarray(value.T) if _is_transposed(name) else value
        stored_as[name] = stored
    if not weights:
        raise UserError(f"{directory}: no ELECTRA weights (electra.embeddings.*, "
                        "electra.encoder.layer.*) found")
    if decoder is not None and "embeddings/word_embeddings" in weights:
        diff = float(np.max(np.abs(decoder - weights["embeddings/word_embeddings"])))
        if diff > 0:
            raise UserError(f"{directory}: generator_lm_head.weight differs from the word "
                            f"embeddings (max |diff| {diff:.3g}); bert_tf ties them")
    report_unused(sorted(unused), directory)
    return config, weights, stored_as


def _check_generator(config: BertConfig, generator: BertConfig, source: str) -> None:
    rule = electra_layout.generator_config_for_width(config, generator.hidden_size, source)
    for field in ("vocab_size", "embedding_width", "num_hidden_layers",
                  "max_position_embeddings", "type_vocab_size", "num_attention_heads",
                  "intermediate_size", "hidden_act"):
        if getattr(generator, field) != getattr(rule, field):
            raise UserError(
                f"{source}: the generator's {field} is {getattr(generator, field)!r} where "
                f"bert_tf's ELECTRA needs {getattr(rule, field)!r} (the discriminator's "
                "vocabulary, embeddings, depth and activation; ELECTRA's heads = hidden // 64, "
                "intermediate = 4 x hidden)")


def read(path: str, vocab_file: Optional[str] = None) -> ModelFiles:
    """Reads an ELECTRA pair directory or one discriminator directory (module docstring).

    Args:
        path: the directory (or a weight file in a discriminator directory).
        vocab_file: default: vocab.txt of the discriminator's directory (or the pair's).

    Returns:
        ELECTRA canonical weights (`electra_layout`), the discriminator's config.

    Raises:
        UserError: a generator directory alone, a generator that does not fit the
            discriminator, embeddings that differ between the two, a weight of another shape,
            a vocabulary of another size.
    """
    directory = path if fileio.isdir(path) else os.path.dirname(path)
    pair = is_pair_directory(directory)
    disc_dir = os.path.join(directory, DISCRIMINATOR_DIR) if pair else directory
    config, weights, stored_as = _read_network(disc_dir, DISCRIMINATOR_DIR)
    gen_dir = os.path.join(directory, GENERATOR_DIR)
    if pair and fileio.exists(os.path.join(gen_dir, CONFIG_NAME)):
        gen_config, gen_weights, gen_stored = _read_network(gen_dir, GENERATOR_DIR)
        _check_generator(config, gen_config, gen_dir)
        electra_layout.check_same_embeddings(weights, gen_weights, directory)
        for name, value in gen_weights.items():
            if not name.startswith("embeddings/"):
                weights[name], stored_as[name] = value, f"{GENERATOR_DIR}/{gen_stored[name]}"
    electra_layout.check_shapes(weights, config, directory,
                                source_name=lambda n: stored_as.get(n, n))
    vocab_file = vocab_file or find_beside(disc_dir, (VOCAB_NAME,)) or (
        find_beside(directory, (VOCAB_NAME,)) if pair else None)
    check_vocab(vocab_file, weights, directory)
    return ModelFiles(config, weights, vocab_file, directory)


# ------------------------------------------------------------------ write


def _network_tensors(weights: Mapping[str, np.ndarray], num_layers: int,
                     role: str) -> Dict[str, np.ndarray]:
    tensors = {}
    for name, hf in network_table(num_layers, role).items():
        if name in weights:
            value = np.asarray(weights[name], np.float32)
            tensors[hf] = np.ascontiguousarray(value.T) if _is_transposed(name) else value
    return tensors


def _write_network(tmp: str, tensors: Dict[str, np.ndarray], config: BertConfig,
                   architecture: str, files: ModelFiles, do_lower_case: Optional[bool]) -> None:
    os.makedirs(tmp)
    safetensors_io.save_file(tensors, os.path.join(tmp, SAFETENSORS_NAME),
                             metadata={"format": "pt"})
    with fileio.atomic_output(os.path.join(tmp, CONFIG_NAME), "wb") as f:
        f.write((json.dumps(config_to_hf(config, architecture), indent=2) + "\n").encode())
    if files.vocab_file:
        copy_file(files.vocab_file, os.path.join(tmp, VOCAB_NAME))
        write_tokenizer_files(files.vocab_file, do_lower_case, config.max_position_embeddings,
                              tmp)


def write(files: ModelFiles, output_dir: str, do_lower_case: Optional[bool] = None) -> str:
    """Writes `output_dir/discriminator` (`ElectraForPreTraining`, or `ElectraModel` without
    the discriminator head) and, when `files` has the generator, `output_dir/generator`
    (`ElectraForMaskedLM`).

    Args:
        files: ELECTRA canonical weights (`electra_layout`); the poolers are not written.
        output_dir: a new directory.
        do_lower_case: the casing for the tokenizer files; None: from the vocabulary.

    Returns:
        `output_dir`.
    """
    config, weights = files.config, files.weights
    if files.vocab_file and do_lower_case is None:
        do_lower_case = infer_do_lower_case(tokenization.load_vocab(files.vocab_file))
    disc = _network_tensors(weights, config.num_hidden_layers, DISCRIMINATOR_DIR)
    with_head = any(n.startswith(electra_layout.DISCRIMINATOR_HEAD_PREFIX) for n in weights)
    width = electra_layout.generator_width(weights)
    with atomic_directory(output_dir) as tmp:
        _write_network(os.path.join(tmp, DISCRIMINATOR_DIR), disc, config,
                       "ElectraForPreTraining" if with_head else "ElectraModel", files,
                       do_lower_case)
        if width is not None:
            generator = electra_layout.generator_config_for_width(config, width)
            tensors = _network_tensors(weights, config.num_hidden_layers, GENERATOR_DIR)
            _write_network(os.path.join(tmp, GENERATOR_DIR), tensors, generator,
                           "ElectraForMaskedLM", files, do_lower_case)
            meaning = activation_meaning(config.hidden_act, "bert_tf")
            if meaning != HF_GENERATOR_HEAD_ACT:
                print(f"note: transformers' ElectraForMaskedLM computes its head with the erf "
                      f"GELU; this generator's head uses hidden_act {config.hidden_act!r}, so "
                      "its MLM logits differ slightly there (the encoders' outputs do not)",
                      file=sys.stderr, flush=True)
    return output_dir
