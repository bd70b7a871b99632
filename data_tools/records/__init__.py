"""The records the create job writes, built in batches with numpy and without TensorFlow:
byte rows, `tf.train.Example` bytes, CRC-32C and TFRecord frames."""
