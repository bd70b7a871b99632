"""bert_tf.finetune.inputs: seeded epochs, batches cut to their longest row, predict padding."""

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.finetune import heads, inputs
from bert_tf.modeling.config import BertConfig

SEQ = 32


def _arrays(lengths, seq=SEQ):
    """Featurizer-style arrays: row i has lengths[i] real positions, then padding (0)."""
    n = len(lengths)
    mask = (np.arange(seq)[None, :] < np.asarray(lengths)[:, None]).astype(np.int32)
    ids = np.where(mask > 0, 5 + np.arange(n)[:, None] * 3 + np.arange(seq)[None, :] % 7, 0)
    labels = np.where(mask > 0, (np.arange(n)[:, None] + np.arange(seq)[None, :]) % 4, 0)
    return {"input_ids": ids.astype(np.int32), "input_mask": mask,
            "segment_ids": np.zeros((n, seq), np.int32), "label_ids": labels.astype(np.int32),
            "label_weights": mask.astype(np.float32), "row": np.arange(n, dtype=np.int32)}


def _batches(arrays, keys, seed, trim_keys, batch, count):
    context = tf.distribute.InputContext()
    ds = inputs.train_dataset_fn(arrays, keys, seed, trim_keys)(context, batch)
    return [{k: v.numpy() for k, v in b.items()} for b in ds.take(count)]


def test_epochs_are_seeded_permutations_of_every_example():
    arrays = _arrays([3] * 12)
    batches = _batches(arrays, ["row"], seed=7, trim_keys=(), batch=4, count=6)
    rows = np.concatenate([b["row"] for b in batches])
    assert sorted(rows[:12]) == list(range(12)) and sorted(rows[12:]) == list(range(12))
    assert list(rows[:12]) != list(rows[12:])  # a fresh order every epoch
    again = _batches(arrays, ["row"], seed=7, trim_keys=(), batch=4, count=6)
    assert [list(b["row"]) for b in again] == [list(b["row"]) for b in batches]
    other = _batches(arrays, ["row"], seed=8, trim_keys=(), batch=4, count=3)
    assert [list(b["row"]) for b in other] != [list(b["row"]) for b in batches[:3]]


def _chi2(table):
    expected = table.sum() / table.size
    return float(((table - expected) ** 2 / expected).sum())


def test_epoch_orders_are_uniform_and_independent_of_the_previous_epoch():
    # What decides a short fine-tuning run is its batch order (README, parity), so the
    # orders must be uniform draws: 3,600 epochs of 6 examples (one batch per epoch) from one
    # seed. chi-square bounds are the 0.001 quantiles; a fixed, rotated or repeated order, or
    # an epoch that follows from the previous one, gives statistics in the thousands.
    epochs = np.stack([b["row"] for b in _batches(_arrays([3] * 6), ["row"], seed=3,
                                                  trim_keys=(), batch=6, count=3600)])
    assert all(sorted(e) == list(range(6)) for e in epochs)
    by_position = np.zeros((6, 6))
    np.add.at(by_position, (np.tile(np.arange(6), len(epochs)), epochs.ravel()), 1)
    assert _chi2(by_position) < 52.6  # item x position, 25 degrees of freedom
    position = np.argsort(epochs, axis=1)  # [epoch, item] -> its position
    following = np.zeros((6, 6))
    np.add.at(following, (position[:-1].ravel(), position[1:].ravel()), 1)
    assert _chi2(following) < 52.6  # an item's position in one epoch against the next
    codes = epochs @ (6 ** np.arange(6))
    counts = np.unique(codes, return_counts=True)[1]
    whole = np.concatenate([counts, np.zeros(720 - len(counts))])
    assert _chi2(whole) < 845  # all 720 orders, 719 degrees of freedom


@pytest.mark.parametrize("longest, expected", [(1, 8), (8, 8), (9, 16), (17, 24), (31, 32),
                                               (32, 32)])
def test_trim_cuts_to_the_longest_row_rounded_up_to_eight(longest, expected):
    arrays = _arrays([1, longest, 2, 3])
    keys = ("input_ids", "input_mask", "segment_ids", "label_ids", "label_weights", "row")
    trim = keys[:5]
    full = _batches(arrays, keys, seed=1, trim_keys=(), batch=4, count=1)[0]
    cut = _batches(arrays, keys, seed=1, trim_keys=trim, batch=4, count=1)[0]
    for k in trim:
        assert cut[k].shape == (4, expected)
        np.testing.assert_array_equal(cut[k], full[k][:, :expected])
        assert not full[k][:, expected:].any()  # only padding was cut
    np.testing.assert_array_equal(cut["row"], full["row"])  # not per-position: untouched


def test_grouped_rows_are_cut_along_their_positions():
    """The listwise reranker's arrays [groups, group, seq_len]: one cut for the whole batch,
    the longest pair of any group, and the group labels [groups, group] untouched."""
    flat = _arrays([3, 4, 2, 9, 1, 5])  # two groups of three rows
    grouped = {k: v.reshape((2, 3) + v.shape[1:]) for k, v in flat.items()
               if k in ("input_ids", "input_mask", "segment_ids", "label_weights")}
    keys = ("input_ids", "input_mask", "segment_ids", "label_weights")
    full = _batches(grouped, keys, seed=1, trim_keys=(), batch=2, count=1)[0]
    cut = _batches(grouped, keys, seed=1, trim_keys=keys[:3], batch=2, count=1)[0]
    for k in keys[:3]:
        assert cut[k].shape == (2, 3, 16)  # the longest pair has 9 positions
        np.testing.assert_array_equal(cut[k], full[k][:, :, :16])
        assert not full[k][:, :, 16:].any()
    assert cut["label_weights"].shape == (2, 3, SEQ)  # not a trim key here


def test_a_cut_batch_gives_the_same_outputs_at_every_real_position():
    """The claim the cut rests on: padding is masked out of attention, so the tagger's
    logits at real positions do not depend on how much padding follows."""
    config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=32,
                        max_position_embeddings=SEQ)
    tf.keras.utils.set_random_seed(3)
    model = heads.model_of_kind("tagger", config, 4)
    arrays = _arrays([5, 11, 3, 9])
    arrays["input_ids"] %= 64  # within the tiny vocabulary
    keys = ("input_ids", "input_mask", "segment_ids")
    full = _batches(arrays, keys, seed=1, trim_keys=(), batch=4, count=1)[0]
    cut = _batches(arrays, keys, seed=1, trim_keys=keys, batch=4, count=1)[0]
    assert cut["input_ids"].shape == (4, 16)
    a = model(full, training=False)["logits"].numpy()
    b = model(cut, training=False)["logits"].numpy()
    real = cut["input_mask"] > 0
    np.testing.assert_allclose(b[real], a[:, :16][real], rtol=0, atol=2e-6)
    assert np.abs(b[real]).max() > 1e-3  # the model is not trivially zero


def test_predict_arrays_pad_to_whole_batches_and_come_back_in_order():
    arrays = _arrays([3, 4, 5, 6, 7])
    padded = inputs.padded_predict_arrays(arrays, ["input_ids", "row"], global_batch=4)
    assert len(padded["row"]) == 8 and inputs.num_predict_batches(padded, 4) == 2
    np.testing.assert_array_equal(padded[inputs.EXAMPLE_INDEX], [0, 1, 2, 3, 4, -1, -1, -1])
    shuffled = np.array([3, 7, 0, 5, 1, 6, 4, 2])
    outputs = {k: v[shuffled] for k, v in padded.items()}
    back = inputs.in_input_order(outputs, 5)
    np.testing.assert_array_equal(back["row"], np.arange(5))
    with pytest.raises(RuntimeError):
        inputs.in_input_order({inputs.EXAMPLE_INDEX: np.array([0, 0, 1, -1])}, 3)
