"""Tests of data_tools.shuffle.bucket_files: the bucket files, cut again, read back in key order,
and the order of equal keys."""

import os

import numpy as np

from data_tools.shuffle import bucket_files as sb


def test_spill_split_and_sort_keep_every_record_in_key_order(tmp_path):
    rng = np.random.default_rng(3)
    keys = rng.integers(0, 1 << 64, 400, dtype=np.uint64)
    lengths = rng.integers(10, 50, 400)
    frames = rng.integers(0, 256, int(lengths.sum()), dtype=np.uint8)
    whole = sb.sort_blocks([sb.Block(7, keys, lengths, frames)], 3)
    directory = str(tmp_path)
    written, cells = sb.spill(sb.SpillPlan(directory, 2, 3), 7, keys, lengths, frames)
    me = f"p{os.getpid()}"
    units = sb.list_units(directory)
    # One file per bucket of this process: its records, keys and lengths, a 24-byte header.
    counts = np.bincount((keys >> np.uint64(62)).astype(np.int64), minlength=4)
    assert written.tolist() == [24 + 16 * n + int(lengths[(keys >> np.uint64(62)) == b].sum())
                                for b, n in enumerate(counts)]
    assert units == {(2, b): ([me], int(written[b])) for b in range(4)}
    bucket = (keys >> np.uint64(62)).astype(np.int64)
    shard = (keys % np.uint64(3)).astype(np.int64)
    dense = np.zeros(12, np.int64)
    dense[cells[0]] = cells[1]
    cells = dense.reshape(4, 3)
    assert cells.tolist() == [[int(lengths[(bucket == b) & (shard == s)].sum())
                               for s in range(3)] for b in range(4)]
    # Bucket 1 cut by 3 more bits: 8 pieces, the same bytes, its file gone.
    read, wrote, piece_cells = sb.split_unit(directory, 2, 1, [me], 3, 3)
    units = sb.list_units(directory)
    pieces = {u: v for u, v in units.items() if u[0] == 5}
    assert read == written[1] and sorted(pieces) == [(5, 8 + s) for s in range(8)]
    assert wrote == sum(size for _, size in pieces.values()) and (2, 1) not in units
    assert all(writers == ["r"] for writers, _ in pieces.values())
    assert piece_cells.shape == (8, 3) and (piece_cells.sum(0) == cells[1]).all()
    # Every bucket sorted, in key order: shard by shard, the whole run's bytes.
    parts = [sb.sort_unit(directory, bits, prefix, units[bits, prefix][0], 3)
             for bits, prefix in sorted(units, key=lambda u: sb.unit_start(*u))]
    for shard in range(3):
        got = b"".join(data[(ends[shard - 1] if shard else 0):ends[shard]]
                       for ends, data, _ in parts)
        want = whole[1][(whole[0][shard - 1] if shard else 0):whole[0][shard]]
        assert got == want
    assert sum(r for _, _, r in parts) == int(written.sum()) - read + wrote
    assert os.listdir(tmp_path) == []  # each bucket's files removed once read


def test_sort_unit_writes_its_pieces_in_place(tmp_path):
    """Each bucket's piece of a shard goes at the offset the counts give it: buckets
    written in any order (as parallel workers do) make the shards of the whole run."""
    rng = np.random.default_rng(4)
    keys = rng.integers(0, 1 << 64, 300, dtype=np.uint64)
    lengths = rng.integers(10, 50, 300)
    frames = rng.integers(0, 256, int(lengths.sum()), dtype=np.uint8)
    ends, whole = sb.sort_blocks([sb.Block(1, keys, lengths, frames)], 2)
    spill_dir = tmp_path / "spill"
    spill_dir.mkdir()
    _, (present, sums) = sb.spill(sb.SpillPlan(str(spill_dir), 3, 2), 1, keys, lengths, frames)
    cells = np.zeros(16, np.int64)
    cells[present] = sums
    cells = cells.reshape(8, 2)
    paths = [str(tmp_path / f"shard-{s}") for s in range(2)]
    for p in paths:
        open(p, "wb").close()
    offsets = np.cumsum(cells, axis=0) - cells  # bucket b's piece of shard s starts here
    for b in (5, 0, 7, 2, 1, 6, 3, 4):
        got_ends, data, _ = sb.sort_unit(str(spill_dir), 3, b, [f"p{os.getpid()}"], 2, paths,
                                         offsets[b])
        assert data == b"" and np.diff(got_ends, prepend=0).tolist() == cells[b].tolist()
    with open(paths[0], "rb") as f0, open(paths[1], "rb") as f1:
        assert f0.read() == whole[:ends[0]] and f1.read() == whole[ends[0]:]


def test_equal_keys_go_in_chunk_then_record_order():
    """As on Beam: the blocks' order (which process wrote first) does not matter."""
    def block(chunk, keys, names):
        return sb.Block(chunk, np.array(keys, np.uint64),
                        np.array([len(x) for x in names], np.int64),
                        np.frombuffer(b"".join(names), np.uint8))

    blocks = [block(5, [9, 7, 7], [b"5a", b"5b", b"5c"]), block(2, [7, 4], [b"2a", b"2b"])]
    for order in (blocks, blocks[::-1]):
        ends, data = sb.sort_blocks(order, 2)  # 4 % 2 = 0; 7 and 9 go to shard 1
        assert ends.tolist() == [2, 10] and data == b"2b2a5b5c5a"
