"""scripts/cli_required.py reads from the code which flags a command requires."""

from __future__ import annotations

import ast
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import cli_required  # noqa: E402  (scripts/ is not a package)


def _requirements(source: str):
    return sorted(cli_required.required_in_module(ast.parse(textwrap.dedent(source))))


def test_requirements_read_from_literals_loops_helpers_and_absl():
    assert _requirements("""
        from absl import flags
        for name in ("a", "b"):
            flags.mark_flag_as_required(name)
        flags.mark_flags_as_required(["c"])

        def _required(name):
            if not getattr(FLAGS, name):
                raise UserError(f"--{name} is required")

        def config():
            _required("d")
            for name in ("e",):
                if not FLAGS[name].value:
                    raise UserError(f"--{name} is required")
            raise UserError("--f is required with --do_train")
            raise UserError("--h is required (true for uncased vocabularies)")
            raise UserError("--g must be positive")
            raise UserError(f"{flag} is required")
        """) == [("a", ""), ("b", ""), ("c", ""), ("d", ""), ("e", ""),
                 ("f", "with --do_train"), ("h", "")]


def test_required_flags_keep_only_the_commands_own(tmp_path):
    package = tmp_path / "bert_tf"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "job.py").write_text(
        "from bert_tf import lib\n"
        "raise UserError('--out is required')\n")
    (package / "lib.py").write_text(
        "raise UserError('--out is required with --x')\n"
        "raise UserError('--vocab is required without --init_checkpoint')\n"
        "raise UserError('--cfg is required with --mode')\n"
        "raise UserError('--other is required')\n")
    assert cli_required.required_flags("bert_tf.job", {"out", "vocab", "cfg", "mode"},
                                       root=tmp_path) == {"out": "", "cfg": "with --mode"}


def test_the_closure_follows_function_level_and_relative_imports(tmp_path):
    package = tmp_path / "data_tools"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from . import extra\n")
    (package / "sub" / "extra.py").write_text("")
    (package / "job.py").write_text(
        "import os\n"
        "def main():\n"
        "    from data_tools.sub import step\n")
    (package / "sub" / "step.py").write_text("from . import deep\n")
    (package / "sub" / "deep.py").write_text("import json\n")
    (package / "unused.py").write_text("")
    assert sorted(cli_required.import_closure("data_tools.job", tmp_path)) == [
        "data_tools.job", "data_tools.sub", "data_tools.sub.deep", "data_tools.sub.extra",
        "data_tools.sub.step"]
