"""A random-weight ModernBERT as a Hugging Face directory: the same start for both sides of
the ModernBERT fine-tuning parity run.

    .venv/bin/python benchmarks/finetuning/random_modernbert.py --vocab_file=VOCAB \\
        --output_dir=/tmp/modernbert_mini_hf
    .venv/bin/python benchmarks/finetuning/bench_finetune_parity.py --data_dir=/tmp/ft_small \\
        --tasks=sst2,mrpc --model_dir=/tmp/modernbert_mini_hf

Builds bert_tf's masked-LM model of `--bert_config` (default configs/modernbert_mini.json,
its vocab_size set to the vocabulary's), seeded, and writes it with `convert_checkpoint
--to_format=hf` (config.json, model.safetensors, vocab.txt): transformers reads it as
ModernBertForMaskedLM, and ModernBertForSequenceClassification takes its encoder and head.
Random weights suffice for parity: both sides start from the same ones.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab_file", required=True)
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--bert_config", default=os.path.join(REPO, "configs",
                                                              "modernbert_mini.json"))
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    import keras
    import tensorflow as tf

    from bert_tf.modeling.config import BertConfig
    from bert_tf.modeling.pretraining_model import BertPretrainingModel

    with open(args.vocab_file, encoding="utf-8") as f:
        vocab_size = sum(1 for _ in f)
    with open(args.bert_config, encoding="utf-8") as f:
        config = dict(json.load(f), vocab_size=vocab_size)
    work = tempfile.mkdtemp(prefix="random_modernbert_")
    try:
        with open(os.path.join(work, "bert_config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f, indent=1)
        shutil.copy(args.vocab_file, os.path.join(work, "vocab.txt"))
        keras.utils.set_random_seed(args.seed)
        model = BertPretrainingModel(BertConfig.from_dict(config), use_nsp=False)
        checkpoint = tf.train.Checkpoint(model=model).write(os.path.join(work, "ckpt-0"))
        subprocess.run([sys.executable, "-m", "bert_tf.convert_checkpoint",
                        "--from_format=bert_tf", "--to_format=hf", f"--input={checkpoint}",
                        f"--output={args.output_dir}",
                        f"--vocab_file={os.path.join(work, 'vocab.txt')}"], check=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
