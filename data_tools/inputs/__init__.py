"""Reading the jobs' text inputs: text files (compression, UTF-8, BOM), byte-range splits and
BERT-format documents (a sentence per line, a blank line between documents)."""
