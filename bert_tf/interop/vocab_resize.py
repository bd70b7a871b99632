"""A model follows an extended vocabulary: new WordPiece rows, base rows untouched.

An extended vocabulary (`data_tools.extend_vocab`) is the base vocabulary of a checkpoint
with new WordPieces written into its `[unusedN]` slots (same size, same ids) or appended after
it (new ids >= the base size), or both. `resize_to_vocab` makes a `ModelFiles` of any format
fit such a vocabulary: the word embeddings `[vocab_size, hidden]` and the MLM output bias
`[vocab_size]` get the new vocabulary's rows, and `config.vocab_size` follows.

A row is new when its token is not in the base vocabulary or its id was an `[unusedN]` slot
there. A new row starts as the mean of the base rows of the pieces the BASE tokenizer splits
the new token into (the MLM bias alike), so that e.g. "covid" starts where "co ##vid" points
on average ([UNK] pieces, which say nothing about the token, are left out of the mean); when
the base tokenizer gives only [UNK], it starts from the mean of the base rows that hold
tokens ([unusedN] slots left out: they were never trained). Every base row keeps its
value bit for bit, so on text of base tokens the resized model computes exactly what the
original did.

A vocabulary in which a base token moved to another id (or disappeared) is refused: its rows
would be silently scrambled. Pure NumPy (and the Python tokenizer); no TensorFlow.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
from absl import logging

from bert_tf.core import tokenization
from bert_tf.core.errors import UserError
from bert_tf.interop.model_files import ModelFiles, vocab_size_of

WORD_EMBEDDINGS = "embeddings/word_embeddings"
MLM_BIAS = "mlm/output_bias"
# Rows indexed by token id: the weights that follow the vocabulary.
VOCAB_ROWS = (WORD_EMBEDDINGS, MLM_BIAS)

_UNUSED = re.compile(r"\[unused\d+\]")
# A character no vocabulary holds (Unicode private use): it stands for the part of the word
# before a `##` piece, see `base_pieces`.
_WORD_BEFORE = "\ue000"


@dataclasses.dataclass(frozen=True)
class VocabChange:
    """How an extended vocabulary differs from its base.

    Attributes:
        base_size: tokens in the base vocabulary (rows of the checkpoint).
        size: tokens in the extended vocabulary.
        new_ids: ids of the new rows, ascending: [unusedN] slots that now hold a new token,
            then the appended ids base_size..size-1.
        tokens: the extended vocabulary, in id order.
    """

    base_size: int
    size: int
    new_ids: Tuple[int, ...]
    tokens: Tuple[str, ...]

    @property
    def replaced(self) -> int:
        """New tokens written into [unusedN] slots."""
        return sum(1 for i in self.new_ids if i < self.base_size)

    @property
    def appended(self) -> int:
        return self.size - self.base_size


def is_unused_slot(token: str) -> bool:
    """True for the `[unusedN]` placeholders of Google's vocabularies."""
    return _UNUSED.fullmatch(token) is not None


def vocab_change(base_vocab_file: str, vocab_file: str) -> Optional[VocabChange]:
    """Compares an extended vocabulary with its base, token by token.

    Returns:
        None when the two hold the same tokens in the same order, else the change.

    Raises:
        UserError: a base token that is not at its base id in `vocab_file` (moved or removed;
            [unusedN] slots excepted), naming the first one.
    """
    base = tokenization.vocab_list(tokenization.load_vocab(base_vocab_file, required_tokens=()))
    new = tokenization.vocab_list(tokenization.load_vocab(vocab_file, required_tokens=()))
    if base == new:
        return None
    base_ids = {token: i for i, token in enumerate(base)}
    new_ids: List[int] = []
    for i, token in enumerate(new):
        where = base_ids.get(token)
        if where is not None and where != i:
            raise UserError(f"{vocab_file}: token {token!r} is id {i} but id {where} in the "
                            f"base vocabulary {base_vocab_file}: an extended vocabulary keeps "
                            "every base token at its id (new tokens go into [unusedN] slots "
                            "or after the base tokens)")
        if i < len(base) and token != base[i]:
            if not is_unused_slot(base[i]):
                raise UserError(f"{vocab_file}: id {i} is {token!r} but {base[i]!r} in the base "
                                f"vocabulary {base_vocab_file}: only [unusedN] slots may be "
                                "replaced")
            new_ids.append(i)
        elif i >= len(base):
            new_ids.append(i)
    if len(new) < len(base):
        raise UserError(f"{vocab_file} has {len(new)} tokens, fewer than the {len(base)} of "
                        f"the base vocabulary {base_vocab_file} (it lacks {base[len(new)]!r})")
    return VocabChange(len(base), len(new), tuple(new_ids), tuple(new))


def infer_do_lower_case(vocab: Mapping[str, int]) -> bool:
    """Whether a vocabulary is uncased: none of its tokens (bracketed specials aside) holds a
    character that lower-casing changes. True for Google's uncased vocabularies and for any
    vocabulary learned on lower-cased text."""
    return not any(ch.lower() != ch for token in vocab
                   if not (token.startswith("[") and token.endswith("]")) for ch in token)


class _WordBefore(Mapping):
    """The base vocabulary plus `_WORD_BEFORE`, the stand-in for a word's first piece."""

    def __init__(self, vocab: Mapping[str, int]):
        self._vocab = vocab

    def __contains__(self, token: object) -> bool:
        return token == _WORD_BEFORE or token in self._vocab

    def __getitem__(self, token: str) -> int:
        return -1 if token == _WORD_BEFORE else self._vocab[token]

    def __iter__(self):
        return iter(self._vocab)

    def __len__(self) -> int:
        return len(self._vocab) + 1


def base_pieces(token: str, tokenizer: tokenization.FullTokenizer) -> List[str]:
    """The base tokenizer's pieces for a new token's surface form.

    A whole-word token ("covid": "co ##vid" in Google's uncased vocabulary) is tokenized as
    text. A continuation piece ("##vidly") only ever follows other characters of a word, so
    its pieces must be found as the tokenizer would find them there: every piece, the first
    included, matched as a `##` piece ("##vid ##ly"). Tokenizing "vidly" alone would match
    word-initial pieces ("vi ##dly"), whose rows mean something else, and tokenizing some
    word + "vidly" lets the greedy match swallow the join ("avidly": "avid ##ly"). So the
    word is given a one-character first piece that the (wrapped) vocabulary alone holds,
    `_WORD_BEFORE`: WordPiece's greedy longest match takes exactly that character first
    (nothing longer that starts with it is in the vocabulary), then matches the rest as
    continuations, as inside a real word; the stand-in is dropped.

    Returns:
        Base tokens, possibly [UNK] (the text is normalised as the tokenizer does: lower-case
        and accents stripped for an uncased vocabulary, punctuation split off).
    """
    if not token.startswith(tokenization.CONTINUATION_PREFIX):
        return tokenizer.tokenize(token)
    words = tokenizer.basic_tokenizer.tokenize(token[len(tokenization.CONTINUATION_PREFIX):])
    if not words:
        return []
    inside = tokenization.WordpieceTokenizer(_WordBefore(tokenizer.vocab),
                                             tokenizer.wordpiece_tokenizer.unk_token)
    pieces = inside.tokenize(_WORD_BEFORE + words[0])
    pieces = pieces[1:] if pieces[:1] == [_WORD_BEFORE] else pieces  # [UNK] stays
    for word in words[1:]:  # punctuation inside the piece: separate words, as in text
        pieces.extend(tokenizer.wordpiece_tokenizer.tokenize(word))
    return pieces


@dataclasses.dataclass(frozen=True)
class RowSources:
    """Where each new row's initial value comes from.

    Attributes:
        pieces: {new id: base ids whose rows are averaged}.
        unresolved: new ids whose base pieces are all [UNK]: they take the mean of
            `fallback_rows`.
        fallback_rows: int64 [n], the base ids that hold tokens (not [unusedN] slots).
    """

    pieces: Dict[int, Tuple[int, ...]]
    unresolved: Tuple[int, ...]
    fallback_rows: np.ndarray


def row_sources(change: VocabChange, base_vocab_file: str,
                do_lower_case: Optional[bool] = None) -> RowSources:
    """The base rows each new row is averaged from (see `base_pieces`).

    Args:
        change: from `vocab_change`.
        base_vocab_file: the checkpoint's vocabulary.
        do_lower_case: the base tokenizer's setting; None infers it from the base vocabulary
            (`infer_do_lower_case`).
    """
    vocab = tokenization.load_vocab(base_vocab_file, required_tokens=(tokenization.UNK,))
    if do_lower_case is None:
        do_lower_case = infer_do_lower_case(vocab)
    tokenizer = tokenization.FullTokenizer(base_vocab_file, do_lower_case, required_tokens=())
    unk = tokenizer.unk_id
    pieces: Dict[int, Tuple[int, ...]] = {}
    unresolved: List[int] = []
    for i in change.new_ids:
        # [UNK] pieces say nothing about the word: average the known pieces, if any.
        ids = tuple(vocab[p] for p in base_pieces(change.tokens[i], tokenizer)
                    if vocab[p] != unk)
        if ids:
            pieces[i] = ids
        else:
            unresolved.append(i)
    base = tokenization.vocab_list(vocab)
    fallback = np.array([i for i, t in enumerate(base) if not is_unused_slot(t)], np.int64)
    return RowSources(pieces, tuple(unresolved), fallback)


def resized_rows(table: np.ndarray, change: VocabChange, sources: RowSources) -> np.ndarray:
    """A vocabulary-indexed weight with the extended vocabulary's rows.

    Args:
        table: float [base_size, ...] (the word embeddings [base_size, hidden], the MLM bias
            [base_size]).
        change, sources: from `vocab_change` and `row_sources`.

    Returns:
        float [size, ...] of `table`'s dtype: base rows copied bit for bit, each new row the
        float64 mean of its source rows.
    """
    table = np.asarray(table)
    if table.shape[0] != change.base_size:
        raise UserError(f"the base vocabulary has {change.base_size} tokens but the weights "
                        f"have {table.shape[0]} rows")
    out = np.empty((change.size,) + table.shape[1:], table.dtype)
    out[:change.base_size] = table
    fallback = table[sources.fallback_rows].astype(np.float64).mean(axis=0)
    for i in change.new_ids:
        ids = sources.pieces.get(i)
        out[i] = fallback if ids is None else table[list(ids)].astype(np.float64).mean(axis=0)
    return out


def resize_to_vocab(files: ModelFiles, vocab_file: str, base_vocab_file: Optional[str] = None,
                    do_lower_case: Optional[bool] = None) -> ModelFiles:
    """Makes a model follow `vocab_file`, an extension of its own vocabulary.

    Args:
        files: the model as read (its `vocab_file` is the checkpoint's own vocabulary).
        vocab_file: the vocabulary the model must have.
        base_vocab_file: the checkpoint's vocabulary when `files` has none (default:
            `files.vocab_file`).
        do_lower_case: the base tokenizer's setting (None: inferred from the base vocabulary).

    Returns:
        `files` with `vocab_file` as its vocabulary: unchanged weights when the two
        vocabularies are the same (or, without a base vocabulary, the same size, as before
        vocabularies could be extended); else resized word embeddings and MLM bias, new rows
        initialised as the module docstring says (logged in one line), and `config.vocab_size`
        following.

    Raises:
        UserError: the base vocabulary is unknown and the sizes differ; a base token moved
            (see `vocab_change`); or the base vocabulary does not fit the weights' rows.
    """
    base_vocab_file = base_vocab_file or files.vocab_file
    rows = files.weights.get(WORD_EMBEDDINGS)
    base_size = files.config.vocab_size if rows is None else int(np.shape(rows)[0])
    if base_vocab_file is None:
        size = vocab_size_of(vocab_file)
        if size != base_size:
            raise UserError(f"vocab file {vocab_file} has {size} tokens but the word "
                            f"embeddings of {files.source} have {base_size} rows, and there is "
                            f"no vocab.txt beside {files.source} to tell which rows are new: "
                            f"put the checkpoint's own vocabulary there (or pass it to "
                            f"convert_checkpoint as --base_vocab_file)")
        return dataclasses.replace(files, vocab_file=vocab_file)
    change = vocab_change(base_vocab_file, vocab_file)
    if change is None:
        return dataclasses.replace(files, vocab_file=vocab_file)
    if change.base_size != base_size:
        raise UserError(f"base vocabulary {base_vocab_file} has {change.base_size} tokens but "
                        f"the word embeddings of {files.source} have {base_size} rows")
    sources = row_sources(change, base_vocab_file, do_lower_case)
    weights = dict(files.weights)
    for name in VOCAB_ROWS:
        if name in weights:
            weights[name] = resized_rows(weights[name], change, sources)
    logging.info("%s", describe(change, sources, files.source, vocab_file,
                                [n for n in VOCAB_ROWS if n in weights]))
    config = dataclasses.replace(files.config, vocab_size=change.size)
    return dataclasses.replace(files, config=config, weights=weights, vocab_file=vocab_file)


def describe(change: VocabChange, sources: RowSources, source: str, vocab_file: str,
             names: Sequence[str]) -> str:
    """The one log line of a resize: rows added and replaced, and how they start."""
    fallback = len(sources.unresolved)
    return (f"vocabulary {vocab_file}: {len(change.new_ids)} new rows of {', '.join(names)} "
            f"for {source} ({change.appended} appended, {change.replaced} in [unusedN] "
            f"slots; vocab_size {change.base_size} -> {change.size}), each the mean of its "
            f"base WordPieces' rows"
            + (f"; {fallback} with only [UNK] pieces from the mean of the "
               f"{len(sources.fallback_rows)} base token rows" if fallback else ""))
