"""A random-weight ModernBERT or ELECTRA as a Hugging Face directory: the same start for
both sides of the fine-tuning parity runs of those model types.

    .venv/bin/python benchmarks/finetuning/random_hf_model.py --kind=modernbert \\
        --vocab_file=VOCAB --output_dir=/tmp/modernbert_mini_hf
    .venv/bin/python benchmarks/finetuning/random_hf_model.py --kind=electra \\
        --vocab_file=VOCAB --output_dir=/tmp/electra_mini_hf        # discriminator/, generator/
    .venv/bin/python benchmarks/finetuning/bench_finetune_parity.py --data_dir=/tmp/ft_small \\
        --tasks=sst2,mrpc --model_dir=/tmp/modernbert_mini_hf       # or .../discriminator

Builds bert_tf's model of `--bert_config` (default configs/modernbert_mini.json for
`--kind=modernbert`, configs/bert_config_electra_mini.json for `--kind=electra`; vocab_size
set to the vocabulary's), seeded, and writes it with `convert_checkpoint --to_format=hf`:
a ModernBERT as config.json, model.safetensors and vocab.txt (transformers reads it as
ModernBertForMaskedLM; ModernBertForSequenceClassification takes its encoder), an ELECTRA
as discriminator/ (ElectraForPreTraining; ElectraForSequenceClassification takes its
encoder) and generator/ (ElectraForMaskedLM, a quarter of the width). Random weights
suffice for parity: both sides start from the same ones. The weights come from Keras'
seeded initialisers, so the same seed writes the same files on one machine, and the parity
runs (keyed by the directory's contents) are found again in the ledger; another CPU's
vectorised math may differ in the last bit, and its runs are then keyed anew.
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
DEFAULT_CONFIG = {"modernbert": os.path.join(REPO, "configs", "modernbert_mini.json"),
                  "electra": os.path.join(REPO, "configs", "bert_config_electra_mini.json")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab_file", required=True)
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--kind", choices=sorted(DEFAULT_CONFIG), default="modernbert")
    parser.add_argument("--bert_config", help="default: the kind's config (module docstring)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    import keras
    import tensorflow as tf

    from bert_tf.modeling.config import BertConfig
    from bert_tf.modeling.electra import ElectraPretrainingModel
    from bert_tf.modeling.pretraining_model import BertPretrainingModel

    with open(args.vocab_file, encoding="utf-8") as f:
        vocab_size = sum(1 for _ in f)
    with open(args.bert_config or DEFAULT_CONFIG[args.kind], encoding="utf-8") as f:
        config = dict(json.load(f), vocab_size=vocab_size)
    work = tempfile.mkdtemp(prefix=f"random_{args.kind}_")
    try:
        with open(os.path.join(work, "bert_config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f, indent=1)
        shutil.copy(args.vocab_file, os.path.join(work, "vocab.txt"))
        keras.utils.set_random_seed(args.seed)
        if args.kind == "electra":
            model = ElectraPretrainingModel(BertConfig.from_dict(config))
        else:
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
