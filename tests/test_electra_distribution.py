"""ELECTRA pretraining under distribution strategies on CPU (`python -m
bert_tf.run_pretraining --objective=electra`, runs forked from the `cli` server):

- MirroredStrategy over 2 logical CPU devices (`--num_cpu_devices=2`) gives the losses and
  the weights of one device for the same global batch: every sum of both networks (the
  generator's masked tokens, the discriminator's real tokens, the AUC's histograms) is
  reduced over the global batch, with the replicas holding different numbers of each;
- MultiWorkerMirroredStrategy with 2 workers on loopback gives them too, and only the chief
  keeps the checkpoint.

For the same examples, two replicas draw other generator samples than one device, by design
(each replica shifts the sampler's seed by its id: `train_loop`), so these runs replace the
draw by the generator's most likely token (`_electra_runs.PATCHED_RUN`, greedy), the same on
every replica; static masks and no dropout, for the same reason. (The per-replica seed shift
is train_loop's, for every seed generator; tests/test_distribution.py checks it on dropout's.)
"""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest
import tensorflow as tf
from _electra_runs import (
    PATCHED_RUN,
    checkpoint_tensors,
    electra_flags,
    write_electra_data,
)
from _pretraining_helpers import (
    loopback_cluster_configs,
    progress_losses,
    progress_steps,
    summary_scalars,
    synthetic_examples,
)

from bert_tf.training.checkpoint_paths import SavedObjectGraph

STEPS = 4
# The per-step figures of the training summaries, beside the loss.
FIGURES = ("masked_lm_loss", "masked_lm_accuracy", "discriminator_loss",
           "discriminator_accuracy", "discriminator_auc", "replaced_fraction")
GREEDY = {"ELECTRA_SAMPLER": "greedy", "ELECTRA_RECORDS_IN_ORDER": "1"}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_electra_data(tmp_path_factory.mktemp("electra_data"))


def flags(data, output_dir, **overrides):
    return electra_flags(data, output_dir, **dict(
        {"bert_config_file": data / "bert_config_no_dropout.json", "dynamic_masking": None,
         "vocab_file": None, "num_train_steps": STEPS, "save_checkpoints_steps": STEPS},
        **overrides))


@pytest.fixture(scope="module")
def one_device(cli, data, tmp_path_factory):
    out = tmp_path_factory.mktemp("one_device")
    proc = cli.run_code(PATCHED_RUN, flags(data, out, distribution_strategy="one_device"),
                        env=GREEDY)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"strategy .* with 1 replica\(s\)", proc.stderr)
    assert progress_steps(proc.stderr) == list(range(1, STEPS + 1))
    return out, progress_losses(proc.stderr)


def assert_same_training(out, losses, reference):
    """The per-step losses and figures (the summaries) and the last checkpoint's weights and
    optimizer slots of the run in `out` are the reference's."""
    reference_dir, reference_losses = reference
    np.testing.assert_allclose(losses, reference_losses, rtol=1e-5)
    for tag in FIGURES:
        ours, ref = summary_scalars(out, tag), summary_scalars(reference_dir, tag)
        assert sorted(ref) == list(range(1, STEPS + 1)), tag
        np.testing.assert_allclose([ours[s] for s in ref], list(ref.values()), rtol=1e-5,
                                   atol=1e-6, err_msg=tag)
    prefix = os.fspath(reference_dir / f"ckpt-{STEPS}")
    paths = SavedObjectGraph(prefix).variables("model")
    assert "model/generator_head/_bias" in paths
    assert "model/discriminator_head/dense_prediction/_kernel" in paths
    ours, ref = checkpoint_tensors(out / f"ckpt-{STEPS}"), checkpoint_tensors(prefix)
    compared = [k for k in ref if k.startswith(("model/", "optimizer/"))]
    assert len(compared) > 3 * len(paths)  # every weight, its 2 Adam slots, the iterations
    for key in compared:
        np.testing.assert_allclose(ours[key], ref[key], rtol=1e-5, atol=1e-6, err_msg=key)


def test_mirrored_over_two_cpu_devices_equals_one_device(cli, data, tmp_path, one_device):
    # The first batch (records 0..7 in order) as Mirrored splits it (0-3, 4-7) and as the
    # two workers do (even, odd records): real tokens and masked tokens differ in both, so a
    # mean per replica, then averaged, would not give the global batch's loss.
    examples = synthetic_examples(64, seed=21, uneven_weights=False)
    real, masked = examples["input_mask"][:8].sum(1), examples["masked_lm_weights"][:8].sum(1)
    assert (real[:4].sum(), real[4:].sum(), real[::2].sum(), real[1::2].sum()) == (49, 45, 44, 50)
    assert (masked[:4].sum(), masked[4:].sum(), masked[::2].sum(), masked[1::2].sum()) == (
        12, 11, 11, 12)
    proc = cli.run_code(PATCHED_RUN, flags(data, tmp_path, distribution_strategy="mirrored",
                                           num_cpu_devices=2), env=GREEDY)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "strategy MirroredStrategy with 2 replica(s)" in proc.stderr
    assert progress_steps(proc.stderr) == list(range(1, STEPS + 1))
    assert_same_training(tmp_path, progress_losses(proc.stderr), one_device)


def test_multi_worker_mirrored_on_loopback_equals_one_device(cli, data, tmp_path, one_device):
    runs = [cli.start(None, flags(data, tmp_path, distribution_strategy="multi_worker_mirrored"),
                      code=PATCHED_RUN, env=dict(GREEDY, TF_CONFIG=json.dumps(tf_config)))
            for tf_config in loopback_cluster_configs(2)]
    procs = [run.wait(300) for run in runs]
    for proc in procs:
        assert proc.returncode == 0, proc.stderr[-3000:]
        # (tf.distribute.MultiWorkerMirroredStrategy is CollectiveAllReduceStrategy.)
        assert "strategy CollectiveAllReduceStrategy with 2 replica(s)" in proc.stderr
        assert "cross-worker stop agreement" in proc.stderr  # the workers agreed per call
        assert progress_steps(proc.stderr) == list(range(1, STEPS + 1))
        np.testing.assert_allclose(progress_losses(proc.stderr), one_device[1], rtol=1e-5)
    assert_same_training(tmp_path, progress_losses(procs[0].stderr), one_device)
    # The chief kept the checkpoint; the other worker's scratch copy is gone.
    assert tf.train.latest_checkpoint(os.fspath(tmp_path)) == os.fspath(tmp_path / f"ckpt-{STEPS}")
    assert not list((tmp_path / "tmp_worker_checkpoints").glob("worker-1/ckpt-*"))
