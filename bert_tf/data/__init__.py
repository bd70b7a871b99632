"""The TFRecord schema and format, input checks, the tf.data pipeline, dynamic masking."""
