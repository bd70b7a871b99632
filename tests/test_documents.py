"""Tests of data_tools.inputs.documents: document splitting, bad bytes, empty files, chunk
boundaries."""

import numpy as np
import pytest
from _text_inputs import input_variants

from bert_tf.core.errors import UserError
from data_tools.inputs import documents, splits


def _write(tmp_path, name, data: bytes):
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def _documents(paths, stats, chunk_bytes=1 << 20):
    """The job's documents, pieces joined back by id."""
    docs, last = [], None
    for chunk in documents.iter_chunks(paths, chunk_bytes, stats):
        for doc_id, doc in zip(chunk.doc_ids, chunk.documents):
            if doc_id == last:
                docs[-1] = docs[-1] + doc
            else:
                docs.append(list(doc))
            last = doc_id
    return docs


def test_documents_blank_lines_crlf_and_end_of_file(tmp_path):
    a = _write(tmp_path, "a.txt", b"s1\r\n  s2  \n\n\n \t\ns3\n\x1c\nlast")
    b = _write(tmp_path, "b.txt", b"\nb1\nb2\n")
    stats = documents.CorpusStats()
    docs = _documents([a, b], stats)
    # "\x1c" is stripped by str.strip() (the original's blank-line test), so it ends a document;
    # the end of a.txt ends "last"'s document.
    assert docs == [["s1", "s2"], ["s3"], ["last"], ["b1", "b2"]]
    assert (stats.files, stats.lines, stats.documents) == (2, 6, 4)
    assert stats.warnings == []


def test_invalid_utf8_is_replaced_counted_and_warned_once_per_file(tmp_path):
    # Two invalid sequences, and one genuine U+FFFD that must not be counted.
    path = _write(tmp_path, "bad.txt", b"ok \xff\xfe word\n\xc3\n\xef\xbf\xbd real\n")
    stats = documents.CorpusStats()
    docs = _documents([path], stats)
    assert docs == [["ok \ufffd\ufffd word", "\ufffd", "\ufffd real"]]
    assert stats.warnings == [f"{path}: 3 invalid UTF-8 byte sequence(s) replaced"]


def test_multibyte_character_split_across_read_blocks(tmp_path):
    text = ("é" * 10 + "\n") * 5
    path = _write(tmp_path, "u.txt", text.encode("utf-8"))
    stats = documents.CorpusStats()
    lines = list(documents.iter_lines(path, stats, block_size=7))  # odd size splits "é"
    assert lines == ["é" * 10] * 5
    assert stats.warnings == []


def test_line_longer_than_block_is_assembled(tmp_path):
    long_line = "x" * 10_000
    path = _write(tmp_path, "l.txt", f"a\n{long_line}\nb".encode())
    lines = list(documents.iter_lines(path, documents.CorpusStats(), block_size=64))
    assert lines == ["a", long_line, "b"]


def test_empty_and_blank_only_files_warn(tmp_path):
    empty = _write(tmp_path, "empty.txt", b"")
    blank = _write(tmp_path, "blank.txt", b"\n  \n\t\n")
    stats = documents.CorpusStats()
    assert _documents([empty, blank], stats) == []
    assert stats.warnings == [f"{empty}: empty file, skipped",
                              f"{blank}: only blank lines, skipped"]


def test_missing_file_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="cannot read input file"):
        _documents([str(tmp_path / "nope.txt")], documents.CorpusStats())


def _doc_file(tmp_path, sizes):
    # Document i has sizes[i] lines of 9 characters + newline = 10 bytes each.
    text = "\n\n".join("\n".join(f"d{i:02d}l{j:05d}" for j in range(n))
                       for i, n in enumerate(sizes))
    return _write(tmp_path, "docs.txt", text.encode())


def test_each_split_reads_the_documents_that_start_in_it(tmp_path):
    # Documents of 30, 30, 30, 30, 5 lines (299 bytes + a blank line each) start at bytes 0,
    # 301, 602, 903 and 1204; splits of 600 bytes own 2, 2 and 1 of them.
    path = _doc_file(tmp_path, [30, 30, 30, 30, 5])
    chunks = list(documents.iter_chunks([path], 600))
    # Ids: (file, range number) in the high bits, a count within the range in the low ones.
    assert [c.index for c in chunks] == [splits.chunk_id(0, k, 0) for k in range(3)] == [
        0, 1 << 16, 2 << 16]
    assert [[d[0][:3] for d in c.documents] for c in chunks] == [
        ["d00", "d01"], ["d02", "d03"], ["d04"]]
    assert [c.doc_ids for c in chunks] == [[0, 1], [1 << 20, (1 << 20) + 1], [2 << 20]]
    assert splits.doc_id(3, 2, 1) == ((3 << 24 | 2) << 20) | 1
    assert sum(c.num_bytes for c in chunks) == 30 * 4 * 10 + 5 * 10 + 5


def test_every_document_is_read_once_whatever_the_split_size(tmp_path):
    rng = np.random.default_rng(0)
    docs = [[f"d{i} l{j} " + "é" * int(rng.integers(0, 30)) for j in range(rng.integers(1, 9))]
            for i in range(40)]
    seps = ["\n\n", "\n  \n", "\n\n\n", "\r\n\r\n", "\n\t\n"]
    text = "\ufeff" + "".join("\n".join(d) + seps[i % 5] for i, d in enumerate(docs))
    path = _write(tmp_path, "c.txt", text.encode("utf-8"))
    for split_bytes in (1, 2, 3, 7, 50, 333, 1 << 20):
        stats = documents.CorpusStats()
        chunks = list(documents.iter_chunks([path], split_bytes, stats))
        pieces = [(i, d) for c in chunks for i, d in zip(c.doc_ids, c.documents)]
        joined = []
        for i, d in pieces:  # pieces of a document cut at split_bytes share its id
            if joined and joined[-1][0] == i:
                joined[-1][1].extend(d)
            else:
                joined.append((i, list(d)))
        assert [d for _, d in joined] == [[line.strip() for line in d] for d in docs]
        assert (stats.documents, stats.lines) == (40, sum(map(len, docs)))
        assert [c.index for c in chunks] == sorted(set(c.index for c in chunks))


def test_document_longer_than_a_chunk_is_cut_at_a_line(tmp_path):
    path = _doc_file(tmp_path, [100])  # 1,000 bytes: it starts in the first range of 250
    stats = documents.CorpusStats()
    chunks = list(documents.iter_chunks([path], 250, stats))
    assert [len(d) for c in chunks for d in c.documents] == [25, 25, 25, 25]
    assert stats.split_documents == 3 and stats.documents == 1


def test_pieces_of_a_long_document_share_its_id(tmp_path):
    path = _doc_file(tmp_path, [100, 3, 50])  # 1000, 30 and 500 bytes
    pieces = [(i, len(d)) for c in documents.iter_chunks([path], 250, documents.CorpusStats())
              for i, d in zip(c.doc_ids, c.documents)]
    # Documents 1 and 2 start at bytes 1,002 and 1,034: the range of 1,000-1,249 (number 4).
    first = splits.doc_id(0, 4, 0)
    assert pieces == [(0, 25)] * 4 + [(first, 3), (first + 1, 25), (first + 1, 25)]


def test_chunk_sizes_count_utf8_bytes(tmp_path):
    import gzip

    # 40 documents of 5 CJK lines: 10 characters, 30 bytes (+1 newline) each.
    line = "\u6f22\u5b57\u306e\u6587\u7ae0\u3067\u3059\u3002\u6f22\u5b57"
    text = "\n\n".join("\n".join([line] * 5) for _ in range(40)) + "\n"
    plain = tmp_path / "cjk.txt"
    plain.write_text(text, encoding="utf-8")
    packed = tmp_path / "cjk.txt.gz"
    packed.write_bytes(gzip.compress(text.encode("utf-8")))
    # A document is 5 * 31 + 1 = 156 bytes (but 56 characters). A compressed file is one
    # split: 4 documents per chunk. The plain file's splits of 620 bytes own 3 or 4.
    chunks = list(documents.iter_chunks([str(packed)], 620))
    assert [c.num_bytes for c in chunks] == [624] * 10
    chunks = list(documents.iter_chunks([str(plain)], 620))
    assert len(chunks) == 10 and {c.num_bytes for c in chunks} <= {468, 624}
    assert sum(c.num_bytes for c in chunks) == 40 * 156
    plan, sizes = splits.plan([str(plain), str(packed)], 620)
    # Progress counts the splits' bytes as stored: they add up to the files.
    assert sizes == [plain.stat().st_size, packed.stat().st_size]
    assert sum(s.size for s in plan) == sum(sizes) and plan[-1].end == -1
    assert (documents.utf8_len(line), documents.utf8_len("ab"), len(line)) == (30, 2, 10)


def test_compressed_and_bom_files_give_the_plain_files_chunks(tmp_path):
    rng = np.random.default_rng(1)
    docs = [[f"d{i} l{j} é" + "x" * int(rng.integers(0, 60)) for j in range(rng.integers(1, 12))]
            for i in range(30)]
    text = "".join("\n".join(d) + ("\n\n", "\n  \n", "\r\n\r\n")[i % 3]
                   for i, d in enumerate(docs)).encode("utf-8").replace(b"xxxxx", b"xxxx\xff")
    bad = text.count(b"\xff")  # each an invalid sequence of its own, counted once per file
    paths = {name: _write(tmp_path, name, data) for name, data in input_variants(text).items()}
    for chunk_bytes in (1, 5, 40, 300, 1 << 20):
        got = {}
        for name, path in paths.items():
            stats = documents.CorpusStats(quiet=True)
            got[name] = [(c.index, c.documents, c.doc_ids, c.num_bytes)
                         for c in documents.iter_chunks([path], chunk_bytes, stats)]
            got[name].append((stats.lines, stats.documents, stats.bad_utf8[path]))
        assert all(g == got["plain.txt"] for g in got.values()), chunk_bytes
        assert got["plain.txt"][-1][2] == bad > 20
        assert len(got["plain.txt"]) > (2 if chunk_bytes < 1000 else 1)
