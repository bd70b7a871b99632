"""Tests of `python -m data_tools.embed_corpus` (data_tools/embed/) on a tiny exported
bi-encoder (one layer, Google's vocabulary, mean pooling, built and exported here) and a
600-passage BEIR corpus written here from the bundled text (a plain file with a byte-order
mark, integer ids and titles, and a gzip file), cut into 4 shards:

- the local run and Beam's DirectRunner (a worker process of its own, RunInference) write
  the same bytes, file for file (SHA-256); the store reads back through
  `embedding_store.read_embeddings` with the ids of `beir_data.read_corpus` and the vectors
  of the SavedModel's embed signature;
- a run stopped after one shard (--max_shards_per_run), a killed run's leftovers (a
  temporary file, a shard whose .npy never got renamed) and the reruns that resume end with
  the bytes of the uninterrupted run, finished shards untouched;
- bad input is one `error:` line and exit code 2: an empty corpus, a SavedModel without the
  signature, a repeated id (in a file, across shards), a line that is not JSON or not UTF-8,
  another job's output directory.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os

import numpy as np
import pytest
from _pretraining_helpers import TINY_FINETUNE_BERT, error_lines

from data_tools.embed import corpus_shards, embed_store

MODULE = "data_tools.embed_corpus"
CLI_PRELOAD = ("numpy", "tensorflow", "tensorflow_text", "absl.flags", "tqdm",
               "data_tools.embed.embed_job", "apache_beam")
CLI_ENV = {"TF_CPP_MIN_LOG_LEVEL": "3"}
SHARD_MB = "0.02"  # 53 kB plain file -> 3 shards, the gzip file 1
# One worker process (tests/_beam_jobs.DIRECT has two): each loads TensorFlow and the model,
# ~10 CPU s, and one already runs the job apart from the launcher, as Dataflow's do.
DIRECT = "--runner=DirectRunner --direct_num_workers=1 --direct_running_mode=multi_processing"


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, repo_root, google_vocab_path):
    """(saved_model_dir, [corpus files], all rows as written)."""
    import keras
    import tensorflow as tf

    from bert_tf.export.embedding_export import export_embedder
    from bert_tf.finetune.retrieval.embedder import BertEmbedder
    from bert_tf.modeling.config import BertConfig

    root = tmp_path_factory.mktemp("embed")
    keras.utils.set_random_seed(5)
    embedder = BertEmbedder(BertConfig.from_dict(TINY_FINETUNE_BERT), "mean", True)
    embedder({k: tf.ones([1, 4], tf.int32) for k in ("input_ids", "input_mask", "segment_ids")})
    model = export_embedder(embedder.encoder, google_vocab_path, True, str(root / "model"), 48,
                            "mean")
    text = (repo_root / "data" / "corpus" / "wikitext2.bert.txt").read_text(encoding="utf-8")
    lines = [line for line in text.split("\n") if line.strip()][:600]
    rows = [{"_id": i if i % 5 == 0 else f"p{i}", "title": "Title" if i % 7 == 0 else "",
             "text": line} for i, line in enumerate(lines)]
    for row in rows[::11]:
        del row["title"]  # BEIR's title is optional
    plain, packed = root / "a.jsonl", root / "b.jsonl.gz"
    body = "".join(json.dumps(r) + "\n" + ("\n" if i == 40 else "")  # a blank line
                   for i, r in enumerate(rows[:300]))
    plain.write_bytes(b"\xef\xbb\xbf" + body.encode("utf-8"))
    with gzip.open(packed, "wt", encoding="utf-8") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows[300:]))
    return model, [str(plain), str(packed)], rows


def args(inputs, output_dir, *more):
    model, files, _ = inputs
    return [f"--input_file={','.join(files)}", f"--saved_model_dir={model}",
            f"--output_dir={output_dir}", f"--shard_mb={SHARD_MB}", "--batch_size=16", *more]


def digests(directory) -> dict:
    return {name: hashlib.sha256((directory / name).read_bytes()).hexdigest()
            for name in sorted(os.listdir(directory))}


def check(proc) -> None:
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.fixture(scope="module")
def local_run(cli, inputs, tmp_path_factory):
    out = tmp_path_factory.mktemp("local") / "out"
    proc = cli.run(MODULE, args(inputs, out))
    check(proc)
    return out, proc.stderr


def test_local_and_direct_runner_write_the_same_bytes(cli, inputs, local_run, tmp_path):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    from bert_tf.finetune.retrieval import beir_data, embedding_store

    out, stderr = local_run
    assert "4 shard(s) of 2 input file(s), 0.1 MB: 0 finished before, 4 to embed now" in stderr
    assert "passages=600" in stderr  # the progress bar's last state
    beam_out = tmp_path / "beam"
    proc = cli.run(MODULE, args(inputs, beam_out, f"--beam_pipeline_options={DIRECT}"))
    check(proc)
    assert "Beam: embedded 600 passages in 4 shard(s)" in proc.stderr
    local = digests(out)
    assert len(local) == 2 * 4 + 2  # 4 x (.npy, ids), the job file, the manifest
    assert digests(beam_out) == local

    manifest = embedding_store.read_manifest(str(out))
    stored = embedding_store.read_embeddings(str(out), manifest["fingerprint"])
    model, files, rows = inputs
    corpus = {**beir_data.read_corpus(files[0]), **beir_data.read_corpus(files[1])}
    assert stored.ids == list(corpus) == [str(r["_id"]) for r in rows]
    assert [s.shape[0] for s in stored.shards] == [e["rows"] for e in manifest["shards"]]
    assert len(stored.shards) == 4 and min(s.shape[0] for s in stored.shards) > 50
    vectors = np.concatenate(stored.shards)
    embed = tf.saved_model.load(model).signatures["embed"]
    texts = [corpus[pid].encoder_text for pid in stored.ids]
    alone = np.concatenate([embed(text=tf.constant(texts[i:i + 100]))["embedding"].numpy()
                            for i in range(0, 600, 100)])
    # Other batches pad to other lengths: the same vectors to float rounding.
    np.testing.assert_allclose(vectors, alone, atol=2e-6)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)


def test_an_interrupted_run_resumes_to_the_same_bytes(cli, inputs, local_run, tmp_path):
    out = tmp_path / "out"
    proc = cli.run(MODULE, args(inputs, out, "--max_shards_per_run=1"))
    check(proc)
    assert "3 shard(s) left: run the same command again" in proc.stderr
    assert sorted(os.listdir(out)) == ["embed_job.json", "embeddings-00000-of-00004.npy",
                                       "ids-00000-of-00004.txt"]
    first = (out / "embeddings-00000-of-00004.npy").stat().st_mtime_ns
    # What a kill leaves: a temporary file, and a shard whose ids were renamed but not its
    # vectors (the .npy is renamed last).
    (out / "embeddings-00001-of-00004.npy.tmp-0123456789ab").write_bytes(b"partial")
    (out / "ids-00001-of-00004.txt").write_text("stale\n")
    proc = cli.run(MODULE, args(inputs, out, "--max_shards_per_run=2"))
    check(proc)
    assert "removed 1 temporary file(s) of an earlier run" in proc.stderr
    assert "1 finished before, 2 to embed now" in proc.stderr
    proc = cli.run(MODULE, args(inputs, out))
    check(proc)
    assert "3 finished before, 1 to embed now" in proc.stderr
    assert (out / "embeddings-00000-of-00004.npy").stat().st_mtime_ns == first
    assert digests(out) == digests(local_run[0])
    proc = cli.run(MODULE, args(inputs, out))  # all done: only the manifest again
    check(proc)
    assert "4 finished before, 0 to embed now" in proc.stderr
    assert digests(out) == digests(local_run[0])


def test_bad_input_is_one_line(cli, inputs, tmp_path):
    import tensorflow as tf

    model, files, _ = inputs

    def error(corpus_lines, *more, model_dir=model, raw=None) -> str:
        path = tmp_path / f"c{len(os.listdir(tmp_path))}.jsonl"
        path.write_bytes(raw if raw is not None else
                         "".join(line + "\n" for line in corpus_lines).encode("utf-8"))
        proc = cli.run(MODULE, [f"--input_file={path}", f"--saved_model_dir={model_dir}",
                                f"--output_dir={tmp_path / 'out' / path.stem}", *more])
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert "Traceback" not in proc.stderr
        (line,) = error_lines(proc.stderr)
        return line.replace(str(path), "FILE")

    good = json.dumps({"_id": "a", "text": "some text"})
    assert error(["", "  "]) == "error: empty corpus: the input holds no passage"
    assert error([good, "{not json"]).startswith("error: FILE:2: not valid JSON (")
    assert error([good, json.dumps({"text": "x"})]) == "error: FILE:2: field '_id' is missing"
    assert error([], raw=good.encode() + b"\n" + b'{"_id": "b", "text": "\xff"}\n') == \
        "error: FILE:2: not UTF-8"
    assert error([good, good]) == "error: FILE:2: passage id 'a' repeats line 1"
    # Across shards: line 2 is in the second shard of 30 bytes.
    assert error([good, json.dumps({"_id": "a", "text": "again"})], "--shard_mb=0.00003") == \
        "error: passage id 'a' is in shard 0 and shard 1 of the input (every id must be unique)"

    class NoEmbed(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def serve(self, text):
            return {"length": tf.strings.length(text)}

    other = tmp_path / "other_model"
    module = NoEmbed()
    tf.saved_model.save(module, str(other), signatures={"serving_default": module.serve})
    assert error([good], model_dir=other) == (
        f"error: --saved_model_dir={other} has no 'embed' signature (it has serving_default): "
        "export a bi-encoder (a run_retrieval output_dir or a sentence-transformers folder)")

    out = tmp_path / "job"
    check(cli.run(MODULE, [f"--input_file={files[1]}", f"--saved_model_dir={model}",
                           f"--output_dir={out}", "--max_shards_per_run=1"]))
    proc = cli.run(MODULE, [f"--input_file={files[1]}", f"--saved_model_dir={model}",
                            f"--output_dir={out}", "--batch_size=8"])
    assert error_lines(proc.stderr) == [
        f"error: --output_dir={out} holds the shards of another job (batch_size differ): use "
        "a new directory, or remove it"]


def test_passages_are_read_as_beir_reads_them(inputs):
    from bert_tf.finetune.retrieval import beir_data, embedding_store

    _, files, _ = inputs
    shards = corpus_shards.plan(files, int(float(SHARD_MB) * 1e6))
    assert [(s.path, s.end < 0) for s in shards] == [(files[0], False)] * 3 + [(files[1], True)]
    read = [corpus_shards.read_shard(s) for s in shards]
    for path, parts in ((files[0], read[:3]), (files[1], read[3:])):
        corpus = beir_data.read_corpus(path)
        assert [i for p in parts for i in p.ids] == list(corpus)
        assert [t for p in parts for t in p.texts] == [c.encoder_text for c in corpus.values()]
    # The store's format is embedding_store's (spelt out in data_tools).
    assert (embed_store.FORMAT, embed_store.MANIFEST) == (embedding_store.FORMAT,
                                                          embedding_store.MANIFEST)
