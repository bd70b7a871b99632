"""The light `bert-tf-data` distribution (packaging/data): the data jobs without TensorFlow.

The distribution is built here from the repository (setuptools, no network), and the three
data jobs run from its wheel's files in subprocesses where importing tensorflow, keras,
keras_hub or tensorflow_text raises ImportError (a `sys.meta_path` blocker installed by a
sitecustomize, so multiprocessing workers have it too). Their outputs must be byte-identical
to the same jobs run from the repository in the full environment; a second run reads and
writes through a Beam filesystem (a local directory behind a `testfs://` scheme), which is
how `gs://` is reached on a Dataflow worker without TensorFlow, and a third runs the Beam
forms of the jobs on the DirectRunner.
"""

from __future__ import annotations

import configparser
import os
import pathlib
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from typing import Dict, List, Set

import pytest
from _source_imports import imported_names
from packaging.requirements import Requirement

HEAVY = {"tensorflow", "tensorflow-text", "keras", "keras-hub", "tf-keras", "tensorflow-cpu",
         "tensorflow-tpu", "tensorflow-io"}
BLOCKED = ("tensorflow", "tensorflow_text", "keras", "keras_hub", "tf_keras")
# The trainer's own dependencies, which the light distribution leaves out.
TRAINER_ONLY = {"tensorflow", "tensorflow-text", "keras", "keras-hub", "safetensors",
                "ml-dtypes", "bm25s", "tqdm"}

# Installed as sitecustomize.py in the light subprocesses. It records every import of a
# blocked module that anything attempts (a caught ImportError would otherwise hide it) and,
# at exit, where bert_tf and data_tools were loaded from.
SITECUSTOMIZE = r'''
import atexit, os, sys

BLOCKED = {blocked!r}
LOG = os.environ["BLOCKER_LOG"]


def _log(line):
    with open(LOG, "a", encoding="utf-8") as f:
        f.write(line + "\n")


class _Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            frame = sys._getframe(1)
            while frame and "importlib" in frame.f_code.co_filename:
                frame = frame.f_back
            _log("attempted " + name + " by " + (frame.f_globals.get("__name__", "?")
                                               if frame else "?"))
            raise ModuleNotFoundError("No module named " + repr(name), name=name)
        return None


sys.meta_path.insert(0, _Blocker())


@atexit.register
def _origins():
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] in ("bert_tf", "data_tools") and getattr(module, "__file__", None):
            _log("loaded " + module.__file__)


if os.environ.get("TESTFS_ROOT"):
    # A Beam filesystem for the scheme testfs://, backed by a local directory: the data
    # jobs reach it through bert_tf.core.fileio's remote branch, as they reach gs:// on Dataflow.
    from apache_beam.io.localfilesystem import LocalFileSystem

    ROOT = os.environ["TESTFS_ROOT"]
    PREFIX = "testfs://"

    def _local(path):
        return os.path.join(ROOT, path[len(PREFIX):])

    class TestFileSystem(LocalFileSystem):
        """Each call goes to a plain LocalFileSystem with the path moved under ROOT."""

        def __init__(self, pipeline_options):
            super().__init__(pipeline_options)
            self._plain = LocalFileSystem(pipeline_options)

        @classmethod
        def scheme(cls):
            return "testfs"

        def match(self, patterns, limits=None):
            results = self._plain.match([_local(p) for p in patterns], limits)
            for result, pattern in zip(results, patterns):
                result.pattern = pattern
                for m in result.metadata_list:
                    m.path = PREFIX + os.path.relpath(m.path, ROOT)
            return results

        def create(self, path, *args, **kwargs):
            return self._plain.create(_local(path), *args, **kwargs)

        def open(self, path, *args, **kwargs):
            return self._plain.open(_local(path), *args, **kwargs)

        def exists(self, path):
            return self._plain.exists(_local(path))

        def size(self, path):
            return self._plain.size(_local(path))

        def mkdirs(self, path):
            return self._plain.mkdirs(_local(path))

        def rename(self, sources, destinations):
            return self._plain.rename([_local(p) for p in sources],
                                      [_local(p) for p in destinations])

        def delete(self, paths):
            return self._plain.delete([_local(p) for p in paths])
'''


def _source(root: pathlib.Path, module: str):
    path = root.joinpath(*module.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def data_tools_closure(root: pathlib.Path) -> Set[str]:
    """The package files (relative paths) that data_tools' modules import, transitively."""
    todo = [".".join(p.relative_to(root).with_suffix("").parts)
            for p in (root / "data_tools").rglob("*.py")]
    files: Set[str] = set()
    seen: Set[str] = set()
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        path = _source(root, module)
        if path is None:
            continue  # `from bert_tf.core.errors import UserError`: UserError is no module
        files.add(path.relative_to(root).as_posix())
        parts = module.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # parent __init__s
        todo += [m for m in imported_names(path) if m.split(".")[0] in ("bert_tf", "data_tools")]
    return files


def shipped_sources(light: pathlib.Path) -> Set[str]:
    """The .py files under packaging/data's package links (directory links followed)."""
    found = set()
    for package in ("bert_tf", "data_tools"):
        for folder, _, names in os.walk(light / package, followlinks=True):
            found |= {(pathlib.Path(folder) / n).relative_to(light).as_posix()
                      for n in names if n.endswith(".py")}
    return found


def test_links_ship_bert_tf_core_and_cover_what_data_tools_imports(repo_root):
    # The light distribution ships bert_tf's TensorFlow-free core whole (and the package's
    # __init__), through a link to its folder: nothing else of bert_tf, and nothing that
    # data_tools imports is missing.
    light = repo_root / "packaging" / "data"
    shipped = shipped_sources(light)
    core = {p.relative_to(repo_root).as_posix()
            for p in (repo_root / "bert_tf" / "core").glob("*.py")}
    assert {p for p in shipped if p.startswith("bert_tf/")} == core | {"bert_tf/__init__.py"}
    assert data_tools_closure(repo_root) <= shipped
    assert {p for p in shipped if p.startswith("data_tools/")} == {
        p.relative_to(repo_root).as_posix() for p in (repo_root / "data_tools").rglob("*.py")}
    for rel in shipped:  # links into the repository, not copies that could drift
        assert (light / rel).resolve() == (repo_root / rel).resolve(), rel
    assert sorted(p.name for p in (light / "bert_tf").iterdir()) == ["__init__.py", "core",
                                                                     "py.typed"]


@pytest.fixture(scope="module")
def light_wheel(repo_root, tmp_path_factory) -> Dict[str, object]:
    """Builds bert-tf-data's wheel (no network: this environment's setuptools, in a copy of
    packaging/data with the links followed) and unpacks it; returns its paths and METADATA."""
    tmp = tmp_path_factory.mktemp("light")
    source = tmp / "src"
    shutil.copytree(repo_root / "packaging" / "data", source, symlinks=False)
    out = tmp / "dist"
    proc = subprocess.run(
        [sys.executable, "-c",
         "import sys, setuptools.build_meta as b; print(b.build_wheel(sys.argv[1]))", str(out)],
        cwd=source, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    wheel = out / proc.stdout.strip().splitlines()[-1]
    site = tmp / "site"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(z.read(name).decode("utf-8"))
        entry_points = z.read(name.replace("METADATA", "entry_points.txt")).decode("utf-8")
    return {"site": site, "metadata": metadata, "entry_points": entry_points}


def test_the_wheel_ships_every_data_tools_module(repo_root, light_wheel):
    # packaging/data/pyproject.toml lists the packages: a new data_tools subpackage must be
    # added there, or its modules are missing from bert-tf-data.
    ours = {p.relative_to(repo_root).as_posix() for p in (repo_root / "data_tools").rglob("*.py")}
    site = light_wheel["site"]
    shipped = {p.relative_to(site).as_posix() for p in (site / "data_tools").rglob("*.py")}
    assert shipped == ours and "data_tools/pretraining_data/create_job.py" in shipped


def _full_requirements(repo_root) -> List[Requirement]:
    parser = configparser.ConfigParser()
    parser.read(repo_root / "setup.cfg")
    lines = parser["options"]["install_requires"].splitlines()
    return [Requirement(line) for line in lines if line.strip() and not line.startswith("#")]


def test_light_metadata_requires_no_tensorflow_or_keras(repo_root, light_wheel):
    metadata = light_wheel["metadata"]
    assert metadata["Name"] == "bert-tf-data"
    requires = [Requirement(r) for r in metadata.get_all("Requires-Dist")]
    assert {r.name.lower() for r in requires} & HEAVY == set()
    # Apache Beam only in the extras; the base is setup.cfg's lines less the trainer's.
    base = {str(r) for r in requires if r.marker is None}
    full = {str(r) for r in _full_requirements(repo_root)
            if r.name.lower().replace("_", "-") not in TRAINER_ONLY}
    assert base == full and len(base) == 5
    assert {r.name for r in requires if r.marker is not None} == {"apache-beam"}
    # The same console scripts as the full distribution's data jobs, nothing else.
    parser = configparser.ConfigParser()
    parser.read(repo_root / "setup.cfg")
    scripts = dict(line.replace(" ", "").split("=") for line in
                   parser["options.entry_points"]["console_scripts"].strip().splitlines())
    light = configparser.ConfigParser()
    light.read_string(light_wheel["entry_points"])
    assert dict(light["console_scripts"]) == {
        name: target for name, target in scripts.items() if target.startswith("data_tools.")}


def _run(args: List[str], cwd, env) -> None:
    proc = subprocess.run([sys.executable, "-m"] + args, cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (args[0], proc.stderr[-3000:])


def _jobs(paths: Dict[str, str], beam: bool = False) -> List[List[str]]:
    """prepare_corpus -> build_vocab -> create_pretraining_data, on 2 workers each, or with
    `beam` the first and last on Beam's DirectRunner, in the process (its worker code runs
    under the same import blocker)."""
    runner = (["--beam_pipeline_options=--runner=DirectRunner --direct_num_workers=1"]
              if beam else ["--num_workers=2"])
    return [
        ["data_tools.prepare_corpus", f"--input_file={paths['raw']}",
         f"--output_file={paths['prepared']}", "--dedup"] + runner,
        ["data_tools.build_vocab", f"--input_file={paths['prepared']}",
         f"--vocab_file={paths['vocab']}", "--vocab_size=1000"],
        ["data_tools.create_pretraining_data", f"--input_file={paths['prepared']}",
         f"--vocab_file={paths['vocab']}", f"--output_file={paths['records']}",
         "--num_output_shards=2", "--max_seq_length=64", "--max_predictions_per_seq=10",
         "--dupe_factor=2", "--random_seed=7"] + runner,
    ]


OUTPUTS = ("prepared.txt", "vocab.txt", "train-00000-of-00002.tfrecord",
           "train-00001-of-00002.tfrecord")


def _paths(prefix: str) -> Dict[str, str]:
    return {"raw": prefix + "raw.txt", "prepared": prefix + "prepared.txt",
            "vocab": prefix + "vocab.txt",
            "records": prefix + "train-{shard}-of-{num_shards}.tfrecord"}


def test_data_jobs_run_without_tensorflow_and_write_the_same_bytes(
        repo_root, corpus_lines, light_wheel, tmp_path):
    # Raw text: the bundled corpus' first 1,500 lines (its blank lines separate articles).
    raw = "\n".join(" ".join(line.split()) if line else "" for line in corpus_lines[:1500])
    dirs = {name: tmp_path / name for name in ("full", "light", "testfs", "beam")}
    for d in dirs.values():
        d.mkdir()
        (d / "raw.txt").write_text(raw + "\n", encoding="utf-8")
    base_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    for job in _jobs(_paths(str(dirs["full"]) + "/")):
        _run(job, repo_root, base_env)

    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(SITECUSTOMIZE.format(blocked=BLOCKED))
    site = str(light_wheel["site"])
    light_env = dict(base_env, PYTHONPATH=os.pathsep.join([str(blocker), site]))
    logs = {name: tmp_path / f"{name}.log" for name in ("light", "testfs", "beam")}
    # cwd outside the repository, so bert_tf and data_tools come from the wheel only.
    for job in _jobs(_paths(str(dirs["light"]) + "/")):
        _run(job, tmp_path, dict(light_env, BLOCKER_LOG=str(logs["light"])))
    for job in _jobs(_paths(str(dirs["beam"]) + "/"), beam=True):
        _run(job, tmp_path, dict(light_env, BLOCKER_LOG=str(logs["beam"])))
    for job in _jobs(_paths("testfs://")):
        _run(job, tmp_path, dict(light_env, BLOCKER_LOG=str(logs["testfs"]),
                                 TESTFS_ROOT=str(dirs["testfs"])))

    for name in OUTPUTS:
        expected = (dirs["full"] / name).read_bytes()
        assert len(expected) > 1000, name
        for run in ("light", "testfs", "beam"):
            assert (dirs[run] / name).read_bytes() == expected, (run, name)
    lines = {name: log.read_text(encoding="utf-8").splitlines() for name, log in logs.items()}
    attempts = {name: {line for line in log if line.startswith("attempted")}
                for name, log in lines.items()}
    # Local paths: nothing even looks for TensorFlow. Remote paths: fileio's find_spec probe
    # (it looks whether TensorFlow is installed, without importing it), and nothing else.
    assert attempts == {"light": set(), "beam": set(),
                        "testfs": {"attempted tensorflow by bert_tf.core.fileio"}}
    for name, log in lines.items():
        loaded = [line[len("loaded "):] for line in log if line.startswith("loaded ")]
        assert loaded and all(p.startswith(site) for p in loaded), (name, loaded[:5])
        beam_fs = [p for p in loaded
                   if p.endswith(os.path.join("bert_tf", "core", "fileio_beam.py"))]
        assert len(beam_fs) == (3 if name == "testfs" else 0), name  # once per job
