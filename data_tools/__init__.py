"""Data tools: learn a WordPiece vocabulary and write pretraining TFRecords."""
