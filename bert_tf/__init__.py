"""bert_tf: pre-train BERT encoders on your own corpus with TensorFlow and Keras 3.

The package is layered the way data flows (text -> tokenizer -> TFRecord -> tf.data -> model
-> losses -> optimizer -> checkpoint -> export). Importing `bert_tf` itself is cheap: it does
not import TensorFlow, so the data tools and the tokenizer start fast; modules that need
TensorFlow import it themselves.
"""

__version__ = "0.1.0"
