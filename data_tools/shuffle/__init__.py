"""The global shuffle of every record of a job in bounded memory: the records' keys, the
plan, and the bucket files that worker processes spill to and sort."""
