"""Export a fine-tuned model (run_classifier, run_tagging, run_squad) as a raw-text SavedModel.

    export_finetuned("out/sst2", "export/sst2/1")   # or: python -m bert_tf.export \\
                                                    #   --output_dir=out/sst2 --export_dir=...

The fine-tuned output directory holds what is needed: its latest checkpoint, bert_config.json,
vocab.txt, label_list.json and finetune_task.json (head kind, do_lower_case, max_seq_length,
a classifier's readout, and for QA the window and answer settings). Text is tokenized in the
graph, exactly as the host featurizers do (`bert_tf.text.tf_tokenization`). Signatures, every
batch dynamic:

    classifier   serving_default / classify   text_a: string [batch]
                 classify_pair                text_a, text_b: string [batch]
                 -> probabilities float32 [batch, num_labels] (softmax), label string [batch];
                    a regression model (label_list null) returns score float32 [batch].
                 Packed as [CLS] A [SEP] (B [SEP]), longest-first truncation.
                 A run_rerank cross-encoder ("reranker" in finetune_task.json) serves
                 serving_default / score: query, passage -> score, logit
                 (`bert_tf.export.classifier_serving`).
    tagger       serving_default / tag        text: string [batch]
                 -> words string [batch, max_words] (padded with ""): the text's words, split
                        on Unicode whitespace (Python's `str.split()`), as CoNLL tokens;
                    tags string [batch, max_words] (""-padded);
                    word_start, word_end int32 [batch, max_words]: CHARACTER offsets (code
                        points) of each word in the text, `text[start:end]` (-1 padding);
                    num_words int32 [batch];
                    entity_type, entity_text string [batch, max_entities] (""-padded),
                    entity_start, entity_end int32 [batch, max_entities] (-1 padding):
                        the chunks of the tags (conlleval's reading, `tagging_metrics.
                        tags_to_spans`), their text `text[start:end]` and character offsets;
                    num_entities int32 [batch]. Tags that are not BIO/IOBES-like (POS tags)
                        give no entities.
                 A sentence of more than max_seq_length - 2 pieces is cut into windows as in
                 training (`tagging_data.featurize`: every `stride` pieces, from the task
                 file's "stride" or "doc_stride", default half a window, the last one ending
                 at the sentence's end); each word is tagged in the window where its first
                 piece has the most context. So no sentence is ever cut short.
    span         serving_default / answer     question, context: string [batch]
                 -> answer string, start, end int32 (character offsets), score float32
                    (see `bert_tf.export.qa_serving`).

Invalid UTF-8 bytes are dropped before anything else; offsets count the characters left.
Example TensorFlow Serving request: {"signature_name": "tag", "instances": [{"text": "..."}]}.
Loading needs the TF Text ops: `import tensorflow_text` before `tf.saved_model.load`.
"""

from __future__ import annotations

import functools
import os
from typing import Dict, List, Optional, Sequence

import tensorflow as tf
import tensorflow_text as tf_text

from bert_tf.core.errors import UserError
from bert_tf.export.classifier_serving import ClassifierServingModule, RerankerServingModule
from bert_tf.export.qa_serving import (
    SpanServingModule,
    build_rows,
    max_context_window,
    plan_windows,
)
from bert_tf.text.tf_tokenization import TFBertTokenizer

_TEXT = tf.TensorSpec([None], tf.string)


@functools.lru_cache(maxsize=1)
def whitespace_class() -> str:
    """What `str.split()` splits on (the words of a tagging request), as an RE2 class."""
    return "[" + "".join(f"\\x{{{c:x}}}" for c in range(0x110000) if chr(c).isspace()) + "]"

_PREFIX_CODES = {"O": 0, "B": 1, "I": 2, "E": 3, "S": 4}


def _i32(x) -> tf.Tensor:
    return tf.cast(x, tf.int32)


def _chunk_codes(label_list: Sequence[str]):
    """(prefix code per tag, type id per tag, type names), or None for non-chunk tags."""
    from bert_tf.finetune.tagging.tagging_metrics import split_tag

    types: List[str] = []
    prefixes, type_ids = [], []
    try:
        for tag in label_list:
            prefix, kind = split_tag(tag)
            if kind and kind not in types:
                types.append(kind)
            prefixes.append(_PREFIX_CODES[prefix])
            type_ids.append(types.index(kind) if kind else -1)
    except UserError:
        return None
    return prefixes, type_ids, types or [""]


class TaggerServingModule(tf.Module):
    """A `BertTagger` with in-graph word splitting, tokenization, windows and entities.

    Args:
        model: the task model -> {"logits": [batch, seq_len, num_labels]}.
        tokenizer: the in-graph tokenizer of the model's vocabulary.
        max_seq_length: row length; windows hold max_seq_length - 2 pieces.
        label_list: tag names in tag-id order.
        stride: pieces between window starts (default: half a window, as in training).
    """

    def __init__(self, model, tokenizer: TFBertTokenizer, max_seq_length: int,
                 label_list: Sequence[str], stride: Optional[int] = None,
                 name: Optional[str] = None) -> None:
        super().__init__(name=name)
        self.model = model
        self.tokenizer = tokenizer
        self.max_seq_length = int(max_seq_length)
        self.window = self.max_seq_length - 2
        self.stride = int(stride or max(1, self.window // 2))
        if self.window < 1 or not 1 <= self.stride <= self.window:
            raise UserError(f"max_seq_length={max_seq_length} with stride={stride}: need "
                            "max_seq_length >= 3 and 1 <= stride <= max_seq_length - 2")
        self.tags = tf.constant(list(label_list))
        codes = _chunk_codes(label_list)
        self.with_entities = codes is not None
        if codes is not None:
            self.prefix_codes = tf.constant(codes[0], tf.int32)
            self.type_ids = tf.constant(codes[1], tf.int32)
            self.type_names = tf.constant(codes[2])

    def signatures(self) -> Dict[str, tf.types.experimental.PolymorphicFunction]:
        # The tf.function, not a concrete function traced here: saving traces it (again).
        return {"serving_default": self.tag, "tag": self.tag}

    def _word_tags(self, text: tf.Tensor, words: tf.RaggedTensor) -> tf.Tensor:
        """int32 [all words]: the tag id of every word, read at its first piece."""
        tok = self.tokenizer
        nrows = tf.shape(text)[0]
        ids = tok.tokenize(words.flat_values)  # [words, (pieces)]
        empty = tf.equal(ids.row_lengths(), 0)
        # A word that gives no piece (a lone control character) is fed as one [UNK].
        ids = tf.concat([ids, tf.RaggedTensor.from_row_lengths(
            tf.fill([tf.reduce_sum(_i32(empty))], tf.constant(tok.unk_id, tf.int32)),
            tf.cast(empty, tf.int64))], axis=1)
        word_row = _i32(words.value_rowids())
        count = tf.math.unsorted_segment_sum(_i32(ids.row_lengths()), word_row, nrows)
        base = tf.cumsum(count, exclusive=True)
        position = _i32(ids.row_starts()) - tf.gather(base, word_row)
        size = tf.fill([nrows], self.window)
        step = tf.fill([nrows], self.stride)
        windows = plan_windows(count, size, step, clamp_last=True)
        inputs = build_rows(windows, ids.flat_values, base, self.max_seq_length, tok)
        inputs.pop("offset")  # always 1: [CLS] window [SEP]
        logits = self.model(inputs, training=False)["logits"]
        predicted = tf.argmax(logits, axis=-1, output_type=tf.int32)  # [windows, seq_len]
        best = max_context_window(word_row, position, count, size, step, windows,
                                  clamp_last=True)
        row = tf.gather(windows.first, word_row) + best
        column = position - tf.gather(windows.start, row) + 1
        return tf.gather_nd(predicted, tf.stack([row, column], axis=1))

    def _entities(self, text, words, tag_ids, word_start, word_end) -> Dict[str, tf.Tensor]:
        """Chunks of the tags, as `tagging_metrics.tags_to_spans` reads them."""
        nrows = tf.shape(text)[0]
        if not self.with_entities:
            empty = tf.RaggedTensor.from_row_lengths(tf.zeros([0], tf.int32),
                                                     tf.zeros([nrows], tf.int64))
            return {"type": empty.with_flat_values(tf.zeros([0], tf.string)), "start": empty,
                    "end": empty, "text": empty.with_flat_values(tf.zeros([0], tf.string))}
        prefix = tf.gather(self.prefix_codes, tag_ids)
        kind = tf.gather(self.type_ids, tag_ids)
        local = _i32(tf.range(tf.size(tag_ids, out_type=tf.int64)) - tf.gather(
            words.row_starts(), words.value_rowids()))
        first = tf.equal(local, 0)
        last = tf.equal(local, tf.gather(_i32(words.row_lengths()), words.value_rowids()) - 1)
        prev_prefix = tf.where(first, 0, tf.concat([[0], prefix[:-1]], axis=0))
        prev_kind = tf.where(first, -1, tf.concat([[-1], kind[:-1]], axis=0))
        next_prefix = tf.where(last, 0, tf.concat([prefix[1:], [0]], axis=0))
        next_kind = tf.where(last, -1, tf.concat([kind[1:], [-1]], axis=0))
        b, i, e, s = (_PREFIX_CODES[x] for x in "BIES")
        # A chunk opens at B-/S-, or at I-/E- not continuing a B-/I- chunk of its type; it
        # closes after E-/S-, or before anything but an I-/E- of its type.
        opens = (prefix > 0) & ((prefix == b) | (prefix == s) | ~(
            ((prev_prefix == b) | (prev_prefix == i)) & tf.equal(prev_kind, kind)))
        closes = (prefix > 0) & ((prefix == e) | (prefix == s) | ~(
            ((next_prefix == i) | (next_prefix == e)) & tf.equal(next_kind, kind)))
        begin_word = tf.where(opens)[:, 0]
        end_word = tf.where(closes)[:, 0]  # the k-th chunk to open is the k-th to close
        sentence = tf.gather(words.value_rowids(), begin_word)
        start = tf.gather(word_start, begin_word)
        end = tf.gather(word_end, end_word)
        chunk_text = tf.strings.substr(tf.gather(text, sentence), start, end - start,
                                       unit="UTF8_CHAR")
        ragged = lambda values: tf.RaggedTensor.from_value_rowids(  # noqa: E731
            values, sentence, nrows=tf.cast(nrows, tf.int64))
        return {"type": ragged(tf.gather(self.type_names, tf.gather(kind, begin_word))),
                "start": ragged(start), "end": ragged(end), "text": ragged(chunk_text)}

    @tf.function(input_signature=[_TEXT], autograph=False)
    def tag(self, text: tf.Tensor) -> Dict[str, tf.Tensor]:
        """text: string [batch] -> words, tags, offsets and entities (module docstring)."""
        text = tf.strings.unicode_transcode(text, "UTF-8", "UTF-8", errors="ignore")
        words, begin, _ = tf_text.regex_split_with_offsets(text, whitespace_class() + "+", "")
        flat_words = words.flat_values
        begin = begin.flat_values
        before = tf.strings.substr(tf.gather(text, words.value_rowids()), tf.zeros_like(begin),
                                   begin)
        word_start = _i32(tf.strings.length(before, unit="UTF8_CHAR"))
        word_end = word_start + _i32(tf.strings.length(flat_words, unit="UTF8_CHAR"))
        tag_ids = self._word_tags(text, words)
        entities = self._entities(text, words, tag_ids, word_start, word_end)
        return {
            "words": words.to_tensor(""),
            "tags": words.with_flat_values(tf.gather(self.tags, tag_ids)).to_tensor(""),
            "word_start": words.with_flat_values(word_start).to_tensor(-1),
            "word_end": words.with_flat_values(word_end).to_tensor(-1),
            "num_words": _i32(words.row_lengths()),
            "entity_type": entities["type"].to_tensor(""),
            "entity_text": entities["text"].to_tensor(""),
            "entity_start": entities["start"].to_tensor(-1),
            "entity_end": entities["end"].to_tensor(-1),
            "num_entities": _i32(entities["start"].row_lengths()),
        }


def restore_finetuned(model_dir: str, kind: str, config, num_labels: int, readout: str,
                      head: str):
    """The task model with the latest checkpoint of `model_dir` read into it."""
    from bert_tf.finetune import heads
    from bert_tf.training.checkpoint_paths import read_strictly

    latest = tf.train.latest_checkpoint(model_dir)
    if not latest:
        raise UserError(f"{model_dir}: no fine-tuned checkpoint to export")
    model = heads.model_of_kind(kind, config, num_labels, readout, head)
    read_strictly(latest, {"model": model}, what="export")
    return model


def _setting(info: Dict[str, object], key: str, default=None):
    """info[key] (or `default`); a missing required setting is a UserError."""
    value = info.get(key, default)
    if value is None:
        raise UserError(f"finetune_task.json has no {key!r}")
    return value


def export_finetuned(model_dir: str, export_dir: str, model=None, *,
                     max_seq_length: Optional[int] = None) -> str:
    """Writes the serving SavedModel of a fine-tuned output directory.

    Args:
        model_dir: the fine-tuning --output_dir (see the module docstring for its files).
        export_dir: a new directory (for TensorFlow Serving `<model_base_path>/<version>`),
            written under a temporary name and renamed when complete.
        model: the task model in memory (after training); None restores the latest
            checkpoint of model_dir.
        max_seq_length: row length of the exported model; default the training one.

    Returns:
        export_dir.

    Raises:
        UserError: a missing or inconsistent file, no checkpoint, an existing export_dir.
    """
    from bert_tf.finetune import heads, runner
    from bert_tf.finetune.label_list import LABEL_LIST_FILE, load_label_list
    from bert_tf.interop.model_files import (
        check_new_directory,
        check_vocab_size,
    )
    from bert_tf.modeling.config import BertConfig

    info = runner.read_task_file(model_dir)
    kind = info.get("kind")
    if kind not in heads.KINDS:
        raise UserError(f"{model_dir}/{runner.TASK_FILE}: unknown kind {kind!r} (expected one "
                        f"of {', '.join(heads.KINDS)})")
    config = BertConfig.from_json_file(os.path.join(model_dir, "bert_config.json"))
    vocab_file = os.path.join(model_dir, "vocab.txt")
    check_vocab_size(vocab_file, config.vocab_size)
    length = int(max_seq_length or _setting(info, "max_seq_length"))
    if length < 3:
        raise UserError(f"max_seq_length={length}: need at least 3 ([CLS] x [SEP])")
    config.check_seq_length(length)
    num_labels = int(_setting(info, "num_labels", 2 if kind == "span" else None))
    label_list = None
    if kind != "span":
        label_list = load_label_list(os.path.join(model_dir, LABEL_LIST_FILE))
        expected = 1 if label_list is None else len(label_list)
        if expected != num_labels or (kind == "tagger" and label_list is None):
            raise UserError(f"{model_dir}: {LABEL_LIST_FILE} does not fit the {kind} of "
                            f"{num_labels} labels in {runner.TASK_FILE}")
    # A classifier's sentence vector (`heads.READOUTS`); files from before the option: pooler.
    readout = str(info.get("classifier_readout", "pooler"))
    if readout not in heads.READOUTS:
        raise UserError(f"{model_dir}/{runner.TASK_FILE}: unknown classifier_readout "
                        f"{readout!r} (expected one of {', '.join(heads.READOUTS)})")
    # The classifier's head (`heads.CLASSIFIER_HEADS`); files from before ELECTRA's: bert.
    head = str(info.get("classifier_head", "bert"))
    if head not in heads.CLASSIFIER_HEADS:
        raise UserError(f"{model_dir}/{runner.TASK_FILE}: unknown classifier_head {head!r} "
                        f"(expected one of {', '.join(heads.CLASSIFIER_HEADS)})")
    check_new_directory(export_dir)  # before the (slow) restore
    if model is None:
        model = restore_finetuned(model_dir, kind, config, num_labels, readout, head)
    tokenizer = TFBertTokenizer(vocab_file, bool(_setting(info, "do_lower_case")))
    if kind == "classifier" and info.get("reranker"):  # run_rerank's cross-encoder
        module = RerankerServingModule(model, tokenizer, length)
    elif kind == "classifier":
        module = ClassifierServingModule(model, tokenizer, length, label_list)
    elif kind == "tagger":
        module = TaggerServingModule(model, tokenizer, length, label_list,
                                     info.get("stride", info.get("doc_stride")))
    else:
        query, stride, answer, n_best = (int(_setting(info, key)) for key in (
            "max_query_length", "doc_stride", "max_answer_length", "n_best_size"))
        if length - query - 3 < 1:
            raise UserError(f"max_seq_length={length} leaves no room for context after "
                            f"max_query_length={query}")
        if min(stride, answer, n_best) < 1:
            raise UserError(f"{model_dir}/{runner.TASK_FILE}: doc_stride, max_answer_length "
                            "and n_best_size must be positive")
        module = SpanServingModule(
            model, tokenizer, length, stride, query, answer, n_best,
            bool(info.get("version_2_with_negative", False)),
            float(info.get("null_score_diff_threshold", 0.0)))
    from bert_tf.export.saved_model import save_module

    return save_module(module, export_dir)
