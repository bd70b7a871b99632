"""Tests for data_tools.prepare.split_worker: a whole file's results past the memory bound go
through a spill file, in order, and nothing is left behind."""

import gzip
import os

import pytest

from bert_tf.core.errors import UserError
from data_tools.prepare import prepare_job, raw_documents, split_worker
from data_tools.prepare.prepare_config import PrepareConfig


def _text(n):
    return "".join(f"Document {i} has a sentence. And another one.\n\n" for i in range(n))


def test_results_past_the_bound_are_spilled_and_read_back_in_order(tmp_path, monkeypatch):
    path = tmp_path / "in.txt.gz"  # one split, of many chunks
    path.write_bytes(gzip.compress(_text(200).encode()))
    config = PrepareConfig((str(path),), ("out",), chunk_bytes=500)
    (split,), _ = raw_documents.plan(config.input_files, "text", "blank_line", 500)
    whole = split_worker.process_split(split, config, prepare_job.process_chunk, "")
    assert whole.spill == "" and len(whole.held) > 10
    monkeypatch.setattr(split_worker, "SPILL_BYTES", 1000)
    spill_dir = tmp_path / "spill"
    spill_dir.mkdir()
    spilled = split_worker.process_split(split, config, prepare_job.process_chunk,
                                         str(spill_dir))
    # Chunks of 12 documents (530 and 540 bytes): the second passes 1000 bytes.
    assert len(spilled.held) == 2
    assert os.listdir(spill_dir) == [os.path.basename(spilled.spill)]
    assert spilled.stats.text_bytes == whole.stats.text_bytes == len(_text(200))
    got = [(r.index, r.documents) for r in spilled.chunk_results()]
    assert got == [(r.index, r.documents) for r in whole.held]
    assert os.listdir(spill_dir) == []  # removed once read


def test_job_output_is_the_same_with_spilling_and_no_file_is_left(tmp_path, monkeypatch):
    src = tmp_path / "in.txt.gz"
    src.write_bytes(gzip.compress(_text(300).encode()))
    outputs = []
    for bound in (64 << 20, 2000):
        monkeypatch.setattr(split_worker, "SPILL_BYTES", bound)
        monkeypatch.setattr(split_worker.tempfile, "tempdir", str(tmp_path / "tmp"))
        os.makedirs(tmp_path / "tmp", exist_ok=True)
        out = tmp_path / f"out-{bound}.txt"
        summary = prepare_job.run(PrepareConfig((str(src),), (str(out),), chunk_bytes=700,
                                                progress_seconds=0))
        assert summary.documents == 300
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1]
    assert os.listdir(tmp_path / "tmp") == []


def test_an_unwritable_spill_directory_is_one_user_error(tmp_path, monkeypatch):
    path = tmp_path / "in.txt.gz"
    path.write_bytes(gzip.compress(_text(50).encode()))
    config = PrepareConfig((str(path),), ("out",), chunk_bytes=200)
    (split,), _ = raw_documents.plan(config.input_files, "text", "blank_line", 200)
    monkeypatch.setattr(split_worker, "SPILL_BYTES", 100)
    with pytest.raises(UserError, match=r"^cannot write temporary file in .*gone: "):
        split_worker.process_split(split, config, prepare_job.process_chunk,
                                   str(tmp_path / "gone"))
