"""Tests for data_tools.prepare.raw_documents: gzip by name or magic, encodings, document
boundaries, chunks, and reading through tf.io.gfile (ram://, as gs://)."""

import bz2
import gzip

import pytest

from bert_tf.core.errors import UserError
from data_tools.prepare import raw_documents
from data_tools.prepare.raw_documents import ReadStats

TEXT = "First doc line one.\nline two.\n\n\nSecond doc.\n \nThird doc.\n"


def _docs(paths, fmt="text", per="blank_line"):
    stats = ReadStats()
    return list(raw_documents.iter_documents([str(p) for p in paths], fmt, per, stats)), stats


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
    stats = ReadStats()
    chunks = list(raw_documents.iter_chunks([str(path)], "text", "blank_line", 200, stats))
    # Split index << 32 plus the chunk's number in its split: increasing, from the plan only.
    assert [c.index >> 32 for c in chunks] == list(range(len(chunks)))
    assert [c.index & 0xFFFFFFFF for c in chunks] == [0] * len(chunks)
    # A 200-byte split owns 9 or 10 documents of 19-20 bytes (their blank lines not counted).
    assert all(171 <= c.num_bytes <= 200 for c in chunks[:-1]) and len(chunks) > 5
    assert all(c.num_bytes == sum(len(d) for d in c.items) for c in chunks)
    items = [d for c in chunks for d in c.items]
    assert items == [f"Document number {i}." for i in range(100)]
    assert [(f, c.line_base + n) for c in chunks for f, n in c.sources] == [
        (0, 1 + 2 * i) for i in range(100)]
    assert (stats.files, stats.lines, stats.text_bytes) == (1, 200, path.stat().st_size)
    # One split (a gzip file) of many chunks, each at least chunk_bytes.
    packed = tmp_path / "many.txt.gz"
    packed.write_bytes(gzip.compress(path.read_bytes()))
    chunks = list(raw_documents.iter_chunks([str(packed)], "text", "blank_line", 200, ReadStats()))
    assert [c.index for c in chunks] == list(range(len(chunks))) and len(chunks) > 5
    assert all(c.num_bytes >= 200 for c in chunks)  # 1890 bytes: 9 chunks of 209 or 210
    assert [d for c in chunks for d in c.items] == items


CASES = [
    b"\xef\xbb\xbfCaf\xe9 one.\r\nok \xff\xfe two.\r\n\r\nnext\r\n",  # BOM, CRLF, bad UTF-8
    "First doc line one.\nline two.\n\n\nSecond doc.\n \nThird doc.\n".encode(),
    "\u00e9 doc\n\u00fc b\n \t \n\n\u65e5\u672c\u8a9e x\n\u3000\n\n\nlast, no newline".encode(),
    b'{"text": "a"}\n\n{"text": "b"}\n  \n{"x": 1}\r\n\n',  # jsonl with blank lines
    b"", b"\n\n \n",
]


@pytest.mark.parametrize("fmt, per", [("text", "blank_line"), ("text", "line"),
                                      ("text", "file"), ("jsonl", "blank_line")])
def test_every_document_is_read_once_by_one_split_whatever_the_split_size(tmp_path, fmt, per):
    """The splits' documents, in split order, are the whole file's (read at once), with the
    same line numbers and counts, for splits of 1 byte to more than the file."""
    paths = []
    for i, data in enumerate(CASES):
        paths.append(str(tmp_path / f"c{i}.txt"))
        (tmp_path / f"c{i}.txt").write_bytes(data)
    expected_stats = ReadStats()
    expected = list(raw_documents.iter_documents(paths, fmt, per, expected_stats))
    assert len(expected) >= (4 if per == "file" else 8)
    for split_bytes in (1, 2, 3, 5, 7, 13, 1000):
        stats = ReadStats()
        got = [(item, f, chunk.line_base + n)
               for chunk in raw_documents.iter_chunks(paths, fmt, per, split_bytes, stats)
               for item, (f, n) in zip(chunk.items, chunk.sources)]
        assert got == expected, split_bytes
        assert ((stats.lines, stats.text_bytes, stats.bad_utf8, stats.bytes_read)
                == (expected_stats.lines, expected_stats.text_bytes, expected_stats.bad_utf8,
                    expected_stats.bytes_read)), split_bytes


def test_document_per_file_and_compressed_files_are_whole_splits(tmp_path):
    plain, packed = tmp_path / "p.txt", tmp_path / "z.txt.gz"
    plain.write_text(TEXT, encoding="utf-8")
    packed.write_bytes(gzip.compress(TEXT.encode()))
    paths = [str(plain), str(packed)]
    by_line, _ = raw_documents.plan(paths, "text", "line", 10)
    assert [(s.start, s.end) for s in by_line] == [
        (i, min(i + 10, len(TEXT))) for i in range(0, len(TEXT), 10)] + [(0, -1)]
    by_file, _ = raw_documents.plan(paths, "text", "file", 10)
    assert [(s.path, s.start, s.end) for s in by_file] == [(p, 0, -1) for p in paths]
    assert raw_documents.plan(paths, "jsonl", "file", 10)[0] == by_line  # per line for jsonl


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
