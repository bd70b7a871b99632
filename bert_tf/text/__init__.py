"""Tokenizers: the Python WordPiece tokenizer and its in-graph TensorFlow twin."""
