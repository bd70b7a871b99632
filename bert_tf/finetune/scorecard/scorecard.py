"""The scorecard job: score a checkpoint (and a reference) on GLUE or a suite of tasks.

    tasks (glue / suite)  ->  check their data  ->  scorecard_runs.run_all (resumable)
        ->  scorecard_baselines: each task's majority-class or chance level
        ->  scorecard_report: scorecard.json, scorecard.md, printed; GLUE submission files

`python -m bert_tf.run_glue` is its entry point; see there for the protocols.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Callable, Dict, Optional, Tuple

from bert_tf.core import fileio
from bert_tf.core.errors import UserError
from bert_tf.finetune.scorecard import scorecard_baselines, scorecard_report, scorecard_runs, suite
from bert_tf.finetune.scorecard.scorecard_runs import Model, Protocol
from bert_tf.training import distribution


@dataclasses.dataclass(frozen=True)
class ScorecardConfig:
    """A scorecard.

    Attributes:
        output_dir: runs/, scorecard.json, scorecard.md, submission/.
        models: the model, then optionally a reference scored with the identical protocol.
        protocol: how every model is fine-tuned.
        glue_dir: GLUE's folders (with `tasks`); "" with a suite file.
        tasks: GLUE task names ("" = every task present but WNLI).
        suite_file: a suite of tasks of any kind instead of GLUE
            (`bert_tf.finetune.scorecard.suite`).
        do_predict: also predict the test sets and write the GLUE server's files.
        keep_checkpoints: keep each run's fine-tuned checkpoint.
        distribution: strategy and precision of every run.
    """

    output_dir: str
    models: Tuple[Model, ...]
    protocol: Protocol
    glue_dir: str = ""
    tasks: Tuple[str, ...] = ()
    suite_file: str = ""
    do_predict: bool = False
    keep_checkpoints: bool = False
    distribution: Optional[distribution.DistributionConfig] = None

    def __post_init__(self) -> None:
        if not self.output_dir:
            raise UserError("--output_dir is required")
        if bool(self.glue_dir) == bool(self.suite_file):
            raise UserError("give either --glue_dir or --suite")
        if self.suite_file and self.tasks:
            raise UserError("--tasks selects GLUE tasks; a --suite file lists its own")
        names = [m.name for m in self.models]
        if len(set(names)) != len(names):
            raise UserError(f"the scored models need distinct names, got {names}")
        first = self.models[0]
        if not first.init_checkpoint and not (first.bert_config_file and first.vocab_file):
            raise UserError("random weights (no --init_checkpoint) need --bert_config_file "
                            "and --vocab_file")


def _settled(model: Model, first: Model, output_dir: str) -> Model:
    """A random-weights model without its own config and vocab takes the first model's.

    The first model's may be a checkpoint of any format (a Hugging Face config.json, a
    Google release): its architecture is written as bert_config.json under output_dir.
    """
    if model.init_checkpoint or (model.bert_config_file and model.vocab_file):
        return model
    from bert_tf.finetune import warm_start

    source = warm_start.resolve(first.init_checkpoint, first.bert_config_file,
                              first.vocab_file)
    folder = os.path.join(output_dir, f"{model.name}_model")
    fileio.makedirs(folder)
    config_file = os.path.join(folder, "bert_config.json")
    source.config.to_json_file(config_file)
    return dataclasses.replace(model, bert_config_file=config_file,
                               vocab_file=model.vocab_file or source.vocab_file)


def run(config: ScorecardConfig, say: Callable[[str], None] = print) -> Dict[str, object]:
    """Runs (or resumes) the scorecard and writes its report.

    Returns:
        The scorecard.json document.

    Raises:
        UserError: bad input (a missing task folder, a dev file without labels, an unknown
            suite kind, a checkpoint that does not load), in one line, before any training
            where it can be found before.
    """
    models = [_settled(m, config.models[0], config.output_dir) for m in config.models]
    tasks = (suite.read_suite(config.suite_file) if config.suite_file
             else suite.glue_tasks(config.glue_dir, list(config.tasks)))
    scorecard_runs.check_tasks(tasks, config.models[0].do_lower_case)
    fileio.makedirs(config.output_dir)
    runs = scorecard_runs.plan(models, tasks, config.protocol)
    say(f"scorecard: {len(config.models)} model(s) x {len(tasks)} task(s) x "
        f"{len(config.protocol.learning_rates)} learning rate(s) x "
        f"{len(config.protocol.seeds)} seed(s) = {len(runs)} runs in {config.output_dir}")
    records = scorecard_runs.run_all(runs, config.protocol, config.output_dir,
                                     config.do_predict, config.keep_checkpoints,
                                     config.distribution, say)
    doc = scorecard_report.summarize(
        models, tasks, config.protocol, records,
        scorecard_baselines.levels(tasks, config.models[0].do_lower_case))
    if config.do_predict:
        if any(not t.glue_task for t in tasks):
            say("scorecard: --do_predict writes GLUE server files for GLUE tasks only; the "
                "other tasks' predictions are in their run folders")
        missing = scorecard_report.write_submission(config.output_dir, doc, config.glue_dir)
        say(f"scorecard: wrote {os.path.join(config.output_dir, scorecard_report.SUBMISSION_ZIP)}"
            + (f" (GLUE's server also needs {', '.join(missing)})" if missing else ""))
    paths = scorecard_report.write_report(config.output_dir, doc)
    say(scorecard_report.markdown(doc) + f"\nwrote {', '.join(paths)}")
    return doc
