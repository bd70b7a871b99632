"""Checks a bert_tf-trained ELECTRA against transformers: from raw text, through the exports.

Trains a tiny ELECTRA with `run_pretraining --objective=electra` (2 layers, 16-wide
embeddings projected to 32, a generator 16 wide, 30 steps at learning rate 0.01 on random
records), converts it with `convert_checkpoint --to_format=hf`, exports the serving
SavedModel with `bert_tf.export`, and runs three texts through the SavedModel's
`serving_default`. Then, in
the transformers environment, it loads the converted directories and prints the largest
differences at real positions:

* transformers' tokenizer (`AutoTokenizer` of `hf/discriminator`) against the SavedModel's ids;
* `ElectraModel`'s last hidden state against the SavedModel's `sequence_output`;
* `ElectraForPreTraining`'s logits and `ElectraForMaskedLM`'s MLM logits against bert_tf's
  discriminator and generator on the same ids (eager and SDPA attention).

Run from the repository root with bert_tf's environment; transformers runs in its own
(torch never enters bert_tf's):

    .venv/bin/python scripts/check_electra_parity.py [--work DIR] [--hidden_act gelu]
        [--hf_python benchmarks/.hf-venv/bin/python]
"""

from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
TEXTS = ["w1 w2 w3 w4 w5 w6 w7", "w9 W10 w11", "w100 w3"]

TRANSFORMERS_SIDE = r"""
import sys, numpy as np, torch, transformers
work = sys.argv[1]
o = np.load(f"{work}/ours.npz")
real = o["mask"].astype(bool)
tok = transformers.AutoTokenizer.from_pretrained(f"{work}/hf/discriminator")
ids = tok([str(t) for t in o["texts"]], padding=True, return_tensors="np")["input_ids"]
print("transformers' tokenizer gives the SavedModel's ids:", bool(np.array_equal(ids, o["ids"])))
t = {"input_ids": torch.from_numpy(o["ids"].astype(np.int64)),
     "attention_mask": torch.from_numpy(o["mask"].astype(np.int64)),
     "token_type_ids": torch.from_numpy(o["seg"].astype(np.int64))}
for impl in ("eager", "sdpa"):
    kw = {"attn_implementation": impl}
    base = transformers.ElectraModel.from_pretrained(f"{work}/hf/discriminator", **kw).eval()
    disc = transformers.ElectraForPreTraining.from_pretrained(f"{work}/hf/discriminator", **kw)
    gen = transformers.ElectraForMaskedLM.from_pretrained(f"{work}/hf/generator", **kw)
    with torch.no_grad():
        h = base(**t).last_hidden_state.numpy()
        d = disc.eval()(**t).logits.numpy()
        m = gen.eval()(**t).logits.numpy()
    diff = lambda a, b: float(np.abs(a[real] - b[real]).max())
    print(f"{impl}: max |diff| sequence_output {diff(h, o['sequence']):.2g}, discriminator "
          f"logits {diff(d, o['disc']):.2g} (|logit| <= {np.abs(d[real]).max():.2g}), "
          f"generator MLM logits {diff(m, o['mlm']):.2g} (|logit| <= {np.abs(m[real]).max():.2g})")
"""


def _run(*args: str) -> None:
    proc = subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True,
                          cwd=ROOT)
    if proc.returncode:
        sys.exit(f"{args[0]} failed:\n{proc.stderr[-3000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", default=None, help="new directory (default: a temporary one)")
    parser.add_argument("--hidden_act", default="gelu", help="the model's hidden_act")
    parser.add_argument("--hf_python", default=str(ROOT / "benchmarks" / ".hf-venv" / "bin"
                                                  / "python"))
    args = parser.parse_args()
    work = pathlib.Path(args.work or tempfile.mkdtemp(prefix="electra_parity_"))
    work.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(ROOT / "tests"))  # the tests' tiny records and config
    import numpy as np
    from _pretraining_helpers import (
        pretraining_flags,
        synthetic_examples,
        write_bert_config,
        write_tfrecords,
    )

    write_tfrecords(work / "train-0.tfrecord", synthetic_examples(64, seed=5,
                                                                  uneven_weights=False))
    write_tfrecords(work / "eval.tfrecord", synthetic_examples(8, seed=6))
    write_bert_config(work / "bert_config.json", embedding_size=16, num_hidden_layers=2,
                      hidden_act=args.hidden_act)
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(123)]
    (work / "vocab.txt").write_text("\n".join(words) + "\n")
    _run("bert_tf.run_pretraining", *pretraining_flags(
        work, work / "run", objective="electra", num_train_steps=30, save_checkpoints_steps=30,
        generator_hidden_fraction=0.5, learning_rate=1e-2))
    _run("bert_tf.convert_checkpoint", "--from_format=bert_tf", "--to_format=hf",
         f"--input={work / 'run'}", f"--output={work / 'hf'}",
         f"--vocab_file={work / 'vocab.txt'}")
    _run("bert_tf.export", f"--output_dir={work / 'run'}", f"--vocab_file={work / 'vocab.txt'}",
         "--do_lower_case=true", f"--export_dir={work / 'sm'}")

    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the SavedModel's tokenizer ops)

    from bert_tf.interop import electra_layout, formats, native_electra
    from bert_tf.modeling.electra import electra_weight_map
    from bert_tf.modeling.weight_map import set_weights

    served = tf.saved_model.load(str(work / "sm")).signatures["serving_default"](
        text_a=tf.constant(TEXTS))
    files = formats.read_model("bert_tf", str(work / "run"))
    model = native_electra.build_model(files.config, electra_layout.generator_width(files.weights))
    set_weights(electra_weight_map(model), files.weights, strict=False)
    inputs = {"input_ids": served["input_ids"].numpy(), "input_mask": served["input_mask"].numpy(),
              "segment_ids": served["segment_ids"].numpy()}
    ids = inputs["input_ids"]
    positions = np.tile(np.arange(ids.shape[1], dtype=np.int32), (ids.shape[0], 1))
    np.savez(work / "ours.npz", ids=ids, mask=inputs["input_mask"], seg=inputs["segment_ids"],
             sequence=served["sequence_output"].numpy(),
             disc=model.discriminator_logits(inputs).numpy(),
             mlm=model.generator_logits({**inputs, "masked_lm_positions": positions}).numpy(),
             texts=np.array(TEXTS))
    proc = subprocess.run([args.hf_python, "-c", TRANSFORMERS_SIDE, str(work)],
                          capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"the transformers side failed:\n{proc.stderr[-3000:]}")
    print(proc.stdout, end="")


if __name__ == "__main__":
    main()
