"""Sentence(-pair) classification and regression (run_classifier).

* `classification_data`: the GLUE / tsv / csv / jsonl readers and the featurizer.
* `classification_metrics`: accuracy, F1, MCC, Pearson and Spearman on the host.
* `classification_task`: the task the shared runner fine-tunes (`BertClassifier` head).
"""
