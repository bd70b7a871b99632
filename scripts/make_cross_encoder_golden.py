"""Writes tests/data/cross_encoder_tiny/: a tiny random run_rerank model, its cross-encoder
folder, and sentence-transformers' CrossEncoder scores of it.

The reference of `tests/test_cross_encoder_writer.py`:

* `run/`: what a run_rerank --output_dir holds (bert_config.json, vocab.txt, label_list.json,
  finetune_task.json, the checkpoint ckpt-1) for a 2-layer BERT (hidden 32, 2 heads,
  intermediate 64, the small vocab.txt below, max_seq_length 24) with one-logit classifier,
  every weight random (LayerNorm gains 1 + 0.2 N(0, 1), the rest 0.2 N(0, 1)) so that a
  misplaced or untransposed weight shows;
* `hf/`: `bert_tf.export.cross_encoder_writer.write_cross_encoder` of `run/`;
* `golden.json`: the (query, passage) pairs, `CrossEncoder("hf/").predict(pairs)` (the sigmoid
  of the logit: the folder's activation) and the logits
  (`activation_fn=torch.nn.Identity()`), with the sentence-transformers, transformers and
  torch versions. One pair is longer than 24 tokens, so the truncation (longest first) is
  compared too.

Run from bert_tf's environment; the scoring runs in the transformers venv
(benchmarks/.hf-venv, made by benchmarks/hf_env.sh), as a subprocess of this script:

    .venv/bin/python scripts/make_cross_encoder_golden.py [--output DIR]

The same seed writes the same run/ and hf/ tensors again.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
HF_PYTHON = ROOT / "benchmarks" / ".hf-venv" / "bin" / "python"
MAX_SEQ_LENGTH = 24
PAIRS = [
    ("what do cats eat", "cats eat fish and mice"),
    ("what do cats eat", "the weather is sunny today"),
    ("Café opening hours", "the café opens at nine and closes at five"),
    ("where is the zyxwv river", "the river runs through the city"),
    ("how long do dogs live",
     "dogs live ten to thirteen years , small dogs often live longer than large dogs , and "
     "mixed dogs live longer than pure dogs of the same size"),
    ("sunny", "sunny"),
]
CONFIG = {"vocab_size": None, "hidden_size": 32, "num_hidden_layers": 2,
          "num_attention_heads": 2, "intermediate_size": 64, "hidden_act": "gelu",
          "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
          "max_position_embeddings": 64, "type_vocab_size": 2, "initializer_range": 0.02}


def vocabulary() -> list:
    """The specials, then every lower-cased word of the pairs (accents stripped) but
    'zyxwv' (an unknown word: [UNK]), then a few continuation pieces."""
    from bert_tf.core.tokenization import BasicTokenizer

    basic = BasicTokenizer(do_lower_case=True)
    words = []
    for pair in PAIRS:
        for text in pair:
            for word in basic.tokenize(text):
                if word != "zyxwv" and word not in words:
                    words.append(word)
    return ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words + ["##s", "##ing", "##ed"]


def write_run(run_dir: pathlib.Path, seed: int) -> None:
    import numpy as np
    import tensorflow as tf

    from bert_tf.finetune import heads, runner
    from bert_tf.finetune.label_list import LABEL_LIST_FILE, save_label_list
    from bert_tf.modeling.config import BertConfig
    from bert_tf.modeling.weight_map import encoder_weight_map, set_weights

    run_dir.mkdir(parents=True)
    vocab = vocabulary()
    (run_dir / "vocab.txt").write_text("".join(t + "\n" for t in vocab), encoding="utf-8")
    config = BertConfig.from_dict({**CONFIG, "vocab_size": len(vocab)})
    config.to_json_file(os.fspath(run_dir / "bert_config.json"))
    model = heads.classifier(config, 1, "bert", "pooler")
    rng = np.random.default_rng(seed)
    weights = encoder_weight_map(model.encoder)
    values = {}
    for name, weight in weights.items():
        noise = rng.standard_normal(weight.shape).astype(np.float32)
        values[name] = 1.0 + 0.2 * noise if name.endswith("/gamma") else 0.2 * noise
    set_weights(weights, values)
    model.head.kernel.assign(0.5 * rng.standard_normal((32, 1)).astype(np.float32))
    model.head.bias.assign(np.array([0.3], np.float32))
    tf.train.CheckpointManager(tf.train.Checkpoint(model=model), os.fspath(run_dir),
                               max_to_keep=1).save(checkpoint_number=1)
    save_label_list(os.fspath(run_dir / LABEL_LIST_FILE), None)
    info = {"kind": "classifier", "num_labels": 1, "do_lower_case": True,
            "max_seq_length": MAX_SEQ_LENGTH, "classifier_readout": "pooler",
            "reranker": True}
    (run_dir / runner.TASK_FILE).write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")


def score(hf_dir: str) -> dict:
    """CrossEncoder's scores and logits of PAIRS (runs in the transformers venv)."""
    import sentence_transformers
    import torch
    import transformers
    from sentence_transformers import CrossEncoder

    model = CrossEncoder(hf_dir, device="cpu")
    scores = model.predict(PAIRS, batch_size=len(PAIRS), convert_to_numpy=True)
    logits = model.predict(PAIRS, batch_size=len(PAIRS), convert_to_numpy=True,
                           activation_fn=torch.nn.Identity())
    return {"pairs": PAIRS, "max_seq_length": MAX_SEQ_LENGTH,
            "scores": [float(x) for x in scores], "logits": [float(x) for x in logits],
            "versions": {"sentence_transformers": sentence_transformers.__version__,
                         "transformers": transformers.__version__,
                         "torch": torch.__version__}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--output", default=os.fspath(ROOT / "tests" / "data" /
                                                      "cross_encoder_tiny"))
    parser.add_argument("--seed", type=int, default=51)
    parser.add_argument("--score", help=argparse.SUPPRESS)  # the subprocess's mode
    args = parser.parse_args()
    if args.score:
        print(json.dumps(score(args.score)))
        return
    from bert_tf.export.cross_encoder_writer import write_cross_encoder

    out = pathlib.Path(args.output)
    if out.exists():
        shutil.rmtree(out)
    write_run(out / "run", args.seed)
    write_cross_encoder(os.fspath(out / "run"), os.fspath(out / "hf"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run([os.fspath(HF_PYTHON), __file__, "--score", os.fspath(out / "hf")],
                          check=True, capture_output=True, text=True, env=env)
    golden = json.loads(done.stdout.strip().splitlines()[-1])
    (out / "golden.json").write_text(json.dumps(golden, indent=2) + "\n")
    print(f"wrote {out}: scores {golden['scores']}", file=sys.stderr)


if __name__ == "__main__":
    main()
