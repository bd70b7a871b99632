"""Packaging: the console scripts setup.cfg declares are installed and start their entry point.

Each script runs in a subprocess (all at once, to keep the test short): `--helpshort` opens
with the entry module's own docstring (what the command does for a user, with a `python -m`
example; the fine-tuning commands once opened with an internal note of a shared helper) and
lists the entry point's own flags (a console script's `__main__` defines none:
errors.run_app declares them), and an unknown flag gives the one-line `error:` and exit 2,
as the `python -m` forms do.
"""

from __future__ import annotations

import ast
import configparser
import importlib.util
import os
import subprocess
import sys

import pytest

# A flag of each entry point's own, so the help shown is the right program's.
OWN_FLAG = {
    "bert-tf-pretrain": "--bert_config_file",
    "bert-tf-export": "--export_dir",
    "bert-tf-convert": "--from_format",
    "bert-tf-build-vocab": "--vocab_size",
    "bert-tf-create-data": "--max_predictions_per_seq",
    "bert-tf-embed-corpus": "--saved_model_dir",
    "bert-tf-prepare-corpus": "--document_per",
    "bert-tf-classify": "--text_pair_column",
    "bert-tf-tag": "--eval_file",
    "bert-tf-squad": "--doc_stride",
    "bert-tf-glue": "--reference_checkpoint",
    "bert-tf-retrieval": "--mini_batch_size",
    "bert-tf-rerank": "--rerank_top_k",
    "bert-tf-extend-vocab": "--num_new_tokens",
}


def declared_scripts(repo_root) -> dict:
    parser = configparser.ConfigParser()
    parser.read(repo_root / "setup.cfg")
    lines = parser["options.entry_points"]["console_scripts"].strip().splitlines()
    return dict(tuple(part.strip() for part in line.split("=")) for line in lines)


def test_setup_cfg_declares_every_entry_point(repo_root):
    scripts = declared_scripts(repo_root)
    assert set(scripts) == set(OWN_FLAG)
    for target in scripts.values():
        module, function = target.split(":")
        assert function == "console_main", target


def test_installed_console_scripts_run_their_entry_points(repo_root):
    bin_dir = os.path.dirname(sys.executable)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    procs = {}
    for script in OWN_FLAG:
        path = os.path.join(bin_dir, script)
        if not os.path.exists(path):
            pytest.fail(f"{script} is not installed beside {sys.executable}: "
                        "reinstall the package (pip install -e .)")
        for args in (["--helpshort"], ["--no_such_flag=1"]):
            procs[script, args[0]] = subprocess.Popen(
                [path] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                env=env, cwd=repo_root)
    scripts = declared_scripts(repo_root)
    for (script, arg), proc in procs.items():
        out, err = proc.communicate(timeout=300)
        if arg == "--helpshort":
            origin = importlib.util.find_spec(scripts[script].split(":")[0]).origin
            with open(origin, encoding="utf-8") as f:
                doc = ast.get_docstring(ast.parse(f.read()))
            assert out.strip().splitlines()[0] == doc.splitlines()[0], (script, out[:300])
            assert "python -m " in out.split("flags:")[0], (script, "no example")
            # absl exits 1 after printing help; the help must be this program's flags.
            assert OWN_FLAG[script] in out, (script, out[-2000:], err[-2000:])
            assert "Traceback" not in err, script
        else:
            assert proc.returncode == 2, (script, err[-2000:])  # a usage error
            lines = [line for line in err.splitlines() if line.startswith("error:")]
            assert lines == ["error: Unknown command line flag 'no_such_flag'"], (script, err)
            assert "Traceback" not in err, script
