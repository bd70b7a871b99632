"""Hugging Face ModernBERT directories (config.json model_type "modernbert"): read and write.

transformers' `ModernBertModel` / `ModernBertForMaskedLM` names, with or without the
`model.` prefix of the masked-LM model, and the canonical names (`modeling.modern_layout`):

    embeddings.tok_embeddings.weight      embeddings/word_embeddings
    embeddings.norm.{weight,bias}         embeddings/layer_norm/{gamma,beta}
    layers.N.attn_norm.*                  layer_N/attention/layer_norm/* (absent in layer 0)
    layers.N.attn.Wqkv.*                  layer_N/attention/qkv/* (query | key | value rows)
    layers.N.attn.Wo.*                    layer_N/attention/output/*
    layers.N.mlp_norm.*                   layer_N/output/layer_norm/*
    layers.N.mlp.Wi.*                     layer_N/intermediate/* (input rows, then gate rows)
    layers.N.mlp.Wo.*                     layer_N/output/*
    final_norm.*                          final_layer_norm/*
    head.dense.*, head.norm.*             mlm/transform/*, mlm/transform/layer_norm/*
    decoder.weight                        mlm/output_weights (untied only; [vocab, hidden])
    decoder.bias                          mlm/output_bias

Linear weights are [out, in], the transpose of the canonical kernels. The architecture is
always ModernBERT's: rotary positions (global and local theta), pre-LN with a final norm,
GLU feed-forward, no segments, no pooler; bert_tf computes it as `position_embedding_type`
"rope", `pre_layer_norm`, `hidden_act` "geglu", `type_vocab_size` 0, and the directory's
`global_attn_every_n_layers`, `local_attention` (window), `norm_eps`, biases (all on or
all off: `use_bias`) and `tie_word_embeddings`. A ModernBERT without a decoder bias reads with
a zero `mlm/output_bias`. Dropout: `attention_dropout` is attention_probs_dropout_prob,
`mlp_dropout` (and `embedding_dropout`, written the same) hidden_dropout_prob.

ModernBERT's tokenizer is a byte-level BPE `tokenizer.json`, which bert_tf does not use
(`hf_tokenizer_kind`): such a directory reads without a vocabulary.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Dict, List, Mapping, Optional

import numpy as np

from bert_tf.core import fileio
from bert_tf.core.errors import UserError
from bert_tf.interop import safetensors_io
from bert_tf.interop.model_files import (
    ModelFiles,
    atomic_directory,
    check_shapes,
    check_vocab,
    copy_file,
    find_beside,
    report_unused,
)
from bert_tf.modeling import modern_config
from bert_tf.modeling.config import BertConfig

MODEL_TYPE = "modernbert"
CONFIG_NAME = "config.json"
SAFETENSORS_NAME = "model.safetensors"
VOCAB_NAME = "vocab.txt"

# Keys that do not change the computation of a ModernBERT bert_tf can compute (others are
# named in one note line, and ignored).
_IGNORED_KEYS = frozenset({
    "_name_or_path", "architectures", "model_type", "transformers_version", "torch_dtype",
    "dtype", "pad_token_id", "bos_token_id", "eos_token_id", "sep_token_id", "cls_token_id",
    "classifier_pooling", "classifier_dropout", "deterministic_flash_attn",
    "sparse_prediction", "sparse_pred_ignore_index", "reference_compile", "id2label",
    "label2id", "num_labels", "problem_type", "initializer_cutoff_factor",
    "gradient_checkpointing", "repad_logits_with_grad", "position_embedding_type",
    "layer_norm_eps", "embedding_dropout", "output_hidden_states", "output_attentions",
    "return_dict", "tokenizer_class", "finetuning_task", "tie_word_embeddings",
    "max_position_embeddings", "initializer_range", "use_cache",
})
_SAME_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
              "intermediate_size", "max_position_embeddings", "initializer_range")
_BIAS_KEYS = ("attention_bias", "mlp_bias", "norm_bias", "classifier_bias")
_HANDLED = frozenset(_SAME_KEYS + _BIAS_KEYS + (
    "hidden_activation", "classifier_activation", "norm_eps", "local_attention",
    "global_attn_every_n_layers", "layer_types", "rope_parameters", "rope_scaling",
    "global_rope_theta", "local_rope_theta", "rope_theta", "attention_dropout", "mlp_dropout",
    "decoder_bias"))

_LAYER_MODULES = {
    "attention/layer_norm": "attn_norm", "attention/qkv": "attn.Wqkv",
    "attention/output": "attn.Wo", "output/layer_norm": "mlp_norm",
    "intermediate": "mlp.Wi", "output": "mlp.Wo",
}
_HEAD_MODULES = {"mlm/transform": "head.dense", "mlm/transform/layer_norm": "head.norm"}
_PARAMS = {"kernel": "weight", "bias": "bias", "gamma": "weight", "beta": "bias"}


def is_modernbert(d: Mapping[str, Any]) -> bool:
    """True for a ModernBERT config.json dict."""
    return d.get("model_type") == MODEL_TYPE


def name_table(config: BertConfig) -> Dict[str, str]:
    """{canonical name: HF name, the encoder's without the `model.` prefix}."""
    table = {"embeddings/word_embeddings": "embeddings.tok_embeddings.weight"}
    modules = {"embeddings/layer_norm": "embeddings.norm", "final_layer_norm": "final_norm"}
    modules.update({f"layer_{i}/{k}": f"layers.{i}.{v}"
                    for i in range(config.num_hidden_layers) for k, v in _LAYER_MODULES.items()})
    modules.update(_HEAD_MODULES)
    for ours, theirs in modules.items():
        norm = ours.endswith(("layer_norm", "final_layer_norm"))
        for p in ("gamma", "beta") if norm else ("kernel", "bias"):
            table[f"{ours}/{p}"] = f"{theirs}.{_PARAMS[p]}"
    table["mlm/output_weights"] = "decoder.weight"
    table["mlm/output_bias"] = "decoder.bias"
    return table


def _is_head(name: str) -> bool:
    return name.startswith(("mlm/", "nsp/"))


# ------------------------------------------------------------------ config


def _layer_pattern(d: Mapping[str, Any], layers: int, source: str) -> int:
    """global_attn_every_n_layers from layer_types (or the key), checked against the rule
    "layer i is global iff i % n == 0"."""
    types = d.get("layer_types")
    every = d.get("global_attn_every_n_layers")
    if types is not None:
        if len(types) != layers or any(t not in ("full_attention", "sliding_attention")
                                       for t in types):
            raise UserError(f"{source}: layer_types must list full_attention or "
                            f"sliding_attention for each of the {layers} layers")
        full = [i for i, t in enumerate(types) if t == "full_attention"]
        if every is None:
            every = full[1] if len(full) > 1 else (1 if len(full) == layers else layers)
    every = 3 if every is None else int(every)
    pattern = ["sliding_attention" if i % every else "full_attention" for i in range(layers)]
    if types is not None and list(types) != pattern:
        raise UserError(f"{source}: layer_types {list(types)} is not every {every}-th layer "
                        "global (the only pattern bert_tf computes)")
    return every


def _rope_thetas(d: Mapping[str, Any], source: str) -> tuple:
    if d.get("rope_scaling"):
        raise UserError(f"{source}: rope_scaling is not supported (bert_tf computes default "
                        "RoPE only)")
    params = d.get("rope_parameters") or {}
    thetas = []
    for layer_type, old_key, default in (("full_attention", "global_rope_theta", 160000.0),
                                         ("sliding_attention", "local_rope_theta", 10000.0)):
        p = params.get(layer_type) or {}
        if p.get("rope_type", "default") != "default":
            raise UserError(f"{source}: rope_type {p['rope_type']!r} is not supported "
                            "(bert_tf computes default RoPE only)")
        thetas.append(float(p.get("rope_theta", d.get(old_key, default))))
    return tuple(thetas)


def config_from_hf(d: Mapping[str, Any], source: str) -> BertConfig:
    """BertConfig from a transformers ModernBERT config.json dict.

    Raises:
        UserError: not a ModernBERT config, or an option bert_tf does not compute (mixed
            biases, another activation, RoPE scaling, an irregular layer pattern).
    """
    if not is_modernbert(d):
        raise UserError(f"{source}: model_type is {d.get('model_type')!r}, not {MODEL_TYPE!r}")
    unknown = sorted(k for k in d if k not in _HANDLED and k not in _IGNORED_KEYS)
    if unknown:
        print(f"note: {source}: ignored config.json keys: {', '.join(unknown)}",
              file=sys.stderr, flush=True)
    for key in ("hidden_activation", "classifier_activation"):
        if d.get(key, "gelu") != "gelu":
            raise UserError(f"{source}: {key}={d[key]!r} is not supported (bert_tf computes "
                            "ModernBERT's \"gelu\", the erf GELU, gated in the feed-forward)")
    biases = {k: bool(d.get(k, False)) for k in _BIAS_KEYS}
    if len(set(biases.values())) > 1:
        raise UserError(f"{source}: biases must be all on or all off for bert_tf's use_bias, "
                        f"got {', '.join(f'{k}={v}' for k, v in biases.items())}")
    layers = int(d.get("num_hidden_layers", 22))
    every = _layer_pattern(d, layers, source)
    global_theta, local_theta = _rope_thetas(d, source)
    values: Dict[str, Any] = {k: d[k] for k in _SAME_KEYS if k in d}
    values.update(
        hidden_act="geglu", type_vocab_size=0, position_embedding_type="rope",
        rope_theta=global_theta, local_rope_theta=local_theta if every > 1 else None,
        pre_layer_norm=True, norm_eps=float(d.get("norm_eps", 1e-5)),
        use_bias=biases["attention_bias"], global_attn_every_n_layers=every,
        local_attention_window=int(d.get("local_attention", 128)) if every > 1 else None,
        tie_word_embeddings=bool(d.get("tie_word_embeddings", True)),
        hidden_dropout_prob=float(d.get("mlp_dropout", 0.0)),
        attention_probs_dropout_prob=float(d.get("attention_dropout", 0.0)))
    return BertConfig.from_dict(values, source=source)


def check_writable(config: BertConfig) -> None:
    """Raises UserError unless `config` is a ModernBERT architecture."""
    wrong = [f"{k}={getattr(config, k)!r}" for k, want in (
        ("position_embedding_type", "rope"), ("pre_layer_norm", True), ("hidden_act", "geglu"),
        ("type_vocab_size", 0)) if getattr(config, k) != want]
    if config.embedding_width != config.hidden_size:
        wrong.append(f"embedding_size={config.embedding_size!r}")
    if wrong:
        raise UserError("a Hugging Face ModernBERT directory needs position_embedding_type "
                        "\"rope\", pre_layer_norm, hidden_act \"geglu\", type_vocab_size 0 and no "
                        "embedding projection; "
                        f"this config has {', '.join(wrong)}")


def config_to_hf(config: BertConfig, with_heads: bool,
                 special_ids: Optional[Mapping[str, Optional[int]]] = None) -> Dict[str, Any]:
    """A transformers ModernBERT config.json dict for `config` (`check_writable` first)."""
    every = config.global_attn_every_n_layers
    local_theta = config.local_rope_theta if config.local_rope_theta is not None \
        else config.rope_theta
    types = ["sliding_attention" if modern_config.is_local_layer(config, i)
             else "full_attention" for i in range(config.num_hidden_layers)]
    d: Dict[str, Any] = {k: getattr(config, k) for k in _SAME_KEYS}
    d.update({
        "architectures": ["ModernBertForMaskedLM" if with_heads else "ModernBertModel"],
        "model_type": MODEL_TYPE, "hidden_activation": "gelu", "classifier_activation": "gelu",
        "norm_eps": config.norm_eps, "global_attn_every_n_layers": every,
        # With every layer global the window is unused; transformers still wants one.
        "local_attention": config.local_attention_window or 128, "layer_types": types,
        "rope_parameters": {
            "full_attention": {"rope_type": "default", "rope_theta": config.rope_theta},
            "sliding_attention": {"rope_type": "default", "rope_theta": local_theta}},
        "global_rope_theta": config.rope_theta, "local_rope_theta": local_theta,
        "decoder_bias": True, "tie_word_embeddings": config.tie_word_embeddings,
        "attention_dropout": config.attention_probs_dropout_prob,
        "mlp_dropout": config.hidden_dropout_prob,
        "embedding_dropout": config.hidden_dropout_prob, "classifier_pooling": "cls",
    })
    d.update({k: config.use_bias for k in _BIAS_KEYS})
    d.update(special_ids or special_token_ids(None))
    return dict(sorted(d.items()))


def special_token_ids(vocab_file: Optional[str]) -> Dict[str, Optional[int]]:
    """pad/cls/sep/bos/eos ids from a WordPiece vocabulary's [PAD], [CLS], [SEP]; without
    one, None (transformers' defaults are ModernBERT's ids, outside a smaller vocabulary),
    and 0 for the pad (transformers' embedding needs a padding id inside the vocabulary)."""
    ids: Dict[str, Optional[int]] = {"pad_token_id": 0, "cls_token_id": None,
                                     "bos_token_id": None, "sep_token_id": None,
                                     "eos_token_id": None}
    if not vocab_file:
        return ids
    from bert_tf.core.tokenization import load_vocab

    vocab = load_vocab(vocab_file, required_tokens=())
    for key, token in (("pad_token_id", "[PAD]"), ("cls_token_id", "[CLS]"),
                       ("bos_token_id", "[CLS]"), ("sep_token_id", "[SEP]"),
                       ("eos_token_id", "[SEP]")):
        if token in vocab:
            ids[key] = vocab[token]
    return ids


# ------------------------------------------------------------------ weights


def read(directory: str, config_dict: Mapping[str, Any], tensors: Mapping[str, np.ndarray],
         vocab_file: Optional[str] = None) -> ModelFiles:
    """A ModernBERT directory's model (`hf_checkpoint.read` calls this for model_type
    "modernbert" with the directory's config.json dict and tensors).

    Raises:
        UserError: a config bert_tf cannot compute, a weight whose shape disagrees with it,
            or a vocabulary of another size.
    """
    config_file = os.path.join(directory, CONFIG_NAME)
    config = config_from_hf(config_dict, config_file)
    vocab_file = vocab_file or find_beside(directory, (VOCAB_NAME,))
    by_hf = {v: k for k, v in name_table(config).items()}
    weights: Dict[str, np.ndarray] = {}
    stored_as: Dict[str, str] = {}
    unused: List[str] = []
    for hf, value in tensors.items():
        key = hf[len("model."):] if hf.startswith("model.") else hf
        name = by_hf.get(key)
        if name is None or (name == "mlm/output_weights" and config.tie_word_embeddings):
            if name is None:
                unused.append(hf)
            continue  # A tied decoder.weight, when stored, is the word embeddings.
        value = np.asarray(value, dtype=np.float32)
        stored_as[name] = hf
        weights[name] = np.ascontiguousarray(value.T) if name.endswith("/kernel") else value
    if "embeddings/word_embeddings" not in weights:
        raise UserError(f"{directory}: no ModernBERT weights (embeddings.tok_embeddings.weight)")
    if any(_is_head(n) for n in weights) and "mlm/output_bias" not in weights and \
            not config_dict.get("decoder_bias", True):
        weights["mlm/output_bias"] = np.zeros((config.vocab_size,), np.float32)
    check_shapes(weights, config, directory, source_name=stored_as.get,
                 source_shape=lambda n, s: s[::-1] if n.endswith("/kernel") else s,
                 config_label="config.json")
    report_unused(sorted(unused), directory)
    check_vocab(vocab_file, weights, directory)
    return ModelFiles(config, weights, vocab_file, directory)


def write(files: ModelFiles, output_dir: str) -> str:
    """Writes a ModernBERT directory: config.json, model.safetensors (the encoder under
    `model.` when the model has its MLM head, as ModernBertForMaskedLM; bare otherwise, as
    ModernBertModel) and vocab.txt when there is one (transformers' ModernBERT tokenizer
    is not written: the vocabulary is WordPiece).

    Raises:
        UserError: not a ModernBERT architecture (`check_writable`), or `output_dir` exists
            and is not empty.
    """
    config = files.config
    check_writable(config)
    with_heads = any(n.startswith("mlm/") for n in files.weights)
    tensors = {}
    for name, hf in name_table(config).items():
        if name not in files.weights:
            continue
        value = np.asarray(files.weights[name], np.float32)
        if name.endswith("/kernel"):
            value = np.ascontiguousarray(value.T)
        if with_heads and not _is_head(name):
            hf = "model." + hf
        tensors[hf] = value
    with atomic_directory(output_dir) as tmp:
        safetensors_io.save_file(tensors, os.path.join(tmp, SAFETENSORS_NAME),
                                 metadata={"format": "pt"})
        hf_config = config_to_hf(config, with_heads, special_token_ids(files.vocab_file))
        with fileio.atomic_output(os.path.join(tmp, CONFIG_NAME), "wb") as f:
            f.write((json.dumps(hf_config, indent=2) + "\n").encode())
        if files.vocab_file:
            copy_file(files.vocab_file, os.path.join(tmp, VOCAB_NAME))
    return output_dir
