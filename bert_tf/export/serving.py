"""`BertServingModule`: the tf.Module a serving SavedModel is made of, with its signatures.

Signatures (every batch size and sequence length is dynamic):

    serving_default    text_a: string [batch]
                       -> pooled_output float32 [batch, hidden],
                          sequence_output float32 [batch, seq_len, hidden],
                          input_ids, input_mask, segment_ids int32 [batch, seq_len]
    serve_text_pair    text_a, text_b: string [batch] -> the same outputs, for pair tasks
                       ([CLS] A [SEP] B [SEP], segment_ids 1 on B).
    serve_ids          input_word_ids, input_mask, input_type_ids: int32 [batch, seq_len]
                       (the TF-Hub names) -> pooled_output, sequence_output.
    fill_mask          text: string [batch], with the literal "[MASK]" where tokens are
                       missing -> mask_positions int32 [batch, masks] (-1 pads rows with
                       fewer masks), top_k_ids int32 [batch, masks, k] (-1 for padding),
                       top_k_tokens string [batch, masks, k] ("" for padding),
                       top_k_scores float32 [batch, masks, k] (softmax probabilities,
                       0 for padding). k is fixed at export time (default 5). Only
                       exported when the model has its MLM head.
    embed              text: string [batch] -> embedding float32 [batch, hidden]: the
                       bi-encoder's vector of [CLS] text [SEP] (truncated to max_seq_length),
                       pooled and, by default, L2-normalised as sentence-transformers does
                       (`bert_tf.finetune.retrieval.pooling`). Only exported with a pooling.

Every signature calls one traced encoder function, which the SavedModel also keeps as the
attribute `encode_ids` ({"input_ids", "input_mask", "segment_ids"} int32 -> pooled_output,
sequence_output): the encoder's graph is stored and traced once, not once per signature.

Text is tokenized in the graph by `bert_tf.text.tf_tokenization.TFBertTokenizer` (ids identical to
the Python `FullTokenizer`), packed as [CLS] A [SEP] (B [SEP]) with longest-first truncation
to `max_seq_length`, and padded to the longest sequence of the batch (not to max_seq_length),
so short requests cost little. For fill_mask the text is split on "[MASK]" *before*
tokenizing — the tokenizer would otherwise cut the literal into "[", "mask", "]" — and the
[MASK] id is put back between the pieces; masks beyond max_seq_length are truncated away.
"""

from __future__ import annotations

from typing import Dict, Optional

import tensorflow as tf

from bert_tf.finetune.retrieval import pooling as pooling_lib
from bert_tf.text.tf_tokenization import TFBertTokenizer

MASK_LITERAL = "[MASK]"

_TEXT = tf.TensorSpec([None], tf.string)
_IDS = tf.TensorSpec([None, None], tf.int32)
ENCODER_INPUTS = {"input_ids": _IDS, "input_mask": _IDS, "segment_ids": _IDS}


class BertServingModule(tf.Module):
    """Encoder (+ MLM head) and in-graph tokenizer, with serving signatures.

    Args:
        encoder: a `bert_tf.modeling.BertEncoder` with its weights loaded.
        tokenizer: the in-graph tokenizer for the model's vocabulary.
        max_seq_length: longest packed sequence for the text signatures.
        mlm_head: the pretraining model's MLM head (tied to `encoder`'s word embeddings);
            None exports no fill_mask signature.
        top_k: candidates returned per mask by fill_mask.
        pooling: "mean", "cls" or "max" exports the embed signature; None does not.
        normalize: embed L2-normalises its vectors.
    """

    def __init__(
        self,
        encoder,
        tokenizer: TFBertTokenizer,
        max_seq_length: int,
        mlm_head=None,
        top_k: int = 5,
        name: Optional[str] = None,
        pooling: Optional[str] = None,
        normalize: bool = True,
    ) -> None:
        super().__init__(name=name)
        self.encoder = encoder
        # Every signature calls this one traced encoder: each would otherwise trace the
        # encoder again, and the SavedModel would hold one copy of its graph per signature.
        self.encode_ids = tf.function(self._encode, input_signature=[ENCODER_INPUTS],
                                      autograph=False)
        self.tokenizer = tokenizer
        self.mlm_head = mlm_head
        self.max_seq_length = int(max_seq_length)
        self.top_k = int(min(top_k, tokenizer.vocab_size))
        if mlm_head is not None:
            # Only then: tf.saved_model.save traces every tf.function attribute.
            self.fill_mask = tf.function(self._fill_mask, input_signature=[_TEXT],
                                         autograph=False)
        if pooling is not None and pooling not in pooling_lib.POOLING_MODES:
            raise ValueError(f"unknown pooling mode {pooling!r}")
        self.pooling, self.normalize = pooling, bool(normalize)
        if pooling is not None:
            self.embed = tf.function(self._embed, input_signature=[_TEXT], autograph=False)

    # ------------------------------------------------------------------ helpers

    def _encode(self, inputs: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
        """{"input_ids", "input_mask", "segment_ids"} int32 [batch, seq_len] -> float32
        {"pooled_output": [batch, hidden], "sequence_output": [batch, seq_len, hidden]}."""
        outputs = self.encoder(inputs, training=False)
        return {
            "pooled_output": tf.cast(outputs["pooled_output"], tf.float32),
            "sequence_output": tf.cast(outputs["sequence_output"], tf.float32),
        }

    def _pack(self, segments) -> Dict[str, tf.Tensor]:
        """Packs, then drops the padding columns no row of the batch needs."""
        packed = self.tokenizer.pack(segments, self.max_seq_length)
        longest = tf.maximum(tf.reduce_max(tf.reduce_sum(packed["input_mask"], axis=1)), 1)
        return {k: v[:, :longest] for k, v in packed.items()}

    def _text_outputs(self, segments) -> Dict[str, tf.Tensor]:
        inputs = self._pack(segments)
        outputs = dict(self.encode_ids(inputs))
        outputs.update(inputs)
        return outputs

    # ------------------------------------------------------------------ signatures

    @tf.function(input_signature=[_TEXT], autograph=False)
    def serve_text(self, text_a: tf.Tensor) -> Dict[str, tf.Tensor]:
        """Raw text -> encoder outputs and the packed ids (see the module docstring)."""
        return self._text_outputs([self.tokenizer.tokenize(text_a)])

    @tf.function(input_signature=[_TEXT, _TEXT], autograph=False)
    def serve_text_pair(self, text_a: tf.Tensor, text_b: tf.Tensor) -> Dict[str, tf.Tensor]:
        """Text pairs -> encoder outputs and the packed ids."""
        return self._text_outputs(
            [self.tokenizer.tokenize(text_a), self.tokenizer.tokenize(text_b)])

    @tf.function(input_signature=[_IDS, _IDS, _IDS], autograph=False)
    def serve_ids(
        self, input_word_ids: tf.Tensor, input_mask: tf.Tensor, input_type_ids: tf.Tensor
    ) -> Dict[str, tf.Tensor]:
        """Token ids (TF-Hub input names) -> pooled_output, sequence_output."""
        return self.encode_ids(
            {"input_ids": input_word_ids, "input_mask": input_mask, "segment_ids": input_type_ids})

    def _embed(self, text: tf.Tensor) -> Dict[str, tf.Tensor]:
        """Raw text -> {"embedding": float32 [batch, hidden]} (`embed`)."""
        inputs = self._pack([self.tokenizer.tokenize(text)])
        sequence = self.encode_ids(inputs)["sequence_output"]
        return {"embedding": pooling_lib.pool(sequence, inputs["input_mask"], self.pooling,
                                              self.normalize)}

    def tokenize_with_masks(self, text: tf.Tensor) -> tf.RaggedTensor:
        """Tokenizes text keeping each literal "[MASK]" as the [MASK] id.

        Args:
            text: string [batch].

        Returns:
            RaggedTensor int32 [batch, (tokens)].
        """
        pieces = tf.strings.split(text, MASK_LITERAL)  # [batch, (pieces)]
        piece_ids = self.tokenizer.tokenize(pieces.flat_values)  # [num_pieces, (tokens)]
        row = pieces.value_rowids()
        index_in_row = tf.range(tf.size(row, out_type=tf.int64)) - tf.gather(
            pieces.row_starts(), row)
        not_last = index_in_row < tf.gather(pieces.row_lengths(), row) - 1
        # A [MASK] id after every piece but the last of its text.
        masks = tf.RaggedTensor.from_row_lengths(
            tf.fill([tf.reduce_sum(tf.cast(not_last, tf.int32))],
                    tf.constant(self.tokenizer.mask_id, tf.int32)),
            tf.cast(not_last, tf.int64))
        merged = tf.concat([piece_ids, masks], axis=1)
        return tf.RaggedTensor.from_row_lengths(merged, pieces.row_lengths()).merge_dims(1, 2)

    def _fill_mask(self, text: tf.Tensor) -> Dict[str, tf.Tensor]:
        """Top-k tokens and probabilities at every "[MASK]" of each text (`fill_mask`)."""
        inputs = self._pack([self.tokenize_with_masks(text)])
        sequence_output = self.encode_ids(inputs)["sequence_output"]
        where = tf.where(tf.equal(inputs["input_ids"], self.tokenizer.mask_id))  # [n, 2]
        positions = tf.RaggedTensor.from_value_rowids(
            tf.cast(where[:, 1], tf.int32), where[:, 0],
            nrows=tf.shape(text, out_type=tf.int64)[0]).to_tensor(default_value=-1)
        valid = positions >= 0  # [batch, masks]
        logits = self.mlm_head(sequence_output, mask_positions=tf.maximum(positions, 0))
        probs = tf.nn.softmax(tf.cast(logits, tf.float32), axis=-1)  # [batch, masks, vocab]
        scores, ids = tf.math.top_k(probs, k=self.top_k)
        keep = tf.broadcast_to(valid[:, :, None], tf.shape(ids))
        flat_ids = tf.RaggedTensor.from_tensor(tf.reshape(ids, [-1, self.top_k]))
        tokens = tf.reshape(self.tokenizer.ids_to_tokens(flat_ids).flat_values, tf.shape(ids))
        return {
            "mask_positions": positions,
            "top_k_ids": tf.where(keep, ids, -1),
            "top_k_tokens": tf.where(keep, tokens, ""),
            "top_k_scores": tf.where(keep, scores, 0.0),
        }

    def signatures(self) -> Dict[str, tf.types.experimental.PolymorphicFunction]:
        """{signature name: tf.function with its input signature} for `tf.saved_model.save`.

        The functions, not their concrete functions: tf.saved_model.save traces every
        function again inside its save context (which is part of the tracing cache's key),
        so a concrete function traced here beforehand would be traced twice."""
        signatures = {"serving_default": self.serve_text, "serve_text_pair": self.serve_text_pair,
                      "serve_ids": self.serve_ids}
        if self.mlm_head is not None:
            signatures["fill_mask"] = self.fill_mask
        if self.pooling is not None:
            signatures["embed"] = self.embed
        return signatures
