"""Checks bert_tf's ELECTRA classifier against transformers' ElectraForSequenceClassification.

The same weights give the same logits before training: transformers loads the tiny
ElectraForPreTraining folder of tests/data/electra_tiny (2 layers, 16-wide embeddings
projected to 32) as an ElectraForSequenceClassification of 3 labels, its classification head
seeded at random, and scores the golden ids (tests/data/electra_tiny/golden.npz). bert_tf
warm-starts the fine-tuning model from the same folder as run_classifier does
(`warm_start.resolve`: --classifier_head=auto picks `ElectraClassifier`), copies the head's
classifier.dense and classifier.out_proj into it, and prints the largest logit difference.

Run from the repository root with bert_tf's environment; transformers runs in its own:

    .venv/bin/python scripts/check_electra_classifier_parity.py \
        [--hf_python benchmarks/.hf-venv/bin/python]
"""

from __future__ import annotations

import argparse
import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "data" / "electra_tiny"

TRANSFORMERS_SIDE = r"""
import sys, numpy as np, torch, transformers
folder, golden, out = sys.argv[1:4]
torch.manual_seed(0)
model = transformers.ElectraForSequenceClassification.from_pretrained(
    folder, num_labels=3, attn_implementation="eager").eval()
with torch.no_grad():  # a head of visible size: the default init is 0.02 wide
    for p in model.classifier.parameters():
        p.normal_(0, 0.5)
g = np.load(golden)
t = {k: torch.from_numpy(g[k].astype(np.int64))
     for k in ("input_ids", "attention_mask", "token_type_ids")}
with torch.no_grad():
    logits = model(**t).logits.numpy()
c = model.classifier
arr = lambda p: p.detach().numpy()
np.savez(out, logits=logits, dense_w=arr(c.dense.weight), dense_b=arr(c.dense.bias),
         out_w=arr(c.out_proj.weight), out_b=arr(c.out_proj.bias))
print("transformers", transformers.__version__, "logits", logits.shape)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hf_python", default=str(ROOT / "benchmarks" / ".hf-venv" / "bin" /
                                                   "python"))
    args = parser.parse_args()
    import numpy as np

    from bert_tf.finetune import warm_start
    from bert_tf.finetune.classification.classification_task import (
        ClassificationSettings,
        ClassificationTask,
    )

    with tempfile.TemporaryDirectory() as work:
        folder = pathlib.Path(work) / "discriminator"
        shutil.copytree(TINY / "discriminator", folder)
        config = __import__("json").loads((folder / "config.json").read_text())
        words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        words += [f"w{i}" for i in range(config["vocab_size"] - len(words))]
        (folder / "vocab.txt").write_text("\n".join(words) + "\n")
        theirs = pathlib.Path(work) / "theirs.npz"
        subprocess.run([args.hf_python, "-c", TRANSFORMERS_SIDE, str(folder),
                        str(TINY / "golden.npz"), str(theirs)], check=True)
        t = np.load(theirs)
        init = warm_start.resolve(str(folder), "", "")
        task = ClassificationTask(ClassificationSettings(task_name="sst2", data_dir=""))
        task.label_list = ["a", "b", "c"]
        task.settle_head(init.kind, str(pathlib.Path(work) / "out"))
        model = task.build_model(init.config)
        warm_start.load_encoder_weights(model, init.files)
        model.head_hidden.kernel.assign(t["dense_w"].T)
        model.head_hidden.bias.assign(t["dense_b"])
        model.head.kernel.assign(t["out_w"].T)
        model.head.bias.assign(t["out_b"])
        g = np.load(TINY / "golden.npz")
        ours = model({"input_ids": g["input_ids"].astype("int32"),
                      "input_mask": g["attention_mask"].astype("int32"),
                      "segment_ids": g["token_type_ids"].astype("int32")})["logits"].numpy()
        print(f"head {task.head} ({type(model).__name__}); max |diff| of the classification "
              f"logits {float(np.abs(ours - t['logits']).max()):.2g} "
              f"(|logit| <= {float(np.abs(t['logits']).max()):.2g})")


if __name__ == "__main__":
    sys.exit(main())
