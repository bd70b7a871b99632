"""bert_tf's TensorFlow-free core: what the trainer and the data jobs share.

The pieces both sides of the pipeline must agree on, in pure Python (numpy at most):

- `errors`: one-line user errors, exit codes and the entry points' runner;
- `fileio`, `fileio_beam`: atomic outputs and reads on local disks, `gs://` and any Beam
  filesystem;
- `tokenization`: the WordPiece tokenizer (the original `FullTokenizer`'s ids);
- `schema`, `tfrecord_format`, `masking_rules`: the pretraining records' features, the
  TFRecord framing, and the masking rules that `data_tools` writes and `bert_tf.data`
  reads.

The package imports neither TensorFlow nor any other part of `bert_tf`, and it is the only
part of `bert_tf` that `data_tools` imports (tests/test_layout.py keeps both rules). That is
what lets the light `bert-tf-data` distribution (packaging/data) ship `data_tools` with this
package alone, for Beam workers and CPU boxes without TensorFlow.
"""
