"""Reranking with a cross-encoder as a fine-tuning task (python -m bert_tf.run_rerank).

A cross-encoder is a sentence-pair classifier with one logit: `[CLS] query [SEP] passage
[SEP]` -> the BERT classifier head on its `classifier_readout` (the pooled output, the [CLS]
row or the token mean) -> a relevance logit, trained with binary cross-entropy over pairs
or a softmax over each query's group of candidates (`rerank_objective`). So the task is
run_classifier's on the shared runner: the pairs are featurized by
`classification_data.featurize` (longest-first truncation of the pair), the model is
`heads.classifier(config, 1, "bert", readout)`, the run directory holds what a classifier's
does (label_list.json is `null`: one output), and export reads it back as a classifier whose
finetune_task.json says `"reranker": true`.

    --do_train   bce: (query, passage, label) pairs of --train_dir's qrels with BM25
                 negatives, or of --train_file (`rerank_pairs.training_pairs`); listwise:
                 the same as groups of 1 + --num_hard_negatives pairs, a batch counting
                 groups (`rerank_pairs.training_groups`; arrays [groups, group, seq_len])
    --do_rerank  the --rerank_top_k candidates of --first_stage (bm25 or a TREC run file)
                 for the queries of --eval_dir's --eval_split, scored by the model and
                 reordered: reranked_run.trec, and in eval_results.txt BEIR's ndcg_at_10,
                 recall_at_100, mrr_at_10 and map_at_100 of the reranked run
                 (`ir_metrics.evaluate`), the same four of the first stage's run
                 (first_stage_*), and eval_loss, the BCE of the candidates against their
                 qrels labels (unjudged: 0). With --fusion=rrf the reranked run is the
                 reciprocal rank fusion of the first stage's order and the model's
                 (`retrieval.fusion`), and the model's own order is scored as reranker_*.

Only the candidates are reranked: a relevant passage the first stage missed stays missed, so
recall_at_100 is the first stage's when --rerank_top_k >= 100 (and lower when smaller).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Dict, List, Optional

import numpy as np
from absl import logging

from bert_tf.core import fileio
from bert_tf.core.errors import UserError
from bert_tf.finetune import heads, probabilities, runner
from bert_tf.finetune import label_list as labels_io
from bert_tf.finetune.classification import classification_data
from bert_tf.finetune.classification.classification_data import Example
from bert_tf.finetune.reranking import first_stage, rerank_pairs
from bert_tf.finetune.reranking.rerank_objective import (
    LOSSES,
    BinaryCrossEntropyObjective,
    ListwiseObjective,
)
from bert_tf.finetune.retrieval import beir_data, fusion, ir_metrics, trec_run
from bert_tf.finetune.retrieval.fusion import DEFAULT_K as RRF_DEFAULT_K
from bert_tf.finetune.retrieval.hard_negatives import MiningConfig
from bert_tf.modeling.config import BertConfig

RERANKED_RUN_FILE = "reranked_run.trec"
RUN_NAME = "bert_tf_rerank"
FIRST_STAGE_PREFIX = "first_stage_"
RERANKER_PREFIX = "reranker_"  # the model's own order, when the written run is fused
FUSIONS = ("none", "rrf")


@dataclasses.dataclass(frozen=True)
class RerankSettings:
    """The task flags of run_rerank.

    Attributes:
        train_dir: a BEIR folder whose qrels/train.tsv gives the positives ("" = none).
        train_file: (query, positive[, negatives]) rows instead (`beir_data`).
        eval_dir: the BEIR folder --do_rerank scores.
        eval_split: its qrels split.
        first_stage: "bm25" or a TREC run file of the eval split's queries.
        rerank_top_k: candidates per query.
        num_hard_negatives, hard_negative_range_min, hard_negative_range_max,
        hard_negative_sampling, seed: how BM25 negatives are mined (`MiningConfig`).
        loss: "bce" or "listwise" (`rerank_objective`).
        classifier_readout: the head's input, one of `heads.READOUTS`.
        fusion: "none" (the run is the model's order) or "rrf" (fused with the first
            stage's, `fusion.reciprocal_rank_fusion` with constant rrf_k).
    """

    train_dir: str = ""
    train_file: str = ""
    eval_dir: str = ""
    eval_split: str = "test"
    first_stage: str = "bm25"  # first_stage.BM25
    rerank_top_k: int = 100
    num_hard_negatives: int = 4
    hard_negative_range_min: int = 0
    hard_negative_range_max: int = 100
    hard_negative_sampling: str = "top"
    seed: int = 12345
    loss: str = "bce"
    classifier_readout: str = "pooler"
    fusion: str = "none"
    rrf_k: float = RRF_DEFAULT_K

    def __post_init__(self) -> None:
        if self.rerank_top_k < 1:
            raise UserError(f"--rerank_top_k must be >= 1, got {self.rerank_top_k}")
        if self.loss not in LOSSES:
            raise UserError(f"--loss must be one of {', '.join(LOSSES)}, got {self.loss!r}")
        if self.classifier_readout not in heads.READOUTS:
            raise UserError(f"--classifier_readout must be one of {', '.join(heads.READOUTS)}, "
                            f"got {self.classifier_readout!r}")
        if self.fusion not in FUSIONS:
            raise UserError(f"--fusion must be one of {', '.join(FUSIONS)}, got "
                            f"{self.fusion!r}")
        if self.rrf_k <= 0:
            raise UserError(f"--rrf_k must be > 0, got {self.rrf_k:g}")
        self.mining()  # its checks, now

    def mining(self) -> MiningConfig:
        return MiningConfig("bm25", self.num_hard_negatives, self.hard_negative_range_min,
                            self.hard_negative_range_max, self.hard_negative_sampling,
                            self.seed)


class RerankTask:
    """What run_rerank adds to the shared runner (see `runner.Task`)."""

    kind = "classifier"
    input_keys = ("input_ids", "input_mask", "segment_ids")
    label_keys = ("label_ids",)
    trim_keys = input_keys

    def __init__(self, settings: RerankSettings):
        self.settings = settings
        self.examples: Dict[str, List[Example]] = {}
        self.features: Dict[str, classification_data.ClassificationFeatures] = {}
        self.rerank: Optional[rerank_pairs.RerankPairs] = None
        self.split: Optional[beir_data.BeirSplit] = None
        self.group_size = 1 + settings.num_hard_negatives  # listwise groups

    def num_labels(self) -> int:
        return 1

    def build_model(self, config: BertConfig):
        """The encoder of `config` with BERT's classifier head of one logit on the readout
        (with the pooler: transformers' BertForSequenceClassification)."""
        return heads.classifier(config, 1, "bert", self.settings.classifier_readout)

    def serving_settings(self) -> Dict[str, object]:
        """finetune_task.json: export rebuilds the head and adds the `score` signature."""
        return {"classifier_readout": self.settings.classifier_readout, "reranker": True}

    def objective(self):
        if self.settings.loss == "listwise":
            return ListwiseObjective(self.group_size)
        return BinaryCrossEntropyObjective()

    def read(self, do_train: bool, do_eval: bool, do_predict: bool, model_dir: str) -> None:
        """Reads the pairs the run needs (before any TF work).

        Raises:
            UserError: bad input files, or `model_dir` is not a reranker's.
        """
        s = self.settings
        if do_train and s.loss == "listwise":
            groups = rerank_pairs.training_groups(s.train_dir, s.train_file, s.mining())
            self.examples["train"] = [pair for group in groups for pair in group]
        elif do_train:
            self.examples["train"] = rerank_pairs.training_pairs(s.train_dir, s.train_file,
                                                                 s.mining())
        else:
            info = runner.read_task_file(model_dir)
            if not info.get("reranker"):
                raise UserError(f"{model_dir} holds a fine-tuned {info.get('kind')}, not a "
                                "reranker (train one with --do_train)")
        if do_eval:
            if not s.eval_dir:
                raise UserError("--do_rerank needs --eval_dir (a BEIR folder)")
            self.split = beir_data.read_split(s.eval_dir, s.eval_split)
            found = first_stage.candidates(s.first_stage, self.split, s.rerank_top_k)
            self.rerank = rerank_pairs.rerank_pairs(self.split, found)
            self.examples["eval"] = self.rerank.examples
            logging.info("reranking %d candidates of %d queries (%s, top %d)",
                         len(self.rerank.examples), len(found), s.first_stage, s.rerank_top_k)

    def save_assets(self, output_dir: str) -> None:
        # One output, no class names: the label list of a regression classifier.
        labels_io.save_label_list(os.path.join(output_dir, labels_io.LABEL_LIST_FILE), None)

    def arrays(self, split: str, tokenizer, max_seq_length: int) -> Dict[str, np.ndarray]:
        """Featurized pairs of `split` ("train" or "eval"): {name: [pairs, ...]}, or for
        listwise training {name: [groups, group_size, ...]}."""
        if split not in self.features:
            feats = classification_data.featurize(self.examples[split], None, tokenizer,
                                                  max_seq_length)
            if feats.num_truncated:
                logging.info("%s: %d of %d pairs truncated to --max_seq_length=%d", split,
                             feats.num_truncated, len(feats), max_seq_length)
            self.features[split] = feats
        arrays = self.features[split].arrays
        if split == "train" and self.settings.loss == "listwise":
            k = self.group_size  # the pairs are featurized group after group: views
            return {name: v.reshape((len(v) // k, k) + v.shape[1:])
                    for name, v in arrays.items() if name in self.input_keys + self.label_keys}
        return arrays

    def evaluate(self, outputs: Dict[str, np.ndarray], output_dir: str) -> Dict[str, float]:
        """BEIR's metrics of the reranked and the first-stage runs, the eval BCE; writes the
        reranked run (module docstring)."""
        logits = outputs["logits"][:, 0].astype(np.float64)
        run: Dict[str, Dict[str, float]] = {qid: {} for qid in self.rerank.candidates}
        for (qid, pid), logit in zip(self.rerank.keys, logits):
            run[qid][pid] = float(logit)
        # The first stage's order as scores: the best candidate highest, no ties.
        before = {qid: {pid: float(len(pids) - rank) for rank, pid in enumerate(pids)}
                  for qid, pids in self.rerank.candidates.items()}
        result = {}
        if self.settings.fusion == "rrf":
            result.update({RERANKER_PREFIX + name: value for name, value
                           in ir_metrics.evaluate(self.split.qrels, run).items()})
            # Ties go to the model's order (the first run given).
            run = fusion.reciprocal_rank_fusion([run, before], self.settings.rrf_k)
        result.update(ir_metrics.evaluate(self.split.qrels, run))
        result.update({FIRST_STAGE_PREFIX + name: value for name, value
                       in ir_metrics.evaluate(self.split.qrels, before).items()})
        labels = self.features["eval"].arrays["label_ids"].astype(np.float64)
        bce = -(labels * probabilities.log_sigmoid(logits)
                + (1 - labels) * probabilities.log_sigmoid(-logits))
        result["eval_loss"] = float(bce.mean())
        fileio.makedirs(output_dir)
        trec_run.write_run(os.path.join(output_dir, RERANKED_RUN_FILE), run, RUN_NAME)
        return result

    def write_predictions(self, outputs: Dict[str, np.ndarray], output_dir: str) -> List[str]:
        return []  # run_rerank has no --do_predict: --do_rerank writes the reranked run
