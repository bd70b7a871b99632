"""Packed records end to end: `create_pretraining_data --feature_set=packed_mlm` on a piece of
the bundled corpus, the input pipeline's packed batches (with dynamic masks), and
`run_pretraining` of a tiny rotary encoder on them: finite, falling losses, checkpoints, and a
run stopped half-way and resumed that continues the straight run's losses; one feature set
per input."""

from __future__ import annotations

import dataclasses
import json
import os
import re

import numpy as np
import pytest
import tensorflow as tf
from _pretraining_helpers import (
    TINY_BERT,
    error_lines,
    pretraining_flags,
    progress_losses,
    progress_steps,
    synthetic_examples,
    write_tfrecords,
)

from bert_tf.core import schema
from bert_tf.core.errors import UserError
from bert_tf.core.masking_rules import MaskingConfig
from bert_tf.data import input_pipeline, input_validation
from bert_tf.data.input_config import InputConfig

MODULE = "bert_tf.run_pretraining"
SEQ, PRED, STEPS = 64, 10, 6
MODERN = {**TINY_BERT, "vocab_size": 30522, "num_hidden_layers": 2, "hidden_act": "geglu",
          "type_vocab_size": 0, "position_embedding_type": "rope", "pre_layer_norm": True,
          "norm_eps": 1e-5, "use_bias": False, "global_attn_every_n_layers": 2,
          "local_attention_window": 16, "hidden_dropout_prob": 0.1}


@pytest.fixture(scope="module")
def data(tmp_path_factory, corpus_lines, google_vocab_path, cli):
    root = tmp_path_factory.mktemp("packed")
    text = root / "text.txt"
    text.write_text("\n".join(corpus_lines[:1200]) + "\n", encoding="utf-8")
    proc = cli.run("data_tools.create_pretraining_data", [
        f"--input_file={text}", f"--vocab_file={google_vocab_path}",
        f"--output_file={root / 'part-{shard}.tfrecord'}", "--num_output_shards=2",
        "--feature_set=packed_mlm", f"--max_seq_length={SEQ}",
        f"--max_predictions_per_seq={PRED}", "--dupe_factor=1", "--num_workers=1",
        "--progress_seconds=0", "--log_examples=1"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "doc_ids: 1 1 1" in proc.stderr and "position_ids: 0 1 2" in proc.stderr
    os.rename(root / "part-00000.tfrecord", root / "train-0.tfrecord")
    os.rename(root / "part-00001.tfrecord", root / "eval.tfrecord")
    (root / "bert_config.json").write_text(json.dumps(MODERN))
    return root, proc.stderr


def _config(path, **kw):
    return InputConfig(input_patterns=os.fspath(path), batch_size=8, max_seq_length=SEQ,
                       max_predictions_per_seq=PRED, vocab_size=30522, **kw)


def test_the_job_reports_the_padding_it_saves(data):
    _, log = data
    share = float(log.split("padding ")[1].split("%")[0])
    assert share < 1.0  # measured 0.1% on these 1,200 lines at 64 tokens


def test_the_pipeline_reads_packed_rows_and_masks_them_within_documents(data,
                                                                        google_vocab_path):
    root, _ = data
    masking = MaskingConfig.from_vocab_file(google_vocab_path, PRED)
    config = _config(root / "train-0.tfrecord", masking=masking, seed=3)
    assert input_validation.validate_input_files(config).packed
    batch = next(iter(input_pipeline.make_pretraining_dataset(config)))
    batch = {k: v.numpy() for k, v in batch.items()}
    doc, pos, ids = batch[schema.DOC_IDS], batch[schema.POSITION_IDS], batch["input_ids"]
    assert doc.dtype == np.int32 and (doc.max(axis=1) >= 1).all()
    assert ((doc > 0) == (batch["input_mask"] > 0)).all()
    for d, p, t, m, labels, w in zip(doc, pos, ids, batch["masked_lm_positions"],
                                     batch["masked_lm_ids"], batch["masked_lm_weights"]):
        starts = np.flatnonzero(p == 0)[:d.max()]
        assert (d[starts] == np.arange(1, d.max() + 1)).all()
        assert (t[starts] == 101).all()  # every document opens with [CLS], never masked
        assert (w > 0).sum() and not np.isin(labels[w > 0], [101, 102]).any()  # nor [SEP]
        assert (d[m[w > 0]] > 0).all()


def test_one_feature_set_per_input(data, tmp_path):
    root, _ = data
    write_tfrecords(tmp_path / "z-plain.tfrecord", synthetic_examples(4, seq=SEQ, preds=PRED))
    os.link(root / "train-0.tfrecord", tmp_path / "a-packed.tfrecord")
    with pytest.raises(UserError, match="holds unpacked rows but .*a-packed.tfrecord holds "
                                        r"packed rows \(doc_ids\): one feature set per input"):
        input_validation.validate_input_files(_config(tmp_path / "*.tfrecord"))
    with pytest.raises(UserError, match=r"a-packed.tfrecord holds packed rows \(doc_ids\) but "
                                        "packed=False was given"):
        input_validation.validate_input_files(_config(tmp_path / "a-*.tfrecord", packed=False))
    # Unvalidated with fixed names, no record is read: packed rows must be said so.
    unread = _config(root / "train-0.tfrecord", validate_files=False,
                     use_v2_feature_names=False)
    assert not input_validation.validate_input_files(unread).packed
    assert input_validation.validate_input_files(
        dataclasses.replace(unread, packed=True)).packed


def _flags(root, out, vocab, **overrides):
    return pretraining_flags(root, out, input_file="train-0.tfrecord", **dict(dict(
        max_seq_length=SEQ, max_predictions_per_seq=PRED, num_train_steps=STEPS,
        learning_rate=5e-3, no_nsp="true", dynamic_masking="true", vocab_file=vocab),
        **overrides))


@pytest.fixture(scope="module")
def straight(data, cli, tmp_path_factory, google_vocab_path):
    root, _ = data
    out = tmp_path_factory.mktemp("straight")
    proc = cli.run(MODULE, _flags(root, out, google_vocab_path, do_eval="true"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, progress_losses(proc.stderr)


def test_run_pretraining_trains_and_evaluates_on_packed_rows(straight):
    out, losses = straight
    assert len(losses) == STEPS and np.isfinite(losses).all()
    assert np.mean(losses[-2:]) < losses[0] - 0.1  # from ln(30522) = 10.3 (measured -0.19)
    assert tf.train.latest_checkpoint(os.fspath(out)).endswith(f"ckpt-{STEPS}")
    results = dict(line.split(" = ") for line in
                   (out / "eval_results.txt").read_text().splitlines())
    assert np.isfinite(float(results["masked_lm_loss"])) and "next_sentence_loss" not in results


def test_a_stopped_run_resumes_on_the_straight_run_s_losses(data, straight, cli, tmp_path,
                                                             google_vocab_path):
    root, _ = data
    _, losses = straight
    first = cli.run(MODULE, _flags(root, tmp_path, google_vocab_path, max_steps_per_run=3))
    assert first.returncode == 0, first.stderr[-3000:]
    assert tf.train.latest_checkpoint(os.fspath(tmp_path)).endswith("ckpt-3")
    second = cli.run(MODULE, _flags(root, tmp_path, google_vocab_path))
    assert second.returncode == 0, second.stderr[-3000:]
    assert progress_steps(second.stderr) == [4, 5, 6]
    np.testing.assert_allclose(progress_losses(first.stderr) + progress_losses(second.stderr),
                               losses, rtol=1e-5)
    assert tf.train.latest_checkpoint(os.fspath(tmp_path)).endswith(f"ckpt-{STEPS}")


def test_packed_rows_with_nsp_are_one_error_line(data, cli, tmp_path, google_vocab_path):
    root, _ = data
    proc = cli.run(MODULE, _flags(root, tmp_path, google_vocab_path, no_nsp="false"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert error_lines(proc.stderr) == [
        "error: --input_file holds packed rows (--feature_set=packed_mlm, masked LM only): "
        "add --no_nsp"]


def test_phase_2_at_1024_tokens_continues_a_rotary_model_of_phase_1(data, straight, cli,
                                                                    tmp_path, corpus_lines,
                                                                    google_vocab_path):
    # The two-phase recipe with packed rows: phase 1 (`straight`) trained at 64 tokens with
    # max_position_embeddings 64; phase 2 reads 1,024-token rows with a config that allows
    # them. Rotary positions have no table, so every weight of phase 1 carries over.
    root, _ = data
    phase1, _ = straight
    seq, pred = 1024, 154
    text = tmp_path / "text.txt"
    text.write_text("\n".join(corpus_lines[:1200]) + "\n", encoding="utf-8")
    made = cli.run("data_tools.create_pretraining_data", [
        f"--input_file={text}", f"--vocab_file={google_vocab_path}",
        f"--output_file={tmp_path / 'train-0.tfrecord'}", "--feature_set=packed_mlm",
        f"--max_seq_length={seq}", f"--max_predictions_per_seq={pred}", "--dupe_factor=1",
        "--num_workers=1", "--progress_seconds=0", "--log_examples=0"])
    assert made.returncode == 0, made.stderr[-3000:]
    (tmp_path / "bert_config.json").write_text(json.dumps({**MODERN,
                                                           "max_position_embeddings": seq}))
    proc = cli.run(MODULE, pretraining_flags(
        tmp_path, tmp_path / "phase2", eval_input_file=None, init_checkpoint=phase1,
        max_seq_length=seq, max_predictions_per_seq=pred, train_batch_size=2,
        num_train_steps=2, num_warmup_steps=1, save_checkpoints_steps=2, no_nsp="true",
        learning_rate=5e-3, dynamic_masking="true", vocab_file=google_vocab_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(rf"init_checkpoint {re.escape(str(phase1))}\S*: restored \d+ variables",
                     proc.stderr)
    assert "NOT in the checkpoint" not in proc.stderr
    losses = progress_losses(proc.stderr)
    # Phase 1's weights carry on: below the untrained start of ln(30522) = 10.33.
    assert len(losses) == 2 and np.isfinite(losses).all() and losses[0] < 10.3
    assert tf.train.latest_checkpoint(os.fspath(tmp_path / "phase2")).endswith("ckpt-2")
    record = next(iter(tf.data.TFRecordDataset(str(tmp_path / "train-0.tfrecord"))))
    positions = tf.train.Example.FromString(record.numpy()).features.feature[
        schema.POSITION_IDS].int64_list.value
    assert len(positions) == seq and max(positions) > 512  # rows past phase 1's length
