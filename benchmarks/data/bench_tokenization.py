"""Tokenizer throughput on the bundled corpus: reference path, fast path, HF oracle, in-graph.

Prints lines/s and MB/s of each, side by side in one run, and the fast/reference ratio.
With --learners, also compares the two WordPiece learners considered for build_vocab
(tensorflow_text's bert_vocab_from_dataset and data_tools.vocab.vocab_learner, which uses
`tokenizers`): seconds, vocabulary size, pieces per word and [UNK] rate with FullTokenizer.

    python benchmarks/data/bench_tokenization.py [--vocab_file=...] [--corpus=...] [--repeat=3]
        [--cased] [--no_tf] [--learners [--learn_size=8000]]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, ROOT)

from bert_tf.core import tokenization  # noqa: E402


def _best_of(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--vocab_file", default=os.path.join(
        ROOT, "..", "shared", "data", "vocab", "bert-base-uncased-vocab.txt"))
    parser.add_argument("--corpus", default=os.path.join(ROOT, "data", "corpus",
                                                         "wikitext2.bert.txt"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cased", action="store_true")
    parser.add_argument("--no_tf", action="store_true", help="skip the in-graph tokenizer")
    parser.add_argument("--learners", action="store_true", help="compare vocab learners")
    parser.add_argument("--learn_size", type=int, default=8000)
    args = parser.parse_args()
    lower = not args.cased

    with open(args.corpus, "rb") as f:
        data = f.read()
    lines = data.decode("utf-8").split("\n")
    mb = len(data) / 1e6
    n = len(lines)
    print(f"corpus: {n} lines, {mb:.2f} MB; vocab: {args.vocab_file}; "
          f"do_lower_case={lower}; best of {args.repeat}")

    results = {}
    tok = tokenization.FullTokenizer(args.vocab_file, do_lower_case=lower)
    results["reference (tokenize+convert)"] = _best_of(
        lambda: [tok.convert_tokens_to_ids(tok.tokenize(s)) for s in lines], args.repeat)

    def fast_cold():
        # A new tokenizer each time: the memo starts empty, as for a fresh input file.
        t = tokenization.FullTokenizer(args.vocab_file, do_lower_case=lower)
        start = time.perf_counter()
        t.encode_batch(lines)
        return time.perf_counter() - start

    results["fast encode_batch (cold memo)"] = min(fast_cold() for _ in range(args.repeat))
    tok.encode_batch(lines)
    results["fast encode_batch (warm memo)"] = _best_of(lambda: tok.encode_batch(lines),
                                                        args.repeat)
    try:
        from tokenizers import Tokenizer, normalizers, pre_tokenizers
        from tokenizers.models import WordPiece

        hf = Tokenizer(WordPiece.from_file(args.vocab_file, unk_token="[UNK]",
                                           max_input_chars_per_word=200))
        hf.normalizer = normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=True, strip_accents=lower, lowercase=lower)
        hf.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        results["HF tokenizers encode_batch (Rust)"] = _best_of(
            lambda: hf.encode_batch(lines, add_special_tokens=False), args.repeat)
    except ImportError:
        print("tokenizers not installed: HF oracle skipped")

    if not args.no_tf:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import tensorflow as tf

        from bert_tf.text import tf_tokenization

        tft = tf_tokenization.TFBertTokenizer(args.vocab_file, do_lower_case=lower)
        batches = [tf.constant(lines[i:i + 512]) for i in range(0, n, 512)]
        fn = tf.function(tft.tokenize)
        fn(batches[0])  # Trace once.
        results["in-graph TFBertTokenizer (batch 512)"] = _best_of(
            lambda: [fn(b) for b in batches], args.repeat)

    base = results["reference (tokenize+convert)"]
    for name, seconds in results.items():
        print(f"{name:40s} {seconds:7.3f} s  {n / seconds:10.0f} lines/s  "
              f"{mb / seconds:7.2f} MB/s  {base / seconds:6.1f}x reference")

    if args.learners:
        compare_learners(lines, lower, args.learn_size)


def _quality(tokens, lines, lower):
    """(pieces per word, [UNK] rate) of FullTokenizer with `tokens` on `lines`."""
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as f:
        f.write("\n".join(tokens) + "\n")
    try:
        tok = tokenization.FullTokenizer(f.name, do_lower_case=lower)
    finally:
        os.remove(f.name)
    basic = tokenization.CachedBasicTokenizer(lower)
    words = sum(len(basic.tokenize(s)) for s in lines)
    ids = tok.encode_batch(lines)
    pieces = sum(map(len, ids))
    unk = sum(i == tok.unk_id for row in ids for i in row)
    return pieces / words, unk / pieces


def compare_learners(lines, lower, size):
    """Both learners on the same word split (FullTokenizer's), same reserved tokens."""
    from data_tools.vocab import vocab_learner

    print(f"\nWordPiece learners, target {size} tokens:")
    start = time.perf_counter()
    hf_tokens, _ = vocab_learner.learn_vocab(
        lines, vocab_learner.VocabConfig(vocab_size=size, do_lower_case=lower))
    hf_seconds = time.perf_counter() - start

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    from tensorflow_text.tools.wordpiece_vocab import bert_vocab_from_dataset

    start = time.perf_counter()
    basic = tokenization.CachedBasicTokenizer(lower)
    joined = [" ".join(basic.tokenize(s)) for s in lines]
    dataset = tf.data.Dataset.from_tensor_slices(joined).batch(1000)
    # lower_case=False: the text is already split, lower-cased and stripped exactly as
    # FullTokenizer does; the learner's own BertTokenizer then only splits on spaces.
    tft_tokens = bert_vocab_from_dataset.bert_vocab_from_dataset(
        dataset, vocab_size=size, reserved_tokens=vocab_learner.special_tokens(99),
        bert_tokenizer_params={"lower_case": False})
    tft_seconds = time.perf_counter() - start
    # The same size for a fair quality comparison: tokenizers at tf_text's actual size.
    same_size, _ = vocab_learner.learn_vocab(
        lines, vocab_learner.VocabConfig(vocab_size=len(tft_tokens), do_lower_case=lower))
    for name, tokens, seconds in (("tokenizers (vocab_learner)", hf_tokens, hf_seconds),
                                  ("tensorflow_text learner", tft_tokens, tft_seconds),
                                  ("tokenizers at tf_text's size", same_size, None)):
        per_word, unk = _quality(tokens, lines, lower)
        took = f"{seconds:7.1f} s" if seconds is not None else "        -"
        print(f"{name:30s} {took}  {len(tokens):6d} tokens  {per_word:.4f} pieces/word  "
              f"[UNK] {100 * unk:.4f}%")


if __name__ == "__main__":
    main()
