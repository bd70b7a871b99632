"""Restart-to-first-new-step time of a resumed run, at step 10 and at a step whose skip would
be about 1M records: the saved input position (new) beside skipping the consumed batches (old).

A tiny BERT (1 layer, hidden 32) with a big batch (4096) on many cheap records (seq 32),
so that reading the input dominates. One run trains to step 10, then its input is read on
to far_step (4096 x 256 = 1,048,576 records) and saved there; each measurement copies one of
its checkpoints into a fresh output_dir and times a new Trainer from construction to the end
of its first step, with the input position restored from the checkpoint and with the old
skip (the checkpoint's input state ignored). It also prints how much the input state adds to
a checkpoint. The last line is the saved position's far/near time ratio (`resume ratio: X`).

--input_position=arithmetic times the input TPUStrategy uses (bert_tf.data.record_positions):
no iterator is saved; the resumed run reads the record counts from their cache and reopens
the files at the computed record, against the same input read from its start and skipped.

--strategy=one_device runs in this process. --strategy=multi_worker_mirrored starts
--num_workers copies of this script as the workers of a cluster on 127.0.0.1 (one replica
each, each reading its share of the files); each worker restores its own saved position,
and a time is that of the slowest worker (the first step's all-reduce joins them anyway).

    python benchmarks/pretraining/bench_resume.py [--strategy=one_device] [--batch_size=4096]
        [--far_step=256] [--repeats=1] [--input_position=iterator]
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks", "common"))  # machine
sys.path.insert(0, os.path.join(ROOT, "benchmarks", "pretraining"))  # loopback

import loopback  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from absl import app, flags, logging  # noqa: E402
from machine import describe  # noqa: E402

from bert_tf.core import schema  # noqa: E402
from bert_tf.data import input_config, record_positions  # noqa: E402
from bert_tf.modeling.config import BertConfig  # noqa: E402
from bert_tf.modeling.pretraining_model import BertPretrainingModel  # noqa: E402
from bert_tf.training import distribution, optimization, resume, trainer  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_integer("batch_size", 4096, "Global batch.")
flags.DEFINE_integer("far_step", 256,
                     "The far step (its skip reads batch_size x far_step records).")
flags.DEFINE_integer("num_records", 65536, "Records written (the input repeats).")
flags.DEFINE_enum("strategy", "one_device", ["one_device", "multi_worker_mirrored"],
                  "Where the resumed runs train.")
flags.DEFINE_integer("num_workers", 2, "Workers on loopback (multi_worker_mirrored).")
flags.DEFINE_integer("repeats", 1, "Restarts timed per figure (the fastest is printed).")
flags.DEFINE_enum("input_position", "iterator", ["iterator", "arithmetic"],
                  "iterator: the saved tf.data iterator; arithmetic: reopened from the record "
                  "counts (bert_tf.data.record_positions; TPUStrategy's input).")
flags.DEFINE_string("worker_dir", "", "Internal: the work directory of a worker process.")

SEQ, PREDS, VOCAB = 32, 5, 1000
NEAR_STEP = 10


def write_records(directory: str, num_records: int, num_files: int = 4) -> str:
    """Random records (4096 distinct ones, repeated) in the schema; returns the glob."""
    rng = np.random.default_rng(0)
    distinct = []
    for r in range(4096):
        n = int(rng.integers(SEQ // 2, SEQ + 1))
        ids = np.zeros(SEQ, np.int64)
        ids[:n] = rng.integers(5, VOCAB, n)
        positions = np.sort(rng.choice(np.arange(1, n), PREDS, replace=False))
        values = {
            schema.INPUT_IDS: ids, schema.INPUT_MASK: (np.arange(SEQ) < n).astype(np.int64),
            schema.SEGMENT_IDS: ((np.arange(SEQ) > n // 2) & (np.arange(SEQ) < n)).astype(np.int64),
            schema.MASKED_LM_POSITIONS: positions, schema.MASKED_LM_IDS: ids[positions],
            schema.NEXT_SENTENCE_LABELS: np.array([r % 2]),
        }
        feature = {k: tf.train.Feature(int64_list=tf.train.Int64List(value=v))
                   for k, v in values.items()}
        feature[schema.MASKED_LM_WEIGHTS] = tf.train.Feature(
            float_list=tf.train.FloatList(value=[1.0] * PREDS))
        distinct.append(tf.train.Example(
            features=tf.train.Features(feature=feature)).SerializeToString())
    writers = [tf.io.TFRecordWriter(os.path.join(directory, f"r-{i}.tfrecord"))
               for i in range(num_files)]
    for r in range(num_records):
        writers[r % num_files].write(distinct[r % len(distinct)])
    for w in writers:
        w.close()
    return os.path.join(directory, "r-*.tfrecord")


def make_trainer(strategy, output_dir: str, **overrides) -> trainer.Trainer:
    bert = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1,
                      num_attention_heads=2, intermediate_size=64, max_position_embeddings=SEQ)
    opt = optimization.OptimizerConfig(learning_rate=1e-3, num_train_steps=100000,
                                       num_warmup_steps=10)
    config = dict(output_dir=output_dir, train_batch_size=FLAGS.batch_size,
                  num_train_steps=100000, save_checkpoints_steps=100000, steps_per_loop=1,
                  log_every_n_steps=100000, keep_checkpoint_max=10)
    config.update(overrides)
    return trainer.Trainer(trainer.TrainerConfig(**config), strategy,
                           model_fn=lambda: BertPretrainingModel(bert),
                           optimizer_fn=lambda: optimization.create_optimizer(opt))


def copy_checkpoint(source_dir: str, step: int, target_dir: str, strategy) -> None:
    """The chief copies checkpoint `step`, every worker its own input position at `step`;
    then all wait for each other (the resumed run reads the chief's copy)."""
    index, num_workers = distribution.worker_info(strategy)
    copies = [("", index == 0)]
    if num_workers > 1 and FLAGS.input_position == "iterator":
        copies.append((os.path.relpath(resume.positions_dir("", index, num_workers)), True))
    for sub, mine in copies:
        os.makedirs(os.path.join(target_dir, sub), exist_ok=True)
        for name in os.listdir(os.path.join(source_dir, sub)) if mine else ():
            if name.startswith(f"ckpt-{step}."):
                shutil.copy(os.path.join(source_dir, sub, name), os.path.join(target_dir, sub))
    if index == 0:
        with open(os.path.join(target_dir, "checkpoint"), "w") as f:
            f.write(f'model_checkpoint_path: "ckpt-{step}"\n'
                    f'all_model_checkpoint_paths: "ckpt-{step}"\n')
    if num_workers > 1:  # A barrier: an all-reduce over the workers.
        strategy.reduce("SUM", strategy.run(lambda: tf.constant(1.0)), axis=None)


def checkpoint_bytes(directory: str, step: int) -> int:
    if not os.path.isdir(directory):
        return 0
    return sum(os.path.getsize(os.path.join(directory, n)) for n in os.listdir(directory)
               if n.startswith(f"ckpt-{step}."))


def advance_to(strategy, run_dir: str, step: int, dataset_fn) -> None:
    """Saves a checkpoint at `step` whose input position is that of `step` (the weights are
    those of the latest checkpoint: training to `step` would only make the benchmark slow)."""
    t = make_trainer(strategy, run_dir)
    saver, train_input, start = t._restore_training_state(dataset_fn)
    if not resume.arithmetic(dataset_fn):  # An arithmetic position is the step itself.
        for _ in range((step - start) * train_input.local_replicas):
            next(train_input.state.iterator)
    t.step.assign(step)
    saver.save()


def time_resume(strategy, source_dir: str, step: int, target_dir: str, config,
                old: bool) -> float:
    """Seconds from a new Trainer to the end of the first step after `step`."""
    copy_checkpoint(source_dir, step, target_dir, strategy)
    saved = resume.unsupported_reason
    if old:
        resume.unsupported_reason = lambda strategy: "benchmark: the old skip"
    try:
        began = time.perf_counter()
        # With an arithmetic position, the run reads the record counts from their cache.
        config = record_positions.with_counts(config, counts_cache(source_dir))
        dataset_fn = trainer.pretraining_dataset_fn(config)
        if old and resume.arithmetic(dataset_fn):  # the same input, skipped to its position
            dataset_fn = functools.partial(dataset_fn, first_batch=0)
        result = make_trainer(strategy, target_dir, max_steps_per_run=1).train(dataset_fn)
        elapsed = time.perf_counter() - began
    finally:
        resume.unsupported_reason = saved
    assert (result.start_step, result.final_step) == (step, step + 1), result
    return elapsed


def counts_cache(run_dir: str) -> str:
    return os.path.join(run_dir, record_positions.COUNTS_FILE)


def measure(strategy, work: str, pattern: str) -> dict:
    """Trains, advances and times the resumed runs; returns this process's figures."""
    config = input_config.InputConfig(
        input_patterns=pattern, batch_size=1, max_seq_length=SEQ,
        max_predictions_per_seq=PREDS, vocab_size=VOCAB, input_position=FLAGS.input_position)
    run_dir = os.path.join(work, "run")
    os.makedirs(run_dir, exist_ok=True)
    began = time.perf_counter()
    dataset_fn = trainer.pretraining_dataset_fn(
        record_positions.with_counts(config, counts_cache(run_dir)))  # counted once, here
    count_seconds = time.perf_counter() - began
    make_trainer(strategy, run_dir, max_steps_per_run=NEAR_STEP).train(dataset_fn)
    advance_to(strategy, run_dir, FLAGS.far_step, dataset_fn)
    prepared = time.perf_counter() - began
    rows = []
    for step in (NEAR_STEP, FLAGS.far_step):
        # The fastest of --repeats restarts: other jobs on the machine only add time.
        new, old = (min(time_resume(strategy, run_dir, step,
                                    os.path.join(work, f"{kind}-{step}" + f"-{r}" * (r > 0)),
                                    config, kind == "old")
                        for r in range(FLAGS.repeats))
                    for kind in ("new", "old"))
        rows.append((step, step * FLAGS.batch_size, new, old))
    # Both resumed runs saved at far_step + 1: with and without the input state.
    far = FLAGS.far_step + 1
    index, num_workers = distribution.worker_info(strategy)
    new_dir, old_dir = (os.path.join(work, f"{m}-{FLAGS.far_step}") for m in ("new", "old"))
    if FLAGS.input_position == "arithmetic":
        input_bytes = 0
    elif num_workers == 1:
        input_bytes = checkpoint_bytes(new_dir, far) - checkpoint_bytes(old_dir, far)
    else:
        input_bytes = checkpoint_bytes(resume.positions_dir(new_dir, index, num_workers), far)
    return {"rows": rows, "prepared": prepared, "input_bytes": input_bytes,
            "count_seconds": count_seconds,
            "checkpoint_bytes": checkpoint_bytes(old_dir, far),
            "record_bytes": os.path.getsize(pattern.replace("*", "0")) * 4 / FLAGS.num_records,
            "shuffle_buffer": config.shuffle_buffer_size}


def run_workers(work: str) -> list:
    """Runs this script as FLAGS.num_workers workers on loopback; their figures."""
    cluster = loopback.cluster(FLAGS.num_workers)
    procs = []
    for index in range(FLAGS.num_workers):
        env = dict(os.environ, TF_CONFIG=json.dumps(
            {"cluster": cluster, "task": {"type": "worker", "index": index}}))
        args = [sys.executable, os.path.abspath(__file__), f"--worker_dir={work}",
                f"--batch_size={FLAGS.batch_size}", f"--far_step={FLAGS.far_step}",
                f"--num_records={FLAGS.num_records}", f"--repeats={FLAGS.repeats}",
                f"--input_position={FLAGS.input_position}",
                "--strategy=multi_worker_mirrored"]
        procs.append(subprocess.Popen(args, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outputs = [proc.communicate()[0] for proc in procs]
    for proc, output in zip(procs, outputs):
        if proc.returncode:
            sys.exit(f"a worker failed:\n{output[-3000:]}")
    results = []
    for index in range(FLAGS.num_workers):
        with open(os.path.join(work, f"result-{index}.json")) as f:
            results.append(json.load(f))
    return results


def main(argv) -> None:
    del argv
    logging.set_verbosity(logging.WARNING)
    if FLAGS.worker_dir:  # One worker of a multi-worker run (TF_CONFIG set by run_workers).
        strategy = distribution.create_strategy(distribution.DistributionConfig(
            distribution_strategy="multi_worker_mirrored"))
        index, _ = distribution.worker_info(strategy)
        work = os.path.join(FLAGS.worker_dir, "runs")
        figures = measure(strategy, work, os.path.join(FLAGS.worker_dir, "r-*.tfrecord"))
        path = os.path.join(FLAGS.worker_dir, f"result-{index}.json")
        with open(path + ".tmp", "w") as f:
            json.dump(figures, f)
        os.replace(path + ".tmp", path)
        return
    print(describe())
    work = tempfile.mkdtemp(prefix="bench_resume_")
    try:
        pattern = write_records(work, FLAGS.num_records)
        if FLAGS.strategy == "one_device":
            results = [measure(tf.distribute.OneDeviceStrategy("/cpu:0"), work, pattern)]
            where = "one worker, one device"
        else:
            results = run_workers(work)
            where = (f"MultiWorkerMirroredStrategy, {FLAGS.num_workers} workers on loopback, "
                     "one replica each; times of the slowest worker")
        rows = [(step, records, max(r["rows"][i][2] for r in results),
                 max(r["rows"][i][3] for r in results))
                for i, (step, records, _, _) in enumerate(results[0]["rows"])]
        first = results[0]
        prepared = max(r["prepared"] for r in results)
        print(f"{where}: trained to step {NEAR_STEP}, input advanced to step {FLAGS.far_step} "
              f"(batch {FLAGS.batch_size}, seq {SEQ}) in {prepared:.0f} s")
        how = "saved position" if FLAGS.input_position == "iterator" else "reopened"
        print(f"input position: {FLAGS.input_position}")
        print(f"{'resume at step':>14} {'records consumed':>17} {how + ' (s)':>19} "
              f"{'skip (s)':>9} {'skip/saved':>10}")
        for step, records, new, old in rows:
            print(f"{step:>14} {records:>17,} {new:>19.2f} {old:>9.2f} {old / new:>10.1f}x")
        (_, near_records, near_new, near_old), (_, far_records, far_new, far_old) = rows
        rate = (far_records - near_records) / max(far_old - near_old, 1e-9)
        print(f"the skip reads ~{rate:,.0f} records/s here: at step 900,000 of a batch-256 run "
              f"(230M records) it would take ~{230e6 / rate / 60:.0f} min before the first step, "
              "with these cheap seq-32 records")
        per_worker = " per worker" if len(results) > 1 else ""
        print(f"checkpoint size: {first['checkpoint_bytes'] / 1e6:.2f} MB without the input "
              f"position; the input state adds {first['input_bytes'] / 1e6:.2f} MB{per_worker} "
              f"(shuffle buffer {first['shuffle_buffer']} records of "
              f"~{first['record_bytes']:.0f} B, plus prefetched batches)")
        if FLAGS.input_position == "arithmetic":
            print(f"record counts: {FLAGS.num_records:,} records in 4 files counted in "
                  f"{max(r['count_seconds'] for r in results):.2f} s by the first run (every "
                  "worker counts all files); a resumed run reads them from the cache")
        print(f"resume ratio: {far_new / near_new:.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    app.run(main)
