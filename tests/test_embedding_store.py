"""Tests for bert_tf.finetune.retrieval.embedding_store: shards round-trip and are searched
as they are, a changed fingerprint invalidates the store, rewrites and failures leave no
manifest pointing at the wrong shards, and damaged stores get one line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bert_tf.core.errors import UserError
from bert_tf.finetune.retrieval import embedding_store as es
from bert_tf.finetune.retrieval import search

IDS = [f"doc{i}" for i in range(10)]


def vectors(seed=0, n=10, dim=4):
    return np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)


def files(directory):
    return sorted(p.name for p in directory.iterdir())


def test_round_trip_memory_mapped_and_searchable(tmp_path):
    data = vectors()
    stored = es.write_embeddings(str(tmp_path), IDS, [data[:4], data[4:5], data[5:]], "f" * 64)
    assert stored.ids == IDS and stored.dim == 4 and len(stored.shards) == 3
    again = es.read_embeddings(str(tmp_path), "f" * 64)
    assert all(isinstance(s, np.memmap) for s in again.shards)
    np.testing.assert_array_equal(np.concatenate(again.shards), data)
    queries = vectors(1, n=3)
    np.testing.assert_array_equal(search.top_k(queries, again.shards, 5, block_size=2)[0],
                                  search.top_k(queries, data, 5)[0])
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["rows"] == 10 and [s["rows"] for s in manifest["shards"]] == [4, 1, 5]
    assert files(tmp_path) == ["embeddings-ffffffffffff-00000.npy",
                               "embeddings-ffffffffffff-00001.npy",
                               "embeddings-ffffffffffff-00002.npy",
                               "ids-ffffffffffff.txt", "manifest.json"]


def test_fingerprint_follows_weights_settings_and_passages():
    weights = [np.ones((2, 3), np.float32), np.zeros(3, np.float32)]
    settings = {"pooling": "mean", "normalize": True, "max_passage_length": 256}
    passages = [("d1", "one text"), ("d2", "another")]
    base = es.fingerprint(weights, settings, passages)
    assert base == es.fingerprint([w.copy() for w in weights], dict(reversed(settings.items())),
                                  list(passages))
    nudged = [weights[0], np.nextafter(weights[1], np.float32(1))]
    changes = [es.fingerprint(nudged, settings, passages),
               es.fingerprint(weights, {**settings, "pooling": "cls"}, passages),
               es.fingerprint(weights, settings, [("d1", "one text"), ("d2", "Another")]),
               es.fingerprint(weights, settings, [("d1", "one tex"), ("td2", "another")]),
               es.fingerprint([w.astype(np.float64) for w in weights], settings, passages)]
    assert len({base, *changes}) == 6


def test_another_fingerprint_is_ignored_then_replaced(tmp_path):
    es.write_embeddings(str(tmp_path), IDS, [vectors()], "a" * 64)
    assert es.read_embeddings(str(tmp_path), "b" * 64) is None  # a changed model: embed again
    assert es.read_embeddings(str(tmp_path / "nothing-here"), "a" * 64) is None
    es.write_embeddings(str(tmp_path), IDS[:3], [vectors(2, n=3)], "b" * 64)
    assert es.read_embeddings(str(tmp_path), "a" * 64) is None
    assert es.read_embeddings(str(tmp_path), "b" * 64).ids == IDS[:3]
    assert files(tmp_path) == ["embeddings-bbbbbbbbbbbb-00000.npy", "ids-bbbbbbbbbbbb.txt",
                               "manifest.json"]  # the old store's files are gone


def test_a_failed_rewrite_leaves_no_manifest_and_no_partial_file(tmp_path):
    es.write_embeddings(str(tmp_path), IDS, [vectors()], "a" * 64)

    def shards():
        yield vectors(3, n=5)
        raise KeyboardInterrupt  # Ctrl-C while embedding the second shard

    with pytest.raises(KeyboardInterrupt):
        es.write_embeddings(str(tmp_path), IDS, shards(), "c" * 64)
    assert "manifest.json" not in files(tmp_path)
    assert not [name for name in files(tmp_path) if ".tmp-" in name]
    assert es.read_embeddings(str(tmp_path), "a" * 64) is None
    assert es.read_embeddings(str(tmp_path), "c" * 64) is None


def test_bad_stores_and_inputs_get_one_line(tmp_path):
    with pytest.raises(UserError, match=r"^9 embedding rows for 10 passage ids$"):
        es.write_embeddings(str(tmp_path / "a"), IDS, [vectors(n=9)], "a" * 64)
    with pytest.raises(UserError, match=r"^embedding shard 1 has shape \(1, 3\), expected "
                                        r"\[rows, 4\]$"):
        es.write_embeddings(str(tmp_path / "a"), IDS, [vectors(n=9), vectors(n=1, dim=3)], "a")
    with pytest.raises(UserError, match="holds a line break"):
        es.write_embeddings(str(tmp_path / "a"), ["x\ny"], [vectors(n=1)], "a")
    store = tmp_path / "store"
    es.write_embeddings(str(store), IDS, [vectors()], "d" * 64)
    shard = store / "embeddings-dddddddddddd-00000.npy"
    np.save(shard, vectors(n=9))
    with pytest.raises(UserError, match=r"embeddings-dddddddddddd-00000.npy holds float32 "
                                        r"\(9, 4\), the manifest says float32 \(10, 4\)$"):
        es.read_embeddings(str(store), "d" * 64)
    shard.unlink()
    with pytest.raises(UserError, match=r"cannot read the stored embeddings \(.*\); remove the "
                                        r"directory to embed the corpus again$"):
        es.read_embeddings(str(store), "d" * 64)
    (store / "manifest.json").write_text("{not json")
    with pytest.raises(UserError, match="cannot read the embeddings manifest"):
        es.read_embeddings(str(store), "d" * 64)
