"""Serving a fine-tuned span extractor (SQuAD-style QA): question + context in, answer out.

Signature (`SpanServingModule.answer`, exported as `answer` and `serving_default`):

    answer    question, context: string [batch]
              -> answer string [batch]: the answer text ("" when there is none),
                 start, end int32 [batch]: its CHARACTER offsets (Unicode code points) in the
                     context, `context[start:end]`; -1 when there is no answer,
                 score float32 [batch]: start + end logit of the answer (SQuAD 2.0's null
                     score when the answer is "", 0 when no span was possible at all).

Everything `squad_data.featurize` and `squad_postprocess.postprocess` do on the host happens
in the graph, with the same results: the question is cut to `max_query_length` pieces, the
context's pieces are laid out as `[CLS] question [SEP] window [SEP]` windows `doc_stride`
pieces apart, each piece is scored only in the window where it has the most context, and the
best span is picked among each window's `n_best_size` best starts and ends, at most
`max_answer_length` pieces long. Answer offsets come from each piece's own characters: every
character of the context is put through the basic tokenizer alone to learn how many
characters it becomes (0 for blanks, controls and lone accents; 1 mostly; 3 for a Hangul
syllable when lower-casing), which maps the pieces' characters back to the context's. Like
the host code, an answer holding an [UNK] piece falls back to its whole words' offsets and
the de-tokenized text, and the text has runs of context blanks collapsed to one space.

Known difference from the host code: candidates with bit-identical scores may be ranked
differently.

The window helpers (`plan_windows`, `max_context_window`, `build_rows`) are shared with the
tagger's serving module in `task_serving`.
"""

from __future__ import annotations

import collections
from typing import Dict, Optional

import tensorflow as tf

from bert_tf.finetune.squad.squad_data import CONTEXT_SPACES
from bert_tf.text.tf_tokenization import TFBertTokenizer

_TEXT = tf.TensorSpec([None], tf.string)
# The blanks that separate SQuAD context words (exactly `squad_data`'s set), as an RE2 class.
CONTEXT_SPACE = "[" + "".join(f"\\x{{{ord(c):x}}}" for c in sorted(CONTEXT_SPACES)) + "]"

Windows = collections.namedtuple("Windows", "example index start length first count")


def _i32(x) -> tf.Tensor:
    return tf.cast(x, tf.int32)


def _padded(values: tf.Tensor, fill) -> tf.Tensor:
    """`values` with one `fill` appended, so that a clipped gather never reads an empty tensor."""
    return tf.concat([values, tf.reshape(tf.cast(fill, values.dtype), [1])], axis=0)


def _window_span(index, num_pieces, size, step, clamp_last: bool):
    """(start, length) of window `index` (broadcasting int32 tensors)."""
    start = index * step
    if clamp_last:  # tagging: the last window ends at the last piece and is full
        start = tf.minimum(start, tf.maximum(num_pieces - size, 0))
    return start, tf.minimum(size, num_pieces - start)


def plan_windows(num_pieces: tf.Tensor, size: tf.Tensor, step: tf.Tensor,
                 clamp_last: bool) -> Windows:
    """The windows of every example, flattened.

    Args:
        num_pieces, size, step: int32 [batch]: pieces of each example, pieces per window,
            pieces between window starts (size >= 1, step >= 1).
        clamp_last: False: windows start every `step` until one reaches the end (SQuAD's
            `doc_windows`); True: the last window is moved back to end at the last piece
            (`tagging_data.window_starts`).

    Returns:
        `Windows` of int32 tensors: example, index (within its example), start, length:
        [num_windows]; first (row of each example's first window), count: [batch]. An
        example without pieces still has one empty window.
    """
    count = 1 + (tf.maximum(num_pieces - size, 0) + step - 1) // step
    example = tf.repeat(tf.range(tf.size(count)), count)
    first = tf.cumsum(count, exclusive=True)
    index = tf.range(tf.reduce_sum(count)) - tf.gather(first, example)
    start, length = _window_span(index, tf.gather(num_pieces, example),
                                 tf.gather(size, example), tf.gather(step, example), clamp_last)
    return Windows(example, index, start, length, first, count)


def max_context_window(example: tf.Tensor, position: tf.Tensor, num_pieces: tf.Tensor,
                       size: tf.Tensor, step: tf.Tensor, windows: Windows,
                       clamp_last: bool) -> tf.Tensor:
    """For each piece, the window where it has the most context (the first on a tie).

    Score of a piece in a window: min(pieces before it, pieces after it) + 0.01 * window
    length, in float64 as the host code computes it.

    Args:
        example, position: int32 [n]: each piece's example and its index there.
        num_pieces, size, step: as given to `plan_windows`, which made `windows`.

    Returns:
        int32 [n]: the index (within its example) of the piece's best window.
    """
    most = tf.maximum(tf.reduce_max(windows.count), 1)
    j = tf.range(most)[None, :]
    column = lambda x: tf.gather(x, example)[:, None]  # noqa: E731
    start, length = _window_span(j, column(num_pieces), column(size), column(step), clamp_last)
    pos = position[:, None]
    inside = (j < column(windows.count)) & (start <= pos) & (pos < start + length)
    score = (tf.cast(tf.minimum(pos - start, start + length - 1 - pos), tf.float64)
             + 0.01 * tf.cast(length, tf.float64))
    score = tf.where(inside, score, tf.constant(-float("inf"), tf.float64))
    best = tf.reduce_max(score, axis=1, keepdims=True)
    return tf.reduce_min(tf.where(score == best, j, most), axis=1)


def build_rows(windows: Windows, pieces: tf.Tensor, piece_base: tf.Tensor, max_seq_length: int,
               tokenizer: TFBertTokenizer, query: Optional[tf.RaggedTensor] = None
               ) -> Dict[str, tf.Tensor]:
    """Model inputs of every window: [CLS] (query [SEP]) window [SEP], padded to the longest.

    Args:
        windows: from `plan_windows`.
        pieces: int32 [all pieces]: every example's piece ids, one after the other.
        piece_base: int32 [batch]: where each example's pieces start in `pieces`.
        query: int32 [batch, (query pieces)], in segment 0; the window is then segment 1.

    Returns:
        "input_ids", "input_mask", "segment_ids": int32 [num_windows, longest row], and
        "offset": int32 [num_windows], the row position of the window's first piece.
    """
    p = tf.range(max_seq_length)[None, :]
    ids = tf.fill(tf.shape(p + windows.example[:, None]), tokenizer.pad_id)
    if query is None:
        offset = tf.ones_like(windows.example)
    else:
        q_len = tf.gather(_i32(query.row_lengths()), windows.example)[:, None]
        q_at = tf.gather(_i32(query.row_starts()), windows.example)[:, None] + p - 1
        q_ids = _padded(query.flat_values, 0)
        q_at = tf.clip_by_value(q_at, 0, tf.size(q_ids) - 1)
        ids = tf.where((p >= 1) & (p <= q_len), tf.gather(q_ids, q_at), ids)
        ids = tf.where(p == q_len + 1, tokenizer.sep_id, ids)
        offset = q_len[:, 0] + 2
    off, length = offset[:, None], windows.length[:, None]
    at = (tf.gather(piece_base, windows.example)[:, None] + windows.start[:, None] + p - off)
    flat = _padded(pieces, 0)
    at = tf.clip_by_value(at, 0, tf.size(flat) - 1)
    ids = tf.where((p >= off) & (p < off + length), tf.gather(flat, at), ids)
    ids = tf.where(p == off + length, tokenizer.sep_id, ids)
    ids = tf.where(p == 0, tokenizer.cls_id, ids)
    mask = p <= off + length
    segment = (p >= off) & mask if query is not None else tf.zeros_like(mask)
    longest = tf.reduce_max(tf.concat([offset + windows.length + 1, [1]], axis=0))
    return {"input_ids": ids[:, :longest], "input_mask": _i32(mask)[:, :longest],
            "segment_ids": _i32(segment)[:, :longest], "offset": offset}


def _per_row_exclusive_cumsum(values: tf.Tensor, row: tf.Tensor, nrows) -> tf.Tensor:
    """Exclusive cumulative sum of `values` restarting at every row (rows sorted)."""
    total = tf.cumsum(values, exclusive=True)
    row_first = tf.math.unsorted_segment_min(tf.range(tf.size(values)), row, nrows)
    base = tf.gather(_padded(total, 0), tf.minimum(row_first, tf.size(values)))
    return total - tf.gather(base, row)


class SpanServingModule(tf.Module):
    """A `BertSpanExtractor` with in-graph tokenization, windows and answer selection.

    Args:
        model: the task model, {"input_ids", "input_mask", "segment_ids"} ->
            {"start_logits", "end_logits": [batch, seq_len]}.
        tokenizer: the in-graph tokenizer of the model's vocabulary.
        max_seq_length, doc_stride, max_query_length, max_answer_length, n_best_size,
        version_2_with_negative, null_score_diff_threshold: as in training and
            `squad_postprocess.postprocess`.
    """

    def __init__(self, model, tokenizer: TFBertTokenizer, max_seq_length: int, doc_stride: int,
                 max_query_length: int, max_answer_length: int, n_best_size: int,
                 version_2_with_negative: bool = False, null_score_diff_threshold: float = 0.0,
                 name: Optional[str] = None) -> None:
        super().__init__(name=name)
        self.model = model
        self.tokenizer = tokenizer
        self.max_seq_length = int(max_seq_length)
        self.doc_stride = int(doc_stride)
        self.max_query_length = int(max_query_length)
        self.max_answer_length = int(max_answer_length)
        self.n_best_size = int(n_best_size)
        self.version_2 = bool(version_2_with_negative)
        self.threshold = float(null_score_diff_threshold)

    def signatures(self) -> Dict[str, tf.types.experimental.PolymorphicFunction]:
        """{signature name: concrete function} for `tf.saved_model.save`."""
        # The tf.function, not a concrete function traced here: saving traces it (again).
        return {"serving_default": self.answer, "answer": self.answer}

    def context_pieces(self, context: tf.Tensor) -> Dict[str, tf.Tensor]:
        """The context's pieces with their character offsets and words.

        Returns int32 tensors: "ids", "example", "start", "end" (character offsets in the
        context), "word" (global index of the blank-separated word), "unk", "suffix" (bool):
        [pieces]; "word_start", "word_end": [words]; "count", "base", "aligned" (bool): [batch].
        """
        tok = self.tokenizer
        nrows = tf.shape(context)[0]
        chars = tf.strings.unicode_split(context, "UTF-8")  # [batch, (chars)]
        char_example = _i32(chars.value_rowids())
        char_base = _i32(chars.row_starts())
        local = tf.range(tf.size(char_example)) - tf.gather(char_base, char_example)
        blank = tf.strings.regex_full_match(chars.flat_values, CONTEXT_SPACE)
        row_length = tf.gather(_i32(chars.row_lengths()), char_example)
        blank_before = tf.concat([[True], blank[:-1]], axis=0) | (local == 0)
        blank_after = tf.concat([blank[1:], [True]], axis=0) | (local == row_length - 1)
        word_begins = ~blank & blank_before
        word_of_char = tf.cumsum(_i32(word_begins)) - 1
        # How many characters the basic tokenizer makes of each character on its own.
        width = _i32(tf.reduce_sum(tf.strings.length(
            tok.split_words(chars.flat_values), unit="UTF8_CHAR"), axis=1))
        owner = tf.repeat(tf.range(tf.size(width)), width)  # tokenized char -> context char
        norm_base = tf.gather(_padded(tf.cumsum(width, exclusive=True), tf.reduce_sum(width)),
                              char_base)
        tokens = tok.split_words(context)  # [batch, (basic tokens)]
        token_pieces = tok.tokenize(tokens.flat_values)  # [tokens, (pieces)]
        ids = token_pieces.flat_values
        token = _i32(token_pieces.value_rowids())
        example = tf.gather(_i32(tokens.value_rowids()), token)
        suffix = tf.range(tf.size(ids)) > tf.gather(_i32(token_pieces.row_starts()), token)
        unk = tf.equal(ids, tok.unk_id)
        piece_text = tok.ids_to_tokens(tf.RaggedTensor.from_row_lengths(
            ids, [tf.size(ids, out_type=tf.int64)])).flat_values
        token_length = tf.strings.length(tokens.flat_values, unit="UTF8_CHAR")
        length = tf.where(unk, tf.gather(token_length, token),
                          tf.strings.length(piece_text, unit="UTF8_CHAR") - 2 * _i32(suffix))
        first = tf.gather(norm_base, example) + _per_row_exclusive_cumsum(length, example, nrows)
        last_index = tf.size(owner)
        owner = _padded(owner, 0)
        start = tf.gather(owner, tf.clip_by_value(first, 0, last_index))
        end = tf.gather(owner, tf.clip_by_value(first + length - 1, 0, last_index)) + 1
        count = tf.math.unsorted_segment_sum(tf.ones_like(ids), example, nrows)
        # The mapping holds when both sides count the same tokenized characters (always, bar
        # Unicode oddities); otherwise answers fall back to whole words, as the host does.
        aligned = tf.equal(tf.math.unsorted_segment_sum(width, char_example, nrows),
                           tf.math.unsorted_segment_sum(length, example, nrows))
        return {"ids": ids, "example": example, "unk": unk, "suffix": suffix,
                "text": piece_text, "word": tf.gather(_padded(word_of_char, 0), start),
                "start": start - tf.gather(char_base, example),
                "end": end - tf.gather(char_base, example),
                "word_start": tf.boolean_mask(local, word_begins),
                "word_end": tf.boolean_mask(local + 1, ~blank & blank_after),
                "count": count, "base": tf.cumsum(count, exclusive=True), "aligned": aligned}

    @tf.function(input_signature=[_TEXT, _TEXT], autograph=False)
    def answer(self, question: tf.Tensor, context: tf.Tensor) -> Dict[str, tf.Tensor]:
        """question, context: string [batch] -> answer, start, end, score (module docstring)."""
        context = tf.strings.unicode_transcode(context, "UTF-8", "UTF-8", errors="ignore")
        nrows = tf.shape(context)[0]
        query = self.tokenizer.tokenize(question)[:, :self.max_query_length]
        pc = self.context_pieces(context)
        size = self.max_seq_length - _i32(query.row_lengths()) - 3
        step = tf.minimum(size, self.doc_stride)
        windows = plan_windows(pc["count"], size, step, clamp_last=False)
        inputs = build_rows(windows, pc["ids"], pc["base"], self.max_seq_length,
                            self.tokenizer, query)
        offset = inputs.pop("offset")
        outputs = self.model(inputs, training=False)
        start_logits = tf.cast(outputs["start_logits"], tf.float32)
        end_logits = tf.cast(outputs["end_logits"], tf.float32)
        width = tf.shape(start_logits)[1]

        # Where each row position is in the context, and whether its piece is scored there.
        p = tf.range(width)[None, :]
        relative = p - offset[:, None]
        in_context = (relative >= 0) & (relative < windows.length[:, None])
        local = windows.start[:, None] + relative
        best = max_context_window(pc["example"], tf.range(tf.size(pc["ids"])) - tf.gather(
            pc["base"], pc["example"]), pc["count"], size, step, windows, clamp_last=False)
        piece = tf.gather(pc["base"], windows.example)[:, None] + local
        piece = tf.clip_by_value(piece, 0, tf.size(best))
        is_max = in_context & tf.equal(tf.gather(_padded(best, -1), piece),
                                       windows.index[:, None])

        best_score, has_span, first_piece, last_piece = self._best_spans(
            start_logits, end_logits, in_context, is_max, windows, offset, pc, nrows)
        text, start, end = self.span_text(context, pc, first_piece, last_piece)
        null = tf.math.unsorted_segment_min(
            tf.cast(start_logits[:, 0], tf.float64) + tf.cast(end_logits[:, 0], tf.float64),
            windows.example, nrows)
        no_answer = ~has_span
        if self.version_2:
            no_answer |= (null - best_score) > self.threshold
            if self.n_best_size == 1:  # the null entry alone fills the n-best list
                no_answer |= null > best_score
        empty_score = null if self.version_2 else tf.zeros_like(null)
        return {"answer": tf.where(no_answer, "", text),
                "start": tf.where(no_answer, -1, start), "end": tf.where(no_answer, -1, end),
                "score": tf.cast(tf.where(no_answer, empty_score, best_score), tf.float32)}

    def _best_spans(self, start_logits, end_logits, in_context, is_max, windows, offset, pc,
                    nrows):
        """The best span of each example among its windows' n-best starts and ends.

        Returns:
            score float64 [batch] (start + end logit), has_span bool [batch], and the span's
            first and last pieces (global indices, int32 [batch]).
        """
        width = tf.shape(start_logits)[1]
        p = tf.range(width)[None, :]

        def top(logits, allowed):
            k = tf.minimum(self.n_best_size, width)
            chosen = tf.math.top_k(tf.where(allowed, logits, -float("inf")), k=k).indices
            return allowed & tf.reduce_any(tf.equal(chosen[:, :, None], p[:, None, :]), axis=1)

        starts, ends = top(start_logits, in_context & is_max), top(end_logits, in_context)
        s, e = p[:, :, None], p[:, None, :]
        valid = starts[:, :, None] & ends[:, None, :] & (e >= s) & (e < s + self.max_answer_length)
        score = (tf.cast(start_logits, tf.float64)[:, :, None]
                 + tf.cast(end_logits, tf.float64)[:, None, :])
        score = tf.reshape(tf.where(valid, score, -float("inf")), [tf.shape(score)[0], -1])
        row_best = tf.reduce_max(score, axis=1)
        # The first (start, end) of the best score in a row, the first window of an example.
        row_pair = tf.reduce_min(tf.where(score == row_best[:, None], tf.range(width * width),
                                          width * width), axis=1)
        best = tf.math.unsorted_segment_max(row_best, windows.example, nrows)
        rows = tf.size(row_best)
        row = tf.math.unsorted_segment_min(
            tf.where(tf.equal(row_best, tf.gather(best, windows.example)), tf.range(rows), rows),
            windows.example, nrows)
        # (A segment max starts from the lowest float, not -inf: count the spans instead.)
        has_span = tf.math.unsorted_segment_max(
            _i32(row_best > -float("inf")), windows.example, nrows) > 0
        row = tf.minimum(row, rows - 1)
        pair = tf.gather(row_pair, row)
        first = pc["base"] + tf.gather(windows.start, row) - tf.gather(offset, row)
        last_index = tf.size(pc["ids"])
        return (best, has_span, tf.clip_by_value(first + pair // width, 0, last_index),
                tf.clip_by_value(first + pair % width, 0, last_index))

    def span_text(self, context, pc, first_piece, last_piece):
        """Text and character offsets of pieces first..last (global indices) of each example."""
        unk_before = _padded(tf.cumsum(_i32(pc["unk"]), exclusive=True),
                             tf.reduce_sum(_i32(pc["unk"])))
        has_unk = tf.gather(unk_before, last_piece + 1) > tf.gather(unk_before, first_piece)
        fallback = has_unk | ~pc["aligned"]
        # Clipped to the context: rows without any span (empty context) point nowhere.
        chars = tf.strings.length(context, unit="UTF8_CHAR")
        start = tf.minimum(tf.gather(_padded(pc["start"], 0), first_piece), chars)
        end = tf.clip_by_value(tf.gather(_padded(pc["end"], 0), last_piece), start, chars)
        exact = tf.strings.regex_replace(
            tf.strings.substr(context, start, end - start, unit="UTF8_CHAR"),
            CONTEXT_SPACE + "+", " ")
        # The host's fallback: the span's whole words, the de-tokenized pieces as the text.
        word_start = tf.gather(_padded(pc["word_start"], 0),
                               tf.gather(_padded(pc["word"], 0), first_piece))
        word_end = tf.gather(_padded(pc["word_end"], 0),
                             tf.gather(_padded(pc["word"], 0), last_piece))
        span = tf.ragged.range(first_piece, tf.maximum(last_piece + 1, first_piece))
        glued = _padded(pc["suffix"], False)
        piece_text = tf.where(glued, tf.strings.regex_replace(_padded(pc["text"], ""), "^##", ""),
                              _padded(pc["text"], ""))
        sep = tf.where(tf.gather(glued, span.flat_values)
                       | tf.equal(span.flat_values, tf.gather(first_piece, span.value_rowids())),
                       "", " ")
        joined = tf.strings.reduce_join(
            span.with_flat_values(sep + tf.gather(piece_text, span.flat_values)), axis=1)
        return (tf.where(fallback, joined, exact), tf.where(fallback, word_start, start),
                tf.where(fallback, word_end, end))
