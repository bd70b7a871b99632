"""Tests for bert_tf.finetune.retrieval.st_folder: the real all-MiniLM-L6-v2 folder's
settings, the Transformer in a subfolder (the older layout), and one-line refusals."""

from __future__ import annotations

import json
import os

import pytest
from _pretraining_helpers import minilm_dir

from bert_tf.core.errors import UserError
from bert_tf.finetune.retrieval import st_folder

TRANSFORMER = "sentence_transformers.models.Transformer"
POOLING = "sentence_transformers.models.Pooling"


def test_minilm_folder():
    path = minilm_dir()
    assert st_folder.is_folder(path)
    folder = st_folder.read_folder(path)
    # modules.json lists 2_Normalize (a module without files: no folder on disk);
    # sentence_bert_config says do_lower_case false, the uncased tokenizer lower-cases.
    assert folder == st_folder.SentenceTransformerFolder(
        transformer_dir=path, pooling="mean", normalize=True, max_seq_length=256,
        do_lower_case=True)


def write_folder(root, modules, pooling=None, st_config=None, tokenizer=None) -> str:
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "modules.json"), "w") as f:
        json.dump([{"idx": i, "name": str(i), "path": p, "type": t}
                   for i, (p, t) in enumerate(modules)], f)
    for name, content in (("1_Pooling/config.json", pooling),
                          ("sentence_bert_config.json", st_config),
                          ("0_Transformer/tokenizer_config.json", tokenizer)):
        if content is not None:
            os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
            with open(os.path.join(root, name), "w") as f:
                json.dump(content, f)
    return os.fspath(root)


def test_transformer_in_a_subfolder_cls_without_normalize(tmp_path):
    path = write_folder(tmp_path / "m", [("0_Transformer", TRANSFORMER), ("1_Pooling", POOLING)],
                        pooling={"pooling_mode": "cls"}, tokenizer={"do_lower_case": False})
    folder = st_folder.read_folder(path)
    assert folder.transformer_dir == os.path.join(path, "0_Transformer")
    assert (folder.pooling, folder.normalize, folder.max_seq_length,
            folder.do_lower_case) == ("cls", False, None, False)
    assert not st_folder.is_folder(os.fspath(tmp_path))


@pytest.mark.parametrize("modules, pooling, message", [
    ([("", TRANSFORMER), ("1_Pooling", POOLING), ("2_Dense", "sentence_transformers.models.Dense")],
     {}, "modules.json: module 'sentence_transformers.models.Dense' is not supported"),
    ([("", TRANSFORMER)], None, "modules.json: no pooling module"),
    ([("", TRANSFORMER), ("1_Pooling", POOLING)], {"pooling_mode_lasttoken": True,
                                                  "pooling_mode_mean_tokens": False},
     "1_Pooling/config.json: pooling mode 'lasttoken' is not supported"),
])
def test_refusals_name_the_file(tmp_path, modules, pooling, message):
    path = write_folder(tmp_path / "m", modules, pooling=pooling)
    with pytest.raises(UserError, match="^" + path) as e:
        st_folder.read_folder(path)
    assert message in str(e.value) and "\n" not in str(e.value)
