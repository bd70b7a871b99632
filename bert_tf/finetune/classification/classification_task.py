"""Sentence(-pair) classification and regression as a fine-tuning task (run_classifier).

Adds to the shared runner (`bert_tf.finetune.runner`): the GLUE / tsv / csv / jsonl readers
(`classification_data`), the `BertClassifier` head, its objective, the metrics written to
eval_results.txt and test_results.tsv with per-class probabilities and the label string.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Dict, List, Optional, Tuple

import numpy as np
from absl import logging

from bert_tf.core import fileio
from bert_tf.core.errors import UserError
from bert_tf.finetune import heads, probabilities, runner, subset
from bert_tf.finetune import label_list as labels_io
from bert_tf.finetune.classification import classification_data as data
from bert_tf.finetune.classification import classification_metrics as metrics
from bert_tf.finetune.objectives import ClassificationObjective
from bert_tf.modeling.config import BertConfig

# CoLA is scored by Matthews correlation in GLUE; the others add F1 when binary.
_MCC_TASKS = ("cola",)
TEST_RESULTS_FILE = "test_results.tsv"


@dataclasses.dataclass(frozen=True)
class ClassificationSettings:
    """The task flags of run_classifier.

    Attributes:
        task_name: a GLUE task or tsv/csv/jsonl.
        data_dir: where train/dev/test files are.
        text_column, text_pair_column, label_column: columns of your own files.
        regression: float labels (your own files; STS-B is regression by itself).
        eval_split: the split --do_eval scores ("dev"; MNLI also "dev_mismatched").
        predict_file: a file --do_predict reads instead of the task's test split (MNLI's
            test_mismatched.tsv, GLUE's diagnostic set); same columns as the test split.
        predictions_file: the file name --do_predict writes in the output directory.
        max_train_examples: train on a seeded subset of this many examples (0 = all).
        subset_seed: the subset's seed (`bert_tf.finetune.subset`).
        classifier_readout: the head's sentence vector, "pooler", "cls" or "mean"
            (`bert_tf.finetune.heads`).
        classifier_head: "bert" (`BertClassifier` of the readout), "electra"
            (`ElectraClassifier`: dense + GELU + dense on [CLS]), "modernbert"
            (`ModernClassifier`: dense + GELU + LayerNorm + dense on [CLS] or the mean) or
            "auto": "modernbert" for a modern encoder, "electra" when --init_checkpoint is
            an ELECTRA discriminator, else "bert" (a fine-tuned directory's own head when it
            resumes or evaluates).
    """

    task_name: str
    data_dir: str
    text_column: str = ""
    text_pair_column: str = ""
    label_column: str = ""
    regression: bool = False
    eval_split: str = "dev"
    predict_file: str = ""
    predictions_file: str = TEST_RESULTS_FILE
    max_train_examples: int = 0
    subset_seed: int = 0
    classifier_readout: str = "pooler"
    classifier_head: str = "auto"

    def __post_init__(self) -> None:
        if self.classifier_readout not in heads.READOUTS:
            raise UserError(f"--classifier_readout must be one of {', '.join(heads.READOUTS)}, "
                            f"got {self.classifier_readout!r}")
        if self.classifier_head not in ("auto",) + heads.CLASSIFIER_HEADS:
            raise UserError(f"--classifier_head must be one of auto, "
                            f"{', '.join(heads.CLASSIFIER_HEADS)}, got {self.classifier_head!r}")
        if self.classifier_head == "electra" and self.classifier_readout == "mean":
            raise UserError("--classifier_head=electra reads [CLS]: --classifier_readout=mean "
                            "needs --classifier_head=bert")


class ClassificationTask:
    """What run_classifier adds to the shared runner (see `runner.Task`)."""

    kind = "classifier"
    input_keys = ("input_ids", "input_mask", "segment_ids")
    label_keys = ("label_ids",)
    # Per-position arrays a training batch may be cut to its longest row (inputs.trim_batch).
    trim_keys = input_keys

    def __init__(self, settings: ClassificationSettings):
        self.settings = settings
        self.spec = data.get_task(settings.task_name, settings.text_column or None,
                                  settings.text_pair_column or None,
                                  settings.label_column or None, settings.regression)
        self.label_list: Optional[List[str]] = None
        self.splits: Dict[str, data.SplitData] = {}
        self.features: Dict[str, data.ClassificationFeatures] = {}
        # (examples trained on, examples in the training file), once read.
        self.train_sizes: Tuple[int, int] = (0, 0)
        # The head "auto" settles on (`settle_head`); build_model before that: the flag's.
        self.head = settings.classifier_head

    # ------------------------------------------------------------------ setup

    @property
    def regression(self) -> bool:
        return self.spec.is_regression

    def num_labels(self) -> int:
        return 1 if self.regression else len(self.label_list or ())

    def settle_head(self, init_kind: str, model_dir: str) -> None:
        """Settles --classifier_head=auto: the fine-tuned directory's own head when
        `model_dir` has one (resuming, evaluating), else "electra" for an ELECTRA
        discriminator (`init_kind`, `warm_start.InitModel.kind`), else "bert".

        Raises:
            UserError: an explicit head other than the one `model_dir` was fine-tuned with.
        """
        task_file = os.path.join(model_dir, runner.TASK_FILE)
        trained = (runner.read_task_file(model_dir).get("classifier_head", "bert")
                   if fileio.exists(task_file) else None)
        wanted = self.settings.classifier_head
        if trained and wanted not in ("auto", trained):
            raise UserError(f"{model_dir} was fine-tuned with --classifier_head={trained}, "
                            f"not {wanted}")
        if wanted == "auto":
            wanted = trained or (init_kind if init_kind in ("electra", "modernbert")
                                 else "bert")
        if wanted == "electra" and self.settings.classifier_readout == "mean":
            raise UserError("an ELECTRA discriminator's head reads [CLS]: give "
                            "--classifier_head=bert for --classifier_readout=mean")
        self.head = wanted

    def build_model(self, config: BertConfig):
        """The model this task fine-tunes: the encoder of `config` and this task's head."""
        head = "bert" if self.head == "auto" else self.head
        return heads.classifier(config, self.num_labels(), head,
                                self.settings.classifier_readout)

    def serving_settings(self) -> Dict[str, object]:
        """finetune_task.json's head settings: export rebuilds the same head and readout
        (a BERT head's file is as before ELECTRA's: no classifier_head means "bert")."""
        if self.head == "electra":
            return {"classifier_readout": "cls", "classifier_head": "electra"}
        if self.head == "modernbert":  # [CLS] or the mean; "pooler" reads as [CLS]
            readout = "mean" if self.settings.classifier_readout == "mean" else "cls"
            return {"classifier_readout": readout, "classifier_head": "modernbert"}
        return {"classifier_readout": self.settings.classifier_readout}

    def objective(self) -> ClassificationObjective:
        train = self.features.get("train")
        mean_square = (float(np.mean(np.square(train.arrays["label_ids"])))
                       if self.regression and train is not None and len(train.guids) else None)
        return ClassificationObjective(regression=self.regression, num_labels=self.num_labels(),
                                       label_mean_square=mean_square)

    def read(self, do_train: bool, do_eval: bool, do_predict: bool, model_dir: str) -> None:
        """Reads the files the run needs and settles the label list (before any TF work).

        Raises:
            UserError: bad files, eval without labels, a dev label unknown to training.
        """
        s = self.settings
        if do_train:
            train = data.read_split(self.spec, s.data_dir, "train")
            self.splits["train"] = dataclasses.replace(train, examples=subset.take_subset(
                train.examples, s.max_train_examples, s.subset_seed))
            self.train_sizes = (len(self.splits["train"].examples), len(train.examples))
            self.label_list = data.build_label_list(self.spec, self.splits["train"])
        else:
            self.label_list = labels_io.load_label_list(
                os.path.join(model_dir, labels_io.LABEL_LIST_FILE))
            # Another readout would restore the same variables and score other logits
            # (ELECTRA's head reads [CLS] whatever the flag says: settle_head; ModernBERT's
            # reads [CLS] for "pooler" too).
            task_file = os.path.join(model_dir, runner.TASK_FILE)
            info = runner.read_task_file(model_dir) if fileio.exists(task_file) else {}
            trained = info.get("classifier_readout", "pooler") if info else s.classifier_readout
            wanted = s.classifier_readout
            if info.get("classifier_head") == "modernbert" and wanted == "pooler":
                wanted = "cls"
            if info.get("classifier_head") != "electra" and trained != wanted:
                raise UserError(f"{model_dir} was fine-tuned with --classifier_readout="
                                f"{trained}; evaluate and predict with the same, not "
                                f"{s.classifier_readout}")
        if do_eval:
            dev = data.read_split(self.spec, s.data_dir, s.eval_split)
            data.require_labels(dev)
            if self.label_list is not None:  # now, not after training (featurize checks too)
                known = set(self.label_list)
                bad = next((e for e in dev.examples if str(e.label) not in known), None)
                if bad is not None:
                    raise UserError(f"{bad.where}: label {bad.label!r} is not one of the "
                                    f"training labels ({', '.join(self.label_list)})")
            self.splits["eval"] = dev
        if do_predict:
            spec = self.spec
            if s.predict_file:  # an absolute path stays as it is under os.path.join
                spec = dataclasses.replace(spec, files={**spec.files,
                                                        "test": os.path.abspath(s.predict_file)})
            self.splits["predict"] = data.read_split(spec, s.data_dir, "test")
        if self.label_list is not None and len(self.label_list) < 2:
            raise UserError(f"{self.splits['train'].path}: only one label "
                            f"({self.label_list[0]!r}); classification needs two or more")

    def save_assets(self, output_dir: str) -> None:
        labels_io.save_label_list(os.path.join(output_dir, labels_io.LABEL_LIST_FILE),
                                  self.label_list)

    def arrays(self, split: str, tokenizer, max_seq_length: int) -> Dict[str, np.ndarray]:
        """Featurized split ("train", "eval", "predict")."""
        if split not in self.features:
            examples = self.splits[split].examples
            if split == "predict":  # its labels, if any, are not needed (nor checked)
                examples = [dataclasses.replace(e, label=None) for e in examples]
            try:
                feats = data.featurize(examples, self.label_list, tokenizer, max_seq_length)
            except UserError as e:
                raise UserError(f"{self.splits[split].path}: {e}") from None
            if feats.num_truncated:
                logging.info("%s: %d of %d examples truncated to --max_seq_length=%d",
                             self.splits[split].path, feats.num_truncated, len(feats),
                             max_seq_length)
            self.features[split] = feats
        return self.features[split].arrays

    # ------------------------------------------------------------------ results

    def evaluate(self, outputs: Dict[str, np.ndarray], output_dir: str) -> Dict[str, float]:
        """eval_* metrics of the dev predictions (the official GLUE metrics of the task)."""
        logits = outputs["logits"].astype(np.float64)
        gold = self.features["eval"].arrays["label_ids"]
        if self.regression:
            result = metrics.classification_metrics("regression", gold, logits[:, 0])
            result["eval_loss"] = float(np.mean((logits[:, 0] - gold) ** 2))
            return result
        result = metrics.classification_metrics(
            "classification", gold, logits, with_mcc=self.spec.name in _MCC_TASKS)
        nll = -probabilities.log_softmax(logits)[np.arange(len(gold)), gold]
        result["eval_loss"] = float(nll.mean())
        return result

    def write_predictions(self, outputs: Dict[str, np.ndarray], output_dir: str) -> List[str]:
        """test_results.tsv: guid, one probability column per class, the predicted label."""
        logits = outputs["logits"].astype(np.float64)
        guids = self.features["predict"].guids
        path = os.path.join(output_dir, self.settings.predictions_file)
        if self.regression:
            lines = ["guid\tprediction"] + [f"{g}\t{v:.6f}" for g, v in zip(guids, logits[:, 0])]
        else:
            probs = np.exp(probabilities.log_softmax(logits))
            header = ["guid"] + [f"prob_{name}" for name in self.label_list] + ["label"]
            lines = ["\t".join(header)]
            for guid, row in zip(guids, probs):
                cells = [guid] + [f"{p:.6f}" for p in row] + [self.label_list[int(row.argmax())]]
                lines.append("\t".join(cells))
        with fileio.atomic_output(path, "wb") as f:
            f.write(("\n".join(lines) + "\n").encode("utf-8"))
        return [path]
