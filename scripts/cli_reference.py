"""Writes docs/reference/cli.md, the command-line reference, from the code itself.

    python scripts/cli_reference.py            # rewrite docs/reference/cli.md
    python scripts/cli_reference.py --check    # exit 1 (with a diff) if the file is stale
    python scripts/cli_reference.py --stdout   # print the page

One section per console script of setup.cfg: the command, its module docstring's first
paragraph and its `python -m` example, then a table of its flags (name, type, default, help,
the module that defines it). Each command is asked for them with absl's `--helpxml`, in a
process of its own (several define the same flag names in absl's one global registry), so
the page shows what the command itself parses and cannot drift from the code:
tests/test_cli_reference.py regenerates it and fails when the checked-in copy differs.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import configparser
import difflib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import List, Sequence, Tuple
from xml.etree import ElementTree

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "docs" / "reference" / "cli.md"
FIX_COMMAND = "python scripts/cli_reference.py"
# Flags defined by modules of these packages are the commands' own; absl's and
# TensorFlow's (--verbosity, --logtostderr, ...) are left out.
OWN_PACKAGES = ("bert_tf", "data_tools")


@dataclass(frozen=True)
class FlagRow:
    """One flag of one command, as the table shows it."""

    name: str
    type: str
    default: str
    help: str
    module: str


@dataclass(frozen=True)
class Command:
    """One console script: its names, its docstring's summary and example, its flags."""

    script: str
    module: str
    summary: str
    example: str
    flags: Tuple[FlagRow, ...]


def console_scripts(setup_cfg: Path = ROOT / "setup.cfg") -> List[Tuple[str, str]]:
    """(script name, module run by `python -m`) of every console script, in setup.cfg's order."""
    parser = configparser.ConfigParser()
    parser.read(setup_cfg, encoding="utf-8")
    scripts = []
    for line in parser["options.entry_points"]["console_scripts"].splitlines():
        if "=" not in line:
            continue
        name, target = (part.strip() for part in line.split("=", 1))
        module = target.split(":", 1)[0]
        scripts.append((name, module))
    return scripts


def split_docstring(doc: str) -> Tuple[str, str]:
    """The first paragraph (joined into one line) and the first indented example block."""
    lines = doc.strip("\n").splitlines()
    summary_lines: List[str] = []
    for line in lines:
        if not line.strip():
            break
        summary_lines.append(line.strip())
    example_lines: List[str] = []
    for line in lines[len(summary_lines):]:
        if line.startswith("    ") and (example_lines or "python -m" in line):
            example_lines.append(line[4:].rstrip())
        elif example_lines:
            break
    # The docstrings write `\\` for a shell continuation; the page shows `\`.
    example = "\n".join(example_lines).replace("\\\\", "\\")
    return " ".join(summary_lines), example


def module_of(file_field: str) -> str:
    """A flag's defining module: absl gives the main module as a path, others by name."""
    if not file_field.endswith(".py"):
        return file_field
    parts = Path(file_field).with_suffix("").parts
    top = max(i for i, part in enumerate(parts) if part in OWN_PACKAGES)
    return ".".join(parts[top:])


def flag_row(element: ElementTree.Element) -> FlagRow:
    kind = element.findtext("type", "")
    help_text = " ".join(element.findtext("meaning", "").split())
    enum_values = [value.text or "" for value in element.findall("enum_value")]
    if enum_values:
        # absl prefixes an enum's help with its values, which the type column shows.
        help_text = help_text.removeprefix("<" + "|".join(enum_values) + ">: ")
        kind = " | ".join(enum_values)
    else:
        kind = {"int": "integer", "multi string": "string, repeatable",
                "comma separated list of strings": "comma-separated list"}.get(kind, kind)
    default = element.findtext("default", "")
    return FlagRow(name=element.findtext("name", ""), type=kind,
                   default=f"`{default}`" if default not in ("", "None") else "",
                   help=help_text,
                   module=module_of(element.findtext("file", "")))


def read_command(script: str, module_name: str) -> Command:
    """Runs `python -m module_name --helpxml` and reads the usage text and flags from it."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run([sys.executable, "-m", module_name, "--helpxml"], cwd=ROOT,
                            env=env, capture_output=True, text=True, check=False)
    # absl exits 1 after printing --helpxml.
    if "</AllFlags>" not in result.stdout:
        raise RuntimeError(f"python -m {module_name} --helpxml failed "
                           f"(exit {result.returncode}):\n{result.stderr[-2000:]}")
    root = ElementTree.fromstring(result.stdout[result.stdout.index("<?xml"):])
    summary, example = split_docstring(root.findtext("usage", ""))
    rows = [flag_row(element) for element in root.findall("flag")]
    # The entry module's own flags first (absl sorts each module's by name), then those of
    # the modules it calls on; absl's and TensorFlow's own are left out.
    shown = module_name.removesuffix(".__main__")
    rows = [row for row in rows if row.module.split(".", 1)[0] in OWN_PACKAGES]
    rows.sort(key=lambda row: (row.module != module_name, row.module, row.name))
    return Command(script=script, module=shown, summary=summary, example=example,
                   flags=tuple(rows))


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render(commands: Sequence[Command]) -> str:
    """The Markdown page."""
    out = [
        "# Command-line reference",
        "",
        "<!-- Generated by `python scripts/cli_reference.py` from the absl flags of every",
        "     console script in setup.cfg; tests/test_cli_reference.py fails when it is stale.",
        "     Do not edit by hand. -->",
        "",
        "Every command runs as `python -m MODULE` or as its console script once the package",
        "is installed; both take the same flags. Flags take `--name=value`; a boolean also",
        "takes `--name` / `--noname`. `--flagfile=FILE` reads flags from a file (one per line,",
        "as in `configs/*.flags`), and `--helpfull` lists absl's own flags too.",
        "",
        "| command | module | what it does |",
        "| --- | --- | --- |",
    ]
    for command in commands:
        anchor = command.script
        out.append(f"| [`{command.script}`](#{anchor}) | `{command.module}` | "
                   f"{_cell(command.summary)} |")
    for command in commands:
        out += ["", f"## {command.script}", "",
                f"`python -m {command.module}` (console script `{command.script}`)", "",
                command.summary, ""]
        if command.example:
            out += ["```bash", command.example, "```", ""]
        out += ["| flag | type | default | help | defined in |",
                "| --- | --- | --- | --- | --- |"]
        for row in command.flags:
            out.append(f"| `--{row.name}` | {_cell(row.type)} | {_cell(row.default)} | "
                       f"{_cell(row.help)} | `{row.module}` |")
    return "\n".join(out) + "\n"


def generate() -> str:
    """The page for the code as it is now (one `--helpxml` process per command)."""
    scripts = console_scripts()
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        commands = list(pool.map(lambda item: read_command(*item), scripts))
    return render(commands)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true",
                      help=f"compare with {OUTPUT.relative_to(ROOT)}; exit 1 if it differs")
    mode.add_argument("--stdout", action="store_true", help="print the page")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    page = generate()
    if args.stdout:
        sys.stdout.write(page)
        return 0
    if args.check:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
        if current == page:
            return 0
        sys.stdout.writelines(difflib.unified_diff(
            current.splitlines(keepends=True), page.splitlines(keepends=True),
            "docs/reference/cli.md (checked in)", "docs/reference/cli.md (from the code)"))
        print(f"\n{OUTPUT.relative_to(ROOT)} is stale: run `{FIX_COMMAND}` and commit it.")
        return 1
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    tmp = OUTPUT.with_suffix(".md.tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(OUTPUT)
    print(f"wrote {OUTPUT.relative_to(ROOT)} ({len(page.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
