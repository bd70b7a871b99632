"""The pretraining-budget benchmark's data stages: corpus, split, vocabulary, TFRecords, GLUE.

Every stage runs bert_tf's own data jobs (`python -m data_tools.*`) into the cache
(budget_cache.py) and is skipped once its marker exists:

    corpus/     prepared.txt (prepare_corpus: one sentence per line, blank line between
                articles), train.txt and heldout.txt (every HELDOUT_EVERY-th article held out)
    vocab/      vocab.txt (build_vocab on train.txt only)
    records/<key>/   create_pretraining_data outputs, one folder per settings key
    glue/       GLUE's folder names as symlinks to the shared data (nothing copied)

Nothing here imports TensorFlow; `articles` is also used by the keras-hub and Hugging Face
arms to read the same training text.
"""

from __future__ import annotations

import dataclasses
import glob
import gzip
import os
import subprocess
import sys
import time
from typing import Iterator, List, Optional

import budget_cache
import measure  # benchmarks/common/measure.py

REPO = budget_cache.REPO
PY = sys.executable
GLUE_FOLDERS = {"cola": ("CoLA", "glue_cola"), "sst2": ("SST-2", "glue_sst2"),
                "mrpc": ("MRPC", "glue_mrpc"), "stsb": ("STS-B", "glue_stsb"),
                "rte": ("RTE", "glue_rte")}


def env() -> dict:
    """The children's environment. PYTHONPATH names this folder so that an arm script run
    from another benchmark's folder (domain_adaptation/domain_hf.py, whose text, sys.path
    line included, is part of its arm's ledger key) finds budget_cache and budget_hf."""
    path = os.pathsep.join(p for p in (budget_cache.HERE, os.environ.get("PYTHONPATH")) if p)
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=path)


def run_logged(cmd: List[str], log_path: str, what: str) -> None:
    """Runs `cmd` in the repo with its output appended to `log_path`; exits the benchmark
    with the log's tail if it fails (a long job's progress can be followed in the log)."""
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(cmd)}\n")
        log.flush()
        code = subprocess.run(cmd, cwd=REPO, env=env(), stdout=log,
                              stderr=subprocess.STDOUT).returncode
    if code:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            tail = f.read()[-4000:]
        sys.exit(f"{what} failed (exit {code}); log {log_path}:\n{tail}")


def articles(path: str) -> Iterator[List[str]]:
    """The articles of a prepared corpus file: lists of sentences (blank lines separate)."""
    doc: List[str] = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line:
                doc.append(line)
            elif doc:
                yield doc
                doc = []
    if doc:
        yield doc


def _head_articles(sources: List[str], n: int, out: str) -> None:
    """The first `n` raw articles (blank-line separated) of the sources, for --smoke."""
    os.makedirs(os.path.dirname(out), exist_ok=True)
    taken, blank = 0, True
    with open(out + ".tmp", "w", encoding="utf-8") as w:
        for src in sources:
            with gzip.open(src, "rt", encoding="utf-8") as f:
                for line in f:
                    if not line.strip():
                        if not blank:
                            taken += 1
                        blank = True
                    else:
                        blank = False
                    if taken >= n:
                        break
                    w.write(line)
            if taken >= n:
                break
    os.replace(out + ".tmp", out)


def corpus(cache: str, corpus_dir: str, heldout_every: int,
           max_articles: Optional[int] = None) -> dict:
    """prepare_corpus on the raw Wikipedia files, then the article split. Returns the marker."""
    d = os.path.join(cache, "corpus")
    marker = budget_cache.done(d, "corpus")
    if marker:
        return marker
    sources = sorted(glob.glob(os.path.join(corpus_dir, "*.txt.gz")))
    if not sources:
        sys.exit(f"no *.txt.gz in --corpus_dir={corpus_dir}")
    inputs = ",".join(sources)
    if max_articles:
        raw = os.path.join(d, f"raw_first_{max_articles}.txt")
        _head_articles(sources, max_articles, raw)
        inputs = raw
    prepared = os.path.join(d, "prepared.txt")
    if not budget_cache.done(d, "prepared"):
        print(f"  prepare_corpus on {inputs if max_articles else corpus_dir} ...", flush=True)
        job = measure.run_job([PY, "-m", "data_tools.prepare_corpus", f"--input_file={inputs}",
                               f"--output_file={prepared}", "--progress_seconds=0"],
                              cwd=REPO, env=env())
        budget_cache.finish(d, "prepared", {"wall_seconds": round(job.wall, 1),
                                            "summary": job.stderr.strip().splitlines()[-1:]})
    counts = {"train": [0, 0, 0], "heldout": [0, 0, 0]}  # articles, sentences, bytes
    paths = {name: os.path.join(d, f"{name}.txt") for name in counts}
    files = {name: open(p + ".tmp", "w", encoding="utf-8") for name, p in paths.items()}
    for i, doc in enumerate(articles(prepared)):
        # Every heldout_every-th article, from the middle of each block: spread over the
        # whole corpus (its files are ordered by page id), the same on every machine.
        name = "heldout" if i % heldout_every == heldout_every // 2 else "train"
        text = "\n".join(doc) + "\n\n"
        files[name].write(text)
        counts[name] = [counts[name][0] + 1, counts[name][1] + len(doc),
                        counts[name][2] + len(text.encode())]
    for name, f in files.items():
        f.close()
        os.replace(paths[name] + ".tmp", paths[name])
    return budget_cache.finish(d, "corpus", {
        "source": corpus_dir, "max_articles": max_articles, "heldout_every": heldout_every,
        **{f"{name}_{k}": v[i] for name, v in counts.items()
           for i, k in enumerate(("articles", "sentences", "bytes"))}})


def vocab(cache: str, vocab_size: int) -> str:
    """build_vocab on the training articles only; returns the vocab path."""
    d = os.path.join(cache, "vocab")
    path = os.path.join(d, "vocab.txt")
    if not budget_cache.done(d, "vocab"):
        print(f"  build_vocab ({vocab_size:,} pieces) on the training articles ...", flush=True)
        os.makedirs(d, exist_ok=True)
        job = measure.run_job([PY, "-m", "data_tools.build_vocab",
                               f"--input_file={os.path.join(cache, 'corpus', 'train.txt')}",
                               f"--vocab_file={path}", f"--vocab_size={vocab_size}",
                               "--do_lower_case=true"], cwd=REPO, env=env())
        budget_cache.finish(d, "vocab", {"vocab_size": vocab_size,
                                         "wall_seconds": round(job.wall, 1)})
    return path


@dataclasses.dataclass(frozen=True)
class RecordSpec:
    """Settings of one create_pretraining_data job (records are cached per settings).

    Attributes:
        split: "train" or "heldout" (which articles).
        nsp: sentence pairs with NSP labels (the original); False: MLM-only packing.
        max_seq_length, max_predictions_per_seq, masked_lm_prob: as the job's flags.
        dupe_factor: copies of the text with different static masks.
        seed: --random_seed.
        packed: MLM-only rows of whole documents with doc_ids and position_ids
            (--feature_set=packed_mlm: attention and positions stay within each document);
            False with nsp False: --no_nsp blocks that run across documents.
    """

    split: str
    nsp: bool
    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    masked_lm_prob: float = 0.15
    dupe_factor: int = 1
    seed: int = 12345
    packed: bool = False

    @property
    def key(self) -> str:
        kind = "packed" if self.packed else "nsp" if self.nsp else "mlm"
        return (f"{self.split}_{kind}_s{self.max_seq_length}"
                f"_p{self.max_predictions_per_seq}_m{self.masked_lm_prob:g}"
                f"_d{self.dupe_factor}_r{self.seed}")


def records(cache: str, spec: RecordSpec, vocab_file: str = "") -> str:
    """Writes (once) the TFRecords of `spec`; returns their glob.

    `vocab_file` (default: the cache's vocab/vocab.txt) tokenizes the text; another
    vocabulary's records go to a folder named after its contents' digest as well.
    """
    d = os.path.join(cache, "records", spec.key)
    if vocab_file:
        with open(vocab_file, encoding="utf-8") as f:
            d += "_v" + budget_cache.digest(f.read())
    else:
        vocab_file = os.path.join(cache, "vocab", "vocab.txt")
    shards = 1 if spec.split == "heldout" else 4
    pattern = os.path.join(d, "part-*.tfrecord")
    if not budget_cache.done(d, "records"):
        print(f"  create_pretraining_data {spec.key} ...", flush=True)
        for stale in glob.glob(pattern):  # a killed job's complete-looking shards
            os.remove(stale)
        os.makedirs(d, exist_ok=True)
        cmd = [PY, "-m", "data_tools.create_pretraining_data",
               f"--input_file={os.path.join(cache, 'corpus', spec.split + '.txt')}",
               f"--output_file={os.path.join(d, 'part-{shard}-of-{num_shards}.tfrecord')}",
               f"--num_output_shards={shards}",
               f"--vocab_file={vocab_file}", "--do_lower_case=true",
               f"--max_seq_length={spec.max_seq_length}",
               f"--max_predictions_per_seq={spec.max_predictions_per_seq}",
               f"--masked_lm_prob={spec.masked_lm_prob}", f"--dupe_factor={spec.dupe_factor}",
               f"--random_seed={spec.seed}", "--progress_seconds=0", "--log_examples=0"]
        if spec.packed:
            cmd.append("--feature_set=packed_mlm")
        elif not spec.nsp:
            cmd.append("--no_nsp")
        job = measure.run_job(cmd, cwd=REPO, env=env())
        budget_cache.finish(d, "records", {"spec": dataclasses.asdict(spec),
                                           "wall_seconds": round(job.wall, 1),
                                           "summary": job.stderr.strip().splitlines()[-1:]})
    return pattern


def glue_dir(cache: str, finetune_dir: str, tasks: List[str]) -> str:
    """A GLUE-layout folder of symlinks to the shared task folders (no data copied)."""
    d = os.path.join(cache, "glue")
    os.makedirs(d, exist_ok=True)
    for task in tasks:
        folder, shared = GLUE_FOLDERS[task]
        target = os.path.join(finetune_dir, shared)
        for name in ("train.tsv", "dev.tsv"):
            if not os.path.exists(os.path.join(target, name)):
                sys.exit(f"{task}: {os.path.join(target, name)} is missing")
        link = os.path.join(d, folder)
        if os.path.islink(link) and os.readlink(link) != target:
            os.remove(link)
        if not os.path.lexists(link):
            os.symlink(target, link)
    return d
