"""The architecture the folders promise: data flows one way, modules stay small.

Imports are read from the source (every `import` and `from ... import`, also inside functions
and `if TYPE_CHECKING:` blocks), so a cycle that Python tolerates at run time still fails here.
"""

from __future__ import annotations

import ast
import pathlib
from typing import Dict, List, Set

import pytest

PACKAGES = ("bert_tf", "data_tools")
# bert_tf's subpackages in the order data flows through them; a subpackage imports only the
# ones before it. errors and fileio (utilities) may be imported by all; the entry points
# (run_pretraining, convert_checkpoint, export.__main__) by none.
FLOW = ("bert_tf.text", "bert_tf.data", "bert_tf.modeling", "bert_tf.training",
        "bert_tf.interop", "bert_tf.finetune", "bert_tf.export")
UTILITIES = ("bert_tf.errors", "bert_tf.fileio")
MAX_LINES = 420  # "roughly 400"


def module_name(root: pathlib.Path, path: pathlib.Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: pathlib.Path) -> Dict[str, Set[str]]:
    """{module: the package modules it imports}."""
    files = {module_name(root, p): p for package in PACKAGES
             for p in (root / package).rglob("*.py")}
    graph = {}
    for name, path in files.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                candidates = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
            elif isinstance(node, ast.Import):
                candidates = [a.name for a in node.names]
            else:
                continue
            # "from bert_tf.data import schema" imports the module bert_tf.data.schema; a
            # class imported from a module counts as that module.
            for target in candidates:
                if target in files:
                    targets.add(target)
                    break
        # A package's __init__ is imported with each of its modules; ignore that edge.
        graph[name] = {t for t in targets if t != name and not name.startswith(t + ".")}
    return graph


@pytest.fixture(scope="module")
def graph(repo_root) -> Dict[str, Set[str]]:
    return import_graph(repo_root)


def find_cycle(graph: Dict[str, Set[str]]) -> List[str]:
    state: Dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: List[str] = []

    def visit(node: str) -> List[str]:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return path[path.index(target):] + [target]
            if target not in state:
                found = visit(target)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return []


def test_the_checker_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_between_modules(graph):
    assert len(graph) > 60  # the walk found the package
    assert find_cycle(graph) == []


def test_bert_tf_never_imports_data_tools(graph):
    assert [f"{m} -> {t}" for m, targets in graph.items() if m.startswith("bert_tf")
            for t in targets if t.startswith("data_tools")] == []


def _layer(module: str) -> str:
    for layer in FLOW + UTILITIES:
        if module == layer or module.startswith(layer + "."):
            return layer
    return module  # an entry point


def test_subpackages_import_only_earlier_ones(graph):
    wrong = []
    for module, targets in graph.items():
        source = _layer(module)
        if source not in FLOW:
            continue
        for target in targets:
            layer = _layer(target)
            if layer == source or layer in UTILITIES:
                continue
            if layer not in FLOW or FLOW.index(layer) > FLOW.index(source):
                wrong.append(f"{module} -> {target}")
    assert wrong == []


def test_modules_stay_small(repo_root):
    long = {str(p.relative_to(repo_root)): n for package in PACKAGES
            for p in (repo_root / package).rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}
