"""The bi-encoder's run (`python -m bert_tf.run_retrieval`): train, then evaluate on BEIR.

    read the data (every check before TensorFlow work)  ->  warm_start.resolve()
        -> hard negatives mined (--hard_negatives_from: `hard_negatives`, `training_input`)
        -> Trainer(BertEmbedder, AdamW, BiEncoderObjective): checkpoints, exact resume,
           SIGTERM, the divergence stop
        -> corpus_eval: embed, search, eval_results.txt, run.trec

The trainer, optimizer, checkpoints and warm start are the fine-tuning commands' own; this
module adds the retrieval data, the model and its settings. Training batches
(`training_input`) have no text twice, and a resumed run sees the batches it would have.
Steps: int(examples / train_batch_size * epochs), as the original fine-tuning scripts count.

Embedding settings (pooling, normalisation, lengths, lower-casing) are, in order: the flag,
the trained output_dir's finetune_task.json, the sentence-transformers folder of
--init_checkpoint (`st_folder`), the defaults (mean, normalised, 64 and 256 tokens,
lower-cased). A flag that contradicts a trained output_dir's setting is refused: the
checkpoint was trained with the other.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Dict, Optional

from absl import logging

from bert_tf.core import fileio, tokenization
from bert_tf.core.errors import UserError
from bert_tf.finetune import warm_start
from bert_tf.finetune.retrieval import (
    beir_data,
    corpus_eval,
    features,
    hard_negatives,
    st_folder,
    training_input,
)
from bert_tf.finetune.retrieval.pooling import POOLING_MODES
from bert_tf.training import distribution, optimization, results, trainer

TASK_FILE = "finetune_task.json"  # as bert_tf.finetune.runner.TASK_FILE
KIND = "bi_encoder"
LOSSES = ("in_batch",)
DEFAULT_QUERY_LENGTH, DEFAULT_PASSAGE_LENGTH = 64, 256
_SETTINGS = ("pooling", "normalize", "max_query_length", "max_passage_length", "do_lower_case")


@dataclasses.dataclass(frozen=True)
class RetrievalConfig:
    """The flags of run_retrieval (the original fine-tuning scripts' names where they exist).

    Attributes:
        output_dir: checkpoints, finetune_task.json, eval_results.txt.
        init_checkpoint, bert_config_file, vocab_file: the model (`warm_start`), or a
            sentence-transformers folder as --init_checkpoint.
        do_train, do_eval: what to run.
        train_dir: a BEIR folder whose qrels/train.tsv gives (query, positive) pairs.
        train_file: plain (query, positive[, negative ...]) pairs, .tsv or .jsonl.
        eval_dir, eval_split: the BEIR folder and qrels split --do_eval scores.
        pooling, normalize, max_query_length, max_passage_length, do_lower_case: None =
            settled as the module docstring says.
        loss: "in_batch" (MultipleNegativesRankingLoss).
        hard_negatives_from: "" (none mined), "bm25" or "model" (`hard_negatives`), with
            num_hard_negatives, hard_negative_range_min/max and hard_negative_sampling.
        similarity_scale: the cosines' multiplier (1 / temperature).
        mini_batch_size: GradCache's texts per pass (0 = one pass, no cache).
        embeddings_dir: corpus embeddings stored and reused ("" = not stored).
        train_batch_size, eval_batch_size: GLOBAL training batch; texts embedded at once.
        learning_rate, num_train_epochs, warmup_proportion, weight_decay_rate, clip_norm,
        seed, distribution, save_checkpoints_steps, keep_checkpoint_max, steps_per_loop,
        log_every_n_steps, max_steps_per_run: as in the fine-tuning commands.
    """

    output_dir: str
    init_checkpoint: str = ""
    bert_config_file: str = ""
    vocab_file: str = ""
    do_train: bool = False
    do_eval: bool = False
    train_dir: str = ""
    train_file: str = ""
    eval_dir: str = ""
    eval_split: str = "test"
    pooling: Optional[str] = None
    normalize: Optional[bool] = None
    max_query_length: Optional[int] = None
    max_passage_length: Optional[int] = None
    do_lower_case: Optional[bool] = None
    loss: str = "in_batch"
    hard_negatives_from: str = ""
    num_hard_negatives: int = 1
    hard_negative_range_min: int = 0
    hard_negative_range_max: int = 100
    hard_negative_sampling: str = "top"
    similarity_scale: float = 20.0
    mini_batch_size: int = 0
    embeddings_dir: str = ""
    train_batch_size: int = 32
    eval_batch_size: int = 64
    learning_rate: float = 2e-5
    num_train_epochs: float = 1.0
    warmup_proportion: float = 0.1
    weight_decay_rate: float = 0.01
    clip_norm: float = 1.0
    seed: int = 12345
    distribution: distribution.DistributionConfig = distribution.DistributionConfig()
    save_checkpoints_steps: int = 1000
    keep_checkpoint_max: int = 1
    steps_per_loop: int = 1
    log_every_n_steps: int = 100
    max_steps_per_run: int = 0

    def __post_init__(self) -> None:
        if not (self.do_train or self.do_eval):
            raise UserError("at least one of --do_train or --do_eval must be true")
        if not self.output_dir:
            raise UserError("--output_dir is required")
        if self.do_train and bool(self.train_dir) == bool(self.train_file):
            raise UserError("--do_train needs one of --train_dir (a BEIR folder) or "
                            "--train_file (query/positive pairs)")
        if self.do_eval and not self.eval_dir:
            raise UserError("--do_eval needs --eval_dir (a BEIR folder)")
        if self.loss not in LOSSES:
            raise UserError(f"--loss must be one of {', '.join(LOSSES)}, got {self.loss!r}")
        if self.pooling is not None and self.pooling not in POOLING_MODES:
            raise UserError(f"--pooling must be one of {', '.join(POOLING_MODES)}, got "
                            f"{self.pooling!r}")
        for name in ("learning_rate", "num_train_epochs", "similarity_scale",
                     "train_batch_size", "eval_batch_size"):
            if not getattr(self, name) > 0:
                raise UserError(f"--{name} must be positive, got {getattr(self, name)}")
        if self.mini_batch_size < 0:
            raise UserError(f"--mini_batch_size must be >= 0, got {self.mini_batch_size}")
        if not 0 <= self.warmup_proportion <= 1:
            raise UserError(f"--warmup_proportion must be in [0, 1], got "
                            f"{self.warmup_proportion}")
        if self.hard_negatives_from and not self.do_train:
            raise UserError("--hard_negatives_from mines negatives for training: add --do_train")
        self.mining()  # checks the mining flags

    def mining(self) -> Optional[hard_negatives.MiningConfig]:
        """The mining of --hard_negatives_from, or None."""
        if not self.hard_negatives_from:
            return None
        return hard_negatives.MiningConfig(
            self.hard_negatives_from, self.num_hard_negatives, self.hard_negative_range_min,
            self.hard_negative_range_max, self.hard_negative_sampling, self.seed)


@dataclasses.dataclass(frozen=True)
class EmbeddingSettings:
    """How texts become vectors: settled once per run (module docstring)."""

    pooling: str
    normalize: bool
    max_query_length: int
    max_passage_length: int
    do_lower_case: bool


def settle(config: RetrievalConfig, saved: Optional[Dict[str, object]],
           folder: Optional[st_folder.SentenceTransformerFolder]) -> EmbeddingSettings:
    """The run's embedding settings from the flags, a trained output_dir's finetune_task.json
    (`saved`) and a sentence-transformers folder (module docstring).

    Raises:
        UserError: a flag that differs from what `saved` says the checkpoint was trained with.
    """
    length = folder.max_seq_length if folder else None
    fallback = {"pooling": folder.pooling if folder else "mean",
                "normalize": folder.normalize if folder else True,
                "max_query_length": length or DEFAULT_QUERY_LENGTH,
                "max_passage_length": length or DEFAULT_PASSAGE_LENGTH,
                "do_lower_case": (folder.do_lower_case if folder and
                                  folder.do_lower_case is not None else True)}
    chosen = {}
    for name in _SETTINGS:
        flag, trained = getattr(config, name), (saved or {}).get(name)
        if name in ("pooling", "normalize") and None not in (flag, trained) and flag != trained:
            raise UserError(f"{config.output_dir} was trained with --{name}={trained}; "
                            f"evaluate and continue with the same, not {flag}")
        chosen[name] = next(v for v in (flag, trained, fallback[name]) if v is not None)
    return EmbeddingSettings(**chosen)


def read_task_file(output_dir: str) -> Optional[Dict[str, object]]:
    """A trained output_dir's finetune_task.json, or None when there is none.

    Raises:
        UserError: the file belongs to another kind of task.
    """
    path = os.path.join(output_dir, TASK_FILE)
    if not fileio.exists(path):
        return None
    with fileio.open_file(path, "r") as f:
        info = json.load(f)
    if info.get("kind") != KIND:
        raise UserError(f"{path}: a {info.get('kind')} model, not a bi-encoder "
                        f"(use another --output_dir)")
    return info


def _write_task_file(output_dir: str, settings: EmbeddingSettings, scale: float,
                     mining: Optional[hard_negatives.MiningConfig]) -> None:
    info = {"kind": KIND, "similarity_scale": scale, **dataclasses.asdict(settings)}
    if mining is not None:  # only then: the file of a run without mining is as before
        info["hard_negatives"] = mining.settings()
    with fileio.atomic_output(os.path.join(output_dir, TASK_FILE), "wb") as f:
        f.write((json.dumps(info, indent=2, sort_keys=True) + "\n").encode("utf-8"))


def _build_model(config, settings: EmbeddingSettings):
    import tensorflow as tf

    from bert_tf.finetune.retrieval.embedder import BertEmbedder

    model = BertEmbedder(config, settings.pooling, settings.normalize)
    model({name: tf.ones([1, 8], tf.int32) if name == "input_mask" else tf.zeros([1, 8], tf.int32)
           for name in features.INPUT_NAMES})
    return model


def initial_model(model: warm_start.InitModel, settings: EmbeddingSettings, seed: int):
    """The bi-encoder as training starts: warm-started, or fresh weights from `seed`."""
    import keras

    keras.utils.set_random_seed(seed)
    embedder = _build_model(model.config, settings)
    if model.files:
        warm_start.load_encoder_weights(embedder, model.files)
    return embedder


def run(config: RetrievalConfig) -> Dict[str, float]:
    """Trains and evaluates as configured.

    Returns:
        The eval results (empty without --do_eval).

    Raises:
        UserError: bad input or a checkpoint that does not fit, each in one line.
        checkpointing.Terminated: SIGTERM (a checkpoint was saved; rerun to continue).
    """
    import tensorflow as tf

    fileio.makedirs(config.output_dir)
    resumed = bool(tf.train.latest_checkpoint(config.output_dir))
    saved = read_task_file(config.output_dir) if resumed else None
    if not config.do_train and not resumed and not config.init_checkpoint:
        raise UserError(f"--output_dir={config.output_dir} has no trained checkpoint: give "
                        "--init_checkpoint to evaluate a model as it is, or --do_train")
    folder = (st_folder.read_folder(config.init_checkpoint)
              if not resumed and st_folder.is_folder(config.init_checkpoint) else None)
    settings = settle(config, saved, folder)
    # Every input is read and checked before any model is built.
    examples, passages = (training_input.read_training_examples(
        config.train_file, config.train_dir, bool(config.hard_negatives_from))
        if config.do_train else ([], []))
    eval_split = (beir_data.read_split(config.eval_dir, config.eval_split)
                  if config.do_eval else None)
    local_config = os.path.join(config.output_dir, "bert_config.json")
    local_vocab = os.path.join(config.output_dir, "vocab.txt")
    if resumed:
        model = warm_start.resolve("", config.bert_config_file or local_config,
                                   config.vocab_file or local_vocab)
    else:
        model = warm_start.resolve(folder.transformer_dir if folder else config.init_checkpoint,
                                   config.bert_config_file, config.vocab_file)
    for name in ("max_query_length", "max_passage_length"):
        model.config.check_seq_length(getattr(settings, name), name)
    logging.info("embedding: %s pooling%s, queries %d and passages %d tokens, %s",
                 settings.pooling, ", normalised" if settings.normalize else "",
                 settings.max_query_length, settings.max_passage_length,
                 "lower-cased" if settings.do_lower_case else "cased")
    tokenizer = tokenization.FullTokenizer(model.vocab_file, settings.do_lower_case)
    if config.hard_negatives_from:
        examples = training_input.mined_examples(
            config.mining(), config.output_dir, examples, passages, saved,
            lambda: initial_model(model, settings, config.seed), tokenizer,
            settings.max_query_length, settings.max_passage_length, config.eval_batch_size)
    steps = 1
    if config.do_train:
        steps = max(1, int(len(examples) / config.train_batch_size * config.num_train_epochs))
        arrays = features.training_features(examples, tokenizer, settings.max_query_length,
                                            settings.max_passage_length)
        order = training_input.batch_order(examples, config.train_batch_size, steps, config.seed)
    strategy = distribution.create_strategy(config.distribution)
    use_xla = distribution.resolve_use_xla(config.distribution, strategy)
    if use_xla and config.mini_batch_size and config.do_train:
        # GradCache's loops over mini-batches of varying length do not compile with XLA yet.
        if config.distribution.use_xla or distribution.is_tpu_strategy(strategy):
            raise UserError("--mini_batch_size (GradCache) does not run XLA-compiled yet: "
                            "drop --use_xla or --mini_batch_size (TPUs need XLA)")
        logging.info("--mini_batch_size: the train step runs without XLA")
        use_xla = False
    warmup = int(steps * config.warmup_proportion)
    trainer_config = trainer.TrainerConfig(
        output_dir=config.output_dir, train_batch_size=config.train_batch_size,
        eval_batch_size=strategy.num_replicas_in_sync, num_train_steps=steps,
        save_checkpoints_steps=min(config.save_checkpoints_steps, steps),
        keep_checkpoint_max=config.keep_checkpoint_max, steps_per_loop=config.steps_per_loop,
        log_every_n_steps=config.log_every_n_steps, max_steps_per_run=config.max_steps_per_run,
        init_checkpoint=config.init_checkpoint, use_nsp=False, seed=config.seed,
        use_xla=use_xla,
        dtype_policy=config.distribution.dtype_policy, num_warmup_steps=warmup)
    optimizer = optimization.OptimizerConfig(
        learning_rate=config.learning_rate, num_train_steps=steps, num_warmup_steps=warmup,
        weight_decay_rate=config.weight_decay_rate, clip_norm=config.clip_norm or None)
    columns = 1 + (len(examples[0].negatives) if examples else 0)
    from bert_tf.finetune.retrieval.contrastive_loss import BiEncoderObjective

    objective = BiEncoderObjective(
        config.similarity_scale, config.mini_batch_size,
        candidates=config.train_batch_size // strategy.num_replicas_in_sync * columns)
    files = None if resumed else model.files
    runner = trainer.Trainer(
        trainer_config, strategy, model_fn=lambda: _build_model(model.config, settings),
        optimizer_fn=lambda: optimization.create_optimizer(optimizer), objective=objective,
        warm_start_fn=(lambda m: warm_start.load_encoder_weights(m, files)) if files else None)
    chief = distribution.is_chief(strategy)
    if config.do_train:
        if chief:
            model.config.to_json_file(local_config)
            if os.path.abspath(model.vocab_file) != os.path.abspath(local_vocab):
                from bert_tf.interop.model_files import copy_file

                copy_file(model.vocab_file, local_vocab)
            _write_task_file(config.output_dir, settings, config.similarity_scale,
                             config.mining())
        logging.info("training on %d examples (%d negatives each): %d steps of %d, %d warmup%s",
                     len(examples), columns - 1, steps, config.train_batch_size, warmup,
                     f", GradCache mini-batches of {config.mini_batch_size}"
                     if config.mini_batch_size else "")
        runner.train(training_input.train_dataset_fn(arrays, order))
    else:
        runner.restore_for_eval()
    if not config.do_eval:
        return {}
    scores = corpus_eval.evaluate(
        runner.model, eval_split, tokenizer,
        corpus_eval.corpus_settings(settings.pooling, settings.normalize,
                                    settings.max_passage_length, settings.do_lower_case,
                                    model.vocab_file),
        settings.max_query_length, config.eval_batch_size, config.embeddings_dir,
        os.path.join(config.output_dir, corpus_eval.RUN_FILE) if chief else "")
    scores = dict(scores, global_step=int(runner.step.numpy()))
    if chief:
        results.write_eval_results(os.path.join(config.output_dir, results.EVAL_RESULTS_FILE),
                                   scores)
    return scores
