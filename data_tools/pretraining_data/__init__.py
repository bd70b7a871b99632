"""The create-pretraining-data job: text to masked-LM and NSP TFRecords, in chunks of documents
packed into instances, masked, serialised and shuffled globally; locally (`create_job`) or on
Apache Beam (`beam_create`)."""
