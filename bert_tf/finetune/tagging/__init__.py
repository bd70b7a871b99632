"""Token tagging: NER, POS, chunking (run_tagging).

* `tagging_data`: the CoNLL reader, WordPiece windows, and predictions back to words.
* `tagging_metrics`: entity-level precision, recall and F1 as conlleval counts them.
* `tagging_task`: the task the shared runner fine-tunes (`BertTagger` head).
"""
