"""The original release's NSP instance packing, restated as a test oracle.

Test support, not product code. It packs whole tokenized documents exactly as the original
`create_pretraining_data.py` describes its algorithm, with Python's `random.Random`, over the
whole corpus at once (no chunks, no pieces): documents are shuffled once, then every dupe
visits every document; a document draws ONE target length (short with probability
`short_seq_prob`); sentences accumulate until they reach the target or the document ends;
A takes a random number of them; B is the rest, or (when there is a single sentence, or with
probability 1/2) a run of sentences from a random other document starting at a random
sentence, the unused sentences being put back; the pair is truncated to fit. Only lengths
and labels are produced (no masks, no ids), which is all the statistics need.
"""

from __future__ import annotations

import random
from typing import List, Sequence, Tuple

Document = Sequence[int]  # the token count of each sentence


def pack_document(docs: Sequence[Document], index: int, max_num_tokens: int,
                  short_seq_prob: float, rng: random.Random
                  ) -> List[Tuple[int, int, int, int, int]]:
    """(len A, len B, is_random_next, document of B, B's first sentence in it) of one
    document's instances."""
    doc = docs[index]
    target = max_num_tokens
    if rng.random() < short_seq_prob:
        target = rng.randint(2, max_num_tokens)
    out = []
    chunk: List[int] = []
    i = 0
    while i < len(doc):
        chunk.append(doc[i])
        if i == len(doc) - 1 or sum(chunk) >= target:
            a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
            len_a = sum(chunk[:a_end])
            if len(chunk) == 1 or rng.random() < 0.5:
                other = index
                for _ in range(10):
                    other = rng.randint(0, len(docs) - 1)
                    if other != index:
                        break
                start = rng.randint(0, len(docs[other]) - 1)
                len_b = 0
                for n in docs[other][start:]:
                    len_b += n
                    if len_b >= target - len_a:
                        break
                i -= len(chunk) - a_end  # put the unused sentences back
                pair = (len_a, len_b, 1, other, start)
            else:
                pair = (len_a, sum(chunk[a_end:]), 0, index, i - len(chunk) + 1 + a_end)
            excess = max(pair[0] + pair[1] - max_num_tokens, 0)
            la, lb = pair[0], pair[1]
            while excess:  # the longer segment loses a token (B on ties)
                if la > lb:
                    la -= 1
                else:
                    lb -= 1
                excess -= 1
            out.append((la, lb) + pair[2:])
            chunk = []
        i += 1
    return out


def pack_corpus(docs: Sequence[Document], max_seq_length: int, short_seq_prob: float,
                dupe_factor: int, seed: int) -> List[Tuple[int, int, int, int, int]]:
    """Every instance of a run, in creation order (the original shuffles them afterwards)."""
    rng = random.Random(seed)
    docs = [d for d in docs if d]
    order = list(range(len(docs)))
    rng.shuffle(order)
    docs = [docs[k] for k in order]
    out = []
    for _ in range(dupe_factor):
        for index in range(len(docs)):
            out += pack_document(docs, index, max_seq_length - 3, short_seq_prob, rng)
    return out
