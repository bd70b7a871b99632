"""Export a pretrained model for serving or fine-tuning.

    serving            `BertServingModule`: the tf.Module and its signatures (raw text, ids,
                       text pairs, fill-mask)
    saved_model        restore a run's checkpoint; write the serving SavedModel
    keras_hub_preset   write a keras-hub preset (BertBackbone + OriginalBertTokenizer)
    preset_tokenizer   the preset's tokenizer: the original WordPiece ids, not NFKC folding
    task_serving       a fine-tuned classifier or tagger (or QA model, via qa_serving) as a
                       SavedModel with raw-text signatures
    qa_serving         the in-graph windowing and span search of the QA signature

The command line is `python -m bert_tf.export` (see `bert_tf/export/__main__.py`).
"""
