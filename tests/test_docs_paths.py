"""The README, DEVELOPERS.md and docs/ name only files and modules that exist.

Moving a module (data_tools was regrouped by stage) leaves its old path in prose, where no
import fails. Here every Markdown link of the README, and every repository path
(`bert_tf/...`, `tests/test_x.py`, ...) or dotted module name (`bert_tf.training.health`)
written as inline code in those pages, must resolve in the work tree, and so must every
script (`benchmarks/.../bench_x.py`, `scripts/x.sh`) a fenced or indented command example
runs; the other paths of those examples (outputs, data) are left alone, as are placeholders
(`<x>`, `{shard}`, globs, `...`) and files on a line that calls them pending.
benchmarks/README.md, the index of the benchmarks, is checked too, its links from its own
folder. (mkdocs build --strict checks the links between the docs pages themselves.)
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = (sorted([ROOT / "README.md", ROOT / "DEVELOPERS.md", ROOT / "benchmarks" / "README.md"])
         + sorted((ROOT / "docs").rglob("*.md")))
TOP_DIRS = ("bert_tf", "data_tools", "tests", "benchmarks", "scripts", "configs", "data",
            "packaging", "constraints", "notebooks", "docs", ".ci")
PACKAGES = ("bert_tf", "data_tools")
PLACEHOLDER = re.compile(r"[<>{}*?$]|\.\.\.|\bN\b|\bX\b")
FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
SCRIPT = re.compile(r"(?<![\w/.-])([\w.-]+/[\w./-]+\.(?:py|sh))\b")


def _prose_lines(text: str) -> Iterator[Tuple[int, str]]:
    """(line number, line) of the lines outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def command_scripts(text: str) -> List[Tuple[int, str]]:
    """Repository scripts (.py, .sh) that fenced or indented command examples run."""
    found = []
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced or line.startswith("    "):
            for match in SCRIPT.finditer(line):
                if (match.group(1).split("/", 1)[0] in TOP_DIRS
                        and not PLACEHOLDER.search(match.group(1))):
                    found.append((number, match.group(1)))
    return found


def path_candidates(text: str) -> List[Tuple[int, str]]:
    """Inline-code repository paths (`dir/file`, relative to the root) in prose lines."""
    found = []
    for number, line in _prose_lines(text):
        for span in CODE_SPAN.findall(line):
            for word in span.split():
                word = word.strip(",;:()'\"").split("::")[0]
                if "=" in word:
                    word = word.split("=", 1)[1]
                if (word.split("/", 1)[0] in TOP_DIRS and "/" in word
                        and not PLACEHOLDER.search(word)):
                    found.append((number, word.rstrip("/")))
    return found


def module_candidates(text: str) -> List[Tuple[int, str]]:
    """Inline-code dotted names starting with bert_tf. or data_tools. in prose lines."""
    found = []
    for number, line in _prose_lines(text):
        for span in CODE_SPAN.findall(line):
            for match in re.finditer(r"\b((?:bert_tf|data_tools)(?:\.[A-Za-z_][A-Za-z0-9_]*)+)",
                                     span):
                found.append((number, match.group(1)))
    return found


def resolve_module(name: str, root: Path = ROOT) -> bool:
    """True if `name` is a module or package, or a module's attribute that its source names."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        base = root.joinpath(*parts[:cut])
        source = (base.with_suffix(".py") if base.with_suffix(".py").is_file()
                  else base / "__init__.py" if (base / "__init__.py").is_file() else None)
        if source is None:
            continue
        rest = parts[cut:]
        if not rest:
            return True
        # One attribute (a class, function or constant) defined or imported there.
        return len(rest) <= 2 and re.search(
            rf"\b{re.escape(rest[0])}\b", source.read_text(encoding="utf-8")) is not None
    return False


def link_targets(text: str) -> List[Tuple[int, str]]:
    """Relative Markdown link targets (anchors dropped), outside fenced blocks."""
    found = []
    for number, line in _prose_lines(text):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue
            found.append((number, target.split("#", 1)[0]))
    return found


def test_the_scanners_find_paths_modules_and_links():
    text = ("See `data_tools/inputs/text_files.py` and `tests/test_<module>.py`,\n"
            "`--vocab_file=data/vocab/bert-base-uncased-vocab.txt`, "
            "`bert_tf.training.eval_history.read_eval_history`, [x](docs/a.md#b).\n"
            "```\npython data_tools/nowhere.py\n```\n")
    assert path_candidates(text) == [(1, "data_tools/inputs/text_files.py"),
                                     (2, "data/vocab/bert-base-uncased-vocab.txt")]
    assert module_candidates(text) == [(2, "bert_tf.training.eval_history.read_eval_history")]
    assert link_targets(text) == [(2, "docs/a.md")]
    assert command_scripts(text) == [(4, "data_tools/nowhere.py")]
    assert command_scripts("    python benchmarks/data/x.py --out=out/y.py /p/z.py\n") == [
        (1, "benchmarks/data/x.py")]
    assert resolve_module("bert_tf.training.eval_history.read_eval_history")
    assert resolve_module("data_tools.inputs")
    assert not resolve_module("data_tools.text_files")  # the path before the regroup
    assert not resolve_module("bert_tf.training.eval_history.no_such_name")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_and_module_named_exists(page):
    text = page.read_text(encoding="utf-8")
    lines = text.splitlines()
    # A file a page announces as pending (a benchmark not run yet) may not exist yet.
    missing = [f"line {n}: {path}" for n, path in path_candidates(text)
               if not (ROOT / path).exists() and not (ROOT / f"{path}.py").exists()
               and "pending" not in lines[n - 1].lower()]
    missing += [f"line {n}: {name}" for n, name in module_candidates(text)
                if not resolve_module(name)]
    missing += [f"line {n}: {path} (a command runs it)" for n, path in command_scripts(text)
                if not (ROOT / path).is_file()]
    assert missing == [], f"{page.relative_to(ROOT)} names what does not exist"


def test_every_readme_link_points_at_a_file():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = link_targets(text)
    assert len(targets) >= 10
    assert [f"line {n}: {t}" for n, t in targets if not (ROOT / t).exists()] == []
    # The README leads into the site: every docs page it links is in mkdocs.yml's nav.
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    docs_links = {t.removeprefix("docs/") for _, t in targets if t.startswith("docs/")}
    assert docs_links and all(link in nav for link in docs_links), docs_links


def test_every_benchmarks_index_link_points_at_a_file():
    index = ROOT / "benchmarks" / "README.md"
    targets = link_targets(index.read_text(encoding="utf-8"))
    assert targets
    assert [f"line {n}: {t}" for n, t in targets if not (index.parent / t).exists()] == []
