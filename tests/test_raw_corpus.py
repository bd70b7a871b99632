"""Tests for data_tools.raw_corpus: gzip by name or magic, encodings, document boundaries,
chunks, and reading through tf.io.gfile (ram://, as gs://)."""

import bz2
import gzip

import pytest

from bert_tf.errors import UserError
from data_tools import raw_corpus
from data_tools.raw_corpus import ReadStats

TEXT = "First doc line one.\nline two.\n\n\nSecond doc.\n \nThird doc.\n"


def _docs(paths, fmt="text", per="blank_line"):
    stats = ReadStats()
    return list(raw_corpus.iter_documents([str(p) for p in paths], fmt, per, stats)), stats


def test_document_per_blank_line_line_and_file(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text(TEXT, encoding="utf-8")
    b.write_text("Only line", encoding="utf-8")  # no final newline
    docs, stats = _docs([a, b])
    assert docs == [("First doc line one.\nline two.", 0, 1), ("Second doc.", 0, 5),
                    ("Third doc.", 0, 7), ("Only line", 1, 1)]
    assert stats.files == 2 and stats.lines == 8
    assert _docs([a], per="line")[0] == [("First doc line one.", 0, 1), ("line two.", 0, 2),
                                         ("Second doc.", 0, 5), ("Third doc.", 0, 7)]
    assert _docs([a, b], per="file")[0] == [
        ("First doc line one.\nline two.\nSecond doc.\nThird doc.", 0, 1), ("Only line", 1, 1)]


def test_gzip_and_bzip2_by_suffix_and_by_magic_bytes(tmp_path):
    plain = tmp_path / "p.txt"
    plain.write_text(TEXT, encoding="utf-8")
    paths = []
    for name, compress in (("s.txt.gz", gzip.compress), ("dump.bin", gzip.compress),
                           ("s.txt.bz2", bz2.compress), ("wiki_00", bz2.compress)):
        paths.append(tmp_path / name)  # renamed dumps are detected from their first bytes
        paths[-1].write_bytes(compress(TEXT.encode()))
    expected, _ = _docs([plain])
    for path in paths:
        docs, stats = _docs([path])
        assert docs == expected
        assert stats.bytes_read == path.stat().st_size and stats.text_bytes == len(TEXT)


@pytest.mark.parametrize("name, data", [
    ("bad.txt.gz", gzip.compress(TEXT.encode() * 50, mtime=0)[:60]),  # truncated
    ("bad.txt.gz", b"\x1f\x8bnot really gzip data"),
    ("bad.txt.bz2", bz2.compress(TEXT.encode() * 50)[:60]),
    ("bad.txt.bz2", b"BZh9 not really bzip2 data"),
])
def test_corrupt_compressed_input_is_one_user_error(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(UserError, match=rf"^cannot read input file .*{name}: \w"):
        _docs([path])


def test_crlf_bom_and_invalid_utf8_are_handled_and_counted(tmp_path):
    path = tmp_path / "win.txt"
    path.write_bytes(b"\xef\xbb\xbfCaf\xe9 one.\r\nok \xff\xfe two.\r\n\r\nnext\r\n")
    docs, stats = _docs([path])
    assert docs == [("Caf\ufffd one.\nok \ufffd\ufffd two.", 0, 1), ("next", 0, 4)]
    assert stats.bad_utf8 == 3
    assert stats.warnings == [f"{path}: 3 invalid UTF-8 byte sequence(s) replaced by U+FFFD"]


def test_jsonl_items_are_raw_lines_with_line_numbers(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"text": "a"}\n\n{"text": "b"}\n', encoding="utf-8")
    docs, _ = _docs([path], fmt="jsonl", per="file")  # --document_per does not apply
    assert docs == [('{"text": "a"}', 0, 1), ('{"text": "b"}', 0, 3)]


def test_chunks_hold_whole_documents_of_at_least_chunk_bytes(tmp_path):
    path = tmp_path / "many.txt"
    path.write_text("".join(f"Document number {i}.\n\n" for i in range(100)), encoding="utf-8")
    chunks = list(raw_corpus.iter_chunks([str(path)], "text", "blank_line", 200, ReadStats()))
    assert [c.index for c in chunks] == list(range(len(chunks)))
    assert all(c.num_bytes >= 200 for c in chunks[:-1]) and len(chunks) > 5
    assert all(c.num_bytes == sum(len(d) for d in c.items) for c in chunks)
    items = [d for c in chunks for d in c.items]
    assert items == [f"Document number {i}." for i in range(100)]
    assert [s for c in chunks for s in c.sources] == [(0, 1 + 2 * i) for i in range(100)]


def test_missing_file_is_one_user_error(tmp_path):
    with pytest.raises(UserError, match=r"^cannot read input file .*nope\.txt: "):
        _docs([tmp_path / "nope.txt"])


def test_remote_gzip_through_tf_gfile():
    import tensorflow as tf
    path = "ram://raw_corpus_test/in.jsonl.gz"
    with tf.io.gfile.GFile(path, "wb") as f:
        f.write(gzip.compress(b'{"text": "x"}\n{"text": "y"}\n'))
    docs, stats = _docs([path], fmt="jsonl")
    assert docs == [('{"text": "x"}', 0, 1), ('{"text": "y"}', 0, 2)]
    assert stats.text_bytes == 28
