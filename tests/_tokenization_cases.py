"""Shared cases of the tokenizer tests (the Python and the in-graph tokenizers): a small
vocabulary, hard strings, and seeded random strings of every kind of character the rules treat
specially."""

from __future__ import annotations

import random
from typing import List

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
# A small vocab for hand-worked cases. Ids: [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4, then in
# this order from 5.
SMALL_PIECES = ["un", "##want", "##ed", "wa", "runn", "##ing", ",", "!", "?", "hello", "how",
                "are", "you", "a", "##a", "b", "##b", "\u535a", "\u63a8", "ah", "zz", "the",
                "##s", "i", "##st", "##an", "##bul", "ο", "##δ", "##ος", "##ς"]

# Hard cases for the fast path and the oracles; each exercises a rule of the reference.
HARD_CASES = [
    "UNwant\u00e9d,running",
    "ΟΔΟΣ ΟΔΟΣ, ΟΔΟΣ.",            # Greek final sigma (context-sensitive lower()).
    "\u0130stanbul \u0130I",       # U+0130 lowers to i + U+0307 (Mn, stripped).
    "a\x1cb c\x85d e\u2028f g\u2029h",  # \x1c/\x85 deleted (Cc); U+2028/9 split by str.split.
    "x\u200by z\u200dw",           # Zero-width space / joiner: Cf, deleted.
    "soft\u00adhyphen",            # Soft hyphen: Cf, deleted.
    "\ufeffbom\ufeff",             # BOM / ZWNBSP: Cf.
    "nb\u00a0sp\u3000ide\u2009o",  # NBSP, ideographic space, thin space: Zs.
    "中文abc漢字x\u4e00y",
    "\U0001f468\u200d\U0001f469\u200d\U0001f467 \U0001f600!\U0001f600",
    "ภาษาไทย العربية हिन्दी",
    "e\u0301te\u0301 cafe\u0301 \u1e9b\u0323",
    "\x00\ufffdok\x7f\x01",
    "\u01c5 \u00df \ufb01 \u2163 \u2460 \u00bd",
    "a" * 300 + " " + "b" * 199 + " " + "a" * 200 + "," + "a" * 201,
    "tab\there\nnew\rline\x0bvt\x0cff",
    "\u0085\u180e\u200e\u202a\u2066",
    "$5 a\u20acb \u00bfque? ``quoted''",
    "\u3001\u3002\u30fb\uff01\uff08x\uff09",
    "\ud7a3\u1100\u3131 \U00020000\U0002a700\U0002f800",
    " \t\n ",
    "",
]


def random_nasty_texts(seed: int, n: int) -> List[str]:
    """Random strings mixing letters with every kind of character the rules treat specially."""
    pool = (list("abcAB xyz,.!'-") + ["\t", "\n", "\r", "\x00", "\x1c", "\x1f", "\x85", "\x0b",
            "\x7f", "\ufffd", "\u00a0", "\u2028", "\u2029", "\u3000", "\u200b", "\u200d",
            "\u00ad", "\ufeff", "\u180e", "\u0301", "\u0323", "\u00e9", "\u0130", "\u03a3",
            "\u039f", "\u03c3", "\u4e2d", "\u6587", "\U00020001", "\U0001f600", "\u0e20",
            "\u0627", "\u0939", "\u094d", "\u00bf", "\u20ac", "\u2163", "\ufb01", "\u00df",
            "\u2019", "\u2033", "\u00bd", "\uac00", "\u3042", "\uff01", "\u2009", "\u1680"])
    rng = random.Random(seed)
    return ["".join(rng.choice(pool) for _ in range(rng.randint(0, 60))) for _ in range(n)]
