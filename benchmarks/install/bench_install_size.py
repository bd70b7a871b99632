"""Installed size of the light `bert-tf-data` install against the full `bert_tf` one.

Both requirement closures are walked through the distributions installed in this environment
(importlib.metadata, markers evaluated here), and each distribution's size is the sum of the
files its RECORD lists, as installed (bytecode included). bert_tf's own files (about 1 MB)
are left out of both. `--extra beam` adds Apache Beam to both sides (what a Beam worker
installs); a requirement that is not installed here is listed and not counted.

    python benchmarks/install/bench_install_size.py [--extra beam]
"""

from __future__ import annotations

import argparse
import configparser
import importlib.metadata
import os
import pathlib
import platform
import sys
from typing import Dict, List, Set, Tuple

from packaging.requirements import Requirement

try:
    import tomllib
except ImportError:  # Python 3.10
    sys.exit("needs Python 3.11+ (tomllib) to read packaging/data/pyproject.toml")

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _norm(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def full_requirements(extra: str) -> List[str]:
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    lines = parser["options"]["install_requires"].splitlines()
    if extra:
        lines += parser["options.extras_require"][extra].splitlines()
    return [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]


def light_requirements(extra: str) -> List[str]:
    project = tomllib.loads((ROOT / "packaging" / "data" / "pyproject.toml").read_text())
    project = project["project"]
    return project["dependencies"] + (project["optional-dependencies"][extra] if extra else [])


def closure(requirements: List[str]) -> Tuple[Dict[str, importlib.metadata.Distribution],
                                             Set[str]]:
    """({name: installed distribution} of the transitive closure, names not installed)."""
    found: Dict[str, importlib.metadata.Distribution] = {}
    missing: Set[str] = set()
    todo = [(Requirement(r), "") for r in requirements]
    seen: Set[Tuple[str, str]] = set()
    while todo:
        req, from_extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": from_extra}):
            continue
        name = _norm(req.name)
        for extra in sorted(req.extras) or [""]:
            if (name, extra) in seen:
                continue
            seen.add((name, extra))
            try:
                dist = importlib.metadata.distribution(name)
            except importlib.metadata.PackageNotFoundError:
                missing.add(name)
                continue
            found[name] = dist
            todo += [(Requirement(r), extra) for r in dist.requires or []]
    return found, missing


def size_of(dist: importlib.metadata.Distribution) -> int:
    total = 0
    for f in dist.files or []:
        path = dist.locate_file(f)
        if os.path.isfile(path):
            total += os.path.getsize(path)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extra", default="", choices=["", "beam"],
                        help="add this extra to both installs")
    args = parser.parse_args()
    print(f"python {platform.python_version()} on {platform.machine()} {sys.platform}; "
          f"sizes of the installed distributions in {sys.prefix}")
    sides = {"full (bert_tf)": full_requirements(args.extra),
             "light (bert-tf-data)": light_requirements(args.extra)}
    totals = {}
    for label, requirements in sides.items():
        dists, missing = closure(requirements)
        sizes = {name: size_of(d) for name, d in dists.items()}
        totals[label] = sum(sizes.values())
        largest = sorted(sizes.items(), key=lambda kv: -kv[1])[:6]
        print(f"{label}{' [' + args.extra + ']' if args.extra else ''}: "
              f"{len(dists)} distributions, {totals[label] / 1e6:,.0f} MB; largest: "
              + ", ".join(f"{n} {s / 1e6:,.0f}" for n, s in largest))
        if missing:
            print(f"  not installed here, not counted: {', '.join(sorted(missing))}")
    full, light = totals.values()
    print(f"light / full: {light / full:.3f} ({light / 1e6:,.0f} MB vs {full / 1e6:,.0f} MB)")


if __name__ == "__main__":
    main()
