"""Tests of bert_tf.training.checkpoint_health: the record of vouched checkpoints, retention,
and what a divergence stop leaves in output_dir (on index files and empty checkpoint files:
no training; the end-to-end runs are in tests/test_health.py)."""

from __future__ import annotations

import os
import time

import tensorflow as tf

from bert_tf.training import checkpoint_health
from bert_tf.training.checkpoint_health import CheckpointRetention, stop_message
from bert_tf.training.health import ADVICE, Divergence


def fake_checkpoints(directory, steps):
    """Empty `ckpt-<step>` files and an index listing them (the newest latest), with the
    timestamps a checkpoint manager writes."""
    paths = []
    for step in steps:
        prefix = os.path.join(directory, f"ckpt-{step}")
        for suffix in (".index", ".data-00000-of-00001"):
            open(prefix + suffix, "w").close()
        paths.append(prefix)
    now = time.time()
    tf.compat.v1.train.update_checkpoint_state(
        os.fspath(directory), paths[-1], paths,
        all_model_checkpoint_timestamps=[now - len(paths) + i for i in range(len(paths))],
        last_preserved_timestamp=now - 100)
    return paths


def manager_list(directory):
    """The checkpoints a rerun's checkpoint manager takes as its own (it rotates them)."""
    return tf.train.CheckpointManager(tf.train.Checkpoint(), os.fspath(directory),
                                      max_to_keep=10).checkpoints


def on_disk(directory):
    return sorted(name for name in os.listdir(directory) if name.startswith("ckpt-"))


def index(directory):
    state = tf.train.get_checkpoint_state(os.fspath(directory))
    return state and (state.model_checkpoint_path, list(state.all_model_checkpoint_paths))


def test_the_record_reads_back_and_is_empty_when_missing_or_damaged(tmp_path):
    out = os.fspath(tmp_path)
    assert checkpoint_health.read_vouched_step(out) == -1
    checkpoint_health.write_vouched_step(out, 40)
    assert (tmp_path / checkpoint_health.HEALTH_FILE).read_text() == '{"vouched_step": 40}\n'
    assert checkpoint_health.read_vouched_step(out) == 40
    (tmp_path / checkpoint_health.HEALTH_FILE).write_text('{"vouched')  # a torn write
    assert checkpoint_health.read_vouched_step(out) == -1


def test_a_stop_makes_the_last_good_checkpoint_the_latest_and_deletes_the_condemned(tmp_path):
    ckpt2, ckpt4, ckpt6 = fake_checkpoints(tmp_path, [2, 4, 6])
    spike = Divergence(step=7, loss=30.0, level=3.0)  # condemns ckpt-6 (its loss was step 7's)
    # Only the chief writes: another worker gives the same line and touches nothing.
    line = stop_message(spike, os.fspath(tmp_path), write=False, vouched_step=4)
    assert index(tmp_path) == (ckpt6, [ckpt2, ckpt4, ckpt6]) and len(on_disk(tmp_path)) == 6
    assert stop_message(spike, os.fspath(tmp_path), write=True, vouched_step=4) == line == (
        "loss diverged at step 7: 30, 10.0x its recent level 3; stopped without saving it "
        f"(last good checkpoint: {ckpt4}, kept; a rerun resumes from it); {ADVICE}")
    assert index(tmp_path) == (ckpt4, [ckpt2, ckpt4])
    assert on_disk(tmp_path) == ["ckpt-2.data-00000-of-00001", "ckpt-2.index",
                                 "ckpt-4.data-00000-of-00001", "ckpt-4.index"]
    assert tf.train.latest_checkpoint(os.fspath(tmp_path)) == ckpt4
    # A rerun's manager still owns both (an index without timestamps would make it drop
    # them from its list, leaving their files on disk for ever).
    assert manager_list(tmp_path) == [ckpt2, ckpt4]


def test_with_no_good_checkpoint_the_index_goes_and_a_rerun_starts_afresh(tmp_path):
    # A directory an older version left: ckpt-20 and ckpt-40 at losses near 200,000, no
    # record. Its rerun resumed from ckpt-40 and stopped at its first step.
    fake_checkpoints(tmp_path, [20, 40])
    found = Divergence(step=41, loss=2.0e5, uniform=11.0)
    line = stop_message(found, os.fspath(tmp_path), write=True)  # the record: nothing vouched
    assert line == (
        "loss diverged at step 41: 200,000, above 38 (3 x 11, the loss of a uniform guess, + 5);"
        " stopped without saving it (no good checkpoint: ckpt-40 held diverged states, "
        f"deleted; a rerun starts from the initial weights); {ADVICE}")
    assert tf.train.latest_checkpoint(os.fspath(tmp_path)) is None
    assert not (tmp_path / checkpoint_health.INDEX_FILE).exists()
    # ckpt-20 was never judged: out of any index, left on disk.
    assert on_disk(tmp_path) == ["ckpt-20.data-00000-of-00001", "ckpt-20.index"]


def test_retention_records_a_checkpoint_once_its_next_loss_vouches_for_it(tmp_path):
    out = os.fspath(tmp_path)
    fake_checkpoints(tmp_path, [1, 2, 3])
    retention = CheckpointRetention(out, keep=1, write=True)
    assert retention.vouched_step == -1
    retention.vouched()  # nothing saved by this run yet: nothing to vouch for
    assert checkpoint_health.read_vouched_step(out) == -1
    retention.saved(3)
    retention.vouched()
    assert retention.vouched_step == 3 and checkpoint_health.read_vouched_step(out) == 3
    assert on_disk(tmp_path) == ["ckpt-3.data-00000-of-00001", "ckpt-3.index"]  # keep=1
    assert manager_list(tmp_path) == [os.path.join(out, "ckpt-3")]
    # The run's last checkpoint has no next loss: the end trims but vouches for nothing.
    fake_checkpoints(tmp_path, [3, 4])
    retention.saved(4)
    retention.finished()
    assert checkpoint_health.read_vouched_step(out) == 3
    assert on_disk(tmp_path) == ["ckpt-4.data-00000-of-00001", "ckpt-4.index"]
    # A resumed run: the record (3) stands for older steps; the resumed ckpt-4 waits for its
    # first loss. A record above the resumed step (another trajectory) is ignored.
    resumed = CheckpointRetention(out, keep=1, write=True, start_step=4)
    assert resumed.vouched_step == 3
    resumed.vouched()
    assert resumed.vouched_step == 4 and checkpoint_health.read_vouched_step(out) == 4
    assert CheckpointRetention(out, keep=1, write=False, start_step=2).vouched_step == 2
    # Other workers keep the same count in memory and write nothing.
    other = CheckpointRetention(out, keep=1, write=False, start_step=4)
    other.saved(5)
    other.vouched()
    assert other.vouched_step == 5 and checkpoint_health.read_vouched_step(out) == 4
