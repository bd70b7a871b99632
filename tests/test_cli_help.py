"""Every console script's --help opens with what the command does for a user, then an example.

Runs each `console_scripts` entry of setup.cfg as its console script does (its
`console_main()` under a `__main__` without a docstring) with --help: absl prints the usage
text, which must be the entry module's own docstring, not a shared helper's (the fine-tuning
commands once opened with an internal note of `bert_tf.finetune_main`).
"""

from __future__ import annotations

import ast
import configparser
import importlib.util
import subprocess
import sys

from _pretraining_helpers import REPO_ROOT, subprocess_env

# What a console script's generated __main__ does, minus the docstring it does not have.
LAUNCHER = "import sys; from {module} import {func}; sys.argv[0] = {name!r}; sys.exit({func}())"


def _console_scripts():
    config = configparser.ConfigParser()
    config.read(REPO_ROOT / "setup.cfg")
    entries = config["options.entry_points"]["console_scripts"].strip().splitlines()
    for entry in entries:
        name, target = (part.strip() for part in entry.split("="))
        module, func = target.split(":")
        yield name, module, func


def test_every_console_script_opens_its_help_with_its_own_docstring():
    scripts = list(_console_scripts())
    assert len(scripts) >= 10
    procs = [(name, module, subprocess.Popen(
        [sys.executable, "-c", LAUNCHER.format(module=module, func=func, name=name), "--help"],
        cwd=REPO_ROOT, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)) for name, module, func in scripts]
    for name, module, proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode in (0, 1), f"{name}: {err[-2000:]}"  # absl's --help exits 1
        assert "Traceback" not in err, f"{name}: {err[-2000:]}"
        origin = importlib.util.find_spec(module).origin
        doc = ast.get_docstring(ast.parse(open(origin, encoding="utf-8").read()))
        first = out.strip().splitlines()[0]
        assert first == doc.splitlines()[0], f"{name} --help opens with {first!r}"
        assert "python -m " in out.split("flags:")[0], f"{name} --help shows no example"
