"""The runs of a scorecard: one fine-tuning run per model, task, learning rate and seed.

    for seed, learning rate, task:  runner.run(...) in runs/<model>/<task>/lr<lr>-seed<seed>/
        -> eval_results.txt (+ test predictions)  -> scorecard_run.json (written last)
    -> scorecard_report: per task mean ± std and median over seeds, the GLUE score,
       scorecard.md / scorecard.json, and with do_predict the GLUE server's files.

Each run is the one fine-tuning flow (`bert_tf.finetune.runner.run`) with its own output
folder: no second trainer. Runs go seed by seed, so a scorecard stopped early already holds
whole seeds, and every task has a measured time for the ETA after the first round.

A run whose loss diverges (`bert_tf.training.health`) is finished too: its record says so,
with the run's one-line reason, and the report shows it as diverged instead of scoring the
model it left.

Resume: a run counts as finished only when its `scorecard_run.json` exists, describes the
same run (model, task, learning rate, seed, protocol) and agrees with the eval_results files
beside it. Anything else in its folder (a killed run, a damaged file, another protocol) is
deleted and the run starts again: it is not trusted, and not resumed from a checkpoint.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import shutil
import time
from typing import Callable, Dict, Iterator, List, Optional, Tuple

from absl import logging

from bert_tf.core import fileio
from bert_tf.core.errors import UserError
from bert_tf.finetune import heads, runner
from bert_tf.finetune.scorecard.suite import ScoredTask, results_name
from bert_tf.training import distribution, health

RUN_RECORD_FILE = "scorecard_run.json"


@dataclasses.dataclass(frozen=True)
class Model:
    """A model to score (a row of the report).

    Attributes:
        name: the row's name and its runs' folder name.
        init_checkpoint: anything `--init_checkpoint` takes, or "" (random weights).
        bert_config_file, vocab_file: default to the files beside init_checkpoint.
        do_lower_case: as the model was pretrained.
    """

    name: str
    init_checkpoint: str = ""
    bert_config_file: str = ""
    vocab_file: str = ""
    do_lower_case: bool = True


@dataclasses.dataclass(frozen=True)
class Protocol:
    """How every model is fine-tuned: the same for each row.

    Attributes:
        name: "fixed" (one learning rate for every task) or "grid" (per task, the learning
            rate with the best mean dev score over seeds, as the BERT paper chose).
        learning_rates: one for "fixed"; the grid otherwise.
        seeds: fine-tuning seeds (head, dropout, order).
        max_train_examples: train on a seeded subset of at most this many examples per task
            (0 = all); subset_seed seeds it, the same for every model and seed.
        classifier_readout: the classification tasks' sentence vector ("pooler", "cls",
            "mean": `bert_tf.finetune.heads`); a suite's classification task may set its own.
        classifier_head: "auto", "bert" or "electra" (run_classifier's --classifier_head):
            give "electra" to score a random reference with the ELECTRA arm's head.
        The rest: as run_classifier's flags.
    """

    name: str
    learning_rates: Tuple[float, ...]
    seeds: Tuple[int, ...]
    train_batch_size: int = 32
    eval_batch_size: int = 32
    num_train_epochs: float = 3.0
    warmup_proportion: float = 0.1
    weight_decay_rate: float = 0.01
    max_seq_length: int = 128
    max_train_examples: int = 0
    subset_seed: int = 0
    classifier_readout: str = "pooler"
    classifier_head: str = "auto"

    def __post_init__(self) -> None:
        if self.name not in ("fixed", "grid"):
            raise UserError(f"--protocol must be fixed or grid, got {self.name!r}")
        if not self.learning_rates or any(not lr > 0 for lr in self.learning_rates):
            raise UserError("learning rates must be positive numbers")
        if self.name == "fixed" and len(self.learning_rates) != 1:
            raise UserError("--protocol=fixed takes one --learning_rate; use --protocol=grid "
                            "with --learning_rates for several")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise UserError("--seeds must name at least one seed, each once")
        if self.max_train_examples < 0:
            raise UserError("--max_train_examples must be >= 0")
        if self.classifier_readout not in heads.READOUTS:
            raise UserError(f"--classifier_readout must be one of {', '.join(heads.READOUTS)}, "
                            f"got {self.classifier_readout!r}")


@dataclasses.dataclass(frozen=True)
class Run:
    """One fine-tuning run of the scorecard."""

    model: Model
    task: ScoredTask
    learning_rate: float
    seed: int

    def folder(self, output_dir: str) -> str:
        return os.path.join(output_dir, "runs", self.model.name, self.task.name,
                            f"lr{self.learning_rate:g}-seed{self.seed}")


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """What a finished run leaves: its scores and where its test predictions are.

    Attributes:
        metrics: eval_results key -> value (a second evaluation's keys `<suffix>/key`).
        predictions: GLUE submission file name -> the run's test_results file.
        seconds: fine-tuning time (every evaluation included).
        train_examples: (examples trained on, examples in the training file).
        diverged: the divergence stop's line when the run diverged ("" otherwise: then
            metrics and predictions are empty).
    """

    metrics: Dict[str, float]
    predictions: Dict[str, str]
    seconds: float
    train_examples: Tuple[int, int]
    diverged: str = ""


def plan(models: List[Model], tasks: List[ScoredTask], protocol: Protocol) -> List[Run]:
    """Every run, seed-major: all tasks and learning rates of seed 1, then of seed 2, ..."""
    return [Run(model, task, lr, seed) for seed in protocol.seeds
            for model in models for lr in protocol.learning_rates for task in tasks]


def fingerprint(run: Run, protocol: Protocol) -> Dict[str, object]:
    """Everything that decides a run's result (compared on resume)."""
    model = dataclasses.asdict(run.model)
    for key in ("init_checkpoint", "bert_config_file", "vocab_file"):
        model[key] = os.path.abspath(model[key]) if model[key] else ""
    proto = dataclasses.asdict(protocol)
    proto.pop("learning_rates")
    proto.pop("seeds")
    proto.pop("name")
    proto["max_seq_length"] = run.task.max_seq_length or protocol.max_seq_length
    if not run.task.subsettable:
        proto.pop("max_train_examples")
        proto.pop("subset_seed")
    # Only where it applies, and not at its default, so that earlier records still match.
    if (run.task.kind != "classification" or protocol.classifier_readout == "pooler"
            or "classifier_readout" in dict(run.task.settings)):
        proto.pop("classifier_readout")
    if run.task.kind != "classification" or protocol.classifier_head == "auto":
        proto.pop("classifier_head")
    return {"model": model, "task": {"name": run.task.name, "kind": run.task.kind,
                                     "settings": [list(kv) for kv in run.task.settings]},
            "learning_rate": run.learning_rate, "seed": run.seed, "protocol": proto}


def read_eval_results(path: str) -> Dict[str, float]:
    """The `key = value` lines of an eval_results.txt file.

    Raises:
        ValueError: a line that is not `key = number`.
    """
    with fileio.open_file(path, "r") as f:
        pairs = [line.split(" = ", 1) for line in f.read().splitlines() if line.strip()]
    if not pairs or any(len(p) != 2 for p in pairs):
        raise ValueError(f"{path}: not an eval_results file")
    return {key: float(value) for key, value in pairs}


def _results_metrics(folder: str, task: ScoredTask) -> Dict[str, float]:
    metrics: Dict[str, float] = {}
    for evaluation in task.evaluations:
        if not evaluation.eval_split:
            continue
        found = read_eval_results(os.path.join(
            folder, results_name("eval_results", evaluation, "txt")))
        prefix = f"{evaluation.suffix}/" if evaluation.suffix else ""
        metrics.update({prefix + k: v for k, v in found.items()})
    return metrics


def load_record(run: Run, protocol: Protocol, output_dir: str) -> Optional[RunRecord]:
    """The run's record if it finished with these settings and its files agree, else None."""
    folder = run.folder(output_dir)
    path = os.path.join(folder, RUN_RECORD_FILE)
    try:
        with fileio.open_file(path, "r") as f:
            doc = json.load(f)
        if doc["fingerprint"] != json.loads(json.dumps(fingerprint(run, protocol))):
            return None
        record = RunRecord(doc["metrics"], doc["predictions"], doc["seconds"],
                           tuple(doc["train_examples"]), doc.get("diverged", ""))
        if not record.diverged and _results_metrics(folder, run.task) != record.metrics:
            return None
        if any(not fileio.exists(os.path.join(folder, p)) for p in record.predictions.values()):
            return None
        return record
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _finetune_config(run: Run, protocol: Protocol, folder: str, evaluation_index: int,
                     do_eval: bool, do_predict: bool, strategy: distribution.DistributionConfig
                     ) -> runner.FinetuneConfig:
    model = run.model
    first = evaluation_index == 0
    evaluation = run.task.evaluations[evaluation_index]
    return runner.FinetuneConfig(
        output_dir=folder, bert_config_file=model.bert_config_file, vocab_file=model.vocab_file,
        do_lower_case=model.do_lower_case, init_checkpoint=model.init_checkpoint if first else "",
        do_train=first, do_eval=do_eval, do_predict=do_predict,
        train_batch_size=protocol.train_batch_size, eval_batch_size=protocol.eval_batch_size,
        learning_rate=run.learning_rate, num_train_epochs=protocol.num_train_epochs,
        warmup_proportion=protocol.warmup_proportion,
        weight_decay_rate=protocol.weight_decay_rate,
        max_seq_length=run.task.max_seq_length or protocol.max_seq_length, seed=run.seed,
        distribution=strategy, save_checkpoints_steps=10**9, log_every_n_steps=10**9,
        eval_results_file=results_name("eval_results", evaluation, "txt"))


@contextlib.contextmanager
def _output_to(log: io.StringIO) -> Iterator[None]:
    """Sends a run's printed results and absl log lines (INFO and up) to `log`."""
    handler = logging.get_absl_handler().python_handler
    verbosity = logging.get_verbosity()
    stream = handler.setStream(log)
    logging.set_verbosity(logging.INFO)
    try:
        with contextlib.redirect_stdout(log):
            yield
    finally:
        handler.setStream(stream)
        logging.set_verbosity(verbosity)


def execute(run: Run, protocol: Protocol, output_dir: str, do_predict: bool,
            keep_checkpoints: bool = False,
            strategy: Optional[distribution.DistributionConfig] = None) -> RunRecord:
    """Runs one fine-tuning run from scratch in its folder and writes its record last.

    The run's console output goes to run.log in its folder. Unless `keep_checkpoints`, the
    fine-tuned checkpoint is deleted once its predictions are written (a scorecard of 5
    tasks x 4 learning rates x 5 seeds would otherwise keep 100 models).

    A run that diverges is recorded as such (`RunRecord.diverged`), without metrics.

    Raises:
        UserError: from the run (bad data, a checkpoint that does not fit).
    """
    import keras

    strategy = strategy or distribution.DistributionConfig()
    folder = run.folder(output_dir)
    if fileio.exists(folder):
        shutil.rmtree(folder)  # a killed or foreign run: not trusted (module docstring)
    fileio.makedirs(folder)
    start = time.monotonic()
    predictions: Dict[str, str] = {}
    train_examples = (0, 0)
    diverged = ""
    log = io.StringIO()
    for index, evaluation in enumerate(run.task.evaluations):
        predict_path = run.task.predict_path(evaluation) if do_predict else None
        if not evaluation.eval_split and predict_path is None:
            continue  # AX without --do_predict or without GLUE's diagnostic folder
        task = run.task.build(evaluation, protocol.max_train_examples if
                              run.task.subsettable else 0, protocol.subset_seed,
                              run.model.do_lower_case, protocol.classifier_readout,
                              protocol.classifier_head)
        config = _finetune_config(run, protocol, folder, index, bool(evaluation.eval_split),
                                  predict_path is not None, strategy)
        try:
            with _output_to(log):
                runner.run(config, task)
        except health.Diverged as e:  # a result of the protocol, not a failure of the job
            diverged = str(e)
            log.write(f"error: {diverged}\n")
        if index == 0:
            train_examples = getattr(task, "train_sizes", (0, 0))
        if diverged:
            keras.backend.clear_session()
            break
        if predict_path is not None and evaluation.submission_file:
            predictions[evaluation.submission_file] = results_name(
                "test_results", evaluation, "tsv")
        keras.backend.clear_session()  # frees the run's graphs (and collects garbage)
    with fileio.atomic_output(os.path.join(folder, "run.log"), "wb") as f:
        f.write(log.getvalue().encode("utf-8"))
    if not keep_checkpoints:
        for name in fileio.listdir(folder):
            if name.startswith("ckpt-") or name == "checkpoint":
                fileio.remove(os.path.join(folder, name))
    record = RunRecord({} if diverged else _results_metrics(folder, run.task),
                       {} if diverged else predictions, time.monotonic() - start,
                       tuple(train_examples), diverged)
    doc = {"fingerprint": fingerprint(run, protocol), **dataclasses.asdict(record)}
    with fileio.atomic_output(os.path.join(folder, RUN_RECORD_FILE), "wb") as f:
        f.write((json.dumps(doc, indent=2, sort_keys=True) + "\n").encode("utf-8"))
    return record


def task_score(record: RunRecord, task: ScoredTask) -> float:
    """The run's score in points: the mean of the task's metrics, times its scale."""
    values = [record.metrics[key] for key, _ in task.metrics]
    return task.scale * sum(values) / len(values)


def check_tasks(tasks: List[ScoredTask], do_lower_case: bool) -> None:
    """Reads every task's training and dev data once before any model trains.

    Raises:
        UserError: a missing file, a dev file without labels, a malformed row.
    """
    for task in tasks:
        for evaluation in task.evaluations:
            if evaluation.eval_split:  # read with the training labels, which it checks against
                task.build(evaluation, 0, 0, do_lower_case).read(True, True, False, "")


def _eta(pending: List[Run], seconds: Dict[str, List[float]]) -> float:
    every = [s for values in seconds.values() for s in values]
    if not every:
        return float("nan")
    overall = sum(every) / len(every)
    return sum(sum(seconds[r.task.name]) / len(seconds[r.task.name]) if seconds.get(
        r.task.name) else overall for r in pending)


def format_duration(seconds: float) -> str:
    if seconds != seconds:  # NaN: nothing measured yet
        return "unknown"
    minutes, sec = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {sec:02d} s"


def run_all(runs: List[Run], protocol: Protocol, output_dir: str, do_predict: bool,
            keep_checkpoints: bool = False,
            strategy: Optional[distribution.DistributionConfig] = None,
            say: Callable[[str], None] = print) -> Dict[Run, RunRecord]:
    """Runs what has not finished, printing one line per run with its score and the ETA."""
    records: Dict[Run, RunRecord] = {}
    for run in runs:
        record = load_record(run, protocol, output_dir)
        if record is not None:
            records[run] = record
    if records:
        say(f"scorecard: {len(records)} of {len(runs)} runs already finished in "
            f"{output_dir}; running the other {len(runs) - len(records)}")
    pending = [r for r in runs if r not in records]
    seconds: Dict[str, List[float]] = {}
    for done, run in enumerate(pending, 1):  # one line per run; the details in its run.log
        record = execute(run, protocol, output_dir, do_predict, keep_checkpoints, strategy)
        records[run] = record
        seconds.setdefault(run.task.name, []).append(record.seconds)
        metric = "diverged (see its run.log)" if record.diverged else ", ".join(
            f"{label} {run.task.scale * record.metrics[key]:.2f}"
            for key, label in run.task.metrics)
        say(f"[{len(records)}/{len(runs)}] {run.model.name} {run.task.name} "
            f"lr={run.learning_rate:g} seed={run.seed}: {metric} "
            f"({format_duration(record.seconds)}); "
            f"ETA {format_duration(_eta(pending[done:], seconds))}")
    return records

