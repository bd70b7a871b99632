"""Tests of data_tools.pretraining_data.packed_rows (the packed_mlm feature set): pieces and
best-fit decreasing on hand-computed cases, then every packed row of the bundled corpus
checked against its source documents, the padding share against the NSP layout's, the
records read back with TensorFlow, and the byte-level codec against TensorFlow's."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.core import schema, tokenization
from data_tools.pretraining_data import chunk_records, instances, packed_rows
from data_tools.pretraining_data.create_config import CreateConfig
from data_tools.records import example_codec, tfrecord_frames

SEQ, PRED = 128, 20
CLS, SEP = 101, 102


def test_documents_are_cut_into_full_pieces_and_a_rest():
    # Documents of 3, 7 and 12 tokens (ids 1000 + k), a [SEP] after each in the buffer.
    docs = [[[1000, 1001], [1002]], [[1003] * 4, [1004] * 3], [[1005] * 12]]
    buf = instances.DocumentBuffer.from_documents(docs, SEP)
    pieces = packed_rows.document_pieces(buf, room=5)
    assert pieces.length.tolist() == [3, 5, 2, 5, 5, 2]
    # The second document starts after the first's 3 tokens and its [SEP], and so on.
    assert pieces.start.tolist() == [0, 4, 9, 12, 17, 22]
    assert buf.ids[9:11].tolist() == [1004, 1004] and buf.ids[11] == SEP


def test_best_fit_decreasing_by_hand():
    # Capacity 10. Decreasing: 7 -> row 0 (room 3); 6 -> row 1 (4); 4 -> row 1 (0, closed);
    # 3 -> row 0, the least room that holds it (0, closed); 2 -> row 2 (8); 2 -> row 2 (6).
    sizes = np.array([3, 7, 2, 4, 6, 2])
    packed = packed_rows.pack_pieces(sizes, 10, np.random.default_rng(0))
    assert packed.num_rows == 3
    assert packed.row.tolist() == [0, 0, 2, 1, 1, 2]
    assert packed.offset[[1, 0]].tolist() == [0, 7] and packed.offset[[4, 3]].tolist() == [0, 6]
    assert packed.rank[[1, 0, 4, 3]].tolist() == [1, 2, 1, 2]
    assert sorted(packed.offset[[2, 5]].tolist()) == [0, 2]  # the two 2s: order from rng
    # Random sizes: no row overflows, segments never overlap, the same seed the same rows.
    sizes = np.random.default_rng(1).integers(1, 129, 500)
    a = packed_rows.pack_pieces(sizes, 128, np.random.default_rng(7))
    b = packed_rows.pack_pieces(sizes, 128, np.random.default_rng(7))
    assert a.row.tolist() == b.row.tolist() and a.offset.tolist() == b.offset.tolist()
    ends = a.offset + sizes
    assert ends.max() <= 128
    for r in range(a.num_rows):
        mine = np.flatnonzero(a.row == r)
        order = mine[np.argsort(a.offset[mine])]
        assert (a.offset[order][1:] == ends[order][:-1]).all()  # back to back from 0
        assert a.offset[order][0] == 0 and a.rank[order].tolist() == list(range(1, len(mine) + 1))
    # Best-fit decreasing needs at most 11/9 of the optimum + 1 rows; the optimum is at least
    # ceil(total / capacity).
    assert a.num_rows <= 11 / 9 * np.ceil(sizes.sum() / 128) + 1


@pytest.fixture(scope="module")
def tokenizer(google_vocab_path):
    return tokenization.FullTokenizer(google_vocab_path, do_lower_case=True)


def _batches(tokenizer, vocab, corpus_path, store, **packing):
    store.mkdir(exist_ok=True)
    config = CreateConfig(
        input_files=(str(corpus_path),), output_files=("/nonexistent/out",), vocab_file=vocab,
        dupe_factor=2, num_workers=1, log_examples=0, progress_seconds=0,
        max_predictions_per_seq=PRED,
        packing=instances.PackingConfig(max_seq_length=SEQ, **packing))
    return [b for _, b in chunk_records.job_batches(config, tokenizer, str(store))]


@pytest.fixture(scope="module")
def packed(tokenizer, google_vocab_path, corpus_path, tmp_path_factory):
    return _batches(tokenizer, google_vocab_path, corpus_path, tmp_path_factory.mktemp("p"),
                    nsp=False, packed=True)


def test_every_row_holds_whole_documents_with_their_ids_and_positions(
        packed, tokenizer, corpus_path):
    # The corpus's token stream, document by document, as the job tokenizes it.
    text = corpus_path.read_text(encoding="utf-8").split("\n\n")
    docs = [[t for line in d.splitlines() if line.strip() for t in tokenizer.encode(line)]
            for d in text]
    stream = [t for d in docs if d for t in d]
    segments = []
    for b in packed:
        assert (b.segment_ids == 0).all() and (b.spans.is_random_next == 0).all()
        for ids, doc, pos, n in zip(b.input_ids, b.doc_ids, b.position_ids, b.lengths):
            assert (ids[n:] == 0).all() and (doc[n:] == 0).all() and (pos[n:] == 0).all()
            k = int(doc.max())
            assert np.unique(doc[:n]).tolist() == list(range(1, k + 1))
            for d in range(1, k + 1):
                where = np.flatnonzero(doc == d)
                assert (np.diff(where) == 1).all()  # contiguous, in rank order
                assert pos[where].tolist() == list(range(len(where)))
                seg = ids[where]
                assert seg[0] == tokenizer.vocab["[CLS]"] and seg[-1] == tokenizer.vocab["[SEP]"]
                assert len(where) >= 3
                segments.append(seg[1:-1].tolist())
    # Each dupe holds every token once: the segments, put back in document order, are the
    # corpus's tokens twice (all but the last piece of a document are 126 tokens long).
    tokens = sum(len(s) for s in segments)
    assert tokens == 2 * len(stream)
    lengths = sorted(len(s) for s in segments)
    assert lengths.count(SEQ - 2) > 0.5 * len(lengths)
    pieces = {}
    for s in segments:
        pieces[tuple(s)] = pieces.get(tuple(s), 0) + 1
    assert min(pieces.values()) >= 2  # the same pieces in both dupes, in other rows


def test_packed_rows_carry_far_less_padding_than_nsp_pairs(packed, tokenizer,
                                                           google_vocab_path, corpus_path,
                                                           tmp_path):
    def share(batches):
        stats = chunk_records.InstanceStats()
        for b in batches:
            stats.add(chunk_records.batch_stats(b, SEQ))
        return stats.padding_share(SEQ), stats

    packed_share, stats = share(packed)
    nsp_share, _ = share(_batches(tokenizer, google_vocab_path, corpus_path, tmp_path / "a"))
    blocks_share, _ = share(_batches(tokenizer, google_vocab_path, corpus_path, tmp_path / "b",
                                     nsp=False))
    # Measured (the whole corpus, dupe 2, 128 tokens): 0.11% packed; 5.6% for the original's
    # NSP pairs (short targets, document ends); 18.8% for --no_nsp blocks of whole sentences.
    assert packed_share < 0.005 and nsp_share > 0.04 and blocks_share > 0.15
    # Masking as usual: 15% of the non-special tokens, capped at PRED per row.
    assert 0.145 < stats.predictions / stats.maskable_tokens < 0.155
    assert "padding 0.1% of the slots" in stats.describe(False, SEQ)


def test_packed_records_parse_back_identical(packed, tmp_path):
    features = packed[0].features(SEQ)
    assert {schema.DOC_IDS, schema.POSITION_IDS} <= set(features)
    records = example_codec.encode_examples(features, SEQ, PRED, packed=True)
    path = tmp_path / "packed.tfrecord"
    path.write_bytes(tfrecord_frames.frame_records(records).data.tobytes())
    spec = schema.parsing_spec(SEQ, PRED, packed=True)
    assert set(spec) == {f.name for f in schema.FEATURES} | {schema.DOC_IDS, schema.POSITION_IDS}
    for i, raw in enumerate(tf.data.TFRecordDataset(str(path)).take(50)):
        parsed = tf.io.parse_single_example(raw, spec)
        for name, values in features.items():
            np.testing.assert_array_equal(parsed[name].numpy(), values[i])
    # The original spec reads them too (the extra features are ignored).
    tf.io.parse_single_example(raw, schema.parsing_spec(SEQ, PRED))


def test_codec_bytes_equal_tensorflow_for_the_packed_features():
    rng = np.random.default_rng(0)
    n, seq, pred = 5, 16, 4
    features = {f.name: (rng.random((n, pred)).astype(np.float32) if f.dtype == "float32"
                         else rng.integers(0, 600, (n, 1 if f.length == 1 else
                                                       seq if f.length == "seq" else pred)))
                for f in schema.features_of(packed=True)}
    for i, record in enumerate(example_codec.example_bytes(features, seq, pred, packed=True)):
        feats = {}
        for f in schema.features_of(packed=True):
            values = features[f.name][i]
            feats[f.name] = (tf.train.Feature(float_list=tf.train.FloatList(value=values))
                             if f.dtype == "float32" else
                             tf.train.Feature(int64_list=tf.train.Int64List(value=values)))
        example = tf.train.Example(features=tf.train.Features(feature=feats))
        assert record == example.SerializeToString(deterministic=True)
    with pytest.raises(ValueError, match="missing features"):
        example_codec.encode_examples({k: v for k, v in features.items()
                                       if k != schema.DOC_IDS}, seq, pred, packed=True)


def test_a_packing_with_nsp_is_refused():
    from bert_tf.core.errors import UserError

    with pytest.raises(UserError, match="packed_mlm is masked LM only"):
        CreateConfig(input_files=(), output_files=(), vocab_file="v",
                     packing=instances.PackingConfig(nsp=True, packed=True))
    assert dataclasses.replace(instances.PackingConfig(), nsp=False, packed=True).max_num_tokens \
        == 126
