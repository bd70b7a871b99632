"""Data tools: prepare a corpus, learn a WordPiece vocabulary, write pretraining TFRecords.

The entry points (`python -m data_tools.<name>`) are the modules at this level. Each job has a
subpackage: `prepare` (prepare_corpus), `vocab` (build_vocab, extend_vocab), `pretraining_data`
(create_pretraining_data). The pieces they share sit below the jobs: `inputs` (reading text),
`records` (TFRecord bytes), `runtime` (worker processes, outputs, Apache Beam) and `shuffle`.
"""
