"""What the entry points of the data jobs share once their flags are parsed.

SIGTERM (a job scheduler stopping the job) cleans up like Ctrl-C: the temporary outputs are
removed. SIGINT is answered even when the job was started with it ignored (a shell without
job control starts `job &` that way, and the job then ran to the end, exit 0): every entry
point installs its handler in `bert_tf.core.errors.run_app`. The job then runs locally, or as an
Apache Beam pipeline when `--beam_pipeline_options` is given (each entry point imports its
job's Beam module, by name, only then: the `[beam]` extra).
"""

from __future__ import annotations

import os
import signal
from typing import Any, Callable, Optional, Sequence, Tuple

from absl import logging

from bert_tf.core import fileio
from bert_tf.core.errors import UserError
from data_tools.runtime.sharded_output import output_paths


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def stop_on_sigterm() -> None:
    """SIGTERM raises KeyboardInterrupt, so the job's cleanup runs as on Ctrl-C."""
    signal.signal(signal.SIGTERM, _raise_interrupt)


def job_files(input_file: str, output_file: str, num_output_shards: int
              ) -> Tuple[Tuple[str, ...], Tuple[str, ...]]:
    """(input files matched by the comma-separated patterns, output shard paths).

    Raises:
        UserError: no input matches, bad output pattern, or an output would overwrite an input.
    """
    inputs = fileio.expand_patterns(input_file, "input_file")
    outputs = output_paths(output_file, num_output_shards)
    check_not_inputs("output_file", outputs, inputs)
    return tuple(inputs), tuple(outputs)


def check_not_inputs(flag: str, outputs: Sequence[str], inputs: Sequence[str]) -> None:
    """Raises UserError naming --`flag` if one of its `outputs` is one of the `inputs`."""
    overlap = set(map(os.path.abspath, inputs)) & set(map(os.path.abspath, outputs))
    if overlap:
        raise UserError(f"--{flag} would overwrite an input file: {sorted(overlap)[0]}")


# Flags of the local runner that a Beam pipeline does not use (its runner options do).
LOCAL_ONLY_FLAGS = ("num_workers", "progress_seconds")


def run_job(argv: Sequence[str], make_config: Callable[[], Any],
            run_local: Callable[[Any], Any], run_beam: Callable[[Any, str], Any],
            beam_pipeline_options: Optional[str],
            local_flags_given: Sequence[str] = ()) -> None:
    """Checks argv, builds the config from the flags and runs the job.

    Args:
        argv: absl's remaining arguments (the program name only).
        make_config: builds and validates the job's config from the parsed flags.
        run_local: runs the job in this process and its workers.
        run_beam: runs the same job as a Beam pipeline, `run_beam(config, options)`; it
            imports Beam, so it is called only with `beam_pipeline_options`.
        beam_pipeline_options: the flag's value; None runs locally.
        local_flags_given: the `LOCAL_ONLY_FLAGS` set on the command line (warned about when
            the job runs on Beam, which ignores them).
    """
    if len(argv) > 1:
        raise UserError(f"unexpected arguments: {' '.join(argv[1:])}")
    stop_on_sigterm()
    logging.set_verbosity(logging.INFO)
    config = make_config()
    if beam_pipeline_options is not None:
        for name in local_flags_given:
            logging.warning("--%s is ignored with --beam_pipeline_options (the runner's own "
                            "options set the workers)", name)
        run_beam(config, beam_pipeline_options)
    else:
        run_local(config)
