"""install_check: a TensorFlow install whose parts do not fit is refused in one line.

The versions are faked: as a mapping for `problems`, and end to end as `*.dist-info`
directories put first on PYTHONPATH, which importlib.metadata finds before the real ones.
The TPU VM lock (constraints/tpu-vm.txt) is checked against setup.cfg and against the same
rules, for each Python version it covers.
"""

from __future__ import annotations

import configparser
import os
import subprocess
import sys
from typing import Dict, List

import pytest
from packaging.requirements import Requirement

from bert_tf import install_check

CPU = {"tensorflow": "2.21.0", "tensorflow-text": "2.21.1", "keras": "3.15.1",
       "keras-hub": "0.32.0"}
TPU = {"tensorflow-tpu": "2.20.0", "tensorflow-text": "2.20.1", "keras": "3.15.1",
       "keras-hub": "0.32.0", "libtpu": "0.0.20"}
HINT = "on a TPU VM use constraints/tpu-vm.txt (README: TPU VMs)"


def problems(**versions: str) -> List[str]:
    return install_check.problems({k.replace("_", "-"): v for k, v in versions.items()}.get)


def test_fitting_installs_pass():
    assert problems(**CPU) == []
    assert problems(**TPU) == []
    # Windows: `tensorflow` installs tensorflow-intel at the same version.
    assert problems(**CPU, tensorflow_intel="2.21.0") == []


def test_tensorflow_text_for_another_minor_is_refused():
    assert problems(**dict(CPU, tensorflow="2.20.0")) == [
        "tensorflow-text 2.21.1 is built for TensorFlow 2.21, but TensorFlow 2.20.0 is "
        f"installed: pip install 'tensorflow-text==2.20.*'; {HINT}"]
    assert problems(**dict(TPU, tensorflow_text="2.21.1")) == [
        "tensorflow-text 2.21.1 is built for TensorFlow 2.21, but TensorFlow 2.20.0 is "
        f"installed: pip install 'tensorflow-text==2.20.*'; {HINT}"]
    assert problems(**{k: v for k, v in CPU.items() if k != "tensorflow-text"}) == [
        "tensorflow-text is not installed: pip install 'tensorflow-text==2.21.*'"]


def test_keras_2_is_refused():
    assert problems(**dict(CPU, keras="2.15.0")) == [
        "keras 2.15.0 is installed, but bert_tf needs Keras 3: pip install 'keras>=3.3,<3.16'"]
    assert problems(**{k: v for k, v in CPU.items() if k != "keras"}) == [
        "Keras is not installed, but bert_tf needs Keras 3: pip install 'keras>=3.3,<3.16'"]
    assert problems(**{k: v for k, v in CPU.items() if k != "keras-hub"}) == [
        "keras-hub is not installed, but bert_tf needs keras-hub 0.32 or newer (Python "
        "3.11+): pip install 'keras-hub>=0.32,<0.33'"]


def test_keras_hub_before_0_32_is_refused():
    expected = ("keras-hub 0.25.1 is installed, but bert_tf needs keras-hub 0.32 or newer "
                "(Python 3.11+): pip install 'keras-hub>=0.32,<0.33'")
    assert problems(**dict(CPU, keras_hub="0.25.1")) == [expected]
    assert problems(**dict(CPU, keras_hub="0.32.1")) == []
    assert problems(**dict(CPU, keras_hub="1.0.0rc1")) == []


def test_libtpu_too_new_for_tensorflow_tpu_is_refused():
    # What `pip install tensorflow-tpu==2.20.0` picks today (libtpu~=0.0.14 -> the newest).
    assert problems(**dict(TPU, libtpu="0.0.52")) == [
        "libtpu 0.0.52 is too new for tensorflow-tpu 2.20.0: import tensorflow aborts with "
        f"libtpu newer than 0.0.31: pip install 'libtpu==0.0.20'; {HINT}"]
    assert problems(**dict(TPU, libtpu="0.0.31")) == []
    # Only tensorflow-tpu loads libtpu; a tensorflow-tpu minor without a known limit passes.
    assert problems(**dict(CPU, libtpu="0.0.52")) == []
    assert problems(**dict(TPU, tensorflow_tpu="2.21.0", tensorflow_text="2.21.1",
                           libtpu="0.0.52")) == []


def test_cpu_tensorflow_beside_tensorflow_tpu_is_refused():
    # What `pip install bert_tf` does on a TPU VM: the newest CPU TensorFlow joins the TPU one.
    assert problems(**dict(TPU, tensorflow="2.21.0")) == [
        "tensorflow 2.21.0 and tensorflow-tpu 2.20.0 are installed together and overwrite each "
        "other's files: pip uninstall -y tensorflow, then reinstall with "
        "constraints/tpu-vm.txt (README: TPU VMs)"]


def test_no_tensorflow_is_refused():
    assert problems(absl_py="2.5.1") == [
        "TensorFlow is not installed (bert-tf-data, the light install, runs only the data "
        f"jobs): pip install bert_tf; {HINT}"]


def _fake_distributions(root, versions: Dict[str, str]) -> str:
    """Directories of `*.dist-info/METADATA` that importlib.metadata reads as installed."""
    for name, version in versions.items():
        info = root / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", encoding="utf-8")
    return str(root)


@pytest.mark.parametrize("fake, expected", [
    ({"tensorflow-text": "2.99.1"}, "error: tensorflow-text 2.99.1 is built for TensorFlow "
                                    "2.99, but TensorFlow "),
    ({"keras": "2.15.0"}, "error: keras 2.15.0 is installed, but bert_tf needs Keras 3"),
])
def test_entry_points_refuse_a_mismatched_install_in_one_line(
        fake, expected, repo_root, tmp_path, corpus_lines):
    # The repository next, so that the console script runs this checkout's code.
    path = [_fake_distributions(tmp_path / "fake", fake), str(repo_root)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path), TF_CPP_MIN_LOG_LEVEL="3")
    bin_dir = os.path.dirname(sys.executable)
    for command in ([sys.executable, "-m", "bert_tf.run_pretraining", "--do_train"],
                    [os.path.join(bin_dir, "bert-tf-export"), "--export_dir=x"]):
        proc = subprocess.run(command, cwd=repo_root, env=env, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 2, (command, proc.stderr[-2000:])
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(expected), (command, proc.stderr)
    # The data jobs never load TensorFlow, so they do not care.
    corpus, vocab = tmp_path / "corpus.txt", tmp_path / "vocab.txt"
    corpus.write_text("\n".join(corpus_lines[:2000]) + "\n", encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "data_tools.build_vocab", f"--input_file={corpus}",
         f"--vocab_file={vocab}", "--vocab_size=500"],
        cwd=repo_root, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(vocab.read_text(encoding="utf-8").splitlines()) == 500


def test_module_reports_this_environment(repo_root):
    proc = subprocess.run([sys.executable, "-m", "bert_tf.install_check"], cwd=repo_root,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-1] == "ok: TensorFlow, tensorflow-text, Keras and keras-hub fit together"
    assert any(line.startswith("tensorflow-text ") for line in lines)
    assert lines[0] == f"cpu: {install_check.describe_cpu()}"
    assert " core(s), ISA " in lines[0]


def _lock(repo_root, python: str) -> Dict[str, str]:
    """constraints/tpu-vm.txt's pins that apply to `python`: {name: version}."""
    pins: Dict[str, str] = {}
    for line in (repo_root / "constraints" / "tpu-vm.txt").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate({"python_version": python}):
            continue
        (spec,) = req.specifier
        assert spec.operator == "==", line
        assert req.name not in pins, (python, req.name)  # one pin per Python
        pins[req.name] = spec.version
    return pins


@pytest.mark.parametrize("python", ["3.11", "3.12", "3.13"])
def test_tpu_vm_lock_fits_setup_cfg_and_the_check(repo_root, python):
    pins = _lock(repo_root, python)
    # tensorflow-tpu is the only TensorFlow; libtpu is its runtime.
    assert not {"tensorflow", "tensorflow-cpu", "tf-keras"} & set(pins)
    assert pins["tensorflow-tpu"] == "2.20.0" and pins["libtpu"] == "0.0.20"
    parser = configparser.ConfigParser()
    parser.read(repo_root / "setup.cfg")
    for line in parser["options"]["install_requires"].splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        req = Requirement(line)
        name = "tensorflow-tpu" if req.name == "tensorflow" else req.name.replace("_", "-")
        assert req.specifier.contains(pins[name]), (python, line, pins[name])
    # keras-hub's own requirements are there too (it is installed with --no-deps).
    assert {"regex", "rich", "kagglehub", "tokenizers", "packaging"} <= set(pins)
    assert install_check.problems(pins.get) == []
