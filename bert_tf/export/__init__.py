"""Export a pretrained model for serving or fine-tuning.

    serving            `BertServingModule`: the tf.Module and its signatures (raw text, ids,
                       text pairs, fill-mask)
    saved_model        restore a run's checkpoint; write the serving SavedModel
    keras_hub_preset   write a keras-hub preset (BertBackbone + BertTokenizer)

The command line is `python -m bert_tf.export` (see `bert_tf/export/__main__.py`).
"""
