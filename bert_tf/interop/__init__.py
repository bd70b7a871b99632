"""Checkpoint formats: the format-neutral ModelFiles, Google's TF1 and Hugging Face."""
