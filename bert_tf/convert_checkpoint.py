"""Convert BERT checkpoints between Google's TF1 format, Hugging Face and bert_tf.

    python -m bert_tf.convert_checkpoint --from_format=google|hf|bert_tf \\
        --to_format=google|hf|bert_tf --input=... --output=DIR \\
        [--bert_config_file=...] [--vocab_file=... [--base_vocab_file=...]]

--input is a Google release directory or `bert_model.ckpt` prefix; an HF model directory; or a
bert_tf run's output_dir (its latest checkpoint) or a `ckpt-N` prefix. --output is a new
directory, written under a temporary name and renamed when complete:

    google    bert_model.ckpt.{index,data-*}, checkpoint, bert_config.json, vocab.txt
    hf        config.json, model.safetensors, vocab.txt and the tokenizer files
              (tokenizer.json, tokenizer_config.json with --do_lower_case, by default
              inferred from the vocabulary, special_tokens_map.json)
    bert_tf   ckpt-0.{index,data-*}, checkpoint, bert_config.json, vocab.txt; pass the
              directory to `python -m bert_tf.run_pretraining --init_checkpoint=DIR`.
    sentence_transformers (--to_format only)   a sentence-transformers folder: the hf
              files at its root, modules.json, 1_Pooling/, 2_Normalize/,
              sentence_bert_config.json (`bert_tf.export.st_folder_writer`). Pooling,
              normalisation and length are the input's (a sentence-transformers folder, a
              run_retrieval output_dir), else --pooling (mean) and --max_seq_length (256).
    cross_encoder (--to_format only, --from_format=bert_tf)   a run_rerank output_dir as a
              transformers BertForSequenceClassification folder of one label that
              sentence-transformers' CrossEncoder loads (`bert_tf.export.cross_encoder_writer`).

An ELECTRA model (an `--objective=electra` run, a transformers ELECTRA directory, or the
directory of its discriminator/ and generator/, a google-research/electra checkpoint)
converts with both networks: hf writes discriminator/ and generator/, google one checkpoint
in ELECTRA's names (docs/export.md, ELECTRA).

Weights the source lacks (a sentence-transformers model has no MLM/NSP head) are listed on
one line. In a bert_tf output, a missing head is left out of the checkpoint, so the
pretraining run initialises it freshly and its log names it; other missing weights are
freshly initialised (seeded by --seed) and stored.

A --vocab_file that extends the input's vocabulary (vocab.txt beside it, or
--base_vocab_file) with new WordPieces, written into its [unusedN] slots or appended, gives a
model with that vocabulary: the word embeddings and the MLM output bias get its rows (each
new row the mean of the rows of the pieces the input's tokenizer splits the new token into;
base rows unchanged) and vocab_size follows (`bert_tf.interop.vocab_resize`). A vocabulary
that moves a base token is refused.

The conversion itself is `bert_tf.interop.formats.convert`; this module parses the flags.
"""
from __future__ import annotations

from bert_tf import install_check
from bert_tf.core import errors
from bert_tf.core.errors import UserError, cli_main
from bert_tf.interop.formats import FORMATS, convert

ST_FORMAT = "sentence_transformers"  # bert_tf.export.st_folder_writer.FORMAT (write only)
CE_FORMAT = "cross_encoder"  # bert_tf.export.cross_encoder_writer.FORMAT (write only)

def _define_flags() -> None:
    from absl import flags

    flags.DEFINE_enum("from_format", None, list(FORMATS), "Format of --input.")
    flags.DEFINE_enum("to_format", None, [*FORMATS, ST_FORMAT, CE_FORMAT],
                      "Format of --output.")
    flags.DEFINE_string("input", None, "Checkpoint prefix or directory to read.")
    flags.DEFINE_string("output", None, "New directory to write.")
    flags.DEFINE_string("bert_config_file", None,
                        "bert_config.json of a google or bert_tf input (default: beside it).")
    flags.DEFINE_string("vocab_file", None, "Vocabulary of the output (default: vocab.txt "
                        "beside the input). An extension of the input's vocabulary resizes "
                        "the word embeddings and the MLM bias to it.")
    flags.DEFINE_string("base_vocab_file", None, "The input's own vocabulary, when it has no "
                        "vocab.txt beside it (to tell the new rows of an extended --vocab_file).")
    flags.DEFINE_integer("seed", 0, "Seeds the initialisation of weights the input lacks.")
    flags.DEFINE_bool("do_lower_case", None, "The model's casing, written into an hf "
                      "output's tokenizer files (default: inferred from the vocabulary, "
                      "uncased when it has no upper-case token).")
    flags.DEFINE_enum("pooling", None, ["mean", "cls", "max"], "sentence_transformers: the "
                      "pooling (default: the input's, else mean).")
    flags.DEFINE_integer("max_seq_length", None, "sentence_transformers: tokens per text "
                         "(default: the input's, else 256 or max_position_embeddings).")
    for name in ("from_format", "to_format", "input", "output"):
        flags.mark_flag_as_required(name)


@cli_main
def main(argv) -> None:
    from absl import flags

    if len(argv) > 1:
        raise UserError(f"unexpected arguments: {' '.join(argv[1:])}")
    f = flags.FLAGS
    if f.base_vocab_file and not f.vocab_file:
        raise UserError("--base_vocab_file applies only with --vocab_file (the vocabulary to "
                        "resize the model to)")
    if f.to_format == CE_FORMAT:
        from bert_tf.export import cross_encoder_writer

        if f.from_format != "bert_tf":
            raise UserError(f"--to_format={CE_FORMAT} converts a run_rerank output directory: "
                            "give --from_format=bert_tf")
        for name in ("bert_config_file", "vocab_file", "base_vocab_file", "pooling",
                     "max_seq_length"):
            if f[name].present:
                raise UserError(f"--{name} does not apply to --to_format={CE_FORMAT} (the "
                                "run directory has its config, vocabulary and length)")
        cross_encoder_writer.convert(f.input, f.output, f.do_lower_case)
        return
    if f.to_format == ST_FORMAT:
        from bert_tf.export import st_folder_writer

        st_folder_writer.convert(f.from_format, f.input, f.output, f.bert_config_file,
                                 f.vocab_file, f.base_vocab_file, f.do_lower_case, f.pooling,
                                 f.max_seq_length)
        return
    for name in ("pooling", "max_seq_length"):
        if f[name].present:
            raise UserError(f"--{name} applies to --to_format={ST_FORMAT} only")
    convert(f.from_format, f.to_format, f.input, f.output, f.bert_config_file, f.vocab_file,
            f.seed, f.base_vocab_file, f.do_lower_case)


def console_main() -> None:
    """The `bert-tf-convert` console script (and `python -m bert_tf.convert_checkpoint`)."""
    _define_flags()
    errors.run_app(main, preflight=install_check.problems)


if __name__ == "__main__":
    console_main()
