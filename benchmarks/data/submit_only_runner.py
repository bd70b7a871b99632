"""A Beam runner that stops the launcher where a remote runner would take over the job.

`--beam_pipeline_options=--runner=submit_only_runner.SubmitOnlyRunner` (with benchmarks/ on
PYTHONPATH) makes a data job's launcher do everything it does before a job runs elsewhere:
imports, flag and input checks, planning, the first chunk, building the graph and
serialising it as a portable runner submits it. Then the process ends at once with exit
status 0, so its CPU time (`benchmarks/data/bench_data_at_scale.py` reads it from
`RUSAGE_CHILDREN`) is the launcher's own work, with no worker's work in it, as on Dataflow or
Flink. What it leaves out, polling the job's state until the end, does not grow with the
corpus.
"""

from __future__ import annotations

import os
import sys

from apache_beam.runners.runner import PipelineRunner


class SubmitOnlyRunner(PipelineRunner):
    """Serialises the pipeline as a job submission does, then exits the process (status 0)."""

    def run_pipeline(self, pipeline, options):
        proto = pipeline.to_runner_api()
        size = len(proto.SerializeToString())
        sys.stderr.write(f"\nsubmit_only_runner: pipeline of {size} bytes submitted\n")
        sys.stderr.flush()
        sys.stdout.flush()
        # No cleanup: the benchmark removes its temporary directory itself, and the job's own
        # `finally` blocks would count work a real launcher does only after the job ended.
        os._exit(0)
