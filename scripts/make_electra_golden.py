"""Writes tests/data/electra_tiny/: a tiny random ELECTRA pair and transformers' outputs.

The reference for `tests/test_hf_electra.py`: transformers' `ElectraForPreTraining` (the
discriminator: 2 layers, hidden 32, 2 heads, intermediate 64) and `ElectraForMaskedLM` (the
generator: 2 layers, hidden 8 = 0.25 x 32, 1 head, intermediate 32), both with 16-wide
embeddings (so that both `embeddings_project` layers exist), a 96-token vocabulary, 32
positions and the erf GELU (transformers' "gelu", which its generator head always uses).
Every weight is random (LayerNorm gains around 1, biases non-zero, so that a misplaced
weight shows); the generator's embeddings are the discriminator's, as ELECTRA shares them.
Saved with `save_pretrained` (safetensors) into `discriminator/` and `generator/`, and
`golden.npz`: three id rows with padding (lengths 12, 8 and 4; row 0's second half in
segment 1), their attention mask and token types, the discriminator's last hidden state
(`ElectraModel`) and its logits, and the generator's MLM logits at every position.

Needs torch and transformers (not bert_tf's environment):

    benchmarks/.hf-venv/bin/python scripts/make_electra_golden.py [--output DIR]
"""

from __future__ import annotations

import argparse
import os
import pathlib

import numpy as np
import torch
import transformers

ROOT = pathlib.Path(__file__).resolve().parent.parent
SEQ_LEN, LENGTHS = 12, (12, 8, 4)

COMMON = dict(vocab_size=96, embedding_size=16, num_hidden_layers=2, hidden_act="gelu",
              max_position_embeddings=32, type_vocab_size=2, pad_token_id=0)
DISCRIMINATOR = dict(COMMON, hidden_size=32, num_attention_heads=2, intermediate_size=64)
GENERATOR = dict(COMMON, hidden_size=8, num_attention_heads=1, intermediate_size=32)


def _randomize(model: torch.nn.Module, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=generator)
            if "LayerNorm.weight" in name:
                p.copy_(1.0 + 0.2 * noise)
            else:
                p.copy_(0.2 * noise)


def _inputs(seed: int):
    rng = np.random.default_rng(seed)
    ids = np.zeros((len(LENGTHS), SEQ_LEN), np.int64)
    mask = np.zeros_like(ids)
    types = np.zeros_like(ids)
    for row, n in enumerate(LENGTHS):
        ids[row, :n] = rng.integers(5, COMMON["vocab_size"], n)
        ids[row, 0], ids[row, n - 1] = 2, 3  # [CLS] ... [SEP], then padding id 0
        mask[row, :n] = 1
    types[0, SEQ_LEN // 2:] = 1
    return ids, mask, types


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default=str(ROOT / "tests" / "data" / "electra_tiny"))
    args = parser.parse_args()
    torch.manual_seed(0)
    disc = transformers.ElectraForPreTraining(
        transformers.ElectraConfig(**DISCRIMINATOR)).eval()
    gen = transformers.ElectraForMaskedLM(transformers.ElectraConfig(**GENERATOR)).eval()
    _randomize(disc, seed=0)
    _randomize(gen, seed=1)
    with torch.no_grad():  # ELECTRA's generator shares the discriminator's embeddings
        for name, p in gen.electra.embeddings.named_parameters():
            p.copy_(dict(disc.electra.embeddings.named_parameters())[name])
        gen.generator_lm_head.weight = gen.electra.embeddings.word_embeddings.weight
    ids, mask, types = _inputs(seed=2)
    t = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask),
         "token_type_ids": torch.from_numpy(types)}
    with torch.no_grad():
        hidden = disc.electra(**t).last_hidden_state.numpy()
        disc_logits = disc(**t).logits.numpy()
        mlm_logits = gen(**t).logits.numpy()
    for name, model in (("discriminator", disc), ("generator", gen)):
        model.save_pretrained(os.path.join(args.output, name), safe_serialization=True)
    np.savez(os.path.join(args.output, "golden.npz"), input_ids=ids.astype(np.int32),
             attention_mask=mask.astype(np.int32), token_type_ids=types.astype(np.int32),
             last_hidden_state=hidden, disc_logits=disc_logits, mlm_logits=mlm_logits)
    print(f"wrote {args.output} (transformers {transformers.__version__}, torch "
          f"{torch.__version__})")


if __name__ == "__main__":
    main()
