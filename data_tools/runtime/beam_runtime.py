"""The machinery the Beam forms of the data jobs share
(`data_tools.pretraining_data.beam_create`, `data_tools.prepare.beam_prepare`): options, the
temporary directory, part files, shards, running and publishing.

The launcher plans the local runner's splits (`data_tools.inputs.splits`) and the workers read
them, so they run exactly the local runner's chunks; the launcher reads no corpus. Workers write
each sorted group of a shard as one part file under a private temporary directory; one step per
shard concatenates its parts into a temporary file beside the output, and the launcher renames
every shard once the pipeline succeeded (`publish`) and removes the temporaries whatever
happened. Beam is imported here only (the optional `[beam]` extra); importing this module
without it raises a one-line `UserError`.
"""

from __future__ import annotations

import logging as std_logging
import os
import re
import shlex
import shutil
import uuid
from typing import Dict, Iterable, List, Sequence, Tuple

from absl import logging

from bert_tf.core import fileio
from bert_tf.core.errors import UserError, reason
from data_tools.runtime import sharded_output

try:
    import apache_beam as beam
    import grpc  # a dependency of Beam: its portable runners talk to their job service in it
    from apache_beam.metrics.metric import MetricsFilter
    from apache_beam.options.pipeline_options import (
        PipelineOptions,
        PortableOptions,
        StandardOptions,
    )
    from apache_beam.runners.runner import create_runner
except ImportError:  # the optional [beam] extra
    raise UserError("--beam_pipeline_options needs Apache Beam: pip install "
                    "'bert_tf[beam]' (or 'apache-beam>=2.77')") from None

# Beam's INFO lines (type hints, every worker's start and stop) would bury the job's own.
std_logging.getLogger("apache_beam").setLevel(std_logging.WARNING)


class _JobMessages(std_logging.Filter):
    """The portable runner logs its job service's messages on the root logger, past the level
    above: keep its warnings and errors, drop its INFO lines and the copies of a worker's
    UserError traceback (`execute` gives that error's one line)."""

    def filter(self, record: std_logging.LogRecord) -> bool:
        if not record.pathname.endswith("portable_runner.py"):
            return True
        return (record.levelno >= std_logging.WARNING
                and "UserError: " not in record.getMessage())


std_logging.getLogger().addFilter(_JobMessages())

NAMESPACE = "bert_tf"
_COPY_BLOCK = 16 << 20


def pipeline_options(options: str, paths: Sequence[str]) -> "PipelineOptions":
    """Parses --beam_pipeline_options; checks that a cloud runner can reach every path.

    Raises:
        UserError: unparsable options, or a local path given to the DataflowRunner.
    """
    try:
        opts = PipelineOptions(shlex.split(options))
        runner = opts.view_as(StandardOptions).runner or "DirectRunner"
        create_runner(runner)  # an unknown runner fails here, not after the staging pass
    except (ValueError, ImportError, SystemExit) as e:
        raise UserError(f"--beam_pipeline_options={options!r}: {reason(e)}") from None
    if "dataflow" in str(runner).lower():
        local = [p for p in paths if p and not fileio.is_remote(p)]
        if local:
            raise UserError(f"--beam_pipeline_options: {runner} workers cannot read the "
                            f"local path {local[0]}: use gs:// paths (and --temp_dir)")
    return opts


def absolute(path: str) -> str:
    """`path`, made absolute when it is a local path relative to this directory: the workers
    of a portable runner (a worker pool, Flink, Spark) have a working directory of their own."""
    if not path or "://" in path:
        return path
    return os.path.abspath(path)


def staging_dir(temp_dir: str, first_output: str) -> str:
    """A new private directory for part files and the token store (created here).

    Raises:
        UserError: it cannot be created.
    """
    base = temp_dir or os.path.dirname(first_output) or "."
    path = os.path.join(base, f".beam-staging-{uuid.uuid4().hex[:12]}")
    try:
        fileio.makedirs(path)
    except Exception as e:
        raise UserError(f"cannot create temporary directory {path}: {reason(e)} "
                        "(--temp_dir chooses where it goes)") from None
    return path


def remove_tree(path: str) -> None:
    """Removes a directory and everything in it, ignoring errors."""
    try:
        if fileio.is_remote(path):
            import tensorflow as tf  # remote paths have TensorFlow loaded already

            tf.io.gfile.rmtree(path)
        else:
            shutil.rmtree(path, ignore_errors=True)
    except Exception:  # cleanup must not hide the real error
        pass


def write_part(directory: str, shard: int, bucket: int,
               data: bytes) -> Tuple[int, Tuple[int, str]]:
    """Writes one sorted group of a shard; returns (shard, (bucket, path))."""
    path = os.path.join(directory, f"part-{shard:05d}-{bucket:08d}")
    # Deterministic bytes, written under a name of this attempt's own and renamed: a retried
    # attempt and a zombie one never interleave their writes in one file.
    tmp = f"{path}.tmp-{uuid.uuid4().hex}"
    with fileio.open_file(tmp, "wb") as f:
        f.write(data)
    fileio.rename(tmp, path)
    return shard, (bucket, path)


def concat_shard(item, temp_paths: Sequence[str], compression: str) -> None:
    """Concatenates one shard's parts, in bucket order, into its temporary output file."""
    shard, groups = item
    # The launcher made this file before the pipeline and removes it when the job failed or
    # was cancelled. A runner whose cancel lets its workers run on (the Python job service's
    # cancel only marks the job) must not bring it back beside the outputs.
    if not fileio.exists(temp_paths[shard]):
        raise UserError(f"{temp_paths[shard]} is gone: the launcher stopped (interrupted or "
                        "failed), so this shard is not written")
    parts = sorted(groups["parts"])
    compressor = (sharded_output.gzip_compressor()
                  if compression == sharded_output.COMPRESSION_GZIP else None)
    with fileio.open_file(temp_paths[shard], "wb") as out:
        out.write(b"")  # remote files exist only after a first write
        for _, path in parts:
            with fileio.open_file(path, "rb") as f:
                while True:
                    block = f.read(_COPY_BLOCK)
                    if not block:
                        break
                    beam.metrics.Metrics.counter(NAMESPACE, "shard_bytes").inc(len(block))
                    out.write(compressor.compress(block) if compressor else block)
        if compressor is not None:
            out.write(compressor.flush())


def finish_shards(p, parts, temp_paths: Sequence[str], compression: str = "") -> None:
    """Writes every shard (also those without parts) from (shard, (bucket, path)) parts."""
    shards = (p | "Shards" >> beam.Create(list(range(len(temp_paths))))
              | "ShardKeys" >> beam.Map(lambda s: (s, None)))
    _ = ({"parts": parts, "shard": shards} | "PartsOfShard" >> beam.CoGroupByKey()
         | "ConcatParts" >> beam.Map(concat_shard, list(temp_paths), compression))


def prepare_outputs(paths: Sequence[str]) -> List[str]:
    """Creates an empty temporary file beside each output (checks it can be written).

    Raises:
        UserError: an output directory cannot be created or written.
    """
    temps: List[str] = []
    try:
        for path in paths:
            parent = os.path.dirname(path)
            if parent and not fileio.exists(parent):
                fileio.makedirs(parent)
            temps.append(fileio.temp_name(path))
            with fileio.open_file(temps[-1], "wb") as f:
                f.write(b"")
    except Exception as e:
        remove_files(temps)
        raise UserError(f"cannot write {paths[len(temps) - 1] if temps else paths[0]}: "
                        f"{reason(e)}") from None
    return temps


def remove_files(paths: Iterable[str]) -> None:
    for path in paths:
        try:
            if fileio.exists(path):
                fileio.remove(path)
        except Exception:
            pass


def execute(p) -> Dict[str, int]:
    """Runs the pipeline to the end; returns its counters (namespace `bert_tf`) by name, or
    {} when the runner reports none (Spark's job server, apache/beam#20177): callers judge
    success by what was written (`written_bytes`), never by the counters.

    Ctrl-C or SIGTERM while the job runs cancels it (`PipelineResult.cancel()`: a Dataflow
    job would otherwise keep running, and billing) and says so.

    Raises:
        UserError: a worker raised one (its message, one line), or the pipeline failed.
        KeyboardInterrupt: interrupted; the job was cancelled.
    """
    result = None
    try:
        result = p.run()
        state = result.wait_until_finish()
    except UserError:
        raise
    except grpc.FutureTimeoutError:  # Beam waits for the job service, then raises this bare
        portable = p.options.view_as(PortableOptions)
        raise UserError(f"the Beam job service at {portable.job_endpoint} did not answer in "
                        f"--job_server_timeout={portable.job_server_timeout} s") from None
    except KeyboardInterrupt:
        if result is None:  # p.run() had not returned the job: there is nothing to cancel
            logging.warning("interrupted while the Beam job was being submitted: if the runner "
                            "has started it, cancel it there")
        else:
            try:
                result.cancel()
                logging.warning("interrupted: the Beam job was cancelled")
            except Exception as e:  # the job may be past cancelling; say so, do not hide ^C
                logging.warning("interrupted: cancelling the Beam job failed: %s", reason(e))
        raise
    except Exception as e:
        found = re.findall(r"UserError: (.+?)(?: \[while running '[^\n]*'\])?$", str(e),
                           re.MULTILINE)
        if found:  # raised by a worker: keep its one line
            raise UserError(found[-1].strip()) from None
        raise
    if str(state).split(".")[-1] != "DONE":
        raise UserError(f"the Beam pipeline ended in state {state}")
    return read_counters(result)


def read_counters(result) -> Dict[str, int]:
    """The job's counters by name ({} if the runner reports no metrics)."""
    counters: Dict[str, int] = {}
    try:
        found = result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))["counters"]
    except Exception:  # a runner without metrics support
        return counters
    for c in found:
        value = c.committed if c.committed is not None else c.attempted
        counters[c.key.metric.name] = counters.get(c.key.metric.name, 0) + int(value or 0)
    return counters


def written_bytes(path: str, compression: str = "") -> int:
    """Record bytes in a written shard: its size, or for gzip the uncompressed size from the
    gzip trailer (ISIZE, mod 2^32, non-zero whenever a record was written below 4 GiB)."""
    size = fileio.size(path)
    if compression != sharded_output.COMPRESSION_GZIP or size < 4:
        return size
    with fileio.open_file(path, "rb") as f:
        f.seek(size - 4)
        return int.from_bytes(f.read(4), "little")


def publish(temps: Sequence[str], finals: Sequence[str]) -> None:
    """Renames every temporary output to its final name."""
    for tmp, path in zip(temps, finals):
        try:
            fileio.rename(tmp, path)
        except Exception as e:
            raise UserError(f"cannot finish the output file {path}: {reason(e)}") from None
