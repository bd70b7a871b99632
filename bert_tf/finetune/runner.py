"""The one fine-tuning flow shared by run_classifier, run_tagging and run_squad.

    task.read()  ->  warm_start.resolve()  ->  Trainer(task model, AdamW, task objective)
        -> train (checkpoints, exact resume, SIGTERM)  -> predict dev -> task.evaluate
        -> predict test -> task.write_predictions  -> export (optional)

A task (`classification_task`, `tagging_task`, `squad_task`) supplies only its data, its
model (`build_model`: the encoder and its head), its objective and its metrics; the trainer,
optimizer, checkpoints and strategies are the pretraining ones. The number of steps follows
the original scripts: int(num_train_examples / train_batch_size * num_train_epochs), warmup
the given proportion of them. Examples are the featurized rows (windows, for tagging and
QA), as in run_squad.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Dict, Optional, Protocol

import numpy as np
from absl import logging

from bert_tf.core import fileio, tokenization
from bert_tf.core.errors import UserError
from bert_tf.finetune import inputs, warm_start
from bert_tf.training import distribution, objectives, optimization, results, trainer

TASK_FILE = "finetune_task.json"


class Task(Protocol):
    kind: str
    input_keys: tuple
    label_keys: tuple
    trim_keys: tuple

    def num_labels(self) -> int: ...
    def build_model(self, config) -> object: ...
    def objective(self) -> objectives.Objective: ...
    def read(self, do_train: bool, do_eval: bool, do_predict: bool, model_dir: str) -> None: ...
    def save_assets(self, output_dir: str) -> None: ...
    def arrays(self, split: str, tokenizer, max_seq_length: int) -> Dict[str, np.ndarray]: ...
    def evaluate(self, outputs: Dict[str, np.ndarray], output_dir: str) -> Dict[str, float]: ...
    def write_predictions(self, outputs: Dict[str, np.ndarray], output_dir: str) -> list: ...


@dataclasses.dataclass(frozen=True)
class FinetuneConfig:
    """The flags common to the three entry points (the original scripts' names).

    Attributes:
        output_dir: checkpoints, label list, eval_results.txt, predictions.
        bert_config_file, vocab_file, do_lower_case, init_checkpoint: the model (config and
            vocab default to the files beside init_checkpoint).
        do_train, do_eval, do_predict: what to run.
        train_batch_size, eval_batch_size: GLOBAL batches.
        learning_rate, num_train_epochs, warmup_proportion, weight_decay_rate, clip_norm:
            the recipe (AdamW, linear warmup then linear decay to 0).
        max_seq_length, seed: as named.
        distribution: strategy and precision.
        save_checkpoints_steps, keep_checkpoint_max, steps_per_loop, log_every_n_steps,
        max_steps_per_run: as in pretraining.
        export_dir: write a serving SavedModel there after training ("" = no).
        eval_results_file: the file name --do_eval writes in output_dir (a second evaluation
            of the same model, such as MNLI's mismatched dev set, names its own).
    """

    output_dir: str
    bert_config_file: str = ""
    vocab_file: str = ""
    do_lower_case: bool = True
    init_checkpoint: str = ""
    do_train: bool = False
    do_eval: bool = False
    do_predict: bool = False
    train_batch_size: int = 32
    eval_batch_size: int = 8
    learning_rate: float = 5e-5
    num_train_epochs: float = 3.0
    warmup_proportion: float = 0.1
    weight_decay_rate: float = 0.01
    clip_norm: float = 1.0
    max_seq_length: int = 128
    seed: int = 12345
    distribution: distribution.DistributionConfig = distribution.DistributionConfig()
    save_checkpoints_steps: int = 1000
    keep_checkpoint_max: int = 1
    steps_per_loop: int = 1
    log_every_n_steps: int = 100
    max_steps_per_run: int = 0
    export_dir: str = ""
    eval_results_file: str = results.EVAL_RESULTS_FILE

    def __post_init__(self) -> None:
        if not (self.do_train or self.do_eval or self.do_predict):
            raise UserError("at least one of --do_train, --do_eval or --do_predict must be true")
        if not self.output_dir:
            raise UserError("--output_dir is required")
        for name in ("learning_rate", "num_train_epochs"):
            if not getattr(self, name) > 0:
                raise UserError(f"--{name} must be positive, got {getattr(self, name)}")
        if not 0 <= self.warmup_proportion <= 1:
            raise UserError(f"--warmup_proportion must be in [0, 1], got "
                            f"{self.warmup_proportion}")
        if self.do_train and not self.init_checkpoint:
            logging.warning("no --init_checkpoint: fine-tuning starts from random weights")


def num_train_steps(num_examples: int, config: FinetuneConfig) -> int:
    """The original scripts' count: int(examples / batch * epochs), at least 1."""
    return max(1, int(num_examples / config.train_batch_size * config.num_train_epochs))


def _fine_tuned_checkpoint(output_dir: str) -> Optional[str]:
    import tensorflow as tf

    return tf.train.latest_checkpoint(output_dir)


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What `run` did: eval results (empty without --do_eval) and the model in memory."""

    eval_results: Dict[str, float]
    model: object
    is_chief: bool


def write_task_file(output_dir: str, task: Task, config: FinetuneConfig) -> None:
    """finetune_task.json: what export and later runs need to rebuild the task model."""
    info = {"kind": task.kind, "num_labels": task.num_labels(),
            "do_lower_case": config.do_lower_case, "max_seq_length": config.max_seq_length}
    info.update(getattr(task, "serving_settings", dict)())
    with fileio.atomic_output(os.path.join(output_dir, TASK_FILE), "wb") as f:
        f.write((json.dumps(info, indent=2, sort_keys=True) + "\n").encode("utf-8"))


def read_task_file(model_dir: str) -> Dict[str, object]:
    """The finetune_task.json of a fine-tuned output directory.

    Raises:
        UserError: no such file (not a fine-tuned model directory).
    """
    path = os.path.join(model_dir, TASK_FILE)
    if not fileio.exists(path):
        raise UserError(f"{model_dir}: no {TASK_FILE} (is it a fine-tuning --output_dir?)")
    with fileio.open_file(path, "r") as f:
        return json.load(f)


def run(config: FinetuneConfig, task: Task) -> Outcome:
    """Trains, evaluates and predicts as configured.

    Returns:
        The eval results and the model.

    Raises:
        UserError: bad input or a checkpoint that does not fit, each in one line.
        checkpointing.Terminated: SIGTERM (a checkpoint was saved; rerun to continue).
    """
    fileio.makedirs(config.output_dir)
    # Before task.read, which then loads the label list saved beside the checkpoint.
    resumed = bool(_fine_tuned_checkpoint(config.output_dir))
    if not config.do_train and not resumed:
        raise UserError(f"--output_dir={config.output_dir} has no fine-tuned checkpoint to "
                        "evaluate or predict with; run with --do_train first")
    task.read(config.do_train, config.do_eval, config.do_predict, config.output_dir)
    # Evaluating a fine-tuned output_dir reads its own config and vocab back.
    local_config = os.path.join(config.output_dir, "bert_config.json")
    local_vocab = os.path.join(config.output_dir, "vocab.txt")
    if not config.do_train or resumed:
        model = warm_start.resolve("", config.bert_config_file or local_config,
                                   config.vocab_file or local_vocab)
        if config.do_train and config.init_checkpoint:
            model = dataclasses.replace(model, files=None)  # resuming: weights come from there
    else:
        model = warm_start.resolve(config.init_checkpoint, config.bert_config_file,
                                   config.vocab_file)
    model.config.check_seq_length(config.max_seq_length)
    tokenizer = tokenization.FullTokenizer(model.vocab_file, config.do_lower_case)
    train_arrays = (task.arrays("train", tokenizer, config.max_seq_length)
                    if config.do_train else None)
    steps = num_train_steps(len(train_arrays["input_ids"]), config) if train_arrays else 1

    strategy = distribution.create_strategy(config.distribution)
    use_xla = distribution.resolve_use_xla(config.distribution, strategy)
    trainer_config = trainer.TrainerConfig(
        output_dir=config.output_dir, train_batch_size=config.train_batch_size,
        eval_batch_size=config.eval_batch_size, num_train_steps=steps,
        save_checkpoints_steps=min(config.save_checkpoints_steps, steps),
        keep_checkpoint_max=config.keep_checkpoint_max, steps_per_loop=config.steps_per_loop,
        log_every_n_steps=config.log_every_n_steps, max_steps_per_run=config.max_steps_per_run,
        use_nsp=False, seed=config.seed, use_xla=use_xla,
        dtype_policy=config.distribution.dtype_policy,
        # The spike rule waits for warmup, as in pretraining; the NaN and absolute rules do
        # not (training.health; the bound comes from task.objective().uniform_loss).
        num_warmup_steps=int(steps * config.warmup_proportion))
    optimizer = optimization.OptimizerConfig(
        learning_rate=config.learning_rate, num_train_steps=steps,
        num_warmup_steps=int(steps * config.warmup_proportion),
        weight_decay_rate=config.weight_decay_rate, clip_norm=config.clip_norm or None)
    files = model.files
    # A task whose head depends on the checkpoint (ELECTRA's classifier) settles it here.
    getattr(task, "settle_head", lambda kind, model_dir: None)(model.kind, config.output_dir)
    runner = trainer.Trainer(
        trainer_config, strategy,
        model_fn=lambda: task.build_model(model.config),
        optimizer_fn=lambda: optimization.create_optimizer(optimizer),
        objective=task.objective(),
        warm_start_fn=(lambda m: warm_start.load_encoder_weights(m, files)) if files else None)
    if config.do_train and distribution.is_chief(strategy):
        model.config.to_json_file(local_config)
        if os.path.abspath(model.vocab_file) != os.path.abspath(local_vocab):
            from bert_tf.interop.model_files import copy_file

            copy_file(model.vocab_file, local_vocab)
        task.save_assets(config.output_dir)
        write_task_file(config.output_dir, task, config)
    if config.do_train:
        logging.info("fine-tuning on %d examples: %d steps of %d, %d warmup",
                     len(train_arrays["input_ids"]), steps, config.train_batch_size,
                     optimizer.num_warmup_steps)
        # TPUs compile one program per input shape: keep their batches at full length.
        trim = () if distribution.is_tpu_strategy(strategy) else task.trim_keys
        runner.train(inputs.train_dataset_fn(
            train_arrays, task.input_keys + task.label_keys, config.seed, trim))
    else:
        runner.restore_for_eval()
    eval_results: Dict[str, float] = {}
    outputs: Dict[str, np.ndarray] = {}
    if config.do_eval:
        outputs = _predict(runner, task, "eval", tokenizer, config)
        eval_results = task.evaluate(outputs, config.output_dir)
        eval_results["global_step"] = int(runner.step.numpy())
        if distribution.is_chief(strategy):
            results.write_eval_results(
                os.path.join(config.output_dir, config.eval_results_file), eval_results)
    if config.do_predict:
        # SQuAD predicts the file it evaluates: its arrays are the same, and so the outputs.
        same = config.do_eval and (task.arrays("predict", tokenizer, config.max_seq_length)
                                   is task.arrays("eval", tokenizer, config.max_seq_length))
        if not same:
            outputs = _predict(runner, task, "predict", tokenizer, config)
        if distribution.is_chief(strategy):
            for path in task.write_predictions(outputs, config.output_dir):
                logging.info("wrote %s", path)
    return Outcome(eval_results, runner.model, distribution.is_chief(strategy))


def _predict(runner: trainer.Trainer, task: Task, split: str, tokenizer,
             config: FinetuneConfig) -> Dict[str, np.ndarray]:
    arrays = task.arrays(split, tokenizer, config.max_seq_length)
    n = len(arrays["input_ids"])
    logging.info("%s: running the model on %d examples", split, n)
    padded = inputs.padded_predict_arrays(arrays, task.input_keys, config.eval_batch_size)
    raw = runner.predict(inputs.predict_dataset_fn(padded),
                         inputs.num_predict_batches(padded, config.eval_batch_size))
    return inputs.in_input_order(raw, n)
