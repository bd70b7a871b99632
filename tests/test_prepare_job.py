"""Tests for data_tools.prepare.prepare_job: filtering, JSON handling, sharding,
determinism across workers and chunk sizes, remote paths, and data_tools.runtime.process_pool."""

import dataclasses
import json
import os

import numpy as np
import pytest

from bert_tf.core.errors import UserError
from data_tools.prepare import prepare_job, raw_documents
from data_tools.prepare.prepare_config import PrepareConfig


def _chunk(items, index=0):
    return raw_documents.Chunk(index, list(items), [(0, i + 1) for i in range(len(items))],
                               sum(map(len, items)))


def test_process_chunk_filters_empty_and_short_documents():
    config = PrepareConfig(("in.txt",), ("out.txt",), min_sentences=2, min_chars=30)
    result = prepare_job.process_chunk(_chunk([
        "One. Two.",                      # 2 sentences, 8 characters: short
        " \u3000 ",                         # empty
        "A single long sentence that passes the character bar.",  # 1 sentence: short
        "First sentence here. Second\tsentence  here.\nThird, a paragraph.",
    ]), config)
    assert result.documents == [
        "First sentence here.\nSecond sentence here.\nThird, a paragraph.\n"]
    assert (result.sentence_counts, result.empty, result.short) == ([3], 1, 2)
    assert result.hashes is None


def test_process_chunk_json_broken_lines_missing_and_non_string_fields():
    config = PrepareConfig(("dump.jsonl",), ("o",), input_format="jsonl", dedup=True)
    lines = ['{"id": "1", "text": "Hello there. Bye."}', '{"id": 2, "text": ', '[1, 2]',
             '{"text": null}', '{"text": "Hello there. Bye."}']
    result = prepare_job.process_chunk(_chunk(lines), config)
    assert result.documents == ["Hello there.\nBye.\n"] * 2
    assert (result.json_ok, result.json_broken, result.empty) == (3, 2, 1)
    messages = result.messages(config.input_files)
    assert messages[0].startswith("dump.jsonl:2: broken JSON line skipped (")
    assert messages[1] == "dump.jsonl:3: broken JSON line skipped (a JSON list, not an object)"
    # Lines counted from a split's start, worded with the lines of the file before it.
    assert result.messages(config.input_files, 40)[0].startswith("dump.jsonl:42: broken")
    assert result.hashes.dtype == np.dtype("<u8") and result.hashes[0] == result.hashes[1]
    with pytest.raises(UserError, match=r"^--text_field='body': no such field in "
                                        r"dump\.jsonl:1 \(its fields: id, text\)$"):
        prepare_job.process_chunk(_chunk(lines[:1]),
                                  dataclasses.replace(config, text_field="body"))
    with pytest.raises(UserError, match=r"^--text_field='id' in dump\.jsonl:1 is a JSON int"):
        prepare_job.process_chunk(_chunk(['{"id": 7}']),
                                  dataclasses.replace(config, text_field="id"))


def _corpus(tmp_path, corpus_lines, n=1500):
    """Raw paragraphs: each document's sentences joined into lines of 4 sentences, with
    every 5th document repeated (duplicates for --dedup)."""
    docs, doc = [], []
    for line in corpus_lines[:n] + [""]:
        if line.strip():
            doc.append(line)
        elif doc:
            docs.append("\n".join(" ".join(doc[i:i + 4]) for i in range(0, len(doc), 4)))
            doc = []
    repeats = docs[::5]
    path = tmp_path / "raw.txt"
    path.write_text("\n\n".join(docs + repeats) + "\n", encoding="utf-8")
    return path, len(docs), len(repeats)


def test_run_is_identical_for_any_workers_and_chunk_size(tmp_path, corpus_lines):
    src, num_docs, num_repeats = _corpus(tmp_path, corpus_lines)
    outputs = {}
    for workers, chunk in ((1, 1 << 20), (2, 5000), (2, 77)):
        outs = tuple(str(tmp_path / f"w{workers}-{chunk}-{i}.txt") for i in range(3))
        summary = prepare_job.run(PrepareConfig((str(src),), outs, dedup=True,
                                                num_workers=workers, chunk_bytes=chunk))
        outputs[workers, chunk] = [open(p, "rb").read() for p in outs]
        assert sorted(os.listdir(tmp_path)) == sorted(
            ["raw.txt"] + [os.path.basename(p) for k in outputs for p in
                           [f"w{k[0]}-{k[1]}-{i}.txt" for i in range(3)]])  # no temp files
    first = outputs[1, 1 << 20]
    assert all(out == first for out in outputs.values())
    texts = [b.decode() for b in first]
    docs = [d for t in texts for d in t.split("\n\n")]
    assert (summary.documents, summary.duplicates) == (len(docs), num_repeats)
    assert len(docs) == num_docs > 10
    assert len(set(docs)) == len(docs)  # duplicates gone
    assert summary.sentences == sum(t.count("\n") for t in texts) - (len(docs) - 3)
    assert all(t.endswith("\n") and not t.endswith("\n\n") and "\n\n\n" not in t
               for t in texts)
    sizes = [t.count("\n\n") + 1 for t in texts]
    assert max(sizes) - min(sizes) <= 1  # dealt in turn


def test_held_out_documents_are_every_n_th_for_any_workers(tmp_path, corpus_lines):
    """--heldout_every=5: kept documents 4, 9, ... go to the held-out file, in order; the
    others are dealt to the shards in turn; the same bytes for any worker count."""
    src, num_docs, _ = _corpus(tmp_path, corpus_lines)
    reference = prepare_job.run(PrepareConfig((str(src),), (str(tmp_path / "all.txt"),),
                                              dedup=True))
    every = open(tmp_path / "all.txt").read().split("\n\n")
    assert len(every) == reference.documents == num_docs
    outputs = {}
    for workers, chunk in ((1, 1 << 20), (2, 77)):
        shards = tuple(str(tmp_path / f"w{workers}-{i}.txt") for i in range(2))
        heldout = str(tmp_path / f"w{workers}-heldout.txt")
        summary = prepare_job.run(PrepareConfig(
            (str(src),), shards, dedup=True, num_workers=workers, chunk_bytes=chunk,
            heldout_file=heldout, heldout_every=5))
        outputs[workers] = [open(p).read() for p in shards + (heldout,)]
        assert (summary.documents, summary.heldout) == (num_docs, num_docs // 5)
    assert outputs[1] == outputs[2]
    def documents(text):
        return [d.strip("\n") for d in text.split("\n\n")]

    shard0, shard1, held = outputs[1]
    assert documents(held) == [d.strip("\n") for d in every[4::5]]
    train = [d.strip("\n") for k, d in enumerate(every) if k % 5 != 4]
    assert (documents(shard0), documents(shard1)) == (train[0::2], train[1::2])
    assert all(t.endswith("\n") and not t.endswith("\n\n") and not t.startswith("\n")
               for t in outputs[1])


def test_run_reads_and_writes_remote_paths(corpus_lines):
    """ram:// goes through tf.io.gfile like gs://; its files live in this process's memory,
    so the job runs here (worker processes read their own splits, which gs:// allows)."""
    import tensorflow as tf
    src = "ram://prepare_job_test/in.txt"
    with tf.io.gfile.GFile(src, "w") as f:
        f.write("\n".join(corpus_lines[:300]) + "\n")
    outs = ("ram://prepare_job_test/out/a.txt", "ram://prepare_job_test/out/b.txt")
    summary = prepare_job.run(PrepareConfig((src,), outs, document_per="file",
                                            num_workers=1, chunk_bytes=1000))
    assert sorted(tf.io.gfile.listdir("ram://prepare_job_test/out")) == ["a.txt", "b.txt"]
    with tf.io.gfile.GFile(outs[0]) as f:
        text = f.read()
    assert summary.documents == 1 and summary.sentences == text.count("\n") >= 280
    with tf.io.gfile.GFile(outs[1]) as f:
        assert f.read() == ""  # fewer documents than shards: an empty shard




def test_messages_give_file_line_numbers_from_any_split(tmp_path):
    """Workers count lines from their split's start; the parent words the file's numbers."""
    src = tmp_path / "in.jsonl"
    lines = [json.dumps({"text": f"Document {i}. It has two sentences."}) for i in range(40)]
    lines[29] = '{"text": "broken'
    src.write_text("\n".join(lines) + "\n\n", encoding="utf-8")
    for workers in (1, 2):
        outs = (str(tmp_path / f"out{workers}.txt"),)
        config = PrepareConfig((str(src),), outs, input_format="jsonl",
                               num_workers=workers, chunk_bytes=100)
        summary = prepare_job.run(config)
        assert summary.warnings[0].startswith(f"{src}:30: broken JSON line skipped (")
        assert summary.documents == 39
        bad = tmp_path / "bad.jsonl"
        bad.write_text("\n".join(lines[:35] + ['{"body": "x"}']) + "\n", encoding="utf-8")
        with pytest.raises(UserError, match=rf"^--text_field='text': no such field in "
                                            rf"{bad}:36 \(its fields: body\)$"):
            prepare_job.run(dataclasses.replace(config, input_files=(str(bad),)))
