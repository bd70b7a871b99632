"""transformers' side of bench_finetune_trajectory.py for ELECTRA's classification head.

    benchmarks/.hf-venv/bin/python benchmarks/finetuning/hf_trajectory.py --task=sst2 \\
        --data_dir=/tmp/ft_bench --model_dir=<hf dir>/discriminator --trace_dir=<dir> \\
        --output_dir=<dir>

ElectraForSequenceClassification's head is two layers (classifier.dense, then GELU, then
classifier.out_proj), not BERT's one Linear, so hf_finetune.py's trace path (which loads
one kernel) does not cover it. This script runs the same classification recipe with
hf_finetune.py's own pieces (its features, training loop, prediction and dropout names), and
starts both head layers from the ones bert_tf drew: head.npz's `kernel` ([hidden,
num_labels], out_proj) and `hidden_kernel` ([hidden, hidden], dense), biases 0.

hf_finetune.py itself is left as it is: its content is part of the fine-tuning parity
ledger's keys (bench_finetune_parity.py), and an edit there would orphan every transformers
run the ledger keeps.

Writes metrics.json to --output_dir: the training losses per update, and with steps.txt
"full" the dev metrics (bert_tf.finetune's classification_metrics).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [os.path.join(REPO, "benchmarks", "common"), REPO]

import hf_finetune  # noqa: E402
import machine  # noqa: E402


def read_trace(trace_dir: str, batch_size: int) -> dict:
    """hf_finetune.TRACE from bench_finetune_trajectory.py's files in `trace_dir`."""
    steps = open(os.path.join(trace_dir, "steps.txt"), encoding="utf-8").read()
    order = np.load(os.path.join(trace_dir, "order.npy"))
    heads = np.load(os.path.join(trace_dir, "head.npz"))
    return {"order": order, "head": heads["kernel"], "hidden": heads["hidden_kernel"],
            "dropout": os.path.exists(os.path.join(trace_dir, "dropout.txt")),
            "share": "both", "evaluate": steps == "full",
            "steps": len(order) // batch_size if steps == "full" else int(steps)}


def set_electra_head(head, trace: dict) -> None:
    """Both layers of ElectraClassificationHead from bert_tf's draws (torch Linear weights
    are [out, in], the kernels [in, out])."""
    import torch

    with torch.no_grad():
        for linear, kernel in ((head.dense, trace["hidden"]), (head.out_proj, trace["head"])):
            if tuple(linear.weight.shape) != kernel.T.shape:
                sys.exit(f"head.npz: a kernel of shape {kernel.shape} for a Linear of "
                         f"{tuple(linear.weight.shape)}")
            linear.weight.copy_(torch.from_numpy(kernel.T))
            linear.bias.zero_()


def run(args, recipe: dict) -> dict:
    import torch
    import transformers
    from transformers import AutoModelForSequenceClassification, ElectraForSequenceClassification

    from bert_tf.finetune.classification import classification_metrics as metrics

    task, max_len = args.task, recipe["max_seq_length"]
    labels = hf_finetune.GLUE[task][3]
    torch.manual_seed(args.seed)
    tok = transformers.BertTokenizerFast.from_pretrained(args.model_dir, do_lower_case=True)
    check = hf_finetune.IdCheck(args.model_dir)
    d = os.path.join(args.data_dir, task)
    tr_rows, tr_types, tr_y, _ = hf_finetune.cls_features(tok, check, task, d + "/train.tsv",
                                                         max_len)
    dv_rows, dv_types, dv_y, _ = hf_finetune.cls_features(tok, check, task, d + "/dev.tsv",
                                                         max_len)
    kind = hf_finetune.model_type(args.model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(
        args.model_dir, num_labels=len(labels), **hf_finetune.dropouts(recipe, kind))
    if not isinstance(model, ElectraForSequenceClassification):
        sys.exit(f"{args.model_dir}: model_type {kind!r}; this script traces ELECTRA's head "
                 "(BERT's is hf_finetune.py --trace_dir)")
    set_electra_head(model.classifier, hf_finetune.TRACE)

    def make(idx, rows, types):
        ids, mask, tt = hf_finetune.batch_tensors([rows[i] for i in idx],
                                                  [types[i] for i in idx])
        return {"input_ids": ids, "attention_mask": mask, "token_type_ids": tt}

    result = {"task": task, "seed": args.seed, "recipe": recipe, "machine": machine.describe(),
              "torch": torch.__version__, "transformers": transformers.__version__}
    result["train"] = hf_finetune.train(
        model, len(tr_rows), lambda idx: (make(idx, tr_rows, tr_types),
                                          torch.from_numpy(tr_y[idx])),
        lambda out, y: torch.nn.functional.cross_entropy(out.logits, y), recipe, args.seed)
    if hf_finetune.TRACE["evaluate"]:
        logits = torch.cat([o.logits for o in hf_finetune.predict(
            model, len(dv_rows), lambda idx: make(idx, dv_rows, dv_types))])
        result["metrics"] = {"dev": metrics.classification_metrics(
            "classification", dv_y, logits.argmax(-1).numpy(), num_classes=len(labels))}
    result["tokenizer_check"] = check.report()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", required=True, choices=sorted(hf_finetune.GLUE))
    parser.add_argument("--data_dir", required=True, help="finetune_subsets.py's output_dir")
    parser.add_argument("--model_dir", required=True, help="an ELECTRA discriminator directory")
    parser.add_argument("--trace_dir", required=True, help="bench_finetune_trajectory.py's")
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    import torch
    import transformers

    torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()
    with open(os.path.join(args.data_dir, "recipes.json"), encoding="utf-8") as f:
        recipe = json.load(f)[args.task]
    hf_finetune.TRACE.update(read_trace(args.trace_dir, recipe["batch_size"]))
    result = run(args, recipe)
    os.makedirs(args.output_dir, exist_ok=True)
    hf_finetune.write_text(os.path.join(args.output_dir, "metrics.json"),
                           json.dumps(result, indent=1) + "\n")
    print(f"{args.task}: {len(result['train']['losses'])} traced steps"
          + (f"; {json.dumps(result['metrics'])}" if "metrics" in result else ""))


if __name__ == "__main__":
    main()
