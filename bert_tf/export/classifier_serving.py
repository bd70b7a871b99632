"""The serving modules of a fine-tuned pair classifier: run_classifier's and run_rerank's.

`ClassifierServingModule` (text or text pair -> class probabilities and label, or a
regression score) is described with the other tasks' in `bert_tf.export.task_serving`.
`RerankerServingModule`, a run_rerank cross-encoder's ("reranker" in finetune_task.json):

    serving_default / score   query, passage: string [batch]
                              -> score float32 [batch]: sigmoid(logit), the probability that
                                     the passage is relevant (what sentence-transformers'
                                     CrossEncoder.predict returns for one label);
                                 logit float32 [batch]: the model's raw output.
    classify_pair             text_a, text_b -> score: the logit, as any one-output
                              classifier's.

Each pair is packed as `[CLS] query [SEP] passage [SEP]`, longest-first truncation to the
export's max_seq_length, as in training. Rank candidates by either output: the sigmoid keeps
their order.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import tensorflow as tf

from bert_tf.export.serving import ENCODER_INPUTS
from bert_tf.text.tf_tokenization import TFBertTokenizer

_TEXT = tf.TensorSpec([None], tf.string)


class ClassifierServingModule(tf.Module):
    """A `BertClassifier` with in-graph tokenization: text (pairs) -> probabilities and label.

    Args:
        model: the task model -> {"logits": [batch, num_labels]}.
        tokenizer: the in-graph tokenizer of the model's vocabulary.
        max_seq_length: longest packed sequence.
        label_list: class names in class-id order; None for regression (one output).
    """

    def __init__(self, model, tokenizer: TFBertTokenizer, max_seq_length: int,
                 label_list: Optional[Sequence[str]], name: Optional[str] = None) -> None:
        super().__init__(name=name)
        self.model = model
        self.tokenizer = tokenizer
        self.max_seq_length = int(max_seq_length)
        self.regression = label_list is None
        self.labels = tf.constant(list(label_list or [""]))
        # One traced model for every signature (each would otherwise trace its own copy).
        self.logits_of = tf.function(self._logits, input_signature=[ENCODER_INPUTS],
                                     autograph=False)

    def _logits(self, inputs: Dict[str, tf.Tensor]) -> tf.Tensor:
        """Packed int32 ids [batch, seq_len] -> float32 logits [batch, num_labels]."""
        return tf.cast(self.model(inputs, training=False)["logits"], tf.float32)

    def outputs_of(self, segments: List[tf.RaggedTensor]) -> Dict[str, tf.Tensor]:
        """The outputs of the packed `segments` (one or two texts of token ids)."""
        packed = self.tokenizer.pack(segments, self.max_seq_length)
        longest = tf.maximum(tf.reduce_max(tf.reduce_sum(packed["input_mask"], axis=1)), 1)
        logits = self.logits_of({k: v[:, :longest] for k, v in packed.items()})
        if self.regression:
            return {"score": logits[:, 0]}
        return {"probabilities": tf.nn.softmax(logits, axis=-1),
                "label": tf.gather(self.labels, tf.argmax(logits, axis=-1, output_type=tf.int32))}

    @tf.function(input_signature=[_TEXT], autograph=False)
    def classify(self, text_a: tf.Tensor) -> Dict[str, tf.Tensor]:
        """text_a: string [batch] -> probabilities and label (or score)."""
        return self.outputs_of([self.tokenizer.tokenize(text_a)])

    @tf.function(input_signature=[_TEXT, _TEXT], autograph=False)
    def classify_pair(self, text_a: tf.Tensor, text_b: tf.Tensor) -> Dict[str, tf.Tensor]:
        """text_a, text_b: string [batch] -> probabilities and label (or score)."""
        return self.outputs_of([self.tokenizer.tokenize(text_a), self.tokenizer.tokenize(text_b)])

    def signatures(self) -> Dict[str, tf.types.experimental.PolymorphicFunction]:
        # The tf.functions, not concrete functions traced here: saving traces them (again,
        # bert_tf.export.serving.BertServingModule.signatures).
        return {"serving_default": self.classify, "classify": self.classify,
                "classify_pair": self.classify_pair}


class RerankerServingModule(ClassifierServingModule):
    """A one-logit `BertClassifier` with in-graph tokenization and the `score` signature.

    Args:
        model: the task model -> {"logits": [batch, 1]}.
        tokenizer: the in-graph tokenizer of the model's vocabulary.
        max_seq_length: longest packed pair.
    """

    def __init__(self, model, tokenizer, max_seq_length: int, name=None) -> None:
        super().__init__(model, tokenizer, max_seq_length, None, name=name)

    @tf.function(input_signature=[_TEXT, _TEXT], autograph=False)
    def score(self, query: tf.Tensor, passage: tf.Tensor) -> Dict[str, tf.Tensor]:
        """query, passage: string [batch] -> score (sigmoid) and logit, float32 [batch]."""
        logit = self.outputs_of([self.tokenizer.tokenize(query),
                                 self.tokenizer.tokenize(passage)])["score"]
        return {"score": tf.math.sigmoid(logit), "logit": logit}

    def signatures(self) -> Dict[str, tf.types.experimental.PolymorphicFunction]:
        return {"serving_default": self.score, "score": self.score,
                "classify_pair": self.classify_pair}
