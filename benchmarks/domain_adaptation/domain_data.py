"""bench_domain_adaptation.py's data stages beyond budget_data's: the base model's config, the
extended vocabulary, tokens per word on held-out text, and the NER sets.

Every stage writes into the benchmark's cache and is skipped once its marker exists
(budget_cache):

    model/bert_config.json      the bert_config keys of the base model's HF config.json
    vocab-<mode>-<n>/vocab.txt  data_tools.extend_vocab on the training abstracts (+ report)
    vocab-<mode>-<n>/heldout_tokens_per_word.done.json   both vocabularies on heldout.txt
    ner-<key>/<set>/{train,test}.conll, suite.json, recipes.json

The NER files are BioBERT's splits with the tags typed (B -> B-Disease, I -> I-Disease: the
entity scorer wants a type) and, when asked, a seeded training subset
(`bert_tf.finetune.subset`) written out once, so that bert_tf (run_glue --suite) and
transformers (hf_finetune.py --tagging) train on the very same sentences. The test file is
the scored file of both (run_glue's eval_file; hf_finetune's test split). Nothing here
imports TensorFlow.
"""

from __future__ import annotations

import collections
import json
import os
import sys
from typing import Dict, List, Tuple

import budget_cache
import budget_data
import measure

REPO = budget_cache.REPO
PY = sys.executable
# The bert_config.json keys (bert_tf.modeling.config.BertConfig) an HF config.json also has.
BERT_CONFIG_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                    "intermediate_size", "hidden_act", "hidden_dropout_prob",
                    "attention_probs_dropout_prob", "max_position_embeddings",
                    "type_vocab_size", "initializer_range")
NER_SETS = {"ncbi": "NCBI-disease", "bc5cdr": "BC5CDR-disease"}
ENTITY_TYPE = "Disease"


def bert_config(cache: str, model_dir: str) -> str:
    """bert_config.json of an HF model directory (run_pretraining needs one); returns it."""
    with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
        hf = json.load(f)
    config = {k: hf[k] for k in BERT_CONFIG_KEYS}
    path = os.path.join(cache, "model", f"bert_config_{budget_cache.digest(config)}.json")
    if not os.path.exists(path):
        budget_cache.write_json(path, config)
    return path


def extended_vocab(cache: str, base_vocab: str, train_text: str, mode: str,
                   num_new_tokens: int) -> dict:
    """data_tools.extend_vocab on the training text; returns the marker (vocab_file, the
    report's figures)."""
    d = os.path.join(cache, f"vocab-{mode}-{num_new_tokens}")
    marker = budget_cache.done(d, "extend_vocab")
    if marker:
        return marker
    path = os.path.join(d, "vocab.txt")
    os.makedirs(d, exist_ok=True)
    print(f"  extend_vocab --mode={mode} --num_new_tokens={num_new_tokens} ...", flush=True)
    job = measure.run_job([PY, "-m", "data_tools.extend_vocab", f"--vocab_file={base_vocab}",
                           f"--input_file={train_text}", f"--output_vocab_file={path}",
                           f"--mode={mode}", f"--num_new_tokens={num_new_tokens}",
                           "--do_lower_case=true"], cwd=REPO, env=budget_data.env())
    report = budget_cache.read_json(path + ".report.json")
    return budget_cache.finish(d, "extend_vocab", {
        "vocab_file": path, "mode": mode, "num_new_tokens": num_new_tokens,
        "added": len(report["new_tokens"]), "before": report["before"],
        "after": report["after"], "reduction": report["tokens_per_word_reduction"],
        "top_words": [g["word"] for g in report["top_words"][:10]],
        "summary": job.stdout.strip().splitlines()[:2], "wall_seconds": round(job.wall, 1)})


def heldout_tokens_per_word(vocab_dir: str, heldout_text: str, base_vocab: str,
                            ext_vocab: str) -> dict:
    """Tokens per word of the held-out text under both vocabularies (FullTokenizer's split:
    extend_vocab's report, recomputed on text the extension never saw)."""
    marker = budget_cache.done(vocab_dir, "heldout_tokens_per_word")
    if marker:
        return marker
    from bert_tf.core import tokenization
    from data_tools.vocab import extend_report

    basic = tokenization.BasicTokenizer(do_lower_case=True)
    counts: Dict[str, int] = collections.Counter()
    with open(heldout_text, encoding="utf-8") as f:
        for line in f:
            counts.update(basic.tokenize(line))
    comparison = extend_report.compare(counts, tokenization.load_vocab(base_vocab),
                                       tokenization.load_vocab(ext_vocab))
    cost = {name: {"words": c.words, "tokens": c.tokens, "tokens_per_word": c.tokens_per_word}
            for name, c in (("before", comparison.before), ("after", comparison.after))}
    return budget_cache.finish(vocab_dir, "heldout_tokens_per_word", dict(
        cost, reduction=comparison.reduction, text=heldout_text))


def read_conll(path: str) -> List[List[Tuple[str, str]]]:
    """Sentences of a `token<TAB>tag` file (blank line between sentences)."""
    sentences: List[List[Tuple[str, str]]] = []
    current: List[Tuple[str, str]] = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            parts = line.rstrip("\r\n").split("\t")
            if line.strip():
                current.append((parts[0], parts[-1]))
            elif current:
                sentences.append(current)
                current = []
    if current:
        sentences.append(current)
    return sentences


def typed(tag: str) -> str:
    """B/I/O -> B-Disease/I-Disease/O (tags already typed are kept)."""
    return f"{tag}-{ENTITY_TYPE}" if tag in ("B", "I") else tag


def write_conll(path: str, sentences: List[List[Tuple[str, str]]]) -> None:
    text = "".join("".join(f"{w}\t{typed(t)}\n" for w, t in s) + "\n" for s in sentences)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def ner(cache: str, ner_dir: str, max_train_examples: int, subset_seed: int,
        test_limit: int, recipe: dict) -> dict:
    """The NER folder both fine-tuning sides read (see the module docstring); returns its
    marker: dir, suite, recipes and the sentence counts per set."""
    from bert_tf.finetune.subset import take_subset

    settings = {"max_train_examples": max_train_examples, "subset_seed": subset_seed,
                "test_limit": test_limit, "recipe": recipe, "source": ner_dir}
    d = os.path.join(cache, f"ner-{budget_cache.digest(settings)}")
    marker = budget_cache.done(d, "ner")
    if marker:
        return marker
    counts, suite = {}, []
    for name, folder in NER_SETS.items():
        src = os.path.join(ner_dir, folder)
        train = read_conll(os.path.join(src, "train.tsv"))
        test = read_conll(os.path.join(src, "test.tsv"))
        kept = take_subset(train, max_train_examples, subset_seed) if max_train_examples \
            else train
        test = test[:test_limit] if test_limit else test
        os.makedirs(os.path.join(d, name), exist_ok=True)
        write_conll(os.path.join(d, name, "train.conll"), kept)
        write_conll(os.path.join(d, name, "test.conll"), test)
        counts[name] = {"train": len(kept), "train_total": len(train), "test": len(test),
                        "test_entities": sum(t == "B" for s in test for _, t in s)}
        suite.append({"name": name, "kind": "tagging", "train_file": f"{name}/train.conll",
                      "eval_file": f"{name}/test.conll"})
    budget_cache.write_json(os.path.join(d, "suite.json"), {"tasks": suite})
    budget_cache.write_json(os.path.join(d, "recipes.json"),
                            {name: recipe for name in NER_SETS})
    return budget_cache.finish(d, "ner", dict(settings, dir=d, counts=counts,
                                              suite=os.path.join(d, "suite.json")))
