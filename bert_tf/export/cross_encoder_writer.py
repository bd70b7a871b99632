"""A run_rerank cross-encoder as a Hugging Face sequence-classification folder with one label,
which sentence-transformers' CrossEncoder (and transformers' AutoModelFor
SequenceClassification) loads (`convert_checkpoint --to_format=cross_encoder`):

    config.json          the BERT keys (`hf_checkpoint.config_to_hf`), architectures
                         ["BertForSequenceClassification"], id2label {"0": "LABEL_0"} (one
                         label), and "sentence_transformers": {"activation_fn": Sigmoid}: so
                         `CrossEncoder.predict` returns sigmoid(logit), the `score` output of
                         the SavedModel's score signature (`export.classifier_serving`)
    model.safetensors    bert.* (encoder and pooler, `hf_checkpoint.hf_tensors`),
                         classifier.weight [1, hidden], classifier.bias [1]
    vocab.txt, tokenizer.json, tokenizer_config.json, special_tokens_map.json
                         the tokenizer (`hf_tokenizer_files`), its model_max_length the
                         reranker's max_seq_length: CrossEncoder truncates pairs where
                         training did (longest first)

    from sentence_transformers import CrossEncoder
    CrossEncoder("DIR").predict([("query", "passage"), ...])

Only a BERT head on the pooled output has this layout (run_rerank trains no other); a modern
(ModernBERT) or factorised-embedding encoder is refused in one line.
"""

from __future__ import annotations

import json
import os
from typing import Optional

import numpy as np

from bert_tf.core import fileio
from bert_tf.core.errors import UserError

FORMAT = "cross_encoder"
ARCHITECTURE = "BertForSequenceClassification"
ACTIVATION = "torch.nn.modules.activation.Sigmoid"  # sentence-transformers' own name for it


def write_cross_encoder(model_dir: str, output_dir: str, model=None) -> str:
    """Writes the folder (module docstring) of a run_rerank output directory, atomically.

    Args:
        model_dir: run_rerank's --output_dir (finetune_task.json says "reranker").
        output_dir: a new directory.
        model: the trained model in memory; None restores model_dir's latest checkpoint.

    Returns:
        `output_dir`.

    Raises:
        UserError: not a reranker's directory, a config the layout cannot hold, no
            checkpoint, an existing `output_dir`.
    """
    from bert_tf.export.task_serving import restore_finetuned
    from bert_tf.finetune import runner
    from bert_tf.interop import hf_checkpoint, safetensors_io
    from bert_tf.interop.hf_tokenizer_files import write_tokenizer_files
    from bert_tf.interop.model_files import (
        atomic_directory,
        check_new_directory,
        check_vocab_size,
        copy_file,
    )
    from bert_tf.modeling import modern_config
    from bert_tf.modeling.config import BertConfig
    from bert_tf.modeling.weight_map import encoder_weight_map, get_weights

    info = runner.read_task_file(model_dir)
    if not info.get("reranker"):
        raise UserError(f"{model_dir}: not a run_rerank output directory (its "
                        f"{runner.TASK_FILE} says no \"reranker\"); --to_format={FORMAT} "
                        "writes cross-encoders only")
    config = BertConfig.from_json_file(os.path.join(model_dir, "bert_config.json"))
    if modern_config.is_modern(config) or config.embedding_size not in (None,
                                                                        config.hidden_size):
        raise UserError(f"{model_dir}: a {FORMAT} folder holds BERT's layout "
                        "(BertForSequenceClassification); this encoder's config has no place "
                        "there")
    vocab_file = os.path.join(model_dir, "vocab.txt")
    check_vocab_size(vocab_file, config.vocab_size)
    check_new_directory(output_dir)  # before the (slow) restore
    if model is None:
        model = restore_finetuned(model_dir, "classifier", config, 1, "pooler", "bert")
    tensors = hf_checkpoint.hf_tensors(get_weights(encoder_weight_map(model.encoder)),
                                       config.num_hidden_layers, "bert.")
    kernel = np.asarray(model.head.kernel.numpy(), np.float32)  # [hidden, 1]
    tensors["classifier.weight"] = np.ascontiguousarray(kernel.T)
    tensors["classifier.bias"] = np.asarray(model.head.bias.numpy(), np.float32)
    hf_config = hf_checkpoint.config_to_hf(config, with_heads=False)
    hf_config.update({"architectures": [ARCHITECTURE], "id2label": {"0": "LABEL_0"},
                      "label2id": {"LABEL_0": 0},
                      "sentence_transformers": {"activation_fn": ACTIVATION}})
    max_length = int(info.get("max_seq_length") or config.max_position_embeddings)
    with atomic_directory(output_dir) as tmp:
        safetensors_io.save_file(tensors, os.path.join(tmp, hf_checkpoint.SAFETENSORS_NAME),
                                 metadata={"format": "pt"})
        with fileio.atomic_output(os.path.join(tmp, hf_checkpoint.CONFIG_NAME), "wb") as f:
            f.write((json.dumps(dict(sorted(hf_config.items())), indent=2) + "\n").encode())
        copy_file(vocab_file, os.path.join(tmp, hf_checkpoint.VOCAB_NAME))
        write_tokenizer_files(vocab_file, bool(info.get("do_lower_case", True)), max_length,
                              tmp)
    return output_dir


def convert(input_path: str, output_dir: str, do_lower_case: Optional[bool] = None) -> str:
    """`convert_checkpoint --to_format=cross_encoder --input=<run_rerank output_dir>`.

    Raises:
        UserError: as `write_cross_encoder`, or a --do_lower_case other than training's.
    """
    from bert_tf.finetune import runner

    trained = runner.read_task_file(input_path).get("do_lower_case", True)
    if do_lower_case is not None and do_lower_case != trained:
        raise UserError(f"--do_lower_case={str(do_lower_case).lower()}: {input_path} was "
                        f"trained with do_lower_case={str(trained).lower()}")
    write_cross_encoder(input_path, output_dir)
    print(f"wrote {FORMAT} folder to {output_dir}", flush=True)
    return output_dir
