"""The architecture the folders promise: data flows one way, modules stay small.

Imports are read from the source (every `import` and `from ... import`, also inside functions
and `if TYPE_CHECKING:` blocks), so a cycle that Python tolerates at run time still fails here.
"""

from __future__ import annotations

import ast
import pathlib
from typing import Dict, List, Set

import pytest
from _source_imports import imported_names

PACKAGES = ("bert_tf", "data_tools")
# bert_tf's subpackages in the order data flows through them; a subpackage imports only the
# ones before it. The utilities (the TensorFlow-free core, and install_check's version and
# CPU facts) may be imported by all and import none of them; the entry points
# (run_pretraining, convert_checkpoint, export.__main__, ...) are imported by none.
FLOW = ("bert_tf.text", "bert_tf.data", "bert_tf.modeling", "bert_tf.training",
        "bert_tf.interop", "bert_tf.finetune", "bert_tf.export")
UTILITIES = ("bert_tf.core", "bert_tf.install_check")
# What a TensorFlow-free module must not import (directly or through another module).
HEAVY = ("tensorflow", "tensorflow_text", "keras", "keras_hub", "tf_keras")
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
                candidates = [a.name for a in node.names] + [""]
            else:
                continue
            # "from bert_tf.core import errors, fileio" imports the modules
            # bert_tf.core.errors and bert_tf.core.fileio; a class imported from a module
            # counts as that module.
            found = [t for t in candidates[:-1] if t in files]
            if found:
                targets.update(found)
            elif candidates[-1] in files:
                targets.add(candidates[-1])
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


def test_the_graph_records_every_module_one_import_names(tmp_path):
    package = tmp_path / "bert_tf"
    (package / "core").mkdir(parents=True)
    for rel in ("__init__.py", "core/__init__.py", "core/a.py", "core/b.py"):
        (package / rel).write_text("")
    (package / "user.py").write_text("from bert_tf.core import a, b\n"
                                     "from bert_tf.core.a import Thing\nimport bert_tf.core\n")
    assert import_graph(tmp_path)["bert_tf.user"] == {"bert_tf.core", "bert_tf.core.a",
                                                      "bert_tf.core.b"}


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


def test_utilities_import_no_layer(graph):
    wrong = [f"{m} -> {t}" for m, targets in graph.items() if _layer(m) in UTILITIES
             for t in targets if _layer(t) not in UTILITIES]
    assert wrong == []


# bert_tf/finetune: the parts every task shares (heads, inputs, objectives, the runner, warm
# start, ...) at its top, and one folder per task family. A family imports the shared parts
# and only the families it names here: the scorecard scores the classification, tagging and
# SQuAD tasks, the reranker builds on classification and retrieval; the others import no
# other family.
FINETUNE_SHARED = ("cli", "heads", "inputs", "label_list", "objectives", "probabilities",
                   "runner", "subset", "warm_start")
FINETUNE_FAMILIES = {
    "bert_tf.finetune.classification": (),
    "bert_tf.finetune.tagging": (),
    "bert_tf.finetune.squad": (),
    "bert_tf.finetune.retrieval": (),
    # A cross-encoder is a pair classifier over BEIR data: classification's featurizer,
    # retrieval's BEIR reader, BM25, mining and metrics.
    "bert_tf.finetune.reranking": ("bert_tf.finetune.classification",
                                   "bert_tf.finetune.retrieval"),
    "bert_tf.finetune.scorecard": ("bert_tf.finetune.classification", "bert_tf.finetune.tagging",
                                   "bert_tf.finetune.squad"),
}


def _family(module: str) -> str:
    return next((f for f in FINETUNE_FAMILIES if module == f or module.startswith(f + ".")), "")


def test_finetune_modules_are_shared_or_in_their_family_folder(repo_root):
    root = repo_root / "bert_tf" / "finetune"
    folders = sorted(f"bert_tf.finetune.{p.name}" for p in root.iterdir()
                     if (p / "__init__.py").is_file())
    assert folders == sorted(FINETUNE_FAMILIES)
    top = sorted(p.stem for p in root.glob("*.py") if p.stem != "__init__")
    assert top == sorted(FINETUNE_SHARED)
    # A family's modules carry the family's name where a shared name would mislead (the
    # classification_* modules in classification/, ...); none sits at the top any more.
    stray = sorted(f"{p.relative_to(root)}" for p in root.glob("*.py")
                   for f in FINETUNE_FAMILIES if p.stem.startswith(f.rsplit(".", 1)[1]))
    assert stray == []


def test_finetune_families_import_only_the_families_they_name(graph):
    wrong = [f"{m} -> {t}" for m, targets in graph.items() if _family(m)
             for t in targets if _family(t) and _family(t) != _family(m)
             and _family(t) not in FINETUNE_FAMILIES[_family(m)]]
    assert wrong == []


def test_finetune_shared_parts_import_no_family(graph):
    shared = {f"bert_tf.finetune.{name}" for name in FINETUNE_SHARED}
    wrong = [f"{m} -> {t}" for m in shared for t in graph[m] if _family(t)]
    assert wrong == []


def module_level_imports(path: pathlib.Path) -> List[str]:
    """The modules `path` imports outside any function (also under if/try at the top)."""
    names: List[str] = []
    todo = list(ast.parse(path.read_text(encoding="utf-8")).body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            todo += [n for field in ("body", "orelse", "finalbody", "handlers")
                     for n in getattr(node, field, [])]
        elif isinstance(node, ast.ExceptHandler):
            todo += node.body
    return names


def test_core_imports_nothing_else_of_bert_tf_and_no_tensorflow(repo_root, graph):
    # bert_tf.core is what data_tools and the light bert-tf-data install share with the
    # trainer: it must stay importable without TensorFlow and without the rest of bert_tf.
    core = {m for m in graph if m == "bert_tf.core" or m.startswith("bert_tf.core.")}
    assert {"bert_tf.core.errors", "bert_tf.core.tokenization", "bert_tf.core.schema"} <= core
    assert [f"{m} -> {t}" for m in core for t in graph[m] if t not in core] == []
    # At import time: a function may still defer to TensorFlow where it is installed
    # (fileio's gs:// reads, schema.parsing_spec), which tests/test_data_install.py checks by
    # running the data jobs with TensorFlow unimportable.
    heavy = {str(p.relative_to(repo_root)): names for p in (repo_root / "bert_tf" / "core")
             .glob("*.py") if (names := sorted(n for n in module_level_imports(p)
                                               if n.split(".")[0] in HEAVY))}
    assert heavy == {}


def test_data_tools_imports_only_the_core_of_bert_tf(graph):
    wrong = sorted(f"{m} -> {t}" for m, targets in graph.items()
                   if m.startswith("data_tools") for t in targets
                   if t.startswith("bert_tf") and t != "bert_tf"
                   and not t.startswith("bert_tf.core"))
    assert wrong == []


def test_modules_stay_small(repo_root):
    long = {str(p.relative_to(repo_root)): n for package in PACKAGES
            for p in (repo_root / package).rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}


# data_tools: the entry points at the top, one subpackage per job, and the shared pieces in
# their own subpackages below the jobs. A shared subpackage imports no job and no entry point;
# a job imports no other job (what two jobs share belongs in a shared subpackage).
DATA_SHARED = ("data_tools.inputs", "data_tools.records", "data_tools.runtime",
               "data_tools.shuffle")
DATA_JOBS = ("data_tools.prepare", "data_tools.vocab", "data_tools.pretraining_data",
             "data_tools.embed")


def _data_part(module: str) -> str:
    for part in DATA_SHARED + DATA_JOBS:
        if module == part or module.startswith(part + "."):
            return part
    return module  # data_tools itself or an entry point


def test_data_tools_top_holds_only_the_entry_points(repo_root):
    top = sorted(p.stem for p in (repo_root / "data_tools").glob("*.py") if p.stem != "__init__")
    assert top and all("def console_main(" in (repo_root / "data_tools" / f"{name}.py")
                       .read_text(encoding="utf-8") for name in top), top
    packages = sorted(f"data_tools.{p.name}" for p in (repo_root / "data_tools").iterdir()
                      if (p / "__init__.py").is_file())
    assert packages == sorted(DATA_SHARED + DATA_JOBS)


def test_data_tools_shared_subpackages_sit_below_the_jobs(graph):
    wrong = []
    for module, targets in graph.items():
        if not module.startswith("data_tools."):
            continue
        source = _data_part(module)
        for target in targets:
            if not target.startswith("data_tools."):
                continue
            layer = _data_part(target)
            if source in DATA_SHARED and layer not in DATA_SHARED:
                wrong.append(f"{module} -> {target}")  # a job or an entry point
            elif source in DATA_JOBS and layer != source and layer not in DATA_SHARED:
                wrong.append(f"{module} -> {target}")  # another job or an entry point
    assert wrong == []


def test_only_beam_modules_import_apache_beam(repo_root):
    # Beam is the optional [beam] extra: the modules that need it say so in their name, and
    # nothing else may import it (the local runners must work without it).
    importers = {str(p.relative_to(repo_root)) for package in PACKAGES
                 for p in (repo_root / package).rglob("*.py")
                 if any(m.split(".")[0] == "apache_beam" for m in imported_names(p))}
    assert importers and all("beam" in pathlib.Path(p).stem for p in importers), importers


def test_data_tools_loads_no_module_by_a_computed_name(repo_root):
    # Every module a data job runs is named in an import statement, for readers and tools.
    computed = []
    for p in (repo_root / "data_tools").rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = (func.attr if isinstance(func, ast.Attribute)
                    else func.id if isinstance(func, ast.Name) else "")
            if name in ("import_module", "__import__") and not (
                    node.args and isinstance(node.args[0], ast.Constant)):
                computed.append(f"{p.relative_to(repo_root)}:{node.lineno}")
    assert computed == []


def _private_uses(path: pathlib.Path, targets: Dict[str, str]) -> List[str]:
    """`from m import _x` and `m._x` in `path` for the modules `targets` names."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    aliases: Dict[str, str] = {}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                full = f"{node.module}.{a.name}"
                if full in targets:
                    aliases[a.asname or a.name] = full
                elif node.module in targets and a.name.startswith("_"):
                    found.append(f"{node.module}.{a.name}")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.asname and a.name in targets:
                    aliases[a.asname] = a.name
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                and not node.attr.startswith("__") and isinstance(node.value, ast.Name)
                and node.value.id in aliases):
            found.append(f"{aliases[node.value.id]}.{node.attr}")
    return found


def test_no_private_name_of_data_tools_crosses_a_module(repo_root):
    # What another module (or a test) needs is public; data_tools uses only the public names
    # of bert_tf too.
    modules = {module_name(repo_root, p): str(p) for package in PACKAGES
               for p in (repo_root / package).rglob("*.py")}
    data_tools = {m: p for m, p in modules.items() if m.startswith("data_tools")}
    uses = {}
    for p in (repo_root / "data_tools").rglob("*.py"):
        own = module_name(repo_root, p)
        uses[str(p.relative_to(repo_root))] = [
            u for u in _private_uses(p, modules) if not u.startswith(own + ".")]
    for p in (repo_root / "tests").glob("*.py"):
        uses[str(p.relative_to(repo_root))] = _private_uses(p, data_tools)
    assert {path: found for path, found in uses.items() if found} == {}


def test_tests_import_no_test_module_only_shared_helpers(repo_root):
    # A helper two test files share lives in tests/_<name>.py, never in a test module (or
    # conftest, which pytest loads as a plugin of its own).
    local = {p.stem for p in (repo_root / "tests").glob("*.py")}
    wrong = {}
    for p in (repo_root / "tests").glob("*.py"):
        names = {m.split(".")[0] for m in imported_names(p)} & local
        bad = sorted(n for n in names if not n.startswith("_"))
        if bad:
            wrong[p.name] = bad
    assert wrong == {}


def test_the_suite_order_names_existing_test_files(repo_root):
    from _suite_order import LONGEST_FILES_FIRST

    assert len(set(LONGEST_FILES_FIRST)) == len(LONGEST_FILES_FIRST)
    assert [n for n in LONGEST_FILES_FIRST if not (repo_root / "tests" / n).is_file()] == []
