"""The data jobs on a runner whose workers share nothing with the launcher: Beam's
PortableRunner against the Python job service, with an external worker pool that starts each
SDK worker as a new `python` process (the one first on PATH: this interpreter's), in a working
directory of its own. create_pretraining_data and prepare_corpus write the local runner's
bytes (given paths relative to the launcher's directory); Ctrl-C of the launcher cancels the
job and leaves nothing; a worker's UserError ends the launcher with that error's one line; a
job service that does not answer is a UserError.

Both services run in their own process groups, on ports they chose themselves (port 0, read
back from the port file and the log), and die with the test process even if it is killed.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

beam = pytest.importorskip("apache_beam")

import grpc  # noqa: E402  (a dependency of Beam)
from _records import count_frames  # noqa: E402
from apache_beam.options.pipeline_options import PipelineOptions  # noqa: E402
from apache_beam.portability.api import beam_job_api_pb2, beam_job_api_pb2_grpc  # noqa: E402

from data_tools.runtime import beam_runtime  # noqa: E402

STATES = beam_job_api_pb2.JobState
# Exec the command with PR_SET_PDEATHSIG (Linux; elsewhere, teardown alone stops it):
# SIGTERM when the test process dies, even killed.
_DIE_WITH_PARENT = ("import ctypes, os, sys\n"
                    "prctl = getattr(ctypes.CDLL(None), 'prctl', None)\n"
                    "if prctl: prctl(1, 15)\n"
                    "if os.getppid() != int(sys.argv[1]): sys.exit(1)\n"
                    "os.execv(sys.executable, [sys.executable] + sys.argv[2:])\n")


def _python(*args):
    """A command running this interpreter with `args`, killed when the test process dies."""
    return [sys.executable, "-c", _DIE_WITH_PARENT, str(os.getpid())] + list(args)


def _env(repo_root):
    # The pool starts its SDK workers as `python -c ...`: this venv's python must come first.
    path = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    return dict(os.environ, PATH=path, PYTHONPATH=str(repo_root), TF_CPP_MIN_LOG_LEVEL="2")


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the process group (the pool's SDK workers are in it), then SIGKILL."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            pass


class Services:
    """A Python job service and an external worker pool, each in its own process group."""

    def __init__(self, directory, repo_root):
        self.dir, self.env, self.procs = directory, _env(repo_root), []
        self.job_port = self.pool_port = None

    def start(self, module, *args):
        log = open(self.dir / f"{module.rsplit('.', 1)[-1]}.log", "wb")
        self.procs.append(subprocess.Popen(
            _python("-m", module, *args),
            cwd=self.dir, env=self.env, stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True))
        log.close()

    def log(self, name):
        return (self.dir / f"{name}.log").read_text(errors="replace")

    def wait_for_ports(self, timeout=90):
        port_file = self.dir / "job.port"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            dead = [p for p in self.procs if p.poll() is not None]
            assert not dead, (self.log("local_job_service_main")[-2000:]
                              + self.log("worker_pool_main")[-2000:])
            if self.job_port is None and port_file.exists():
                self.job_port = int(port_file.read_text())
            found = re.search(r"worker pool servicer at port: localhost:(\d+)",
                              self.log("worker_pool_main"))
            if found:
                self.pool_port = int(found.group(1))
            if self.job_port and self.pool_port:
                return
            time.sleep(0.1)
        raise AssertionError(f"the Beam services did not start in {timeout} s:\n"
                             + self.log("local_job_service_main")[-2000:]
                             + self.log("worker_pool_main")[-2000:])

    def options(self):
        return (f"--runner=PortableRunner --job_endpoint=localhost:{self.job_port} "
                f"--environment_type=EXTERNAL --environment_config=localhost:{self.pool_port}")

    def jobs(self):
        with grpc.insecure_channel(f"localhost:{self.job_port}") as channel:
            stub = beam_job_api_pb2_grpc.JobServiceStub(channel)
            return {j.job_id: j.state for j in stub.GetJobs(
                beam_job_api_pb2.GetJobsRequest(), timeout=30).job_info}

    def state_history(self, job_id):
        """The job's states in order, up to its first terminal one."""
        with grpc.insecure_channel(f"localhost:{self.job_port}") as channel:
            stub = beam_job_api_pb2_grpc.JobServiceStub(channel)
            return [e.state for e in stub.GetStateStream(
                beam_job_api_pb2.GetJobStateRequest(job_id=job_id), timeout=30)]


@pytest.fixture(scope="module")
def services(tmp_path_factory, repo_root):
    directory = tmp_path_factory.mktemp("beam_services")
    svc = Services(directory, repo_root)
    try:
        svc.start("apache_beam.runners.portability.local_job_service_main", "--port=0",
                  f"--port_file={directory / 'job.port'}",
                  f"--staging_dir={directory / 'artifacts'}")
        svc.start("apache_beam.runners.worker.worker_pool_main", "--service_port=0")
        svc.wait_for_ports()
        yield svc
    finally:
        for proc in svc.procs:
            _stop(proc)


def _run(args, cwd, env):
    return subprocess.run(_python("-m", "data_tools.create_pretraining_data", *args),
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _corpus(tmp_path, corpus_lines, num_lines):
    path = tmp_path / "small.txt"
    path.write_text("\n".join(corpus_lines[:num_lines]) + "\n", encoding="utf-8")
    return path


def test_portable_runner_with_a_worker_pool_writes_the_local_bytes(
        services, tmp_path, corpus_lines, google_vocab_path):
    _corpus(tmp_path, corpus_lines, 3000)
    # Paths relative to the launcher's directory, which is not the workers' (the services').
    vocab = os.path.relpath(google_vocab_path, tmp_path)
    # 2.3 MB of records in 2 shards with a 1 MB budget: 2 key buckets per shard.
    args = ["--input_file=small.txt", f"--vocab_file={vocab}", "--dupe_factor=3",
            "--num_output_shards=2", "--chunk_mb=0.05", "--shuffle_memory_mb=1",
            "--log_examples=0"]
    started = services.log("worker_pool_main").count("Starting worker with command")
    out = {}
    for mode, extra in (("local", ["--num_workers=2"]),
                        ("portable", [f"--beam_pipeline_options={services.options()}"])):
        proc = _run(args + extra + [f"--output_file={mode}/train-{{shard}}-of-{{num_shards}}"
                                    ".tfrecord"], tmp_path, services.env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        out[mode] = {n: (tmp_path / mode / n).read_bytes()
                     for n in sorted(os.listdir(tmp_path / mode))}
    # Nothing but the shards (no staging directory, part or temporary file left).
    assert sorted(out["portable"]) == ["train-00000-of-00002.tfrecord",
                                       "train-00001-of-00002.tfrecord"]
    assert out["portable"] == out["local"]
    assert all(len(b) > 500_000 for b in out["local"].values())
    assert "in 2 group(s) per shard" in proc.stderr
    # The counters came back from the job service: the instances of both shards.
    frames = sum(count_frames(b) for b in out["local"].values())
    assert f"Beam: wrote {frames} instances to 2 shard(s)" in proc.stderr
    # The pool started this job's SDK worker as a process of its own. (The Python job
    # service runs every job on one SDK worker: its FnApiRunner takes --direct_num_workers
    # only when it is the launcher's runner, and --sdk_worker_parallelism not at all.)
    assert services.log("worker_pool_main").count("Starting worker with command") == started + 1


def test_prepare_corpus_on_the_portable_runner_writes_the_local_bytes(
        services, tmp_path, corpus_lines):
    text = "\n".join(corpus_lines[:1500]) + "\n\n"
    (tmp_path / "twice.txt").write_text(text + text, encoding="utf-8")  # every article twice
    out = {}
    for mode, extra in (("local", []),
                        ("portable", [f"--beam_pipeline_options={services.options()}"])):
        proc = subprocess.run(_python(
            "-m", "data_tools.prepare_corpus", "--input_file=twice.txt", "--dedup",
            "--num_output_shards=2", f"--output_file={mode}/c-{{shard}}", *extra),
            cwd=tmp_path, env=services.env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        out[mode] = {n: (tmp_path / mode / n).read_bytes()
                     for n in sorted(os.listdir(tmp_path / mode))}
    assert sorted(out["portable"]) == ["c-00000", "c-00001"]
    assert out["portable"] == out["local"] and all(len(b) > 50_000 for b in out["local"].values())
    assert re.search(r"Beam: wrote \d+ documents, .* dropped 0 empty, 0 short, [1-9]\d* "
                     "duplicate", proc.stderr), proc.stderr[-3000:]


def test_build_vocab_on_the_portable_runner_learns_the_local_vocabulary(
        services, tmp_path, corpus_lines):
    # Relative paths: the workers run in the services' directory (this failed with "cannot
    # read input file" before beam_vocab made them absolute).
    _corpus(tmp_path, corpus_lines, 3000)
    out = {}
    for mode, extra in (("local", ["--num_workers=2"]),
                        ("portable", [f"--beam_pipeline_options={services.options()}"])):
        proc = subprocess.run(_python(
            "-m", "data_tools.build_vocab", "--input_file=small.txt", "--split_mb=0.1",
            "--vocab_size=1200", "--num_unused=5", f"--vocab_file={mode}.txt", *extra),
            cwd=tmp_path, env=services.env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        out[mode] = (tmp_path / f"{mode}.txt").read_bytes()
    assert out["portable"] == out["local"] and out["local"].count(b"\n") == 1200
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".beam")]


def _launch_until_running(services, tmp_path, args):
    """Starts the launcher in `tmp_path` (its output in launcher.log); returns it and the id
    of its job once the job service runs that job."""
    before = set(services.jobs())
    with open(tmp_path / "launcher.log", "wb") as log:
        launcher = subprocess.Popen(
            _python("-m", "data_tools.create_pretraining_data", *args,
                    f"--beam_pipeline_options={services.options()}"),
            cwd=tmp_path, env=services.env, stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline, job = time.monotonic() + 120, None
        while job is None and time.monotonic() < deadline and launcher.poll() is None:
            running = [j for j, s in services.jobs().items()
                       if j not in before and s == STATES.RUNNING]
            job = running[0] if running else None
            time.sleep(0.05)
        assert job is not None, (tmp_path / "launcher.log").read_text()[-3000:]
    except BaseException:
        _stop(launcher)
        raise
    return launcher, job


def test_ctrl_c_of_the_launcher_cancels_the_portable_job(
        services, tmp_path, corpus_lines, google_vocab_path):
    # 1.1 MB at dupe_factor 3: about 3 s of work for the workers, time enough to interrupt.
    _corpus(tmp_path, corpus_lines, 8000)
    launcher, job = _launch_until_running(services, tmp_path, [
        "--input_file=small.txt", f"--vocab_file={google_vocab_path}", "--dupe_factor=3",
        "--num_output_shards=2", "--chunk_mb=0.05", "--log_examples=0",
        "--output_file=out/train-{shard}.tfrecord"])
    try:
        launcher.send_signal(signal.SIGINT)
        assert launcher.wait(timeout=60) == 130
    finally:
        _stop(launcher)
    stderr = (tmp_path / "launcher.log").read_text()
    assert "interrupted: the Beam job was cancelled" in stderr, stderr[-3000:]
    assert stderr.rstrip().endswith("error: interrupted")
    assert STATES.CANCELLED in services.state_history(job)
    # The Python job service only marks the job cancelled (its cancel is a TODO in Beam
    # 2.77): its worker goes on until it finds the staged chunks gone. Wait for that end,
    # then nothing may be left beside the outputs (no shard, temporary or staging file).
    deadline = time.monotonic() + 60
    while services.jobs()[job] == STATES.CANCELLED and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not (tmp_path / "out").exists() or os.listdir(tmp_path / "out") == []


def test_a_user_error_on_a_worker_gives_its_one_line(
        services, tmp_path, corpus_lines, google_vocab_path):
    _corpus(tmp_path, corpus_lines, 800)
    vocab = tmp_path / "vocab.txt"
    shutil.copyfile(google_vocab_path, vocab)
    launcher, job = _launch_until_running(services, tmp_path, [
        "--input_file=small.txt", "--vocab_file=vocab.txt", "--dupe_factor=1",
        "--log_examples=0", "--output_file=out/train.tfrecord"])
    try:
        # The launcher has read the vocab; the job's SDK worker, a process still starting
        # (seconds of imports), reads it in its setup.
        vocab.unlink()
        assert launcher.wait(timeout=120) == 2
    finally:
        _stop(launcher)
    stderr = (tmp_path / "launcher.log").read_text()
    # The job service's copies of the worker's traceback are not repeated by the launcher.
    assert "Traceback" not in stderr and "UserError" not in stderr, stderr[-3000:]
    assert stderr.rstrip().splitlines()[-1] == f"error: vocab file not found: {vocab}"
    assert services.jobs()[job] == STATES.FAILED
    assert not (tmp_path / "out").exists() or os.listdir(tmp_path / "out") == []


def test_a_job_service_that_does_not_answer_is_a_user_error():
    # Beam waits --job_server_timeout (300 s by default), then raised a bare FutureTimeoutError.
    with socket.socket() as closed:  # a port of ours that nobody listens on
        closed.bind(("localhost", 0))
        port = closed.getsockname()[1]
        p = beam.Pipeline(options=PipelineOptions([
            "--runner=PortableRunner", f"--job_endpoint=localhost:{port}",
            "--job_server_timeout=1"]))
        _ = p | beam.Create([1])
        with pytest.raises(beam_runtime.UserError) as raised:
            beam_runtime.execute(p)
    assert str(raised.value) == (f"the Beam job service at localhost:{port} did not answer "
                                 "in --job_server_timeout=1 s")
