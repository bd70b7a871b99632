"""Token tagging (NER, POS) as a fine-tuning task (run_tagging).

Adds to the shared runner: the CoNLL reader and windowed featurizer (`tagging_data`), the
`BertTagger` head, its objective, entity-level metrics with CoNLL semantics
(`tagging_metrics`) and CoNLL prediction files. Every word of every sentence is predicted:
long sentences are windowed and each word is read from the window where it has the most
context.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Dict, List, Optional, Tuple

import numpy as np
from absl import logging

from bert_tf.core.errors import UserError
from bert_tf.finetune import heads, probabilities, subset
from bert_tf.finetune import label_list as labels_io
from bert_tf.finetune.objectives import TaggingObjective
from bert_tf.finetune.tagging import tagging_data as data
from bert_tf.finetune.tagging import tagging_metrics
from bert_tf.modeling.config import BertConfig

EVAL_PREDICTIONS_FILE = "eval_predictions.conll"
TEST_PREDICTIONS_FILE = "test_predictions.conll"


@dataclasses.dataclass(frozen=True)
class TaggingSettings:
    """The task flags of run_tagging: CoNLL files (token first, tag last).

    `max_train_examples` > 0 trains on a seeded subset of that many sentences
    (`bert_tf.finetune.subset`, seeded by `subset_seed`).
    """

    train_file: str = ""
    eval_file: str = ""
    predict_file: str = ""
    max_train_examples: int = 0
    subset_seed: int = 0


class TaggingTask:
    """What run_tagging adds to the shared runner (see `runner.Task`)."""

    kind = "tagger"
    input_keys = ("input_ids", "input_mask", "segment_ids")
    label_keys = ("label_ids", "label_weights")
    # Per-position arrays a training batch may be cut to its longest row (inputs.trim_batch).
    trim_keys = input_keys + label_keys

    def __init__(self, settings: TaggingSettings):
        self.settings = settings
        self.label_list: Optional[List[str]] = None
        self.sentences: Dict[str, List[data.Sentence]] = {}
        self.features: Dict[str, data.TaggingFeatures] = {}
        self.paths: Dict[str, str] = {}
        # (sentences trained on, sentences in the training file), once read.
        self.train_sizes: Tuple[int, int] = (0, 0)

    def num_labels(self) -> int:
        return len(self.label_list or ())

    def build_model(self, config: BertConfig):
        """The model this task fine-tunes: the encoder of `config` and this task's head."""
        return heads.BertTagger(config, self.num_labels())

    def objective(self) -> TaggingObjective:
        return TaggingObjective(self.num_labels())

    def read(self, do_train: bool, do_eval: bool, do_predict: bool, model_dir: str) -> None:
        s = self.settings
        wanted = (("train", do_train, s.train_file, "--train_file", True),
                  ("eval", do_eval, s.eval_file, "--eval_file", True),
                  ("predict", do_predict, s.predict_file, "--predict_file", False))
        for split, needed, path, flag, tags in wanted:
            if not needed:
                continue
            if not path:
                raise UserError(f"{flag} is required")
            self.paths[split] = path
            self.sentences[split] = data.read_conll(path, require_tags=tags)
            if not self.sentences[split]:
                raise UserError(f"{path}: no sentences")
        if do_train:
            total = len(self.sentences["train"])
            self.sentences["train"] = subset.take_subset(
                self.sentences["train"], s.max_train_examples, s.subset_seed)
            self.train_sizes = (len(self.sentences["train"]), total)
            self.label_list = data.build_tag_list(self.sentences["train"])
        else:
            self.label_list = labels_io.load_label_list(
                os.path.join(model_dir, labels_io.LABEL_LIST_FILE))
        if do_eval:
            unknown = sorted({t for sent in self.sentences["eval"] for t in sent.tags}
                             - set(self.label_list))
            if unknown:
                raise UserError(f"{self.paths['eval']}: tag {unknown[0]!r} is not among the "
                                f"training tags ({len(unknown)} unknown tag(s))")

    def save_assets(self, output_dir: str) -> None:
        labels_io.save_label_list(os.path.join(output_dir, labels_io.LABEL_LIST_FILE),
                                  self.label_list)

    def arrays(self, split: str, tokenizer, max_seq_length: int) -> Dict[str, np.ndarray]:
        if split not in self.features:
            labels = self.label_list if split != "predict" else None
            feats = data.featurize(self.sentences[split], labels, tokenizer, max_seq_length)
            if feats.num_split_sentences:
                logging.info("%s: %d sentence(s) longer than --max_seq_length=%d split into "
                             "overlapping windows (every word is still predicted)",
                             self.paths[split], feats.num_split_sentences, max_seq_length)
            if feats.num_empty_words:
                logging.warning("%s: %d word(s) gave no WordPiece and were fed as [UNK]",
                                self.paths[split], feats.num_empty_words)
            self.features[split] = feats
        return self.features[split].arrays

    def _tags(self, split: str, outputs: Dict[str, np.ndarray]) -> List[List[str]]:
        return data.predictions_to_tags(self.features[split], outputs["logits"],
                                        self.label_list)

    def evaluate(self, outputs: Dict[str, np.ndarray], output_dir: str) -> Dict[str, float]:
        """Entity P/R/F1 (CoNLL semantics) and word accuracy; writes the dev predictions."""
        gold = [s.tags for s in self.sentences["eval"]]
        predicted = self._tags("eval", outputs)
        result = tagging_metrics.tagging_metrics(gold, predicted)
        arrays = self.features["eval"].arrays
        log_probs = probabilities.log_softmax(outputs["logits"])
        scored = arrays["word_index"] >= 0  # each word once, from its max-context window
        picked = np.take_along_axis(log_probs, arrays["label_ids"][..., None], -1)[..., 0]
        result["eval_loss"] = float(-picked[scored].mean())
        data.write_conll(os.path.join(output_dir, EVAL_PREDICTIONS_FILE),
                         [s.words for s in self.sentences["eval"]], predicted, gold)
        return result

    def write_predictions(self, outputs: Dict[str, np.ndarray], output_dir: str) -> List[str]:
        path = os.path.join(output_dir, TEST_PREDICTIONS_FILE)
        data.write_conll(path, [s.words for s in self.sentences["predict"]],
                         self._tags("predict", outputs))
        return [path]
