"""The tokenizer files of a Hugging Face model directory, written from a vocab.txt.

Without them, transformers' `AutoTokenizer` falls back to `BertTokenizer`'s defaults, which
lower-case: a cased model would then see ids it was never trained on. An exported directory
therefore carries:

    tokenizer_config.json    tokenizer_class PreTrainedTokenizerFast (so that AutoTokenizer
                             loads tokenizer.json as written), do_lower_case, the special
                             tokens, model_max_length (the model's max_position_embeddings),
                             model_input_names with token_type_ids
    special_tokens_map.json  [UNK] [SEP] [PAD] [CLS] [MASK]
    tokenizer.json           the fast tokenizer, built with the `tokenizers` library: BERT's
                             normalizer and pre-tokenizer, WordPiece over the vocabulary,
                             [CLS] text [SEP] (and [SEP] after a second text, type id 1)

Why not tokenizer_class BertTokenizer: transformers 5 rebuilds that class from vocab.txt with
its own defaults (lower-casing character by character, [UNK] for words over 100 characters),
which differ from the original tokenizer on Greek final sigma and on words of 101-200
characters.

`tokenizer.json` gives the ids of `bert_tf.core.tokenization.FullTokenizer` with the same
vocabulary and casing, word for word on the tokenizer tests' hard and random cases (Greek
final sigma and words over 200 characters included). One difference is transformers' own: it
matches the special tokens ("[MASK]", "[SEP]", ...) written literally in the text as single
tokens, where FullTokenizer splits them like any text.
"""

from __future__ import annotations

import json
import os

from bert_tf.core import fileio, tokenization

SPECIAL_TOKENS = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                  "cls_token": "[CLS]", "mask_token": "[MASK]"}
TOKENIZER_FILES = ("tokenizer_config.json", "special_tokens_map.json", "tokenizer.json")
# A capital sigma that follows a cased letter (case-ignorable characters such as combining
# marks or an apostrophe between them, up to 3; Oniguruma's look-behind must have a fixed
# width) and is not followed by one.
FINAL_SIGMA = (r"(?<=\p{Cased}|\p{Cased}\p{Case_Ignorable}|\p{Cased}\p{Case_Ignorable}{2}|"
               r"\p{Cased}\p{Case_Ignorable}{3})" "\u03a3" r"(?!\p{Case_Ignorable}*\p{Cased})")


def build_fast_tokenizer(vocab_file: str, do_lower_case: bool):
    """A `tokenizers.Tokenizer` equal to FullTokenizer(vocab_file, do_lower_case) plus BERT's
    [CLS]/[SEP] template.

    Args:
        vocab_file: one WordPiece per line; the line number is the id.
        do_lower_case: lower-case and strip accents, as FullTokenizer does.

    Returns:
        The tokenizer (`encode(text).ids` -> [CLS] ids [SEP]).
    """
    from tokenizers import (
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
    )

    vocab = dict(tokenization.load_vocab(vocab_file))
    # FullTokenizer's WordpieceTokenizer (as the original): [UNK] for a word of more than 200
    # characters; transformers' own default is 100.
    longest = tokenization.MAX_INPUT_CHARS_PER_WORD
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]",
                                           max_input_chars_per_word=longest))
    clean = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                       strip_accents=False, lowercase=False)
    if do_lower_case:
        # Python's str.lower(), which FullTokenizer applies, writes a capital sigma at the end
        # of a word as the final form ς (Unicode's Final_Sigma rule); the Rust normalizer
        # lower-cases character by character (σ). This replacement applies the rule first.
        final_sigma = normalizers.Replace(Regex(FINAL_SIGMA), "\u03c2")
        fold = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=False,
                                          strip_accents=True, lowercase=True)
        tokenizer.normalizer = normalizers.Sequence([clean, final_sigma, fold])
    else:
        tokenizer.normalizer = clean
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    cls, sep = "[CLS]", "[SEP]"
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {sep}:0", pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
        special_tokens=[(cls, vocab[cls]), (sep, vocab[sep])])
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    return tokenizer


def write_tokenizer_files(vocab_file: str, do_lower_case: bool, model_max_length: int,
                          directory: str) -> None:
    """Writes TOKENIZER_FILES into `directory` (each under a temporary name, then renamed).

    Args:
        vocab_file: the model's vocabulary (already copied beside it as vocab.txt).
        do_lower_case: the model's casing.
        model_max_length: the longest input, in tokens (max_position_embeddings).
    """
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "do_lower_case": do_lower_case,
              "strip_accents": do_lower_case, "tokenize_chinese_chars": True,
              "do_basic_tokenize": True, "model_max_length": model_max_length,
              "model_input_names": ["input_ids", "token_type_ids", "attention_mask"],
              "padding_side": "right",
              **SPECIAL_TOKENS}
    for name, value in (("tokenizer_config.json", config),
                        ("special_tokens_map.json", SPECIAL_TOKENS)):
        with fileio.atomic_output(os.path.join(directory, name), "wb") as f:
            f.write((json.dumps(value, indent=2) + "\n").encode())
    text = build_fast_tokenizer(vocab_file, do_lower_case).to_str(pretty=True)
    with fileio.atomic_output(os.path.join(directory, "tokenizer.json"), "wb") as f:
        f.write(text.encode("utf-8"))
