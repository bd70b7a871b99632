"""run_pretraining's objective flags: `--objective=bert|electra`, ELECTRA's, and the masks'.

Imported only by the `python -m bert_tf.run_pretraining` entry point, which parses the flags
and turns them at once into a frozen `electra_objective.ElectraConfig` (or None for BERT)
with `config_from_flags`; `trainer_args` gives the trainer the run's model and objective;
`masking_from_flags` checks the masking flags (run_pretraining defines them) for both.
ELECTRA's flags keep the names of google-research/electra's
configure_pretraining.py where it has them (`disc_weight`); its `generator_hidden_size` (a
fraction there) is `--generator_hidden_fraction` here, which says what it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Optional

from absl import flags

from bert_tf.core.errors import UserError

if TYPE_CHECKING:  # they import TensorFlow; flag errors should not wait for it
    from bert_tf.core.masking_rules import MaskingConfig
    from bert_tf.modeling.config import BertConfig
    from bert_tf.training.electra_objective import ElectraConfig

FLAGS = flags.FLAGS
OBJECTIVES = ["bert", "electra"]
ELECTRA_FLAGS = ("generator_hidden_fraction", "disc_weight", "init_discriminator_only")


def define_flags() -> None:
    """Defines --objective, --generator_hidden_fraction, --disc_weight and
    --init_discriminator_only; call once."""
    flags.DEFINE_enum("objective", "bert", OBJECTIVES,
                      "bert: masked LM (+ next-sentence prediction unless --no_nsp). electra: "
                      "a small masked-LM generator fills the masked positions with samples "
                      "and the model (the discriminator) learns which of all the tokens were "
                      "replaced (Clark et al., 2020); no next-sentence head.")
    flags.DEFINE_float("generator_hidden_fraction", 0.25,
                       "--objective=electra: the generator's hidden size as a fraction of the "
                       "discriminator's (heads: one per 64 units; feed-forward 4x).")
    flags.DEFINE_float("disc_weight", 50.0,
                       "--objective=electra: the discriminator loss's weight (lambda) in "
                       "loss = generator MLM loss + lambda x discriminator loss.")
    flags.DEFINE_bool("init_discriminator_only", False,
                      "--objective=electra with --init_checkpoint: start only the "
                      "discriminator from the checkpoint, which may be any BERT-layout encoder "
                      "of the config (a bert_tf masked-LM run, Google's or Hugging Face's BERT, "
                      "an ELECTRA discriminator); the generator and the discriminator's head, "
                      "if the checkpoint has none, start from scratch. How an encoder that "
                      "already reads the context is continued with ELECTRA.")


def config_from_flags(bert_config: "BertConfig") -> Optional["ElectraConfig"]:
    """ELECTRA's frozen settings, or None for --objective=bert.

    Args:
        bert_config: the discriminator's config (the generator's is checked against it).

    Raises:
        UserError: an ELECTRA flag without --objective=electra, or with it a flag that does
            not apply (--no_nsp, --train_only_new_embeddings_steps) or a generator size the
            config cannot have.
    """
    if FLAGS.objective != "electra":
        given = [name for name in ELECTRA_FLAGS if FLAGS[name].present]
        if given:
            raise UserError(f"--{' and --'.join(given)} appl{'ies' if len(given) == 1 else 'y'}"
                            " only with --objective=electra")
        return None
    if FLAGS.no_nsp:
        raise UserError("--no_nsp does not apply to --objective=electra (it has no "
                        "next-sentence head): leave it out")
    if FLAGS.train_only_new_embeddings_steps:
        raise UserError("--train_only_new_embeddings_steps is not supported with "
                        "--objective=electra")
    from bert_tf.modeling.electra import generator_config
    from bert_tf.training.electra_objective import ElectraConfig

    if FLAGS.init_discriminator_only and not FLAGS.init_checkpoint:
        raise UserError("--init_discriminator_only needs --init_checkpoint (the encoder the "
                        "discriminator starts from)")
    config = ElectraConfig(generator_hidden_fraction=FLAGS.generator_hidden_fraction,
                           disc_weight=FLAGS.disc_weight,
                           init_discriminator_only=FLAGS.init_discriminator_only)
    generator_config(bert_config, config.generator_hidden_fraction)  # fails in one line
    return config


def masking_from_flags(bert_config: "BertConfig") -> Optional["MaskingConfig"]:
    """--dynamic_masking's settings, or None for the records' stored masks (either objective).

    Args:
        bert_config: the model's config (its vocab_size bounds --vocab_file's).

    Raises:
        UserError: a masking flag without --dynamic_masking (it would be ignored), no
            --vocab_file, n-gram spans, or a vocabulary larger than the model's.
    """
    if not FLAGS.dynamic_masking:
        # Masking flags without --dynamic_masking would be silently ignored: refuse them.
        ignored = [name for name, given in (
            ("do_whole_word_mask", FLAGS.do_whole_word_mask),
            ("max_ngram_size", FLAGS.max_ngram_size != 1),
            ("vocab_file", bool(FLAGS.vocab_file) and not FLAGS.init_checkpoint),
            ("masked_lm_prob", FLAGS["masked_lm_prob"].present)) if given]
        if ignored:
            raise UserError(f"--{' and --'.join(ignored)} appl{'ies' if len(ignored) == 1 else 'y'}"
                            " only with --dynamic_masking (the stored masks are used as "
                            "written)")
        return None
    if not FLAGS.vocab_file:
        raise UserError("--dynamic_masking needs --vocab_file: the ids of [MASK], [CLS], "
                        "[SEP] and [PAD] differ between vocabularies")
    if FLAGS.max_ngram_size != 1:
        raise UserError(f"--max_ngram_size={FLAGS.max_ngram_size} is not supported with "
                        f"--dynamic_masking: it masks single tokens or, with "
                        f"--do_whole_word_mask, whole words (n-gram spans are drawn only by "
                        f"create_pretraining_data)")
    from bert_tf.core import masking_rules

    masking = masking_rules.MaskingConfig.from_vocab_file(
        FLAGS.vocab_file, FLAGS.max_predictions_per_seq, FLAGS.masked_lm_prob,
        do_whole_word_mask=FLAGS.do_whole_word_mask)
    if masking.vocab_size > bert_config.vocab_size:
        raise UserError(f"--vocab_file has {masking.vocab_size} tokens, more than "
                        f"vocab_size={bert_config.vocab_size} in --bert_config_file")
    return masking


def trainer_args(bert_config: "BertConfig", electra: Optional["ElectraConfig"], use_nsp: bool,
                 seed: int) -> Dict[str, Any]:
    """The `trainer.Trainer` arguments of the objective: its model_fn and objective.

    Args:
        bert_config: the model's (with ELECTRA: the discriminator's) config.
        electra: ELECTRA's settings, or None for BERT (MLM, NSP as `use_nsp` says).
        use_nsp: BERT's next-sentence head.
        seed: the run's seed (seeds ELECTRA's sampling).

    Returns:
        {"model_fn": ..., "objective": ... (None: the trainer's default, BERT's)}.
    """
    if electra is None:
        from bert_tf.modeling.pretraining_model import BertPretrainingModel

        return {"model_fn": lambda: BertPretrainingModel(bert_config, use_nsp=use_nsp),
                "objective": None}
    from bert_tf.modeling.electra import ElectraPretrainingModel
    from bert_tf.training.electra_objective import ElectraObjective

    def model_fn():
        return ElectraPretrainingModel(bert_config, electra.generator_hidden_fraction,
                                       sampling_seed=seed)

    return {"model_fn": model_fn,
            "objective": ElectraObjective(bert_config.vocab_size, electra.disc_weight)}
