"""The exact tokenizer of keras-hub presets: keras-hub's `BertTokenizer`, bert_tf's ids.

Presets use it only on request (`python -m bert_tf.export --format=keras_hub
--preset_tokenizer=exact`, or `export_keras_hub_preset(..., preset_tokenizer="exact")`):
the default, portable preset ships keras-hub's own `BertTokenizer`, which loads without
bert_tf, and says at export on how many lines it gives other ids
(`bert_tf.export.tokenizer_check`).

keras-hub's `BertTokenizer` cannot be configured to give the ids the model was pretrained
with. `lowercase=True` is Unicode NFKC case folding, not the original release's
`str.lower()` + NFD + accent stripping ('µ' becomes 'μ', 'm²' 'm2', 'ﬁ' 'fi', 'Ⅻ' 'xii',
'ß' 'ss', a final 'ς' 'σ'); `lowercase=False` does not lower-case at all. In both settings
it splits words at every Cc/Cf character (the original deletes them: 'co\\u00adoperate' is
one word), keeps U+FFFD, does not split at no-break spaces, and FastWordpiece maps words
over 100 bytes to [UNK] (the original allows 200 characters).

`OriginalBertTokenizer` is that `BertTokenizer` with `tokenize` replaced by bert_tf's own
tokenizers: `FullTokenizer.encode` on keras-hub's pure-Python path (eager calls) and
`TFBertTokenizer` on its TensorFlow path (`tf.data`, `tf.function`). Everything else
(special tokens, vocabulary asset, `detokenize`, presets, preprocessors) is keras-hub's.

It is registered with Keras as `bert_tf>OriginalBertTokenizer`, so loading a preset that
uses it needs bert_tf installed and this module imported first:

    import bert_tf.export.preset_tokenizer  # noqa: F401  (registers the tokenizer)
    classifier = keras_hub.models.BertTextClassifier.from_preset(DIR, num_classes=2)

Without the import, `from_preset` fails with Keras' "Could not locate class
'OriginalBertTokenizer'" instead of silently tokenizing another way.
"""

from __future__ import annotations

import os
import tempfile

import keras
import keras_hub
import numpy as np
import tensorflow as tf

# keras-hub's own helpers for its two tokenizer paths, so that inputs and outputs have
# exactly the shapes and types of `WordPieceTokenizer`'s.
from keras_hub.src.utils.tensor_utils import (
    canonicalize_python_string_inputs,
    is_int_dtype,
    preprocessing_function,
    restore_outer_shape,
)

from bert_tf.core import tokenization
from bert_tf.text.tf_tokenization import TFBertTokenizer

# Arguments of keras-hub's WordPieceTokenizer whose only supported value is the original
# algorithm's (bert_tf's tokenizers implement nothing else).
_FIXED_ARGUMENTS = {
    "split": True,
    "split_on_cjk": True,
    "suffix_indicator": tokenization.CONTINUATION_PREFIX,
    "oov_token": tokenization.UNK,
    "special_tokens_in_strings": False,
}


@keras.saving.register_keras_serializable(package="bert_tf")
class OriginalBertTokenizer(keras_hub.models.BertTokenizer):
    """`keras_hub.models.BertTokenizer` giving exactly `bert_tf.core.tokenization`'s ids.

    Example:
        tokenizer = OriginalBertTokenizer(vocabulary="vocab.txt", lowercase=True)
        tokenizer("5 µg/ml")  # int32 [4]: '5', 'µ', '##g', '/', 'ml' as FullTokenizer

    Args:
        vocabulary: list of tokens or a vocabulary file (as keras-hub's), with the five
            BERT special tokens.
        lowercase: the model's `do_lower_case`: `str.lower()`, NFD and removal of
            nonspacing marks (never NFKC); False keeps the text as it is.
        strip_accents: must equal `lowercase` (the original strips accents iff it
            lower-cases); None: `lowercase`.
        **kwargs: other `WordPieceTokenizer` arguments (`sequence_length`, `dtype`, ...);
            `split`, `split_on_cjk`, `suffix_indicator`, `oov_token` and
            `special_tokens_in_strings` only with their defaults.

    Raises:
        ValueError: an argument the original algorithm does not have.
        bert_tf.core.errors.UserError: a bad vocabulary (see `tokenization.load_vocab`).
    """

    def __init__(self, vocabulary=None, lowercase: bool = False, strip_accents=None, **kwargs):
        if strip_accents is None:
            strip_accents = lowercase
        if bool(strip_accents) != bool(lowercase):
            raise ValueError(f"OriginalBertTokenizer: strip_accents={strip_accents} with "
                             f"lowercase={lowercase}; the original strips accents exactly "
                             "when it lower-cases")
        for name, value in _FIXED_ARGUMENTS.items():
            if kwargs.get(name, value) != value:
                raise ValueError(f"OriginalBertTokenizer supports only {name}={value!r}, "
                                 f"got {kwargs[name]!r}")
        self._python_tokenizer = None
        self._graph_tokenizer = None
        super().__init__(vocabulary=vocabulary, lowercase=lowercase,
                         strip_accents=strip_accents, **kwargs)

    def set_vocabulary(self, vocabulary):
        """Sets keras-hub's vocabulary, then builds bert_tf's tokenizers on it.

        The graph tokenizer is built here, eagerly, so that it is never created inside a
        `tf.data` trace (as keras-hub does for its FastWordpiece).
        """
        super().set_vocabulary(vocabulary)
        self._python_tokenizer = self._graph_tokenizer = None
        if self.vocabulary is None:
            return
        # Both take a vocabulary file (validated by `tokenization.load_vocab`).
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "vocab.txt")
            with open(path, "w", encoding="utf-8") as f:
                f.writelines(token + "\n" for token in self.vocabulary)
            self._python_tokenizer = tokenization.FullTokenizer(path, self.lowercase)
            self._graph_tokenizer = TFBertTokenizer(path, self.lowercase)

    def tokenize(self, inputs):
        """Text -> WordPiece ids (or tokens, for `dtype="string"`), as keras-hub's.

        Args:
            inputs: a string, or strings of any rank (list, array, tf.Tensor or
                tf.RaggedTensor), UTF-8; invalid bytes are dropped.

        Returns:
            As `WordPieceTokenizer.tokenize`: [..., (tokens)] ragged, or dense
            [..., sequence_length] when `sequence_length` is set; [tokens] for a scalar.
        """
        self._check_vocabulary()
        if self._use_tf_workflow():
            return self._tokenize_tf(inputs)
        return self._tokenize_python(inputs)

    @preprocessing_function
    def _tokenize_tf(self, inputs):
        if not isinstance(inputs, tf.RaggedTensor):
            inputs = tf.convert_to_tensor(inputs)
        unbatched = inputs.shape.rank == 0
        if unbatched:
            inputs = inputs[tf.newaxis]
        if isinstance(inputs, tf.Tensor) and inputs.shape.rank == 1:
            tokens = self._graph_tokenizer.tokenize(inputs)  # [batch, (tokens)]
        else:  # Tokenize the flat strings, keep the outer (ragged or dense) dimensions.
            if isinstance(inputs, tf.Tensor):
                inputs = tf.RaggedTensor.from_tensor(inputs)
            tokens = inputs.with_flat_values(self._graph_tokenizer.tokenize(inputs.flat_values))
        if is_int_dtype(self.compute_dtype):
            tokens = tf.cast(tokens, self.compute_dtype)
        else:
            tokens = tf.ragged.map_flat_values(tf.gather, tf.constant(self.vocabulary), tokens)
        if self.sequence_length:
            shape = tokens.shape.as_list()
            shape[-1] = self.sequence_length
            tokens = tokens.to_tensor(shape=shape)
        return tokens[0] if unbatched else tokens

    def _tokenize_python(self, inputs):
        texts, batched, outer_shape = canonicalize_python_string_inputs(
            inputs, errors="ignore")  # bytes decode as in `tokenization.convert_to_unicode`
        tokenizer = self._python_tokenizer
        rows = [tokenizer.encode(text) for text in texts]
        integer = is_int_dtype(self.compute_dtype)
        if not integer:
            rows = [tokenizer.convert_ids_to_tokens(row) for row in rows]
        if self.sequence_length:
            length, pad = self.sequence_length, 0 if integer else ""
            rows = [row[:length] + [pad] * (length - len(row)) for row in rows]
            if integer:
                rows = np.array(rows, dtype=self.compute_dtype).reshape(-1, length)
        if outer_shape is not None:
            return restore_outer_shape(rows, outer_shape)
        if not batched:
            rows = rows[0]
            if integer and not self.sequence_length:
                rows = np.array(rows, dtype=self.compute_dtype)
        return rows
