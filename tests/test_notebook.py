"""Executes notebooks/pretrain_bert_colab_tpu.ipynb headless on CPU (smoke sizes), so it cannot
rot."""

import os
import re

import ipykernel  # noqa: F401  (the kernel nbclient starts; all three are in the test extra)
import nbclient
import nbformat
import pytest
from _pretraining_helpers import SITE_DIR

from bert_tf.core.tokenization import FullTokenizer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOK = os.path.join(REPO, "notebooks", "pretrain_bert_colab_tpu.ipynb")


def _text(cell) -> str:
    return "".join(o.get("text", "") or "".join(o.get("data", {}).get("text/plain", ""))
                   for o in cell.get("outputs", []))


def test_notebook_structure():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    # Parameters first, in one cell tagged for papermill.
    assert "parameters" in code[0].metadata.get("tags", [])
    assert sum("parameters" in c.metadata.get("tags", []) for c in nb.cells) == 1
    source = "\n".join(c.source for c in nb.cells)
    for needle in ("TPUClusterResolver", "TPUs cannot read local files", "gs://",
                   "data_tools.build_vocab", "data_tools.create_pretraining_data",
                   "bert_tf.run_pretraining", "steps_per_loop", "bert_tf.export", "fill_mask",
                   "BERT_TF_NOTEBOOK_SMOKE"):
        assert needle in source, needle
    assert all(not c.get("outputs") for c in code), "commit the notebook without outputs"


@pytest.mark.slow  # runs the whole pipeline on a tiny model (~1-2 minutes on 2 cores)
def test_notebook_runs_on_cpu(tmp_path):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    env_before = dict(os.environ)
    os.environ.update({"BERT_TF_NOTEBOOK_SMOKE": "1", "BERT_TF_NOTEBOOK_WORKDIR": str(tmp_path),
                       "TF_CPP_MIN_LOG_LEVEL": "2",
                       # Not tests/_site: the kernel keeps Grappler on, as users run it.
                       "PYTHONPATH": os.pathsep.join([REPO] + [
                           p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                           if p and p != os.fspath(SITE_DIR)])})
    try:
        client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                         resources={"metadata": {"path": REPO}})
        client.execute()
    finally:
        os.environ.clear()
        os.environ.update(env_before)
    outputs = {i: _text(c) for i, c in enumerate(nb.cells) if c.cell_type == "code"}
    everything = "\n".join(outputs.values())
    assert "mode: cpu" in everything
    # Every stage left its product in the work dir.
    assert (tmp_path / "vocab.txt").read_text().count("\n") == 2000
    assert (tmp_path / "data" / "train.tfrecord").stat().st_size > 0
    assert (tmp_path / "pretrain" / "ckpt-6.index").exists()
    results = (tmp_path / "pretrain" / "eval_results.txt").read_text()
    assert "masked_lm_accuracy" in results and "global_step = 6" in results
    exports = os.listdir(tmp_path / "export" / "bert")
    assert len(exports) == 1 and exports[0].isdigit()
    # The last cell filled the mask with 5 candidates and probabilities.
    assert "signatures: ['fill_mask', 'serve_ids', 'serve_text_pair', 'serving_default']" \
        in everything
    match = re.search(r"\[MASK\] at position (\d+): (.*)", everything)
    assert match, everything[-2000:]
    # [CLS] + the WordPiece tokens before the mask, with the vocabulary the notebook learned.
    tokenizer = FullTokenizer(str(tmp_path / "vocab.txt"), do_lower_case=True)
    assert int(match.group(1)) == 1 + len(tokenizer.tokenize("the capital of france is"))
    candidates = re.findall(r"(\S+) \((0\.\d+)\)", match.group(2))
    assert len(candidates) == 5
    scores = [float(s) for _, s in candidates]
    assert scores == sorted(scores, reverse=True)
    assert "pooled_output: (1, 32)" in everything
