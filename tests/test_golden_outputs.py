"""Golden digests (SHA-256) of the data jobs' output bytes: what byte identity rests on.

The local runner, any worker count, the Beam runners and a rerun next year all promise the
same bytes for the same input, flags and seed. That promise rests on code outside this
repository: NumPy's random streams (`numpy.random.Generator` on PCG64: packing, masking,
NSP negatives and the shuffle's keys), `tokenizers`' WordPiece trainer (`build_vocab`),
Python's `unicodedata` tables (the tokenizer's clean-up, accents and punctuation) and the
bundled corpus and vocab. Comparing two runs with each other, as the other tests do, cannot
see such a change; these digests can. Both jobs run as a user runs them (the command line),
on the first 1,500 lines of the bundled WikiText (about 0.2 MB): 3 runs, about 2 s in all.

Uncompressed outputs only: gzip shards also depend on the zlib the interpreter was built
with, which may differ between machines without breaking local-versus-Beam identity.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import subprocess
import sys
import unicodedata

import pytest
from _records import count_frames

# The versions the digests below were made with (printed beside today's on a failure).
MADE_WITH = "numpy 2.4.6, tokenizers 0.23.3, unicodedata 14.0.0 (Python 3.11)"

# create_pretraining_data: {flags: {shard name: (instances, bytes, sha256)}}.
CREATE_GOLDEN = {
    # The defaults (NSP, token masking) in 2 shards, from several chunks (per-chunk seeds).
    ("--dupe_factor=2", "--num_output_shards=2", "--chunk_mb=0.03"): {
        "train-00000-of-00002.tfrecord": (
            462, 381921, "3b0942c17f8861bb09f00718a1af3503315bd493b60cc7f6e6ca2c22d9689cf7"),
        "train-00001-of-00002.tfrecord": (
            465, 385232, "b9bab893e3e60314add2c1b013b7b5ea7034e4fd2f53d3698d97b75edfabed90")},
    # Whole words and n-grams, MLM only; 1.4 MB of records through the shuffle's spill files.
    ("--dupe_factor=4", "--do_whole_word_mask", "--max_ngram_size=3", "--no_nsp",
     "--chunk_mb=0.03", "--shuffle_memory_mb=1"): {
        "train-00000-of-00001.tfrecord": (
            1713, 1394888, "1707856e79956e4f4cd3dcce2912c4ff0a7a5d0205b8f41d16dd1631b2116740")},
}
# build_vocab --vocab_size=1000 on the same text: (tokens, bytes, sha256).
VOCAB_GOLDEN = (1000, 5709, "ffb500c4b53e0be82aba22358db7860e3c7cfa99210a7467075184a8bbee0a00")

NUM_LINES = 1500


def _meaning(what: str) -> str:
    versions = (f"numpy {_version('numpy')}, tokenizers {_version('tokenizers')}, "
                f"unicodedata {unicodedata.unidata_version} (Python "
                f"{platform.python_version()})")
    return (
        f"{what}: the output bytes changed for the same input, flags and seed. Runs made "
        "before and after this change are no longer byte-identical (for instance a job "
        "resumed, or compared, across the change). Either a dependency changed what it "
        "computes (NumPy's random streams, tokenizers' WordPiece trainer, the Unicode "
        f"tables; digests made with {MADE_WITH}, this run has {versions}), or the code's "
        "output changed. If that change is intended (a new format, sampling or rule), "
        "update the golden value in tests/test_golden_outputs.py and say why in the commit; "
        "if not, find what changed before trusting new outputs.")


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _run(module, args, repo_root):
    env = dict(os.environ, PYTHONPATH=str(repo_root), TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, "-m", f"data_tools.{module}"] + list(args),
                          cwd=repo_root, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def small_text(tmp_path_factory, corpus_lines):
    path = tmp_path_factory.mktemp("golden") / "small.txt"
    path.write_text("\n".join(corpus_lines[:NUM_LINES]) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("flags", list(CREATE_GOLDEN), ids=["nsp", "whole_word_mlm"])
def test_create_pretraining_data_writes_the_golden_bytes(flags, small_text, tmp_path,
                                                         google_vocab_path, repo_root):
    out = tmp_path / "out"
    _run("create_pretraining_data", [
        f"--input_file={small_text}", f"--vocab_file={google_vocab_path}",
        f"--output_file={out / 'train-{shard}-of-{num_shards}.tfrecord'}",
        "--random_seed=12345", "--num_workers=1", "--log_examples=0",
        "--progress_seconds=0", f"--temp_dir={tmp_path}"] + list(flags), repo_root)
    got = {}
    for name in sorted(os.listdir(out)):
        data = (out / name).read_bytes()
        got[name] = (count_frames(data), len(data), hashlib.sha256(data).hexdigest())
    assert got == CREATE_GOLDEN[flags], _meaning(f"create_pretraining_data {' '.join(flags)}")


def test_build_vocab_writes_the_golden_bytes(small_text, tmp_path, repo_root):
    vocab = tmp_path / "vocab.txt"
    _run("build_vocab", [f"--input_file={small_text}", f"--vocab_file={vocab}",
                         "--vocab_size=1000", "--do_lower_case=true"], repo_root)
    data = vocab.read_bytes()
    got = (data.count(b"\n"), len(data), hashlib.sha256(data).hexdigest())
    assert got == VOCAB_GOLDEN, _meaning("build_vocab --vocab_size=1000")
