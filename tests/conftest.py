"""Shared pytest fixtures: paths to the repository, the bundled corpus and Google's vocab."""

from __future__ import annotations

import json
import os
import pathlib
import resource
from typing import List

import pytest
from _pretraining_helpers import fresh_pythonpath

# Every process a test starts inherits tests/_site first on its path: Grappler off there too
# (tests/_site/sitecustomize.py). Tests that set their own PYTHONPATH use fresh_pythonpath.
os.environ["PYTHONPATH"] = fresh_pythonpath(*os.environ.get("PYTHONPATH", "").split(os.pathsep))

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS_PATH = REPO_ROOT / "data" / "corpus" / "wikitext2.bert.txt"
# Google's uncased vocab ships with the repository (Apache-2.0, see data/vocab/README.md).
GOOGLE_VOCAB_PATH = REPO_ROOT / "data" / "vocab" / "bert-base-uncased-vocab.txt"


def pytest_configure(config) -> None:
    """Turns TensorFlow's graph optimizer (Grappler) off for the tests' own processes, unless
    BERT_TF_TEST_GRAPPLER=1 (`_pretraining_helpers.grappler_off_unless_asked`); the processes
    they start get it from tests/_site/sitecustomize.py. The notebook's kernel keeps it on,
    as users run it.
    """
    xdist_controller = config.getoption("numprocesses", None) and not hasattr(
        config, "workerinput")
    if not xdist_controller:
        from _pretraining_helpers import grappler_off_unless_asked

        grappler_off_unless_asked()


def pytest_collection_modifyitems(config, items) -> None:
    """The longest files first (tests/_suite_order.py)."""
    from _suite_order import LONGEST_FILES_FIRST

    rank = {name: i for i, name in enumerate(LONGEST_FILES_FIRST)}
    # A stable sort: each file keeps its tests' order, the other files their own order.
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


# BERT_TF_TEST_CPU_LOG=FILE appends one JSON line per test: the CPU seconds (user + system)
# its process and the child processes it reaped spent on it, set-up and teardown included,
# and the `cli` fixture's runs it waited for (their fork server reaps them). Unlike
# --durations, these do not grow when the machine is busy (scripts/suite_cpu.py sums them).
CPU_LOG = os.environ.get("BERT_TF_TEST_CPU_LOG")


def _cpu_seconds() -> float:
    from _cli_runner import forked_cpu_seconds

    return forked_cpu_seconds() + sum(u.ru_utime + u.ru_stime for u in (
        resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)))


if CPU_LOG:
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        start = _cpu_seconds()
        yield
        with open(CPU_LOG, "a", encoding="utf-8") as f:
            f.write(json.dumps({"test": item.nodeid, "cpu_s": round(_cpu_seconds() - start, 3)})
                    + "\n")


@pytest.fixture(scope="session")
def repo_root() -> pathlib.Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def corpus_path() -> pathlib.Path:
    """The bundled WikiText-2 corpus (one sentence per line, blank line between articles)."""
    return CORPUS_PATH


@pytest.fixture(scope="session")
def corpus_lines() -> List[str]:
    """Every line of the bundled corpus, blank lines included, without newlines."""
    # split("\n"), not splitlines(): the latter also breaks at \x1c, \x85, U+2028 ...
    lines = CORPUS_PATH.read_bytes().decode("utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


@pytest.fixture(scope="session")
def google_vocab_path() -> str:
    """Google's bert-base-uncased vocab (30,522 tokens), bundled under data/vocab/."""
    return os.fspath(GOOGLE_VOCAB_PATH)


@pytest.fixture(scope="session")
def fork_servers():
    """This worker's fork servers (tests/_cli_runner.py), one per preload and environment,
    shared by the test modules: a server's imports (~6 s) are paid once per worker, not
    once per module."""
    servers = {}
    yield servers
    for server in servers.values():
        server.close()


@pytest.fixture(scope="module")
def cli(request, fork_servers):
    """The module's `python -m` runs, each a process forked from a server that imported
    TensorFlow once (tests/_cli_runner.py). A test module may set `CLI_PRELOAD` (modules the
    server imports; default `_cli_runner.PRELOAD`) and `CLI_ENV` (the server's environment
    additions); modules with the same ones share a server. Runs a module leaves going are
    killed at its end."""
    from _cli_runner import PRELOAD, ForkServer  # here: most tests need no server

    preload = tuple(getattr(request.module, "CLI_PRELOAD", PRELOAD))
    env = dict(getattr(request.module, "CLI_ENV", None) or {})
    key = (preload, tuple(sorted(env.items())))
    if key not in fork_servers or not fork_servers[key].alive():
        if key in fork_servers:
            fork_servers[key].close()
        fork_servers[key] = ForkServer(preload, env=env or None)
    server = fork_servers[key]
    try:
        yield server
    finally:
        server.end_runs()
