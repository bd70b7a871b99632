"""Extractive question answering (SQuAD v1.1 / v2.0) as a fine-tuning task (run_squad).

Adds to the shared runner: the SQuAD reader and windowing (`squad_data`), the
`BertSpanExtractor` head, the span objective, post-processing to answer text
(`squad_postprocess`) and the official EM/F1 (`squad_metrics`). --do_eval and --do_predict
both read --predict_file: predictions.json and nbest_predictions.json (and null_odds.json for
v2.0) are written either way, and EM/F1 whenever the file has answers.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Dict, List, Optional

import numpy as np
from absl import logging

from bert_tf.core import fileio
from bert_tf.core.errors import UserError
from bert_tf.finetune import heads
from bert_tf.finetune.objectives import SpanObjective
from bert_tf.finetune.squad import squad_data, squad_metrics, squad_postprocess
from bert_tf.modeling.config import BertConfig
from bert_tf.training import results


@dataclasses.dataclass(frozen=True)
class SquadSettings:
    """The task flags of run_squad (the original's names and defaults)."""

    train_file: str = ""
    predict_file: str = ""
    version_2_with_negative: bool = False
    null_score_diff_threshold: float = 0.0
    doc_stride: int = 128
    max_query_length: int = 64
    n_best_size: int = 20
    max_answer_length: int = 30
    do_lower_case: bool = True


class SquadTask:
    """What run_squad adds to the shared runner (see `runner.Task`)."""

    kind = "span"
    input_keys = ("input_ids", "input_mask", "segment_ids")
    label_keys = ("start_positions", "end_positions")
    # None: the span softmax covers the padding, as in the original run_squad, so a batch
    # keeps the full --max_seq_length (see inputs.trim_batch).
    trim_keys = ()

    def __init__(self, settings: SquadSettings):
        self.settings = settings
        self.examples: Dict[str, list] = {}
        self.features: Dict[str, squad_data.SquadFeatures] = {}
        # The outputs --do_eval scored (it wrote eval_results.txt and the predictions).
        self._scored: Optional[Dict[str, np.ndarray]] = None

    def num_labels(self) -> int:
        return 2

    def build_model(self, config: BertConfig):
        """The model this task fine-tunes: the encoder of `config` and this task's head."""
        return heads.BertSpanExtractor(config)

    def objective(self) -> SpanObjective:
        train = self.features.get("train")  # its windows are max_seq_length long, untrimmed
        return SpanObjective(train.arrays["input_ids"].shape[1] if train is not None else None)

    def serving_settings(self) -> Dict[str, object]:
        s = self.settings
        return {"doc_stride": s.doc_stride, "max_query_length": s.max_query_length,
                "n_best_size": s.n_best_size, "max_answer_length": s.max_answer_length,
                "version_2_with_negative": s.version_2_with_negative,
                "null_score_diff_threshold": s.null_score_diff_threshold}

    def read(self, do_train: bool, do_eval: bool, do_predict: bool, model_dir: str) -> None:
        s = self.settings
        if do_train:
            if not s.train_file:
                raise UserError("--train_file is required with --do_train")
            self.examples["train"] = squad_data.read_squad_examples(s.train_file, True)
            if not self.examples["train"]:
                raise UserError(f"{s.train_file}: no usable training question")
            impossible = sum(e.is_impossible for e in self.examples["train"])
            if impossible and not s.version_2_with_negative:
                raise UserError(f"{s.train_file}: {impossible} question(s) without an answer; "
                                "pass --version_2_with_negative for SQuAD 2.0 data")
        if do_eval or do_predict:
            if not s.predict_file:
                raise UserError("--predict_file is required with --do_eval/--do_predict")
            examples = squad_data.read_squad_examples(s.predict_file, False)
            if do_eval and not squad_data.has_answers(examples):
                raise UserError(f"--do_eval needs answers, but {s.predict_file} has none "
                                "(use --do_predict to write predictions only)")
            self.examples["eval"] = self.examples["predict"] = examples

    def save_assets(self, output_dir: str) -> None:
        pass  # no label list: positions are the labels

    def arrays(self, split: str, tokenizer, max_seq_length: int) -> Dict[str, np.ndarray]:
        key = "train" if split == "train" else "eval"
        if key not in self.features:
            s = self.settings
            feats = squad_data.featurize(
                self.examples[split], tokenizer, max_seq_length=max_seq_length,
                doc_stride=s.doc_stride, max_query_length=s.max_query_length,
                is_training=split == "train")
            windows = len(feats.arrays["input_ids"])
            logging.info("%s: %d questions in %d windows of %d tokens (doc_stride %d)",
                         "train" if split == "train" else "predict", len(self.examples[split]),
                         windows, max_seq_length, s.doc_stride)
            self.features[key] = feats
        return self.features[key].arrays

    def _postprocess(self, outputs: Dict[str, np.ndarray], output_dir: str
                     ) -> squad_postprocess.SquadPredictions:
        s = self.settings
        predictions = squad_postprocess.postprocess(
            self.examples["eval"], self.features["eval"].feature_meta,
            outputs["start_logits"], outputs["end_logits"], do_lower_case=s.do_lower_case,
            n_best_size=s.n_best_size, max_answer_length=s.max_answer_length,
            version_2_with_negative=s.version_2_with_negative,
            null_score_diff_threshold=s.null_score_diff_threshold)
        for path in squad_postprocess.write_predictions(predictions, output_dir):
            logging.info("wrote %s", path)
        return predictions

    def _score(self, predictions: squad_postprocess.SquadPredictions) -> Dict[str, float]:
        with fileio.open_file(self.settings.predict_file, "r") as f:
            dataset = json.load(f)
        version = "2.0" if self.settings.version_2_with_negative else "1.1"
        return squad_metrics.squad_evaluate(dataset, predictions.predictions,
                                            predictions.null_odds, version=version)

    def evaluate(self, outputs: Dict[str, np.ndarray], output_dir: str) -> Dict[str, float]:
        """Official EM/F1 (v2.0: also HasAns/NoAns and the best null threshold)."""
        self._scored = outputs
        return self._score(self._postprocess(outputs, output_dir))

    def write_predictions(self, outputs: Dict[str, np.ndarray], output_dir: str) -> List[str]:
        if outputs is self._scored:  # --do_eval already wrote these very predictions
            return [os.path.join(output_dir, "predictions.json")]
        predictions = self._postprocess(outputs, output_dir)
        written = [os.path.join(output_dir, "predictions.json")]
        if squad_data.has_answers(self.examples["eval"]) and self._scored is None:
            scores = self._score(predictions)
            results.write_eval_results(os.path.join(output_dir, results.EVAL_RESULTS_FILE),
                                       scores)
            written.append(os.path.join(output_dir, results.EVAL_RESULTS_FILE))
        return written
