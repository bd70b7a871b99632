"""The scorecard (run_glue): one model scored on GLUE or a suite of tasks of the other
families, over learning rates and seeds.

* `glue`: GLUE's folders, metrics, evaluations and submission files.
* `suite`: the tasks a scorecard scores (`ScoredTask`), GLUE's or a suite file's.
* `scorecard_runs`: one fine-tuning run per model, task, learning rate and seed, resumable.
* `scorecard_baselines`: each task's majority-class or chance level.
* `scorecard_report`: statistics over seeds, the GLUE score, markdown, JSON, submission.
* `scorecard`: the job that ties them together.
"""
