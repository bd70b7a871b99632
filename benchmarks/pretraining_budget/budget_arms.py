"""The pretraining-budget benchmark's arms: the ways to pretrain it compares, and the model.

Every arm gets the same training-time budget (--minutes) on this machine:

    a  random init: no pretraining
    b  bert_tf, the original recipe: create_pretraining_data's static masks (dupe_factor 2),
       NSP, 15 %, configs/demo.flags (batch 32, AdamW, peak 1e-3, 10 % warmup, linear
       decay), the steps sized to the budget by a throughput probe
    c  bert_tf's budget recipe, configs/budget.flags: MLM-only packed records
       (create_pretraining_data --no_nsp), whatever that flagfile sets (dynamic masking, the
       masking rate, the warmup-stable-decay schedule tied to --max_train_minutes, ...)
    d  keras-hub BertMaskedLM.fit() with keras-hub's defaults and the keras.io guide's
       32 prediction slots (budget_keras_hub.py)
    e  transformers BertForMaskedLM + Trainer with its documented from-scratch settings
       (budget_hf.py, in benchmarks/.hf-venv)
    d-tuned, e-tuned  d and e at c's batch, peak rate and warmup (configs/budget.flags):
       the "tuned peers", which separate the recipe from the framework
    f  bert_tf ELECTRA, configs/electra_budget.flags, the shared model as its discriminator
    g, h  the modern encoder (the shared model's shape with ModernBERT's block: pre-LN,
       GeGLU, rotary positions, no biases; MODERN_OPTIONS) on packed documents, with c's
       recipe (g) and f's (h)
    c120, f120  c and f for 4 x the budget in one run each, their state kept and scored at
       1/4 and 1/2 of it (budget_curves.py): the report's GLUE-against-minutes table

and the ablations of c (`--arms=c-...`), each putting one of c's choices back to the
original recipe's. An arm's fields enter its cache key (`budget_keys.arm_key`), so a change
to an existing arm's values starts it anew; a new field needs a default that keeps the
ledger's keys (`budget_keys.LATER_ARM_FIELDS`).

The protocol every arm is scored under (`CHOSEN`) and the one model config they share
(`model_config`, and `modern_config_of` for the modern arms) live here too.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import List, Optional, Tuple

import budget_bert_tf
import budget_cache

REPO = budget_cache.REPO
DEMO = budget_bert_tf.parse_flags("configs/demo.flags", [])


@dataclasses.dataclass(frozen=True)
class Arm:
    """One way to pretrain (or not).

    Attributes:
        name: the arm's name (--arms).
        kind: "random", "bert_tf", "keras_hub" or "hf".
        title: one line for the report.
        flagfile: bert_tf arms: run_pretraining's flagfile (repo-relative).
        flags: bert_tf arms: flags after the flagfile.
        drop: bert_tf arms: flagfile flags left out (a copy of the flagfile without them is
            written to the arm's folder).
        records: bert_tf arms: "nsp" (sentence pairs), "mlm" (MLM-only blocks, --no_nsp) or
            "packed" (whole documents packed into rows, --feature_set=packed_mlm).
        dupe_factor: copies of the text with different static masks in the records.
        size_to_budget: set --num_train_steps from the probe's rate (linear schedules).
        warmup_fraction: with size_to_budget, --num_warmup_steps as this share of the steps
            (None: the flagfile's own warmup steps).
        default: run without --arms.
        peer_flags: keras_hub and hf arms: flags for the arm's script (the tuned peers'
            batch, peak rate and warmup).
        scale: the arm's budget in --minutes (4: 120 minutes at the default 30).
        snapshots: fractions of the budget where the run's state is kept and scored as
            well (one run, cut into slices that resume exactly: budget_curves.py).
        recipe: the arm whose recipe a long arm trains longer (the curve's row).
        architecture: "" (the shared bert_config.json) or "modern": the same config with
            the modern encoder's options (`modern_config_of`).
        mlm_first: bert_tf ELECTRA arms: this share of the budget goes first to c's masked
            LM (MLM_PHASE), and the discriminator starts from its encoder
            (`--init_discriminator_only`; `pretrain_after_mlm`).
    """

    name: str
    kind: str
    title: str
    flagfile: str = ""
    flags: Tuple[str, ...] = ()
    drop: Tuple[str, ...] = ()
    records: str = ""
    dupe_factor: int = 1
    size_to_budget: bool = False
    warmup_fraction: Optional[float] = None
    default: bool = True
    peer_flags: Tuple[str, ...] = ()
    scale: float = 1.0
    snapshots: Tuple[float, ...] = ()
    recipe: str = ""
    architecture: str = ""
    mlm_first: float = 0.0


BUDGET = budget_bert_tf.parse_flags("configs/budget.flags", [])
# The tuned peers train with c's batch, peak rate and warmup steps, so that c - d-tuned and
# c - e-tuned compare the frameworks at one recipe, and d-tuned - d, e-tuned - e what that
# recipe buys each framework.
TUNED = (f"--batch_size={BUDGET['train_batch_size']}",
         f"--learning_rate={BUDGET['learning_rate']}",
         f"--warmup_steps={BUDGET['num_warmup_steps']}")


C = dict(kind="bert_tf", flagfile="configs/budget.flags", records="mlm", default=False)
ARMS: List[Arm] = [
    Arm("a", "random", "random init"),
    Arm("b", "bert_tf", "bert_tf original recipe (static masks, NSP, 15 %, linear)",
        flagfile="configs/demo.flags", records="nsp", dupe_factor=2, size_to_budget=True,
        warmup_fraction=int(DEMO["num_warmup_steps"]) / int(DEMO["num_train_steps"])),
    Arm("c", "bert_tf", "bert_tf budget recipe (configs/budget.flags)",
        flagfile="configs/budget.flags", records="mlm"),
    Arm("d", "keras_hub", "keras-hub BertMaskedLM.fit"),
    # ELECTRA at the benchmark's model: the one shared bert_config.json is the discriminator
    # (as every arm's model); its flagfile's generator (a quarter of the width), lambda,
    # 15 % dynamic masks in 20 slots and schedule; the same records, budget and scorecard.
    Arm("f", "bert_tf", "bert_tf ELECTRA (configs/electra_budget.flags)",
        flagfile="configs/electra_budget.flags", records="mlm"),
    Arm("e", "hf", "transformers BertForMaskedLM + Trainer"),
    Arm("d-tuned", "keras_hub", "keras-hub BertMaskedLM.fit at c's batch, peak rate, warmup",
        peer_flags=TUNED),
    Arm("e-tuned", "hf", "transformers Trainer at c's batch, peak rate, warmup",
        peer_flags=TUNED),
    # The budget curve: c and f trained 4 x the budget (120 minutes) in one run each, whose
    # schedule is the 120-minute one, with the state kept at 1/4 and 1/2 (30 and 60 min).
    Arm("c120", "bert_tf", "c trained 4 x the budget, kept at 1/4, 1/2 and the end",
        flagfile="configs/budget.flags", records="mlm", default=False, scale=4.0,
        snapshots=(0.25, 0.5), recipe="c"),
    Arm("f120", "bert_tf", "f trained 4 x the budget, kept at 1/4, 1/2 and the end",
        flagfile="configs/electra_budget.flags", records="mlm", default=False, scale=4.0,
        snapshots=(0.25, 0.5), recipe="f"),
    # The modern encoder (the benchmark's second lever after the objective): the shared model's
    # shape with ModernBERT's block, on packed documents, with c's and f's recipes.
    Arm("g", "bert_tf", "modern encoder, packed, budget MLM recipe (configs/budget.flags)",
        flagfile="configs/budget.flags", records="packed", architecture="modern",
        default=False),
    Arm("h", "bert_tf", "modern encoder, packed, ELECTRA (configs/electra_budget.flags)",
        flagfile="configs/electra_budget.flags", records="packed", architecture="modern",
        default=False),
    # ELECTRA after masked LM: at BERT-Tiny, ELECTRA's discriminator from random weights
    # stays at chance for its first 3,300 steps (it does not yet read the context), while
    # from an encoder that reads it (c's) it learns in a few hundred steps (electra_probe.py).
    Arm("f-mlm", "bert_tf", "c's masked LM for half the budget, then ELECTRA from its encoder",
        flagfile="configs/electra_budget.flags", records="mlm", default=False, mlm_first=0.5),
    # Ablations of c: each puts one of c's choices back to the original recipe's (b), or
    # moves one of the values configs/budget.flags leaves to tuning. (c already shares b's
    # peak rate, batch, sequence length and model shape.)
    Arm("c-mask15", title="c masking 15 % (dynamic)", flags=("--masked_lm_prob=0.15",), **C),
    Arm("c-mask30", title="c masking 30 % (dynamic)", flags=("--masked_lm_prob=0.3",), **C),
    Arm("c-static", title="c with static 15 % masks (dupe_factor 2)", dupe_factor=2,
        drop=("dynamic_masking", "masked_lm_prob", "vocab_file"), **C),
    # c-mask15 and c-static keep c's 51 prediction slots, of which 15 % masking fills 19: the
    # same work a step as c, so they compare the rates at equal steps. The -p20 arms use the
    # 20 slots b uses, the speed a 15 % rate buys: they compare the rates at equal time.
    Arm("c-mask15-p20", title="c masking 15 % (dynamic), 20 prediction slots",
        flags=("--masked_lm_prob=0.15", "--max_predictions_per_seq=20"), **C),
    Arm("c-static-p20", title="c with static 15 % masks (dupe_factor 2), 20 prediction slots",
        dupe_factor=2, flags=("--max_predictions_per_seq=20",),
        drop=("dynamic_masking", "masked_lm_prob", "vocab_file"), **C),
    Arm("c-linear", title="c with warmup + linear decay sized to the budget",
        flags=("--lr_schedule=linear",), drop=("decay_proportion",), size_to_budget=True, **C),
    Arm("c-nsp", title="c with NSP sentence pairs", drop=("no_nsp",),
        **dict(C, records="nsp")),
    Arm("c-lr5e-4", title="c at peak learning rate 5e-4", flags=("--learning_rate=5e-4",),
        **C),
    # Pretraining grows the weights 2-4x over their initial scale, so a fixed fine-tuning
    # rate moves them less, relative to their size, than it moves random weights
    # (docs/results/pretraining.md): more decay holds them nearer that scale.
    Arm("c-wd0.1", title="c with weight decay 0.1", flags=("--weight_decay_rate=0.1",), **C),
    # Speed, not the recipe: keras-hub's arm d trains 7 % more steps per second with XLA on
    # this CPU (its probe times both); bert_tf leaves XLA off on CPUs by default.
    Arm("c-xla", title="c with the train step XLA-compiled", flags=("--use_xla=true",), **C),
]
# The protocol screen's choice (README.md beside this script, "The protocol screen"; the
# figures in docs/results/pretraining.md): the mean of the sequence output at 1e-3 is the
# protocol under which arms c and d register pretraining (mean t 2.46). Under it arm c does
# not beat the majority class on MRPC and RTE, so the GLUE score averages CoLA, SST-2 and
# STS-B (the other two are still scored and shown). The final scores use seeds the screen
# did not (1,2,3), so that the noise the choice was made on does not enter them.
CHOSEN = dict(readout="mean", learning_rate=1e-3, glue_tasks="cola,sst2,stsb", seeds="4,5,6")
EVAL_SEQ, EVAL_PRED = 128, 20  # the held-out records every arm is measured on


def model_config(args, cache: str, vocab_size: int) -> str:
    """The one bert_config.json of every arm: --bert_config with the vocabulary's size."""
    with open(os.path.join(REPO, args.bert_config), encoding="utf-8") as f:
        config = dict(json.load(f), vocab_size=vocab_size)
    path = os.path.join(cache, "model", f"bert_config_{budget_cache.digest(config)}.json")
    if not os.path.exists(path):
        budget_cache.write_json(path, config)
    return path


# The modern encoder's options (bert_tf.modeling.modern_config) for arms g and h: ModernBERT's
# block (pre-LN with a final norm, GeGLU, rotary positions, no biases, no segment table).
# Every layer attends globally: at the benchmark's 128 tokens a sliding window of ModernBERT's
# 128 would cover the whole row.
MODERN_OPTIONS = dict(position_embedding_type="rope", pre_layer_norm=True, norm_eps=1e-5,
                      use_bias=False, hidden_act="geglu", type_vocab_size=0)


def modern_config_of(config_path: str, cache: str) -> str:
    """The shared config with MODERN_OPTIONS, its GeGLU feed-forward 2/3 as wide so that the
    block has BERT's parameters (3 x H x I' = 2 x H x I)."""
    with open(config_path, encoding="utf-8") as f:
        config = json.load(f)
    config = dict(config, **MODERN_OPTIONS,
                  intermediate_size=round(2 * config["intermediate_size"] / 3))
    path = os.path.join(cache, "model", f"bert_config_{budget_cache.digest(config)}.json")
    if not os.path.exists(path):
        budget_cache.write_json(path, config)
    return path


def objective_flags(arm: Arm) -> List[str]:
    """The objective flags an eval-only run of the arm's checkpoint needs (ELECTRA's)."""
    if arm.kind != "bert_tf":
        return []
    values = budget_bert_tf.parse_flags(arm.flagfile, list(arm.flags))
    if values.get("objective", "bert") != "electra":
        return []
    return ["--objective=electra",
            f"--generator_hidden_fraction={values.get('generator_hidden_fraction', '0.25')}"]
