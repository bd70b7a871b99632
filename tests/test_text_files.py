"""Tests of data_tools.inputs.text_files: the one set of input rules of the three data jobs."""

from __future__ import annotations

import bz2

import pytest
from _text_inputs import input_variants

from bert_tf.core.errors import UserError
from data_tools.inputs import documents, text_files

TEXT = "first line\nsecond café line\n\nthird\n".encode("utf-8")


def _variants(tmp_path):
    """The same text stored plain, gzip, bzip2, gzip without its suffix, and with a BOM."""
    files = input_variants(TEXT)
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    return {name: str(tmp_path / name) for name in files}


def test_every_variant_gives_the_same_lines_and_counts_stored_bytes(tmp_path):
    for name, path in _variants(tmp_path).items():
        stats = documents.CorpusStats()
        lines = list(documents.iter_lines(path, stats, block_size=7))  # lines cross blocks
        assert lines == ["first line", "second café line", "", "third"], name
        assert stats.bytes_read == (tmp_path / name).stat().st_size
        stored = []
        with text_files.open_input(path, stored.append) as f:
            data = f.read()
        assert data == (TEXT if name != "bom.txt" else b"\xef\xbb\xbf" + TEXT)
        assert sum(stored) == (tmp_path / name).stat().st_size


def test_decode_counts_invalid_sequences_not_genuine_replacement_characters():
    assert text_files.decode(b"ok \xff\xfe \xef\xbf\xbd") == ("ok \ufffd\ufffd \ufffd", 2)
    assert text_files.strip_bom("\ufeffa\ufeff") == "a\ufeff"


@pytest.mark.parametrize("name, data", [("bad.gz", b"\x1f\x8b\x08\x00garbage"),
                                        ("cut.bz2", bz2.compress(TEXT * 100)[:60])])
def test_corrupt_or_truncated_compressed_data_is_one_error(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(UserError, match=f"cannot read input file {path}: "):
        list(documents.iter_lines(str(path), documents.CorpusStats()))


def test_missing_file_is_one_error(tmp_path):
    with pytest.raises(UserError, match="cannot read input file"):
        text_files.open_input(str(tmp_path / "missing.txt"), lambda n: None)
