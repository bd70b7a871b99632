"""Export a pretraining run as a serving SavedModel or a keras-hub preset.

    python -m bert_tf.export --output_dir=out/pretrain --vocab_file=out/vocab.txt \\
        --do_lower_case=true --export_dir=export/bert/1 \\
        [--bert_config_file=...] [--max_seq_length=128] [--top_k=5] \\
        [--format=saved_model|keras_hub] \\
        [--preset_tokenizer=portable|exact] [--tokenizer_check_file=domain.txt]

With --format=keras_hub the preset's tokenizer is by default (--preset_tokenizer=portable)
keras-hub's own `BertTokenizer`, so the preset loads with keras-hub alone
(`keras_hub.models.BertTextClassifier.from_preset(DIR, num_classes=2)`, no bert_tf needed).
That tokenizer gives other ids than pretraining on some text (NFKC case folding of 'µ', 'ﬁ',
full-width letters; words over 100 bytes): the export counts the differing lines of
--tokenizer_check_file (your domain text: its first 10,000 non-empty lines, at most 10 MB)
or, without it, of the vocabulary's own tokens, and prints one line.
--preset_tokenizer=exact ships bert_tf's tokenizer instead (the pretraining ids on any
text); loading that preset needs `import bert_tf.export.preset_tokenizer` first.

--output_dir is the run's output directory (its latest checkpoint is exported) or one
checkpoint prefix (`out/pretrain/ckpt-1000`); --bert_config_file defaults to the
bert_config.json the run saved there. --export_dir must not exist yet; it is written under a
temporary name and renamed when complete. For TensorFlow Serving, give it a version
directory (`<model_base_path>/1`). The SavedModel's signatures are documented in
`bert_tf/export/serving.py`.

An `--objective=electra` run is exported as its discriminator (the checkpoint's
`model/encoder`): the SavedModel has the same signatures but fill_mask (the masked-LM head
is the generator's), and --format=keras_hub writes a keras-hub `ElectraBackbone` preset with
keras-hub's `ElectraTokenizer` (`bert_tf/export/keras_hub_electra.py`; its pooled_output is
an untrained layer).

A fine-tuning output directory (run_classifier, run_tagging, run_squad: it holds
finetune_task.json) is exported with its task's raw-text signatures instead
(`bert_tf/export/task_serving.py`):

    python -m bert_tf.export --output_dir=out/sst2 --export_dir=export/sst2/1 \
        [--max_seq_length=128]

Its vocabulary, casing, config and labels are read from the directory, so --vocab_file,
--do_lower_case, --bert_config_file, --top_k, --format=keras_hub and the preset tokenizer
flags are refused there.

A sentence-transformers folder (modules.json; e.g. one `convert_checkpoint
--to_format=sentence_transformers` wrote) exports with the `embed` signature, its pooling,
normalisation, casing and max_seq_length read from the folder
(`bert_tf/export/embedding_export.py`); only --max_seq_length applies there. So does a
run_retrieval output directory, with the settings it was trained with.
"""

from __future__ import annotations

import dataclasses
import os
import sys

from absl import flags, logging

from bert_tf import install_check
from bert_tf.core import errors
from bert_tf.core.errors import UserError, cli_main

FLAGS = flags.FLAGS
DEFAULT_MAX_SEQ_LENGTH = 128

flags.DEFINE_string("output_dir", None, "Pretraining output dir (latest checkpoint) or a "
                    "checkpoint prefix; or a fine-tuning output dir.")
flags.DEFINE_string("vocab_file", None, "The model's vocabulary.")
flags.DEFINE_bool("do_lower_case", None, "Lower-case and strip accents (as in training).")
flags.DEFINE_string("export_dir", None, "New directory to write.")
flags.DEFINE_string("bert_config_file", None, "Default: bert_config.json in --output_dir.")
flags.DEFINE_integer("max_seq_length", None, "Longest packed sequence for text signatures "
                     "(keras_hub: the classifier preprocessor's sequence_length). Default: 128, or "
                     "max_position_embeddings if smaller.")
flags.DEFINE_integer("top_k", 5, "Candidates per [MASK] in the fill_mask signature.")
flags.DEFINE_enum("format", "saved_model", ["saved_model", "keras_hub"], "What to write.")
flags.DEFINE_enum("preset_tokenizer", "portable", ["portable", "exact"],
                  "keras_hub: 'portable' is keras-hub's BertTokenizer (loads with keras-hub "
                  "alone; other ids on some text: the export counts them); 'exact' gives the "
                  "pretraining ids but loading needs `import bert_tf.export.preset_tokenizer`.")
flags.DEFINE_string("tokenizer_check_file", None,
                    "keras_hub, portable: text (e.g. your domain's) on whose first 10,000 "
                    "non-empty lines the export counts those keras-hub's tokenizer gives other "
                    "ids than pretraining. Default: the vocabulary's tokens.")


@dataclasses.dataclass(frozen=True)
class ExportConfig:
    """The export settings, from the flags.

    Attributes:
        checkpoint: pretraining output dir or checkpoint prefix.
        vocab_file: the model's vocabulary.
        do_lower_case: lower-case and strip accents.
        export_dir: the new directory.
        bert_config_file: None: the one beside the checkpoint.
        max_seq_length: longest packed text sequence; None: 128, or max_position_embeddings
            if smaller.
        top_k: fill_mask candidates (SavedModel).
        export_format: "saved_model" or "keras_hub".
        preset_tokenizer: keras_hub: "portable" or "exact".
        tokenizer_check_file: keras_hub, portable: text to count mismatching lines on;
            None: the vocabulary's tokens.
    """

    checkpoint: str
    vocab_file: str
    do_lower_case: bool
    export_dir: str
    bert_config_file: str | None = None
    max_seq_length: int | None = None
    top_k: int = 5
    export_format: str = "saved_model"
    preset_tokenizer: str = "portable"
    tokenizer_check_file: str | None = None


def export(config: ExportConfig) -> str:
    """Restores the checkpoint and writes the export. Returns export_dir."""
    from bert_tf.core import fileio
    from bert_tf.export import saved_model
    from bert_tf.interop import native, native_electra
    from bert_tf.interop.model_files import check_new_directory
    from bert_tf.modeling import modern_config

    check_new_directory(config.export_dir)  # Before the (slow) restore.
    if config.tokenizer_check_file and not fileio.exists(config.tokenizer_check_file):
        raise UserError(f"--tokenizer_check_file={config.tokenizer_check_file} does not exist")
    loaded = native.load_pretrained(config.checkpoint, config.bert_config_file)
    max_seq_length = config.max_seq_length or min(
        DEFAULT_MAX_SEQ_LENGTH, loaded.model.config.max_position_embeddings)
    # An ELECTRA run's discriminator is its model/encoder, which load_pretrained restored.
    electra = native_electra.is_electra_checkpoint(loaded.checkpoint)
    if config.export_format == "keras_hub" and modern_config.is_modern(loaded.model.config):
        raise UserError(f"{loaded.checkpoint} has the modern encoder's options "
                        f"({', '.join(modern_config.modern_keys(loaded.model.config))}), which "
                        "no keras-hub backbone computes: export --format=saved_model, or "
                        "convert_checkpoint --to_format=hf for transformers' ModernBERT")
    if config.export_format == "keras_hub" and (
            electra or loaded.model.config.embedding_size is not None):
        from bert_tf.export.keras_hub_electra import export_electra_preset

        if config.preset_tokenizer != "portable":
            raise UserError("--preset_tokenizer=exact: an ELECTRA preset ships keras-hub's "
                            "ElectraTokenizer only")
        export_electra_preset(loaded.model.encoder, config.vocab_file, config.do_lower_case,
                              config.export_dir, config.tokenizer_check_file)
    elif config.export_format == "keras_hub":
        from bert_tf.export.keras_hub_preset import export_keras_hub_preset

        export_keras_hub_preset(loaded.model.encoder, config.vocab_file, config.do_lower_case,
                                config.export_dir, max_seq_length,
                                preset_tokenizer=config.preset_tokenizer,
                                tokenizer_check_file=config.tokenizer_check_file)
    else:
        if electra:
            print(f"note: {loaded.checkpoint} is an ELECTRA run's: its discriminator is "
                  "exported, without a fill_mask signature (ELECTRA's masked-LM head is the "
                  "generator's)", file=sys.stderr, flush=True)
        elif not loaded.has_mlm_head:
            print(f"note: {loaded.checkpoint} has no MLM head; the SavedModel gets no fill_mask "
                  "signature", file=sys.stderr, flush=True)
        saved_model.export_saved_model(
            loaded.model, config.vocab_file, config.do_lower_case, config.export_dir,
            max_seq_length, config.top_k, with_fill_mask=loaded.has_mlm_head)
    print(f"exported {loaded.checkpoint} as {config.export_format} to {config.export_dir}",
          flush=True)
    return config.export_dir


def config_from_flags() -> ExportConfig:
    for name in ("output_dir", "vocab_file", "export_dir"):
        if not getattr(FLAGS, name):
            raise UserError(f"--{name} is required")
    if FLAGS.do_lower_case is None:
        raise UserError("--do_lower_case is required (true for uncased vocabularies)")
    if FLAGS.format != "keras_hub":
        for name in ("preset_tokenizer", "tokenizer_check_file"):
            if FLAGS[name].present:
                raise UserError(f"--{name} applies to --format=keras_hub only")
    if FLAGS.preset_tokenizer == "exact" and FLAGS.tokenizer_check_file:
        raise UserError("--tokenizer_check_file measures the portable tokenizer; "
                        "--preset_tokenizer=exact gives the pretraining ids on any text")
    return ExportConfig(
        checkpoint=FLAGS.output_dir, vocab_file=FLAGS.vocab_file,
        do_lower_case=FLAGS.do_lower_case, export_dir=FLAGS.export_dir,
        bert_config_file=FLAGS.bert_config_file, max_seq_length=FLAGS.max_seq_length,
        top_k=FLAGS.top_k, export_format=FLAGS.format,
        preset_tokenizer=FLAGS.preset_tokenizer,
        tokenizer_check_file=FLAGS.tokenizer_check_file)


def is_finetuned(path: str) -> bool:
    """Whether `path` is a fine-tuning output directory (it has finetune_task.json)."""
    from bert_tf.core import fileio
    from bert_tf.finetune.runner import TASK_FILE

    return fileio.exists(os.path.join(path, TASK_FILE))


def bi_encoder(path: str) -> bool:
    """Whether the fine-tuning output directory `path` is run_retrieval's (a bi-encoder)."""
    import json

    from bert_tf.core import fileio
    from bert_tf.finetune.runner import TASK_FILE

    with fileio.open_file(os.path.join(path, TASK_FILE), "rb") as f:
        return json.loads(f.read().decode("utf-8")).get("kind") == "bi_encoder"


def export_finetuned_from_flags() -> str:
    """Exports the fine-tuned --output_dir with its task signatures. Returns export_dir."""
    from bert_tf.export.task_serving import export_finetuned

    if not FLAGS.export_dir:
        raise UserError("--export_dir is required")
    for name in ("vocab_file", "do_lower_case", "bert_config_file", "top_k"):
        if FLAGS[name].present:
            raise UserError(f"--{name} does not apply to the fine-tuned model in "
                            f"{FLAGS.output_dir}: it is read from that directory")
    if FLAGS.format != "saved_model":
        raise UserError(f"--format={FLAGS.format}: a fine-tuned model exports as saved_model")
    for name in ("preset_tokenizer", "tokenizer_check_file"):
        if FLAGS[name].present:
            raise UserError(f"--{name} applies to --format=keras_hub only; a fine-tuned "
                            "model exports as saved_model")
    if bi_encoder(FLAGS.output_dir):  # a run_retrieval output_dir: the embed signature
        from bert_tf.export.embedding_export import export_bi_encoder

        export_bi_encoder(FLAGS.output_dir, FLAGS.export_dir, FLAGS.max_seq_length)
    else:
        export_finetuned(FLAGS.output_dir, FLAGS.export_dir,
                         max_seq_length=FLAGS.max_seq_length)
    print(f"exported fine-tuned {FLAGS.output_dir} as saved_model to {FLAGS.export_dir}",
          flush=True)
    return FLAGS.export_dir


def export_st_folder_from_flags() -> str:
    """Exports the sentence-transformers folder --output_dir with the embed signature."""
    from bert_tf.export.embedding_export import export_st_folder

    if not FLAGS.export_dir:
        raise UserError("--export_dir is required")
    for name in ("vocab_file", "do_lower_case", "bert_config_file", "top_k", "format",
                 "preset_tokenizer", "tokenizer_check_file"):
        if FLAGS[name].present:
            raise UserError(f"--{name} does not apply to the sentence-transformers folder "
                            f"{FLAGS.output_dir}: it exports as saved_model, as the folder says")
    export_st_folder(FLAGS.output_dir, FLAGS.export_dir, FLAGS.max_seq_length)
    print(f"exported sentence-transformers {FLAGS.output_dir} as saved_model (embed) to "
          f"{FLAGS.export_dir}", flush=True)
    return FLAGS.export_dir


@cli_main
def main(argv) -> None:
    from bert_tf.finetune.retrieval import st_folder

    if len(argv) > 1:
        raise UserError(f"unexpected arguments: {' '.join(argv[1:])}")
    logging.set_verbosity(logging.INFO)
    if FLAGS.output_dir and st_folder.is_folder(FLAGS.output_dir):
        export_st_folder_from_flags()
    elif FLAGS.output_dir and is_finetuned(FLAGS.output_dir):
        export_finetuned_from_flags()
    elif FLAGS.output_dir and is_finetuned(os.path.dirname(FLAGS.output_dir)):
        raise UserError(f"{FLAGS.output_dir} is a checkpoint of a fine-tuned model: give its "
                        f"directory, --output_dir={os.path.dirname(FLAGS.output_dir)} (the "
                        "latest checkpoint there is exported)")
    else:
        export(config_from_flags())


def console_main() -> None:
    """The `bert-tf-export` console script (and `python -m bert_tf.export`)."""
    errors.run_app(main, preflight=install_check.problems)


if __name__ == "__main__":
    console_main()
