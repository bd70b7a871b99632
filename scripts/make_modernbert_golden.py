"""Writes tests/data/modernbert_tiny/: a tiny random ModernBERT and transformers' outputs.

The reference for `tests/test_hf_modernbert.py`: transformers' `ModernBertForMaskedLM` with a
3-layer, 48-wide config (4 heads, intermediate 64, vocabulary 256, layer 0 global and layers
1-2 local with a window of 6, so that keys more than 3 positions away are masked in the
test's 16-token rows), every weight random (LayerNorm gains around 1, the decoder bias
non-zero, so that a misplaced weight shows), saved with `save_pretrained` (safetensors),
and `golden.npz`: three id rows with padding (lengths 16, 11 and 5), their attention mask,
the last hidden state of `ModernBertModel` and the MLM logits of every position, computed
with the eager attention (checked against SDPA's here).

`golden_classifier.npz` is the reference for the fine-tuning head
(`tests/test_modern_classifier.py`): `ModernBertForSequenceClassification` loaded from that
folder with 3 labels (its `head.dense` and `head.norm` come from the MLM model, as in any
fine-tuning from a ModernBERT checkpoint), its new `classifier` set from a seeded
generator, and its logits on the same rows with `classifier_pooling` "cls" and "mean".
`--classifier_only` writes that file alone from an existing folder.

Needs torch and transformers (not bert_tf's environment):

    benchmarks/.hf-venv/bin/python scripts/make_modernbert_golden.py [--output DIR]
"""

from __future__ import annotations

import argparse
import os
import pathlib

import numpy as np
import torch
import transformers

ROOT = pathlib.Path(__file__).resolve().parent.parent
SEQ_LEN, LENGTHS = 16, (16, 11, 5)

CONFIG = dict(
    vocab_size=256, hidden_size=48, intermediate_size=64, num_hidden_layers=3,
    num_attention_heads=4, global_attn_every_n_layers=3, local_attention=6,
    max_position_embeddings=64, global_rope_theta=160000.0, local_rope_theta=10000.0,
    norm_eps=1e-5, pad_token_id=0, bos_token_id=1, cls_token_id=1, eos_token_id=2,
    sep_token_id=2, hidden_activation="gelu", classifier_activation="gelu",
)


def _randomize(model: torch.nn.Module, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=generator)
            if "norm" in name:  # LayerNorm gains
                p.copy_(1.0 + 0.2 * noise)
            else:
                p.copy_(0.2 * noise)


def _inputs(seed: int):
    rng = np.random.default_rng(seed)
    ids = np.zeros((len(LENGTHS), SEQ_LEN), np.int64)
    mask = np.zeros_like(ids)
    for row, n in enumerate(LENGTHS):
        # Ids from 5 on: tests/test_hf_modernbert.py writes them as the words "w5", "w6", ...
        # of a WordPiece vocabulary whose ids 0-4 are [PAD], [CLS], [SEP], [UNK] and [MASK].
        ids[row, :n] = rng.integers(5, CONFIG["vocab_size"], n)
        ids[row, 0], ids[row, n - 1] = 1, 2  # [CLS] ... [SEP], then padding id 0
        mask[row, :n] = 1
    return ids, mask


def classifier_golden(folder: str) -> None:
    """Writes `folder`/golden_classifier.npz (module docstring)."""
    golden = np.load(os.path.join(folder, "golden.npz"))
    ids = torch.from_numpy(golden["input_ids"].astype(np.int64))
    mask = torch.from_numpy(golden["attention_mask"].astype(np.int64))
    generator = torch.Generator().manual_seed(2)
    kernel = 0.3 * torch.randn((CONFIG["hidden_size"], 3), generator=generator)
    bias = 0.1 * torch.randn((3,), generator=generator)
    logits = {}
    for pooling in ("cls", "mean"):
        model = transformers.ModernBertForSequenceClassification.from_pretrained(
            folder, num_labels=3, classifier_pooling=pooling,
            attn_implementation="eager").eval()
        with torch.no_grad():
            model.classifier.weight.copy_(kernel.T)
            model.classifier.bias.copy_(bias)
            logits[pooling] = model(input_ids=ids, attention_mask=mask).logits.numpy()
    np.savez(os.path.join(folder, "golden_classifier.npz"), classifier_kernel=kernel.numpy(),
             classifier_bias=bias.numpy(), logits_cls=logits["cls"],
             logits_mean=logits["mean"])
    print(f"wrote {folder}/golden_classifier.npz")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default=str(ROOT / "tests" / "data" / "modernbert_tiny"))
    parser.add_argument("--classifier_only", action="store_true",
                        help="write golden_classifier.npz alone, from an existing --output")
    args = parser.parse_args()
    if args.classifier_only:
        classifier_golden(args.output)
        return
    torch.manual_seed(0)
    config = transformers.ModernBertConfig(**CONFIG)
    model = transformers.ModernBertForMaskedLM(config).eval()
    _randomize(model, seed=0)
    ids, mask = _inputs(seed=1)
    outputs = {}
    for implementation in ("eager", "sdpa"):
        model.config._attn_implementation = implementation
        model.model.config._attn_implementation = implementation
        with torch.no_grad():
            t_ids, t_mask = torch.from_numpy(ids), torch.from_numpy(mask)
            hidden = model.model(input_ids=t_ids, attention_mask=t_mask).last_hidden_state
            logits = model(input_ids=t_ids, attention_mask=t_mask).logits
        outputs[implementation] = (hidden.numpy(), logits.numpy())
    real = mask.astype(bool)
    for a, b in zip(outputs["eager"], outputs["sdpa"]):
        diff = float(np.abs(a[real] - b[real]).max())
        assert diff < 1e-5, f"eager and sdpa attention differ by {diff}"
    os.makedirs(args.output, exist_ok=True)
    model.config._attn_implementation = "eager"
    model.save_pretrained(args.output, safe_serialization=True)
    hidden, logits = outputs["eager"]
    np.savez(os.path.join(args.output, "golden.npz"), input_ids=ids.astype(np.int32),
             attention_mask=mask.astype(np.int32), last_hidden_state=hidden,
             mlm_logits=logits)
    print(f"wrote {args.output} (transformers {transformers.__version__}, torch "
          f"{torch.__version__})")
    classifier_golden(args.output)


if __name__ == "__main__":
    main()
