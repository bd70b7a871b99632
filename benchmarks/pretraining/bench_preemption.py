"""SIGTERM time-to-checkpoint and time-to-exit with --steps_per_loop=1000, beside one loop's time.

Runs `python -m bert_tf.run_pretraining --steps_per_loop=1000` on the tests' tiny BERT (1
layer, hidden 32) with a batch that makes a step slow (default 1024 sequences of 16 tokens), sends
SIGTERM a few seconds into training and prints, from the run's own log and exit:

    signal -> checkpoint written, signal -> process exit
    one 1000-step call (the measured time per step x 1000): when the run would have seen the
    signal had the loop been a single call

With --workers=2 it runs MultiWorkerMirroredStrategy on loopback, signals worker 1 only, and
also prints each worker's stop step and the measured cost of the per-call stop agreement.

With --first_call it sends SIGTERM as soon as the run starts its first train call (which
traces the step) and prints signal -> exit, then runs the same command unsignalled and prints
how long that first call takes when waited for (the run's own log line).

    python benchmarks/pretraining/bench_preemption.py [--batch_size=1024] [--workers=1] [--wait=6]
    python benchmarks/pretraining/bench_preemption.py --workers=2 --batch_size=512  # README figures
    python benchmarks/pretraining/bench_preemption.py --first_call

The records and the tiny BERT config come from tests/_pretraining_helpers.py (the tests'
synthetic data).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "benchmarks", "common"))  # machine
sys.path.insert(0, os.path.join(ROOT, "benchmarks", "pretraining"))  # loopback
sys.path.insert(0, os.path.join(ROOT, "tests"))

import loopback  # noqa: E402
from absl import app, flags  # noqa: E402
from machine import describe  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_integer("batch_size", 1024, "Global batch (sequences of 16 tokens).")
flags.DEFINE_integer("workers", 1, "1: default strategy; 2: MultiWorkerMirrored on loopback.")
flags.DEFINE_float("wait", 6.0, "Seconds of training (after the first call) before SIGTERM.")
flags.DEFINE_bool("first_call", False, "SIGTERM during the first train call instead (one "
                  "process); then that call's time, unsignalled.")

LOG_TIME = re.compile(r"^I\d{4} (\d\d):(\d\d):(\d\d\.\d+) ")


def log_seconds(line: str) -> float:
    """Seconds since local midnight of an absl log line."""
    h, m, s = LOG_TIME.match(line).groups()
    return int(h) * 3600 + int(m) * 60 + float(s)


def local_seconds(t: float) -> float:
    """Seconds since local midnight of time.time() `t` (absl log lines use local time)."""
    lt = time.localtime(t)
    return lt.tm_hour * 3600 + lt.tm_min * 60 + lt.tm_sec + t % 1


def wait_for(log_path: str, proc: subprocess.Popen, text: str) -> str:
    """Polls the log until `text` appears (exits if the run ends first); returns the log."""
    while text not in (log := open(log_path).read()):
        if proc.poll() is not None:
            sys.exit(f"the run ended early:\n{log[-3000:]}")
        time.sleep(0.02)
    return log


def first_call(command, env, work: str) -> None:
    """--first_call: signal -> exit during the first train call, then that call's own time
    in a second run, one after the other."""
    def start(name):
        log_path = os.path.join(work, f"{name}.log")
        with open(log_path, "w") as log:
            return subprocess.Popen(command + [f"--output_dir={work}/{name}"], cwd=ROOT, env=env,
                                    stdout=subprocess.DEVNULL, stderr=log), log_path

    proc, log_path = start("signalled")
    wait_for(log_path, proc, "the first call traces the step")
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.wait()
    exit_seconds = time.monotonic() - sent
    if "before its first train call ended" not in open(log_path).read():
        sys.exit(f"exit {proc.returncode}, no stop line:\n{open(log_path).read()[-3000:]}")
    code = proc.returncode
    proc, log_path = start("waited")
    took = re.search(r"first train call \(graph tracing and 1 step\) took ([\d.]+) s",
                     wait_for(log_path, proc, "first train call (graph tracing")).group(1)
    proc.kill()
    proc.wait()
    print(f"SIGTERM during the first train call: exit {code}, {exit_seconds:.2f} s after the "
          f"signal; that call took {took} s when waited for (batch {FLAGS.batch_size})")


def main(argv) -> None:
    del argv
    from _pretraining_helpers import (
        subprocess_env,
        synthetic_examples,
        write_bert_config,
        write_tfrecords,
    )

    print(describe())
    work = tempfile.mkdtemp(prefix="bench_preemption_")
    examples = synthetic_examples(96, seed=11, uneven_weights=False)
    write_tfrecords(os.path.join(work, "train-0.tfrecord"), examples)
    write_bert_config(os.path.join(work, "bert_config.json"))
    out = os.path.join(work, "run")
    args = [f"--bert_config_file={work}/bert_config.json", f"--input_file={work}/train-0.tfrecord",
            f"--output_dir={out}", "--max_seq_length=16", "--max_predictions_per_seq=4",
            f"--train_batch_size={FLAGS.batch_size}", "--num_train_steps=100000",
            "--steps_per_loop=1000", "--save_checkpoints_steps=1000", "--log_every_n_steps=1000",
            "--do_train=true", "--do_eval=false"]
    if FLAGS.first_call:
        return first_call([sys.executable, "-m", "bert_tf.run_pretraining",
                           *[a for a in args if not a.startswith("--output_dir=")]],
                          subprocess_env(), work)
    configs = [None]
    if FLAGS.workers > 1:
        cluster = loopback.cluster(FLAGS.workers)
        configs = [{"cluster": cluster, "task": {"type": "worker", "index": i}}
                   for i in range(FLAGS.workers)]
        args.append("--distribution_strategy=multi_worker_mirrored")
    logs = [os.path.join(work, f"worker{i}.log") for i in range(len(configs))]
    procs = []
    for log_path, config in zip(logs, configs):
        env = subprocess_env({"TF_CONFIG": json.dumps(config)} if config else None)
        with open(log_path, "w") as log:
            procs.append(subprocess.Popen([sys.executable, "-m", "bert_tf.run_pretraining", *args],
                                          cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log))
    signalled = len(procs) - 1
    while "first train call" not in open(logs[signalled]).read():
        if procs[signalled].poll() is not None:
            sys.exit(f"the run ended early:\n{open(logs[signalled]).read()[-3000:]}")
        time.sleep(0.1)
    first_seen = time.monotonic()
    time.sleep(FLAGS.wait)
    sent, sent_wall = time.monotonic(), local_seconds(time.time())
    procs[signalled].send_signal(signal.SIGTERM)
    exits = [None] * len(procs)
    while None in exits:
        for i, proc in enumerate(procs):
            if exits[i] is None and proc.poll() is not None:
                exits[i] = time.monotonic() - sent
        time.sleep(0.05)
    for i, (proc, log_path) in enumerate(zip(procs, logs)):
        text = open(log_path).read()
        stopped = re.search(r"^stopped by SIGTERM at step (\d+)", text, re.M)
        saved = [line for line in text.splitlines() if "saved checkpoint" in line]
        agreement = re.search(r"stop agreement ([\d.]+) ms per call, ([\d.]+)%", text)
        if not stopped or not saved:
            sys.exit(f"worker {i}: exit {proc.returncode}, no stop line:\n{text[-3000:]}")
        step = int(stopped.group(1))
        saved_after = log_seconds(saved[-1]) - sent_wall
        print(f"worker {i}{' (signalled)' if i == signalled else ''}: exit {proc.returncode}, "
              f"stopped at step {step}; signal -> checkpoint written {saved_after:.1f} s, "
              f"-> exit {exits[i]:.1f} s"
              + (f"; stop agreement {agreement.group(1)} ms per call "
                 f"({agreement.group(2)}% of training time)" if agreement else ""))
        if i == signalled:
            # Steps ran from the first call's end until at least the signal.
            per_step = (sent - first_seen) / max(step - 1, 1)
    print(f"one 1000-step call: >= {1000 * per_step:.0f} s ({per_step * 1e3:.0f} ms per step, "
          f"batch {FLAGS.batch_size}, {len(procs)} worker(s)); signal -> exit "
          f"{max(exits):.1f} s; ratio {1000 * per_step / max(exits):.1f}x")


if __name__ == "__main__":
    app.run(main)
