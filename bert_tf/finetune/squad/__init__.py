"""Extractive question answering, SQuAD v1.1 and v2.0 (run_squad).

* `squad_data`: the SQuAD JSON reader and its windows over long contexts.
* `squad_metrics`: exact match and F1 as the official evaluation scripts compute them.
* `squad_postprocess`: start/end logits to answer texts in the context.
* `squad_task`: the task the shared runner fine-tunes (`BertSpanExtractor` head).
"""
