"""The prepare-corpus job: raw documents (plain text or JSON Lines) to one sentence per line,
a blank line between documents; locally (`prepare_job`) or on Apache Beam (`beam_prepare`)."""
