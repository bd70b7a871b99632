"""Writes constraints/tpu-vm.txt: every package bert_tf needs on a Cloud TPU VM, pinned.

Why a full lock installed with --no-deps: tensorflow-text (and keras-hub through it) names
the `tensorflow` distribution as a requirement, and `tensorflow-tpu` provides the same
`tensorflow` package under another name, so any ordinary `pip install` on a TPU VM pulls a
CPU TensorFlow beside (or over) the TPU build. Installing a complete, consistent set with
--no-deps sidesteps the resolver: tensorflow-tpu stays the only TensorFlow.

How: pip's resolver (`pip install --dry-run --report`, metadata only, nothing downloaded
beyond it) resolves the TPU stack plus bert_tf's other requirements for Linux x86_64 and
each Python version below; `tensorflow` (pulled in by tensorflow-text's metadata) is dropped;
versions that differ between Python versions get a `python_version` marker.

    python scripts/lock_tpu_vm.py            # needs the package index; rewrites the file
"""

from __future__ import annotations

import configparser
import json
import pathlib
import subprocess
import sys
import tempfile
from typing import Dict, List

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "constraints" / "tpu-vm.txt"
# The TPU stack: the newest tensorflow-tpu on PyPI, the tensorflow-text built for it, and
# the libtpu it was released with. tensorflow-tpu 2.20.0 asks for libtpu~=0.0.14, which
# pip meets with the newest libtpu (0.0.52), but from 0.0.32 on `import tensorflow` aborts
# ("TpuExecutable_FreeMaybeOwningDeviceMemoryArray not available in this library"); 0.0.20
# is the last libtpu published before tensorflow-tpu 2.20.0 (2025-08-01, 08-13).
TPU_STACK = ["tensorflow-tpu==2.20.0", "tensorflow-text==2.20.*", "libtpu==0.0.20"]
# keras-hub 0.32, the first with the tokenizer helpers bert_tf's keras-hub preset uses, needs
# Python 3.11+ (TPU VM images on Ubuntu 22.04 have 3.10: README says how to get a newer one).
PYTHONS = ["3.11", "3.12", "3.13"]
PLATFORMS = ["manylinux_2_35_x86_64", "manylinux_2_31_x86_64", "manylinux_2_28_x86_64",
             "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "linux_x86_64"]
# Provided by tensorflow-tpu under another distribution name.
DROPPED = {"tensorflow"}


def bert_tf_requirements() -> List[str]:
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    lines = parser["options"]["install_requires"].splitlines()
    return [line.strip() for line in lines
            if line.strip() and not line.strip().startswith("#")
            and not line.strip().startswith(("tensorflow>", "tensorflow-text"))]


def resolve(python: str) -> Dict[str, str]:
    """{normalized name: version} of the whole closure for one Python version."""
    with tempfile.TemporaryDirectory() as tmp:
        report = pathlib.Path(tmp) / "report.json"
        cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--dry-run",
               "--ignore-installed", "--only-binary=:all:", "--python-version", python,
               "--report", str(report)]
        for platform in PLATFORMS:
            cmd += ["--platform", platform]
        subprocess.run(cmd + TPU_STACK + bert_tf_requirements(), check=True)
        items = json.loads(report.read_text())["install"]
    return {item["metadata"]["name"].lower().replace("_", "-"): item["metadata"]["version"]
            for item in items}


def _marker(pythons: List[str]) -> str:
    """'' for every Python, else a python_version marker naming these ones."""
    if pythons == PYTHONS:
        return ""
    if pythons == PYTHONS[PYTHONS.index(pythons[0]):]:
        return f' ; python_version >= "{pythons[0]}"'
    return " ; " + " or ".join(f'python_version == "{p}"' for p in pythons)


def main() -> None:
    resolved = {python: resolve(python) for python in PYTHONS}
    names = sorted(set().union(*resolved.values()) - DROPPED)
    lines = []
    for name in names:
        by_version: Dict[str, List[str]] = {}
        for python, pins in resolved.items():
            if name in pins:
                by_version.setdefault(pins[name], []).append(python)
        for version, pythons in by_version.items():
            lines.append(f"{name}=={version}" + _marker(pythons))
    header = [
        "# bert_tf on a Cloud TPU VM (Linux x86_64, Python " + ", ".join(PYTHONS) + "):",
        "# every package it needs, pinned, with tensorflow-tpu as the only TensorFlow.",
        "# Install with --no-deps (README: TPU VMs); written by scripts/lock_tpu_vm.py from",
        "# " + " ".join(TPU_STACK) + " and setup.cfg's other requirements.",
        "#   pip install --no-deps -r constraints/tpu-vm.txt",
        "#   pip install --no-deps -e .        # or: pip install --no-deps bert_tf",
    ]
    OUTPUT.parent.mkdir(exist_ok=True)
    OUTPUT.write_text("\n".join(header + lines) + "\n")
    print(f"wrote {OUTPUT.relative_to(ROOT)}: {len(names)} packages, Python {PYTHONS}")


if __name__ == "__main__":
    main()
