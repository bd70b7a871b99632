"""The build-vocab job: count a corpus's words in parallel and in bounded memory (locally, or
on Apache Beam with `beam_vocab`), then learn a WordPiece vocabulary from the counts."""
