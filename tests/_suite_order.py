"""Which test files the workers take first.

The files that take longest, longest first. xdist's loadfile hands whole files to the
workers in collection order (scripts/run_tests.sh turns off its reordering by test count,
which put these last), so the workers start on the long files and finish together instead
of one waiting while the other runs a long file alone. Order: worker seconds per file in
a `--junitxml` run of the whole suite (2026-11-27), then the files added since by their
CPU seconds alone (2026-12-01); tests/test_layout.py checks the names.
"""

LONGEST_FILES_FIRST = (
    "test_run_glue.py", "test_run_pretraining.py", "test_preemption.py",
    "test_distribution.py", "test_resume.py", "test_trainer.py", "test_run_classifier.py",
    "test_two_phase_recipe.py", "test_health.py", "test_saved_model.py",
    "test_input_pipeline.py", "test_keras_hub_preset.py", "test_notebook.py",
    "test_convert_checkpoint.py", "test_record_positions.py", "test_task_serving.py",
    "test_embedding_export.py", "test_embed_corpus.py", "test_electra_training.py",
    "test_packed_pretraining.py", "test_export_electra.py", "test_hf_modernbert.py",
    "test_electra_distribution.py", "test_run_rerank.py", "test_run_retrieval.py",
)
