"""Checkpoint converters: Google's original TF1 checkpoints, Hugging Face directories, and
bert_tf's own tf.train.Checkpoint, all going through the encoder's canonical weight map.

    google_checkpoint   read/write `bert_model.ckpt` + bert_config.json + vocab.txt
    hf_checkpoint       read/write config.json + model.safetensors (or pytorch_model.bin)
    safetensors_io      the safetensors file format, with NumPy only

The command line is `python -m bert_tf.convert_checkpoint`.
"""
