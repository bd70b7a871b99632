"""embed_corpus's output directory: one embeddings file and one ids file per shard, the job
file, and the manifest that `bert_tf.finetune.retrieval.embedding_store` reads.

    <output_dir>/embed_job.json                        written first: what the shards are of
    <output_dir>/ids-00000-of-00004.txt                one passage id per line, file order
    <output_dir>/embeddings-00000-of-00004.npy         float32 [rows, dim] (NumPy .npy)
    ...
    <output_dir>/manifest.json                         written last, when every shard is

A shard is written as its ids file, then its embeddings file, each under a temporary name
and renamed when complete: a shard is finished when its `.npy` exists, and a rerun after a
kill skips finished shards and redoes the others (a killed run's temporary files are
removed first). The job file records the inputs (paths and sizes), the SavedModel's digest,
the signature, --batch_size and --shard_mb: a rerun of another job into the same directory
is refused, since its finished shards would be mixed with the new ones.

The manifest is `embedding_store`'s format (FORMAT below, spelt out: data_tools imports only
bert_tf.core), each shard entry naming its own ids file; its fingerprint is the job file's
digest. `embedding_store.read_embeddings(output_dir, manifest["fingerprint"])` reads the
store, and `search.top_k` takes its shards as they are.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from typing import Callable, Dict, List, Mapping, Sequence, Set, Tuple

import numpy as np

from bert_tf.core import fileio
from bert_tf.core.errors import UserError, reason

MANIFEST = "manifest.json"  # embedding_store.MANIFEST
FORMAT = "bert_tf.corpus_embeddings/1"  # embedding_store.FORMAT
JOB_FILE = "embed_job.json"
JOB_FORMAT = "bert_tf.embed_job/1"


def shard_files(index: int, count: int) -> Tuple[str, str]:
    """(embeddings file, ids file) names of shard `index` of `count`."""
    tag = f"{index:05d}-of-{count:05d}"
    return f"embeddings-{tag}.npy", f"ids-{tag}.txt"


def shard_bytes(vectors: np.ndarray, ids: Sequence[str]) -> Tuple[bytes, bytes]:
    """The bytes of a shard's two files: the .npy of float32 `vectors` and the ids' lines."""
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(vectors, dtype=np.float32), allow_pickle=False)
    return buffer.getvalue(), "".join(f"{pid}\n" for pid in ids).encode("utf-8")


def write_shard(output_dir: str, index: int, count: int, vectors: np.ndarray,
                ids: Sequence[str]) -> None:
    """Writes one shard, its .npy last (module docstring).

    Raises:
        UserError: an id holding a line break, rows that do not match the ids, or a file
            that cannot be written.
    """
    bad = [pid for pid in ids if "\n" in pid or "\r" in pid]
    if bad:
        raise UserError(f"passage id {bad[0]!r} holds a line break: it cannot be stored")
    if vectors.shape[0] != len(ids):
        raise ValueError(f"{vectors.shape[0]} vectors for {len(ids)} ids")
    npy, text = shard_bytes(vectors, ids)
    npy_name, ids_name = shard_files(index, count)
    for name, data in ((ids_name, text), (npy_name, npy)):
        with fileio.atomic_output(os.path.join(output_dir, name), "wb") as f:
            f.write(data)


def finished_shards(output_dir: str, count: int) -> Set[int]:
    """The shards whose .npy (written last) exists."""
    present = set(fileio.listdir(output_dir)) if fileio.isdir(output_dir) else set()
    return {i for i in range(count) if shard_files(i, count)[0] in present}


def remove_temporaries(output_dir: str) -> int:
    """Removes the temporary files a killed run left (`fileio.temp_name`); returns how many."""
    names = [n for n in fileio.listdir(output_dir) if ".tmp-" in n]
    for name in names:
        fileio.remove(os.path.join(output_dir, name))
    return len(names)


def start_job(output_dir: str, job: Mapping[str, object]) -> None:
    """Writes the job file, or checks that the one there is the same job.

    Raises:
        UserError: the directory holds another job's shards, or cannot be written.
    """
    fileio.check_writable_dir(output_dir, "output_dir")
    path = os.path.join(output_dir, JOB_FILE)
    wanted = {"format": JOB_FORMAT, **job}
    if fileio.exists(path):
        try:
            with fileio.open_file(path, "rb") as f:
                found = json.loads(f.read().decode("utf-8"))
        except (OSError, ValueError) as e:
            raise UserError(f"{path}: cannot read ({reason(e)})") from None
        if found != wanted:
            differ = sorted(k for k in set(found) | set(wanted) if found.get(k) != wanted.get(k))
            raise UserError(f"--output_dir={output_dir} holds the shards of another job "
                            f"({', '.join(differ)} differ): use a new directory, or remove it")
        return
    if any(n.startswith(("embeddings-", "ids-")) or n == MANIFEST
           for n in fileio.listdir(output_dir)):
        raise UserError(f"--output_dir={output_dir} holds embeddings but no {JOB_FILE}: use "
                        "a new directory")
    with fileio.atomic_output(path, "wb") as f:
        f.write((json.dumps(wanted, indent=1, sort_keys=True) + "\n").encode("utf-8"))


def job_fingerprint(job: Mapping[str, object]) -> str:
    """The SHA-256 hex digest of the job (the manifest's fingerprint)."""
    return hashlib.sha256(json.dumps(dict(job), sort_keys=True).encode("utf-8")).hexdigest()


def read_ids(output_dir: str, index: int, count: int) -> List[str]:
    with fileio.open_file(os.path.join(output_dir, shard_files(index, count)[1]), "rb") as f:
        return f.read().decode("utf-8").split("\n")[:-1]


def _npy_shape(path: str) -> Tuple[Tuple[int, ...], str]:
    """(shape, dtype string) from a .npy file's header, without reading its data."""
    with fileio.open_file(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                else np.lib.format.read_array_header_2_0)
        shape, _, dtype = read(f)
    return tuple(shape), np.dtype(dtype).str


def id_digests(ids: Sequence[str]) -> np.ndarray:
    """uint64 [ids]: a 64-bit BLAKE2b digest of each id."""
    return np.array([int.from_bytes(hashlib.blake2b(p.encode("utf-8"), digest_size=8).digest(),
                                    "little") for p in ids], dtype=np.uint64)


def check_unique_ids(digests: Sequence[np.ndarray], read: Callable[[int], List[str]]) -> None:
    """Raises UserError naming an id found in two shards.

    Args:
        digests: per shard, `id_digests` of its ids (ids within a shard were checked as
            strings when it was read).
        read: shard -> its ids, read again only for two shards sharing a digest (a 64-bit
            collision is not a duplicate): memory is 8 bytes an id, not the ids.
    """
    if not digests:
        return
    values = np.concatenate(digests)
    owner = np.concatenate([np.full(len(d), s, np.int64) for s, d in enumerate(digests)])
    order = np.argsort(values, kind="stable")
    for k in np.nonzero(values[order][1:] == values[order][:-1])[0]:
        a, b = int(owner[order[k]]), int(owner[order[k + 1]])
        common = set(read(a)) & set(read(b)) if a != b else set()
        if common:
            raise UserError(f"passage id {min(common)!r} is in shard {a} and shard {b} of the "
                            "input (every id must be unique)")


def write_manifest(output_dir: str, count: int, dim: int, fingerprint: str) -> Dict:
    """Checks every shard (ids unique across shards, rows as the ids) and writes the
    manifest; returns it.

    Raises:
        UserError: a repeated id, a shard whose files disagree, or no passage at all.
    """
    digests, entries = [], []
    for i in range(count):
        ids = read_ids(output_dir, i, count)
        digests.append(id_digests(ids))
        npy_name, ids_name = shard_files(i, count)
        shape, dtype = _npy_shape(os.path.join(output_dir, npy_name))
        if shape != (len(ids), dim) or dtype != np.dtype(np.float32).str:
            raise UserError(f"{os.path.join(output_dir, npy_name)} holds {dtype} {shape} for "
                            f"{len(ids)} ids: remove it to embed the shard again")
        entries.append({"file": npy_name, "ids_file": ids_name, "rows": len(ids)})
    check_unique_ids(digests, lambda i: read_ids(output_dir, i, count))
    rows = sum(e["rows"] for e in entries)
    if not rows:
        raise UserError("empty corpus: the input holds no passage")
    manifest = {"format": FORMAT, "fingerprint": fingerprint, "rows": rows, "dim": dim,
                "dtype": "float32", "shards": entries}
    with fileio.atomic_output(os.path.join(output_dir, MANIFEST), "wb") as f:
        f.write((json.dumps(manifest, indent=1) + "\n").encode("utf-8"))
    return manifest
