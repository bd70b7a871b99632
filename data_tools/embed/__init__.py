"""The embed-corpus job (`python -m data_tools.embed_corpus`): a BEIR corpus through an
exported bi-encoder's `embed` signature into sharded embedding files, locally or on Beam.

* `corpus_shards`: the shards (byte ranges of the input files) and their passages.
* `saved_model_embed`: the SavedModel's signature, the batches, the model's digest.
* `embed_store`: the output directory (shards, job file, manifest), resumable.
* `embed_job`: the config, the plan both runners share, the local runner.
* `beam_embed`: the Beam pipeline (RunInference with `EmbedModelHandler`).
"""
