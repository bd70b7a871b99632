"""Which flags a command requires, read from its source (for scripts/cli_reference.py).

A flag is required when the command marks it with absl's `flags.mark_flag_as_required` /
`flags.mark_flags_as_required`, or when its code raises `UserError("--NAME is required ...")`
in the entry module or any bert_tf / data_tools module that module imports (at its top or
inside a function). Most entry points check their flags themselves, to give the project's
one-line error rather than absl's, so the messages are where the truth is. The text after
"is required", when it names another flag ("with --do_train"), is the condition under
which the flag is needed.

The names in a message are read when the code states them plainly: a string literal, or an
f-string over a loop variable of a literal tuple (`for name in ("a", "b"):`) or over a
parameter of a helper called with string constants (`_required("output_dir")`).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set, Tuple

ROOT = Path(__file__).resolve().parent.parent
OWN_PACKAGES = ("bert_tf", "data_tools")
REQUIRED_MESSAGE = re.compile(r"^--(?P<name>[A-Za-z0-9_]+) is required(?P<when>.*)$", re.S)


def module_file(name: str, root: Path = ROOT) -> Optional[Path]:
    """The source file of a bert_tf / data_tools module or package, or None."""
    base = root.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def imported_modules(tree: ast.AST, module: str, root: Path = ROOT) -> Set[str]:
    """The bert_tf / data_tools modules a module imports anywhere (function-level too).

    `from pkg import name` counts `pkg` and, when it is a module, `pkg.name`.
    """
    path = module_file(module, root)
    # A package's __init__ resolves `from . import x` against itself, a module against its
    # package.
    package = (module if path is not None and path.name == "__init__.py"
               else module.rsplit(".", 1)[0])
    found: Set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[:len(parts) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {name for name in found
            if name.split(".", 1)[0] in OWN_PACKAGES and module_file(name, root) is not None}


def import_closure(entry: str, root: Path = ROOT) -> Dict[str, ast.AST]:
    """The parsed source of `entry` and of every own module it imports, transitively."""
    trees: Dict[str, ast.AST] = {}
    pending = [entry]
    while pending:
        name = pending.pop()
        path = module_file(name, root)
        if name in trees or path is None:
            continue
        trees[name] = ast.parse(path.read_text(encoding="utf-8"), str(path))
        pending.extend(imported_modules(trees[name], name, root) - set(trees))
    return trees


def _parents(tree: ast.AST) -> Dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _string_items(node: ast.AST) -> Optional[List[str]]:
    """The strings of a tuple/list/set literal of string constants, else None."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and all(
            isinstance(item, ast.Constant) and isinstance(item.value, str)
            for item in node.elts):
        return [item.value for item in node.elts]
    return None


def _values_of(name: str, node: ast.AST, parents: Dict[ast.AST, ast.AST],
               tree: ast.AST) -> List[str]:
    """The strings a variable used at `node` can hold, when the code says so plainly.

    Two forms: a loop over a literal (`for name in ("a", "b"):`), and a parameter of the
    enclosing function whose every call in the module passes a string constant
    (`_required("output_dir")`). Anything else gives [].
    """
    scope = parents.get(node)
    while scope is not None:
        if (isinstance(scope, ast.For) and isinstance(scope.target, ast.Name)
                and scope.target.id == name):
            return _string_items(scope.iter) or []
        if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if name not in [arg.arg for arg in scope.args.args]:
                return []
            index = [arg.arg for arg in scope.args.args].index(name)
            values = []
            for call in ast.walk(tree):
                if (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                        and call.func.id == scope.name and len(call.args) > index
                        and isinstance(call.args[index], ast.Constant)
                        and isinstance(call.args[index].value, str)):
                    values.append(call.args[index].value)
            return values
        scope = parents.get(scope)
    return []


def _message_texts(node: ast.AST, parents: Dict[ast.AST, ast.AST],
                   tree: ast.AST) -> Iterator[str]:
    """The texts a string, a variable or an f-string (one variable at most) can take."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node.value
        return
    if isinstance(node, ast.Name):
        yield from _values_of(node.id, node, parents, tree)
        return
    if not isinstance(node, ast.JoinedStr):
        return
    holes = [part for part in node.values if isinstance(part, ast.FormattedValue)]
    if len(holes) != 1 or not isinstance(holes[0].value, ast.Name):
        return
    for value in _values_of(holes[0].value.id, node, parents, tree):
        yield "".join(value if isinstance(part, ast.FormattedValue) else str(part.value)
                      for part in node.values)


def required_in_module(tree: ast.AST) -> List[Tuple[str, str]]:
    """(flag, condition) for each requirement the module states; condition "" = always.

    A requirement is a `flags.mark_flag_as_required(NAME)` /
    `flags.mark_flags_as_required([...])` call, or a message starting "--NAME is required"
    raised as a `UserError`.
    """
    parents = _parents(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if called == "mark_flag_as_required" and node.args:
            found += [(name, "") for name in _message_texts(node.args[0], parents, tree)]
        elif called == "mark_flags_as_required" and node.args:
            found += [(name, "") for name in _string_items(node.args[0]) or []]
        elif called == "UserError" and node.args:
            for text in _message_texts(node.args[0], parents, tree):
                match = REQUIRED_MESSAGE.match(text)
                if match:
                    found.append((match["name"], condition(match["when"])))
    return found


def condition(when: str) -> str:
    """The condition in the text after "is required", "" when it states none.

    A condition names another flag ("with --do_train", "(no vocab.txt beside
    --init_checkpoint)"); a remark that names none ("(true for uncased vocabularies)") is
    advice on the value, and the flag is required always.
    """
    when = " ".join(when.split())
    return when if re.search(r"--[A-Za-z0-9_]", when) else ""


def required_flags(entry: str, flag_names: Set[str],
                   root: Path = ROOT) -> Dict[str, str]:
    """{flag: condition} of the flags `entry` requires; condition "" = always required.

    Only flags in `flag_names` (the command's) count, and only conditions that name no
    other flag than those: the modules a command imports may state another command's
    requirement ("--bert_config_file is required without --init_checkpoint" belongs to a
    command that has --init_checkpoint). A flag required unconditionally anywhere is shown
    so; otherwise its conditions are joined with "; ".
    """
    conditions: Dict[str, List[str]] = {}
    for tree in import_closure(entry, root).values():
        for name, when in required_in_module(tree):
            named = set(re.findall(r"--([A-Za-z0-9_]+)", when))
            if name not in flag_names or not named <= flag_names:
                continue
            conditions.setdefault(name, [])
            if when not in conditions[name]:
                conditions[name].append(when)
    return {name: "" if "" in whens else "; ".join(sorted(whens))
            for name, whens in conditions.items()}
