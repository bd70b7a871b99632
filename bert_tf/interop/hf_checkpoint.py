"""Hugging Face BERT directories: read and write (ModernBERT's: `hf_modernbert`).

A directory holds `config.json` (model_type "bert"), the weights in `model.safetensors`
(sharded: `model.safetensors.index.json`) or `pytorch_model.bin` (needs torch), and usually
`vocab.txt`. Weight names, with or without the `bert.` prefix of BertForPreTraining:

    embeddings.{word,position,token_type}_embeddings.weight, embeddings.LayerNorm.{weight,bias}
    encoder.layer.N.attention.self.{query,key,value}.{weight,bias}
    encoder.layer.N.attention.output.dense.*, encoder.layer.N.attention.output.LayerNorm.*
    encoder.layer.N.intermediate.dense.*, encoder.layer.N.output.dense.*,
    encoder.layer.N.output.LayerNorm.*, pooler.dense.*
    cls.predictions.transform.dense.*, cls.predictions.transform.LayerNorm.*,
    cls.predictions.bias (= cls.predictions.decoder.bias), cls.predictions.decoder.weight (tied
    to the word embeddings), cls.seq_relationship.{weight,bias}

Linear weights are [out, in], the transpose of the canonical [in, out] kernels. Old files
name LayerNorm parameters `gamma`/`beta` instead of `weight`/`bias`. Written directories are
BertForPreTraining-style (`bert.` prefix) when the model has heads and BertModel-style
otherwise, in model.safetensors; the tied decoder weight is not stored (as transformers does).
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Mapping, Optional

import numpy as np

from bert_tf.core import fileio, tokenization
from bert_tf.core.errors import UserError
from bert_tf.interop import hf_modernbert, safetensors_io
from bert_tf.interop.hf_tokenizer_files import write_tokenizer_files
from bert_tf.interop.model_files import (
    MLM_PREFIX,
    NSP_PREFIX,
    ModelFiles,
    activation_meaning,
    activation_name,
    atomic_directory,
    check_shapes,
    check_vocab,
    copy_file,
    find_beside,
    report_unused,
)
from bert_tf.interop.vocab_resize import infer_do_lower_case
from bert_tf.modeling import modern_config
from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.encoder import LAYER_NORM_EPSILON

CONFIG_NAME = "config.json"
SAFETENSORS_NAME = "model.safetensors"
SAFETENSORS_INDEX_NAME = "model.safetensors.index.json"
PYTORCH_NAME = "pytorch_model.bin"
VOCAB_NAME = "vocab.txt"

# config.json keys that are BertConfig keys under the same name (ELECTRA's config.json
# shares them: hf_electra reads and writes these too).
SAME_KEYS = (
    "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
    "intermediate_size", "hidden_dropout_prob", "attention_probs_dropout_prob",
    "max_position_embeddings", "type_vocab_size", "initializer_range",
)
# Generic transformers keys that do not change the encoder's computation.
_IGNORED_KEYS = frozenset({
    "_name_or_path", "architectures", "model_type", "transformers_version", "torch_dtype",
    "dtype", "pad_token_id", "bos_token_id", "eos_token_id", "sep_token_id", "cls_token_id",
    "use_cache", "gradient_checkpointing", "classifier_dropout", "id2label", "label2id",
    "num_labels", "problem_type", "finetuning_task", "output_past", "tokenizer_class",
    "task_specific_params", "output_hidden_states", "output_attentions", "return_dict",
    "torchscript", "pruned_heads", "tie_word_embeddings", "chunk_size_feed_forward",
    "prefix", "directionality", "pooler_fc_size", "pooler_num_attention_heads",
    "pooler_num_fc_layers", "pooler_size_per_head", "pooler_type", "layer_norm_eps",
    "position_embedding_type", "is_decoder", "add_cross_attention",
})

# Canonical name under layer_{i}/ -> HF name under encoder.layer.{i}. (without .weight/.bias)
_LAYER_MODULES = {
    "attention/query": "attention.self.query",
    "attention/key": "attention.self.key",
    "attention/value": "attention.self.value",
    "attention/output": "attention.output.dense",
    "attention/layer_norm": "attention.output.LayerNorm",
    "intermediate": "intermediate.dense",
    "output": "output.dense",
    "output/layer_norm": "output.LayerNorm",
}
_HEAD_MODULES = {
    "pooler": "pooler.dense",
    "mlm/transform": "cls.predictions.transform.dense",
    "mlm/transform/layer_norm": "cls.predictions.transform.LayerNorm",
    "nsp": "cls.seq_relationship",
}
_PARAMS = {"kernel": "weight", "bias": "bias", "gamma": "weight", "beta": "bias"}
_OLD_PARAMS = {"gamma": "gamma", "beta": "beta"}  # pre-2019 LayerNorm names


def name_table(num_layers: int) -> Dict[str, str]:
    """{canonical name: HF name without the `bert.` prefix} for `num_layers` layers."""
    table = {
        "embeddings/word_embeddings": "embeddings.word_embeddings.weight",
        "embeddings/position_embeddings": "embeddings.position_embeddings.weight",
        "embeddings/token_type_embeddings": "embeddings.token_type_embeddings.weight",
        "embeddings/layer_norm/gamma": "embeddings.LayerNorm.weight",
        "embeddings/layer_norm/beta": "embeddings.LayerNorm.bias",
    }
    modules = {f"layer_{i}/{k}": f"encoder.layer.{i}.{v}"
               for i in range(num_layers) for k, v in _LAYER_MODULES.items()}
    modules.update(_HEAD_MODULES)
    for ours, theirs in modules.items():
        params = ("gamma", "beta") if ours.endswith("layer_norm") else ("kernel", "bias")
        for p in params:
            table[f"{ours}/{p}"] = f"{theirs}.{_PARAMS[p]}"
    table["mlm/output_bias"] = "cls.predictions.bias"
    return table


def _is_transposed(name: str) -> bool:
    return name.endswith("/kernel")


def _hf_shape(name: str, shape: tuple) -> tuple:
    return tuple(reversed(shape)) if _is_transposed(name) else shape


def _is_head(name: str) -> bool:
    return name.startswith((MLM_PREFIX, NSP_PREFIX))


# ------------------------------------------------------------------ config


def config_from_hf(d: Mapping[str, Any], source: str) -> BertConfig:
    """BertConfig from a transformers BERT config.json dict.

    Raises:
        UserError: not a BERT config, an architecture variant bert_tf does not compute
            (relative positions, another LayerNorm epsilon, a decoder), or an unknown key.
    """
    if d.get("model_type", "bert") != "bert":
        raise UserError(f"{source}: model_type is {d.get('model_type')!r}, not 'bert'")
    for key in d:
        if key not in SAME_KEYS and key != "hidden_act" and key not in _IGNORED_KEYS:
            raise UserError(f"{source}: unknown key {key!r} in config.json")
    if d.get("position_embedding_type", "absolute") != "absolute":
        raise UserError(f"{source}: position_embedding_type={d['position_embedding_type']!r}"
                        " is not supported (bert_tf has absolute positions only)")
    eps = d.get("layer_norm_eps", LAYER_NORM_EPSILON)
    if not np.isclose(eps, LAYER_NORM_EPSILON, rtol=1e-6, atol=0):
        raise UserError(f"{source}: layer_norm_eps={eps} is not supported (bert_tf uses "
                        f"{LAYER_NORM_EPSILON})")
    if d.get("is_decoder") or d.get("add_cross_attention"):
        raise UserError(f"{source}: decoder BERT models (is_decoder/add_cross_attention) are "
                        "not supported")
    values = {k: d[k] for k in SAME_KEYS if k in d}
    values["hidden_act"] = activation_name(activation_meaning(d.get("hidden_act", "gelu"), "hf"),
                                           "bert_tf")
    return BertConfig.from_dict(values, source=source)


def config_to_hf(config: BertConfig, with_heads: bool) -> Dict[str, Any]:
    """A transformers config.json dict for `config`."""
    d = config.to_dict()
    d["hidden_act"] = activation_name(activation_meaning(config.hidden_act, "bert_tf"), "hf")
    d.update({
        "architectures": ["BertForPreTraining" if with_heads else "BertModel"],
        "model_type": "bert",
        "layer_norm_eps": LAYER_NORM_EPSILON,
        "pad_token_id": 0,
        "position_embedding_type": "absolute",
    })
    return dict(sorted(d.items()))


# ------------------------------------------------------------------ weights


def _load_torch(path: str) -> Dict[str, np.ndarray]:
    try:
        import torch  # Optional: only old-style pytorch_model.bin files need it.
    except ImportError:
        raise UserError(f"{path} needs torch to read: pip install torch, or convert the model "
                        "to model.safetensors") from None
    state = torch.load(path, map_location="cpu", weights_only=True)
    return {k: v.float().numpy() if v.is_floating_point() else v.numpy() for k, v in state.items()}


def load_tensors(directory: str) -> Dict[str, np.ndarray]:
    """All tensors of an HF directory, by their HF names (prefixes as stored).

    Raises:
        UserError: no weight file, or torch missing for pytorch_model.bin.
    """
    single = os.path.join(directory, SAFETENSORS_NAME)
    index = os.path.join(directory, SAFETENSORS_INDEX_NAME)
    if fileio.exists(single):
        return safetensors_io.load_file(single)
    if fileio.exists(index):
        with fileio.open_file(index, "r") as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        tensors: Dict[str, np.ndarray] = {}
        for shard in shards:
            tensors.update(safetensors_io.load_file(os.path.join(directory, shard)))
        return tensors
    if fileio.exists(os.path.join(directory, PYTORCH_NAME)):
        return _load_torch(os.path.join(directory, PYTORCH_NAME))
    raise UserError(f"{directory}: no {SAFETENSORS_NAME}, {SAFETENSORS_INDEX_NAME} or "
                    f"{PYTORCH_NAME}")


def _strip(name: str) -> str:
    name = name[len("bert."):] if name.startswith("bert.") else name
    # Old LayerNorm parameter names.
    if ".LayerNorm." in name:
        name = name.replace(".LayerNorm.gamma", ".LayerNorm.weight")
        name = name.replace(".LayerNorm.beta", ".LayerNorm.bias")
    return name


def read_config_dict(path: str) -> Dict[str, Any]:
    """The config.json of an HF directory (or of its weight file's directory), as a dict.

    Raises:
        UserError: no config.json, or not valid JSON.
    """
    directory = path if fileio.isdir(path) else os.path.dirname(path)
    config_file = os.path.join(directory, CONFIG_NAME)
    if not fileio.exists(config_file):
        raise UserError(f"{path}: no {CONFIG_NAME} (is it a Hugging Face model directory?)")
    with fileio.open_file(config_file, "r") as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as e:
            raise UserError(f"{config_file}: not valid JSON ({e.msg})") from None


def read_config(path: str) -> BertConfig:
    """The architecture of an HF BERT or ModernBERT directory (or its weight file), from its
    config.json.

    Raises:
        UserError: no config.json, not valid JSON, or neither a BERT nor a ModernBERT config.
    """
    directory = path if fileio.isdir(path) else os.path.dirname(path)
    d = read_config_dict(path)
    if hf_modernbert.is_modernbert(d):
        return hf_modernbert.config_from_hf(d, os.path.join(directory, CONFIG_NAME))
    return config_from_hf(d, os.path.join(directory, CONFIG_NAME))


def read(path: str, vocab_file: Optional[str] = None) -> ModelFiles:
    """Reads an HF BERT directory.

    Args:
        path: the directory (config.json + weights), or its weight file.
        vocab_file: default: vocab.txt in the directory (optional).

    Returns:
        The model; weights the directory lacks (e.g. no heads in a sentence-transformers
        model) are absent from `weights`.

    Raises:
        UserError: a missing or unknown config, a weight whose shape disagrees with it, a
            decoder weight that is not tied to the word embeddings, a vocabulary of another
            size.
    """
    directory = path if fileio.isdir(path) else os.path.dirname(path)
    d = read_config_dict(path)
    if hf_modernbert.is_modernbert(d):  # model_type "modernbert"
        return hf_modernbert.read(directory, d, load_tensors(directory), vocab_file)
    config = config_from_hf(d, os.path.join(directory, CONFIG_NAME))
    vocab_file = vocab_file or find_beside(directory, (VOCAB_NAME,))

    table = name_table(config.num_hidden_layers)
    by_hf = {v: k for k, v in table.items()}
    by_hf["cls.predictions.decoder.bias"] = "mlm/output_bias"  # the same parameter
    weights: Dict[str, np.ndarray] = {}
    stored_as: Dict[str, str] = {}  # canonical name -> name in the file, for messages
    unused: List[str] = []
    decoder = None
    for hf, value in load_tensors(directory).items():
        key = _strip(hf)
        if key == "embeddings.position_ids":
            continue  # A buffer (0..max_len-1), not a weight.
        if key == "cls.predictions.decoder.weight":
            decoder = value
            continue
        name = by_hf.get(key)
        if name is None:
            unused.append(hf)
            continue
        value = np.asarray(value, dtype=np.float32)
        stored_as[name] = hf
        weights[name] = np.ascontiguousarray(value.T) if _is_transposed(name) else value
    if not weights:
        raise UserError(f"{directory}: no BERT weights (embeddings.*, encoder.layer.*) found")
    check_shapes(weights, config, directory, source_name=stored_as.__getitem__,
                 source_shape=_hf_shape, config_label="config.json")
    if decoder is not None and "embeddings/word_embeddings" in weights:
        diff = float(np.max(np.abs(decoder - weights["embeddings/word_embeddings"])))
        if diff > 0:
            raise UserError(f"{directory}: cls.predictions.decoder.weight differs from the word "
                            f"embeddings (max |diff| {diff:.3g}); bert_tf ties them")
    report_unused(sorted(unused), directory)
    check_vocab(vocab_file, weights, directory)
    return ModelFiles(config, weights, vocab_file, directory)


def hf_tensors(weights: Mapping[str, np.ndarray], num_layers: int, base_prefix: str = ""
               ) -> Dict[str, np.ndarray]:
    """The Hugging Face tensors of canonical BERT `weights` (float32, Linear weights [out, in]).

    Args:
        weights: canonical names (`name_table`); names it lacks are left out.
        num_layers: the encoder's layers.
        base_prefix: before the encoder's and pooler's names: "bert." in a model with heads
            (BertForPreTraining, BertForSequenceClassification), "" in a BertModel. The MLM
            and NSP heads' `cls.` names take none.
    """
    tensors = {}
    for name, hf in name_table(num_layers).items():
        if name not in weights:
            continue
        value = np.asarray(weights[name], np.float32)
        if _is_transposed(name):
            value = np.ascontiguousarray(value.T)
        tensors[hf if _is_head(name) else base_prefix + hf] = value
    return tensors


def write(files: ModelFiles, output_dir: str, do_lower_case: Optional[bool] = None) -> str:
    """Writes an HF directory: config.json, model.safetensors and, with a vocabulary,
    vocab.txt and the tokenizer files (`hf_tokenizer_files`), so that transformers'
    AutoTokenizer gives bert_tf's ids.

    Args:
        files: the model.
        output_dir: a new directory.
        do_lower_case: the model's casing; None infers it from the vocabulary (uncased when
            no token but the bracketed specials has an upper-case letter).

    Returns:
        `output_dir`.

    Raises:
        UserError: `output_dir` exists and is not empty.
    """
    config = files.config
    if modern_config.is_modern(config):  # ModernBERT's layout and config.json
        return hf_modernbert.write(files, output_dir)
    with_heads = any(_is_head(n) for n in files.weights)
    tensors = hf_tensors(files.weights, config.num_hidden_layers,
                         "bert." if with_heads else "")
    with atomic_directory(output_dir) as tmp:
        safetensors_io.save_file(tensors, os.path.join(tmp, SAFETENSORS_NAME),
                                 metadata={"format": "pt"})
        with fileio.atomic_output(os.path.join(tmp, CONFIG_NAME), "wb") as f:
            f.write((json.dumps(config_to_hf(config, with_heads), indent=2) + "\n").encode())
        if files.vocab_file:
            copy_file(files.vocab_file, os.path.join(tmp, VOCAB_NAME))
            if do_lower_case is None:
                do_lower_case = infer_do_lower_case(tokenization.load_vocab(files.vocab_file))
            write_tokenizer_files(files.vocab_file, do_lower_case,
                                  config.max_position_embeddings, tmp)
    return output_dir
