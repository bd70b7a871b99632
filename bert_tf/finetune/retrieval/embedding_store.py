"""Corpus embeddings on disk: float32 `.npy` shards, the passage ids, and a manifest.

    <embeddings_dir>/manifest.json                       written last: the store's contents
    <embeddings_dir>/ids-<fingerprint[:12]>.txt          one passage id per line
    <embeddings_dir>/embeddings-<fingerprint[:12]>-00000.npy, ...    [rows, dim] each

A store may instead give each shard its own ids file (the shard's entry in the manifest
names it, and the manifest has no top-level one): `data_tools.embed_corpus` writes its
shards so, each complete on its own, and `read_embeddings` reads both layouts.

The manifest records a fingerprint of everything the vectors depend on (the model's
weights, pooling, normalisation, maximum length, the corpus texts: `fingerprint`). A second
eval with the same fingerprint reads the shards instead of embedding the corpus again
(`read_embeddings`); any change gives another fingerprint, and the stored vectors are
ignored and replaced.

Every file is written under a temporary name and renamed when complete
(`bert_tf.core.fileio.atomic_output`). A rewrite first removes the old manifest, so a crash
mid-way leaves no manifest rather than one pointing at shards of two models; file names
carry the fingerprint so new shards never overwrite the old ones a reader may be reading, and
the old files are removed once the new manifest is in place.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
from typing import Any, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from bert_tf.core import fileio
from bert_tf.core.errors import UserError, reason

MANIFEST = "manifest.json"
FORMAT = "bert_tf.corpus_embeddings/1"


@dataclasses.dataclass(frozen=True)
class StoredEmbeddings:
    """A store's passage ids and shards (memory-mapped when local), in corpus order.

    Attributes:
        ids: the passage id of each row, across the shards in order.
        shards: float32 [rows, dim] arrays (`search.top_k` takes the list as it is).
        fingerprint: what the vectors were computed from.
    """

    ids: List[str]
    shards: List[np.ndarray]
    fingerprint: str

    @property
    def dim(self) -> int:
        return int(self.shards[0].shape[1])


def fingerprint(weights: Iterable[np.ndarray], settings: Mapping[str, Any],
                passages: Iterable[Tuple[str, str]] = ()) -> str:
    """A SHA-256 hex digest of the model weights, the embedding settings and the passages.

    Args:
        weights: the encoder's weight arrays, in a fixed order (e.g. `model.get_weights()`).
        settings: JSON-serialisable choices that change the vectors (pooling, normalisation,
            max_passage_length, the vocabulary file's digest, ...); keys in any order.
        passages: (id, text) of each passage embedded, in corpus order.
    """
    digest = hashlib.sha256()
    for array in weights:
        array = np.ascontiguousarray(array)
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(array.tobytes())
    digest.update(json.dumps(dict(settings), sort_keys=True).encode())
    for pair in passages:
        for text in pair:  # length-prefixed, so ("ab", "c") and ("a", "bc") differ
            encoded = text.encode("utf-8")
            digest.update(len(encoded).to_bytes(8, "little") + encoded)
    return digest.hexdigest()


def _write_bytes(path: str, data: bytes) -> None:
    with fileio.atomic_output(path, "wb") as f:
        f.write(data)


def read_manifest(directory: str) -> Optional[dict]:
    """The store's manifest, or None when there is none.

    Raises:
        UserError: the manifest exists but cannot be read or parsed.
    """
    path = os.path.join(directory, MANIFEST)
    if not fileio.exists(path):
        return None
    try:
        with fileio.open_file(path, "rb") as f:
            manifest = json.loads(f.read().decode("utf-8"))
    except (OSError, ValueError) as e:
        raise UserError(f"{path}: cannot read the embeddings manifest ({reason(e)}); remove "
                        f"it to embed the corpus again") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise UserError(f"{path}: not a bert_tf embeddings manifest (format {FORMAT})")
    return manifest


def write_embeddings(directory: str, ids: Sequence[str], shards: Iterable[np.ndarray],
                     fingerprint: str) -> StoredEmbeddings:
    """Writes the corpus embeddings, one file per shard, then the manifest.

    Args:
        directory: the store (created if needed); an older store there is replaced.
        ids: the passage id of each row.
        shards: float [rows, dim] arrays in corpus order, e.g. one per batch of passages
            embedded (only one is held at a time here).
        fingerprint: `fingerprint(...)` of what the vectors depend on.

    Returns:
        The store as `read_embeddings` would return it.

    Raises:
        UserError: an id holding a line break, rows that do not add up to the ids, shards
            of different widths, or a directory that cannot be written.
    """
    fileio.check_writable_dir(directory, "embeddings_dir")
    bad = [pid for pid in ids if "\n" in pid or "\r" in pid]
    if bad:
        raise UserError(f"passage id {bad[0]!r} holds a line break: it cannot be stored in "
                        f"--embeddings_dir")
    old = read_manifest(directory)
    if old is not None:  # never a manifest that points at shards of two models
        fileio.remove(os.path.join(directory, MANIFEST))
    tag = fingerprint[:12]
    entries, rows, dim = [], 0, None
    for i, shard in enumerate(shards):
        shard = np.ascontiguousarray(shard, dtype=np.float32)
        if shard.ndim != 2 or (dim is not None and shard.shape[1] != dim):
            raise UserError(f"embedding shard {i} has shape {shard.shape}, expected "
                            f"[rows, {dim if dim is not None else 'dim'}]")
        dim = int(shard.shape[1])
        name = f"embeddings-{tag}-{i:05d}.npy"
        buffer = io.BytesIO()
        np.save(buffer, shard, allow_pickle=False)
        _write_bytes(os.path.join(directory, name), buffer.getvalue())
        entries.append({"file": name, "rows": int(shard.shape[0])})
        rows += int(shard.shape[0])
    if rows != len(ids) or not entries:
        raise UserError(f"{rows} embedding rows for {len(ids)} passage ids")
    ids_name = f"ids-{tag}.txt"
    _write_bytes(os.path.join(directory, ids_name), "".join(f"{pid}\n" for pid in ids)
                 .encode("utf-8"))
    manifest = {"format": FORMAT, "fingerprint": fingerprint, "rows": rows, "dim": dim,
                "dtype": "float32", "ids_file": ids_name, "shards": entries}
    _write_bytes(os.path.join(directory, MANIFEST),
                 (json.dumps(manifest, indent=1) + "\n").encode("utf-8"))
    if old is not None:  # the previous store's files, unless this one reuses their names
        kept = {ids_name} | {e["file"] for e in entries}
        for name in [old.get("ids_file")] + [e.get("file") for e in old.get("shards", [])]:
            path = os.path.join(directory, str(name))
            if name and name not in kept and fileio.exists(path):
                fileio.remove(path)
    return read_embeddings(directory, fingerprint)


def _load(path: str) -> np.ndarray:
    if not fileio.is_remote(path):
        return np.load(path, mmap_mode="r", allow_pickle=False)
    with fileio.open_file(path, "rb") as f:
        return np.load(io.BytesIO(f.read()), allow_pickle=False)


def read_embeddings(directory: str, fingerprint: str) -> Optional[StoredEmbeddings]:
    """The stored embeddings if they were computed with `fingerprint`, else None.

    Returns:
        None when the directory holds no store or one of another fingerprint (a changed
        model, settings or corpus: embed again).

    Raises:
        UserError: a store of this fingerprint whose files are missing or disagree with the
            manifest (rows, width, dtype, ids).
    """
    manifest = read_manifest(directory)
    if manifest is None or manifest.get("fingerprint") != fingerprint:
        return None
    where = os.path.join(directory, MANIFEST)
    try:
        shards = [_load(os.path.join(directory, entry["file"])) for entry in manifest["shards"]]
        ids: List[str] = []
        for name in ([manifest["ids_file"]] if "ids_file" in manifest
                     else [entry["ids_file"] for entry in manifest["shards"]]):
            with fileio.open_file(os.path.join(directory, name), "rb") as f:
                ids += f.read().decode("utf-8").split("\n")[:-1]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UserError(f"{where}: cannot read the stored embeddings ({reason(e)}); remove "
                        f"the directory to embed the corpus again") from None
    for entry, shard in zip(manifest["shards"], shards):
        if shard.dtype != np.float32 or shard.shape != (entry["rows"], manifest["dim"]):
            raise UserError(f"{where}: {entry['file']} holds {shard.dtype} {shard.shape}, the "
                            f"manifest says float32 ({entry['rows']}, {manifest['dim']})")
    if len(ids) != manifest["rows"]:
        raise UserError(f"{where}: the ids files hold {len(ids)} ids for "
                        f"{manifest['rows']} rows")
    return StoredEmbeddings(ids=ids, shards=shards, fingerprint=fingerprint)
