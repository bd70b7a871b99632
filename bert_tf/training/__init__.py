"""Losses, optimizer, the train loop and trainer, checkpoints, distribution, progress."""
