"""Fine-tuning: task heads, data readers and metrics on top of the pretraining encoder and
trainer."""
