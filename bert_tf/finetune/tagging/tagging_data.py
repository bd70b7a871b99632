"""Token tagging (NER) data: a CoNLL reader, WordPiece windows, and predictions back to words.

Pure Python and NumPy (no TensorFlow).

Reading (`read_conll`): one token per line, the token in the first column and its tag in the
last, columns separated by spaces or tabs (CoNLL-2003's `EU NNP B-NP B-ORG` and WNUT-17's
`token<TAB>tag` alike); a line of only whitespace ends a sentence (WNUT-17's training file
separates some sentences with a lone tab); `-DOCSTART-` lines are skipped.

Featurizing (`featurize`): each word becomes its WordPieces; its tag sits on its FIRST piece,
the other pieces have weight 0. A word that yields no piece at all (a lone control or format
character such as U+FE0F) is fed as one [UNK] so that it still gets a prediction. A sentence
longer than max_seq_length - 2 pieces is never cut: it becomes overlapping windows of that
many pieces that start every `stride` pieces (the last window ends at the sentence's end).
Training uses every first piece of every window (weight 1), so a word in the overlap is
trained on twice, each time with different context; this keeps every window's loss a plain
sum over its words. For prediction each word is SCORED in exactly one window: the one where
its first piece has the most context on both sides (SQuAD's max-context rule),
`min(pieces before, pieces after) + 0.01 * window length`, the earliest window on a tie.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Dict, List, Optional, Sequence

import numpy as np

from bert_tf.core import fileio
from bert_tf.core.errors import UserError

DOCSTART = "-DOCSTART-"
OUTSIDE = "O"
_COLUMNS = re.compile(r"[ \t]+")  # ASCII only: a token may hold other Unicode spaces.


@dataclasses.dataclass(frozen=True)
class Sentence:
    """One sentence: its words, their tags (None: unlabelled), and where it starts.

    Word `i` is on line `line + i` of `path` (a sentence's lines are consecutive).
    """

    words: List[str]
    tags: Optional[List[str]]
    path: str = ""
    line: int = 0


def read_conll(path: str, require_tags: bool = True) -> List[Sentence]:
    """Reads a CoNLL-style file into sentences.

    Args:
        path: local or remote file, UTF-8.
        require_tags: every token line needs at least two columns (token, tag). False (for a
            predict file): lines may be tokens alone; then the file's sentences have no tags.
            Either every token line has a tag or none does.

    Raises:
        UserError: missing file, not UTF-8, a one-column line where a tag is required, or
            lines with and without tags mixed; the message names file and line.
    """
    if not fileio.exists(path):
        raise UserError(f"{path}: no such file")
    with fileio.open_file(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise UserError(f"{path}:{line}: not UTF-8") from None
    sentences: List[Sentence] = []
    words: List[str] = []
    tags: List[Optional[str]] = []
    first_line = 0
    tagged_line = untagged_line = 0  # The first line seen with / without a tag.

    def end_sentence() -> None:
        if words:
            sentences.append(Sentence(list(words), list(tags), path, first_line))  # type: ignore
            words.clear()
            tags.clear()

    # split("\n"), not splitlines(): the latter also splits inside tokens at \x85, U+2028 ...
    for n, raw in enumerate(text.split("\n"), 1):
        columns = _COLUMNS.split(raw.rstrip("\r").strip(" \t"))
        if columns == [""] or not raw.strip():
            end_sentence()
            continue
        if columns[0] == DOCSTART:
            end_sentence()
            continue
        if len(columns) == 1:
            if require_tags:
                raise UserError(f"{path}:{n}: expected a token and a tag, found one column "
                                f"{columns[0]!r}")
            untagged_line = untagged_line or n
        else:
            tagged_line = tagged_line or n
        if tagged_line and untagged_line:
            other = min(tagged_line, untagged_line)
            here, there = ("a tag", "none") if len(columns) > 1 else ("no tag", "one")
            raise UserError(f"{path}:{n}: {here} here but {there} on line {other}; either "
                            f"every token line has a tag or none does")
        if not words:
            first_line = n
        words.append(columns[0])
        tags.append(columns[-1] if len(columns) > 1 else None)
    end_sentence()
    if untagged_line:
        sentences = [dataclasses.replace(s, tags=None) for s in sentences]
    return sentences


def build_tag_list(sentences: Sequence[Sentence]) -> List[str]:
    """The tag list (index = label id) from training sentences: "O" first, then sorted.

    "O" first makes label id 0 (also the filler of non-scored positions) the outside tag;
    sorted so the same training file always gives the same ids.
    """
    tags = {t for s in sentences for t in (s.tags or ())}
    return ([OUTSIDE] if OUTSIDE in tags else []) + sorted(tags - {OUTSIDE})


@dataclasses.dataclass
class TaggingFeatures:
    """Model inputs: one row per window, `n` windows over all sentences.

    Attributes:
        arrays: "input_ids", "input_mask", "segment_ids" (all 0): int32 [n, max_seq_length];
            "label_ids": int32 [n, max_seq_length], the tag id at each word's first piece, 0
            elsewhere, and "label_weights": float32 [n, max_seq_length], 1.0 at every first
            piece in the window (both absent without tags); host-side "example_index":
            int32 [n], the sentence of each window, and "word_index": int32
            [n, max_seq_length], the word scored at that position, -1 where none is.
        num_words: words per sentence.
        has_labels: whether "label_ids" and "label_weights" are present.
        num_split_sentences: sentences that needed more than one window (for a log line).
        num_empty_words: words that gave no WordPiece and were fed as [UNK].
    """

    arrays: Dict[str, np.ndarray]
    num_words: List[int]
    has_labels: bool
    num_split_sentences: int
    num_empty_words: int

    def __len__(self) -> int:
        return len(self.arrays["input_ids"])


def window_starts(num_pieces: int, window: int, stride: int) -> List[int]:
    """Starts of the windows of `window` pieces that cover `num_pieces` pieces.

    Windows start every `stride` pieces; the last one ends at the last piece, so every window
    is full (unless the whole sentence fits in one). Example: (10, 4, 2) -> [0, 2, 4, 6].
    """
    if num_pieces <= window:
        return [0]
    return list(range(0, num_pieces - window, stride)) + [num_pieces - window]


def featurize(sentences: Sequence[Sentence], label_list: Optional[Sequence[str]], tokenizer,
              max_seq_length: int, stride: Optional[int] = None) -> TaggingFeatures:
    """Turns sentences into windows of `[CLS] pieces [SEP]`, padded with 0.

    Args:
        sentences: from `read_conll`.
        label_list: tag names (index = label id); None, or sentences without tags, give no
            label arrays.
        tokenizer: a `bert_tf.core.tokenization.FullTokenizer` (its `encode` fast path gives
            the same ids as `convert_tokens_to_ids(tokenize(word))`).
        max_seq_length: sequence length, [CLS] and [SEP] included; windows hold
            max_seq_length - 2 pieces.
        stride: pieces between window starts; default half a window.

    Returns:
        `TaggingFeatures` (see the module docstring for windows and weights).

    Raises:
        UserError: a tag not in `label_list` (names file and line); a bad length or stride.
    """
    window = max_seq_length - 2
    stride = max(1, window // 2) if stride is None else stride
    if window < 1 or not 1 <= stride <= window:
        raise UserError(f"max_seq_length={max_seq_length} with stride={stride}: need "
                        f"max_seq_length >= 3 and 1 <= stride <= max_seq_length - 2")
    has_labels = label_list is not None and all(s.tags is not None for s in sentences)
    tag_ids = {t: i for i, t in enumerate(label_list or ())}
    cls_id, sep_id, unk_id = (tokenizer.vocab[t] for t in ("[CLS]", "[SEP]", "[UNK]"))
    rows: List[tuple] = []  # (sentence, piece ids, word of each piece or -1, scored word or -1)
    num_split = num_empty = 0
    for index, sentence in enumerate(sentences):
        pieces: List[int] = []
        first_pieces: List[int] = []  # Position of each word's first piece.
        for word in sentence.words:
            ids = tokenizer.encode(word)
            if not ids:
                ids, num_empty = [unk_id], num_empty + 1
            first_pieces.append(len(pieces))
            pieces.extend(ids)
        starts = window_starts(len(pieces), window, stride)
        num_split += len(starts) > 1
        # For each piece, the window where it has the most context (earliest on a tie).
        best = np.full(len(pieces), -np.inf)
        best_window = np.zeros(len(pieces), np.int64)
        for w, start in enumerate(starts):
            length = min(window, len(pieces) - start)
            offsets = np.arange(length)
            score = np.minimum(offsets, length - 1 - offsets) + 0.01 * length
            span = slice(start, start + length)
            better = score > best[span]
            best[span] = np.where(better, score, best[span])
            best_window[span] = np.where(better, w, best_window[span])
        word_of_piece = np.full(len(pieces), -1, np.int64)
        word_of_piece[first_pieces] = np.arange(len(first_pieces))
        for w, start in enumerate(starts):
            end = min(start + window, len(pieces))
            words = word_of_piece[start:end]
            scored = np.where((words >= 0) & (best_window[start:end] == w), words, -1)
            rows.append((index, pieces[start:end], words, scored))
    n = len(rows)
    arrays = {name: np.zeros((n, max_seq_length), np.int32)
              for name in ("input_ids", "input_mask", "segment_ids", "label_ids")}
    arrays["label_weights"] = np.zeros((n, max_seq_length), np.float32)
    arrays["word_index"] = np.full((n, max_seq_length), -1, np.int32)
    arrays["example_index"] = np.array([r[0] for r in rows], np.int32).reshape(n)
    for row, (index, ids, words, scored) in enumerate(rows):
        length = len(ids) + 2
        arrays["input_ids"][row, :length] = [cls_id, *ids, sep_id]
        arrays["input_mask"][row, :length] = 1
        arrays["word_index"][row, 1:length - 1] = scored
        if has_labels:
            positions = np.nonzero(words >= 0)[0]
            arrays["label_ids"][row, positions + 1] = [
                _tag_id(sentences[index], int(words[p]), tag_ids) for p in positions]
            arrays["label_weights"][row, positions + 1] = 1.0
    if not has_labels:
        del arrays["label_ids"], arrays["label_weights"]
    return TaggingFeatures(arrays, [len(s.words) for s in sentences], has_labels,
                           num_split, num_empty)


def _tag_id(sentence: Sentence, word: int, tag_ids: Dict[str, int]) -> int:
    tag = sentence.tags[word]  # type: ignore[index]
    if tag not in tag_ids:
        raise UserError(f"{sentence.path}:{sentence.line + word}: tag {tag!r} is not one of "
                        f"the training tags ({', '.join(tag_ids)})")
    return tag_ids[tag]


def predictions_to_tags(features: TaggingFeatures, logits_or_pred_ids: np.ndarray,
                        label_list: Sequence[str],
                        num_words_per_sentence: Optional[Sequence[int]] = None
                        ) -> List[List[str]]:
    """Maps window predictions back to one tag per word of every sentence.

    Args:
        features: what `featurize` returned for these sentences.
        logits_or_pred_ids: logits [n, max_seq_length, num_labels] (argmax is taken) or
            predicted label ids [n, max_seq_length], rows in `features` order.
        label_list: tag names (index = label id).
        num_words_per_sentence: words per sentence; default `features.num_words`.

    Returns:
        Per sentence, the tag of each word, read from the window that scores the word.

    Raises:
        ValueError: shapes that do not match `features`, or a word scored zero or twice (a
            bug: `featurize` scores every word exactly once).
    """
    predictions = np.asarray(logits_or_pred_ids)
    if predictions.ndim == 3:
        predictions = predictions.argmax(axis=-1)
    word_index = features.arrays["word_index"]
    if predictions.shape != word_index.shape:
        raise ValueError(f"predictions of shape {predictions.shape} for features of shape "
                         f"{word_index.shape}")
    counts = features.num_words if num_words_per_sentence is None else num_words_per_sentence
    tags: List[List[Optional[str]]] = [[None] * count for count in counts]
    example_index = features.arrays["example_index"]
    for row, position in zip(*np.nonzero(word_index >= 0)):
        sentence, word = example_index[row], word_index[row, position]
        if tags[sentence][word] is not None:
            raise ValueError(f"word {word} of sentence {sentence} is scored twice")
        tags[sentence][word] = label_list[int(predictions[row, position])]
    for sentence, sentence_tags in enumerate(tags):
        if None in sentence_tags:
            raise ValueError(f"word {sentence_tags.index(None)} of sentence {sentence} "
                             f"has no prediction")
    return tags  # type: ignore[return-value]


def write_conll(path: str, sentences_tokens: Sequence[Sequence[str]],
                predicted_tags: Sequence[Sequence[str]],
                gold_tags: Optional[Sequence[Sequence[str]]] = None) -> None:
    """Writes `token [gold] predicted` lines, tab-separated, a blank line after each sentence.

    The layout conlleval reads (with `-d '\\t'`) and `read_conll` reads back (its last column
    is the prediction). Written atomically.

    Raises:
        ValueError: sentence or word counts that do not match.
    """
    columns = [sentences_tokens, predicted_tags] if gold_tags is None else [
        sentences_tokens, gold_tags, predicted_tags]
    if len({len(c) for c in columns}) != 1:
        raise ValueError(f"sentence counts differ: {[len(c) for c in columns]}")
    lines: List[str] = []
    for index, sentence in enumerate(zip(*columns)):
        if len({len(c) for c in sentence}) != 1:
            raise ValueError(f"sentence {index}: word counts differ: "
                             f"{[len(c) for c in sentence]}")
        lines.extend("\t".join(fields) for fields in zip(*sentence))
        lines.append("")
    with fileio.atomic_output(path, "wb") as f:
        f.write("".join(line + "\n" for line in lines).encode("utf-8"))
