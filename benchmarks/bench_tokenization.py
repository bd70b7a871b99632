"""Tokenizer throughput on the bundled corpus: reference path, fast path, HF oracle, in-graph.

Prints lines/s and MB/s of each, side by side in one run, and the fast/reference ratio.

    python benchmarks/bench_tokenization.py [--vocab_file=...] [--corpus=...] [--repeat=3]
        [--cased] [--no_tf]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bert_tf import tokenization  # noqa: E402


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

        from bert_tf import tf_tokenization

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


if __name__ == "__main__":
    main()
