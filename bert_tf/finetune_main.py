"""The main functions shared by the fine-tuning entry points (run_classifier, run_tagging,
run_squad, run_rerank): flags -> `bert_tf.finetune.runner`, then the serving export.

A top-level module, like the entry points themselves: `bert_tf.finetune` may not import
`bert_tf.export` (data flows one way), so the exporter is passed in from here.
"""

from __future__ import annotations

from typing import Callable, Optional, Tuple

from bert_tf import install_check
from bert_tf.core import errors
from bert_tf.core.errors import cli_main
from bert_tf.finetune import cli


def export_finetuned(model_dir: str, export_dir: str, model) -> None:
    from bert_tf.export import task_serving

    task_serving.export_finetuned(model_dir, export_dir, model)


def entry_points(make_task: Callable[[], object], module: str,
                 eval_mode: Optional[str] = None) -> Tuple[Callable, Callable]:
    """(main, console_main) of an entry point whose task `make_task` builds from its flags.

    Args:
        make_task: builds the task from the entry point's flags.
        module: the entry module's `__name__`: `main` is declared its own, so that --help
            opens with that module's docstring (what the command does, with an example),
            not with this one's.
        eval_mode: the entry point's evaluation flag (None: --do_eval; `cli.run_main`).
    """

    @cli_main
    def main(argv) -> None:
        cli.run_main(argv, make_task, export_finetuned, eval_mode)

    main.__module__ = module

    def console_main() -> None:
        errors.run_app(main, preflight=install_check.problems)

    return main, console_main
