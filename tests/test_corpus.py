"""Tests of data_tools.corpus: document splitting, bad bytes, empty files, chunk boundaries."""

import pytest

from bert_tf.errors import UserError
from data_tools import corpus


def _write(tmp_path, name, data: bytes):
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def test_documents_blank_lines_crlf_and_end_of_file(tmp_path):
    a = _write(tmp_path, "a.txt", b"s1\r\n  s2  \n\n\n \t\ns3\n\x1c\nlast")
    b = _write(tmp_path, "b.txt", b"\nb1\nb2\n")
    stats = corpus.CorpusStats()
    docs = list(corpus.iter_documents([a, b], stats))
    # "\x1c" is stripped by str.strip() (the original's blank-line test), so it ends a document;
    # the end of a.txt ends "last"'s document.
    assert docs == [["s1", "s2"], ["s3"], ["last"], ["b1", "b2"]]
    assert (stats.files, stats.lines, stats.documents) == (2, 6, 4)
    assert stats.warnings == []


def test_invalid_utf8_is_replaced_counted_and_warned_once_per_file(tmp_path):
    # Two invalid sequences, and one genuine U+FFFD that must not be counted.
    path = _write(tmp_path, "bad.txt", b"ok \xff\xfe word\n\xc3\n\xef\xbf\xbd real\n")
    stats = corpus.CorpusStats()
    docs = list(corpus.iter_documents([path], stats))
    assert docs == [["ok \ufffd\ufffd word", "\ufffd", "\ufffd real"]]
    assert stats.warnings == [f"{path}: 3 invalid UTF-8 byte sequence(s) replaced"]


def test_multibyte_character_split_across_read_blocks(tmp_path):
    text = ("é" * 10 + "\n") * 5
    path = _write(tmp_path, "u.txt", text.encode("utf-8"))
    stats = corpus.CorpusStats()
    lines = list(corpus.iter_lines(path, stats, block_size=7))  # odd size splits "é"
    assert lines == ["é" * 10] * 5
    assert stats.warnings == []


def test_line_longer_than_block_is_assembled(tmp_path):
    long_line = "x" * 10_000
    path = _write(tmp_path, "l.txt", f"a\n{long_line}\nb".encode())
    lines = list(corpus.iter_lines(path, corpus.CorpusStats(), block_size=64))
    assert lines == ["a", long_line, "b"]


def test_empty_and_blank_only_files_warn(tmp_path):
    empty = _write(tmp_path, "empty.txt", b"")
    blank = _write(tmp_path, "blank.txt", b"\n  \n\t\n")
    stats = corpus.CorpusStats()
    assert list(corpus.iter_documents([empty, blank], stats)) == []
    assert stats.warnings == [f"{empty}: empty file, skipped",
                              f"{blank}: only blank lines, skipped"]


def test_missing_file_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="cannot read input file"):
        list(corpus.iter_documents([str(tmp_path / "nope.txt")], corpus.CorpusStats()))


def _doc_file(tmp_path, sizes):
    # Document i has sizes[i] lines of 9 characters + newline = 10 bytes each.
    text = "\n\n".join("\n".join(f"d{i:02d}l{j:05d}" for j in range(n))
                       for i, n in enumerate(sizes))
    return _write(tmp_path, "docs.txt", text.encode())


def test_chunks_hold_whole_documents_and_merge_a_small_tail(tmp_path):
    # Documents of 30, 30, 30, 30, 5 lines (~300 bytes each); chunks of >= 600 bytes.
    path = _doc_file(tmp_path, [30, 30, 30, 30, 5])
    chunks = list(corpus.iter_chunks([path], 600))
    assert [c.index for c in chunks] == [0, 1]
    assert [[d[0][:3] for d in c.documents] for c in chunks] == [
        ["d00", "d01"], ["d02", "d03", "d04"]]  # the 5-line tail joined the last chunk
    assert sum(c.num_bytes for c in chunks) == 30 * 4 * 10 + 5 * 10 + 5


def test_large_tail_stays_a_chunk_and_boundaries_depend_only_on_input(tmp_path):
    path = _doc_file(tmp_path, [30, 30, 30, 30, 35])  # tail 351 bytes >= 600 / 2
    chunks = list(corpus.iter_chunks([path], 600))
    assert [len(c.documents) for c in chunks] == [2, 2, 1]
    again = list(corpus.iter_chunks([path], 600))
    assert [c.documents for c in again] == [c.documents for c in chunks]


def test_document_longer_than_a_chunk_is_cut_at_a_line(tmp_path):
    path = _doc_file(tmp_path, [100])
    stats = corpus.CorpusStats()
    docs = list(corpus.iter_documents([path], stats, max_document_bytes=250))
    assert [len(d) for d in docs] == [25, 25, 25, 25]
    assert stats.split_documents == 4 and stats.documents == 4


def test_pieces_of_a_long_document_share_its_id(tmp_path):
    path = _doc_file(tmp_path, [100, 3, 50])  # 1000, 30 and 500 bytes
    pieces = list(corpus.iter_pieces([path], corpus.CorpusStats(), max_document_bytes=250))
    assert [(i, len(d)) for i, d in pieces] == [(0, 25)] * 4 + [(1, 3), (2, 25), (2, 25)]


def test_chunk_sizes_and_progress_count_utf8_bytes(tmp_path):
    import gzip

    # 40 documents of 5 CJK lines: 10 characters, 30 bytes (+1 newline) each.
    line = "\u6f22\u5b57\u306e\u6587\u7ae0\u3067\u3059\u3002\u6f22\u5b57"
    text = "\n\n".join("\n".join([line] * 5) for _ in range(40)) + "\n"
    plain = tmp_path / "cjk.txt"
    plain.write_text(text, encoding="utf-8")
    packed = tmp_path / "cjk.txt.gz"
    packed.write_bytes(gzip.compress(text.encode("utf-8")))
    for path in (plain, packed):
        chunks = list(corpus.iter_chunks([str(path)], 620))
        # A document is 5 * 31 + 1 = 156 bytes (but 56 characters): 4 documents per chunk.
        assert [c.num_bytes for c in chunks] == [624] * 10
        assert all(b.input_bytes >= a.input_bytes for a, b in zip(chunks, chunks[1:]))
        assert chunks[-1].input_bytes == path.stat().st_size  # progress ends at 100%
    assert (corpus.utf8_len(line), corpus.utf8_len("ab"), len(line)) == (30, 2, 10)
