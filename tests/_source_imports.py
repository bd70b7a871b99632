"""What a Python source file imports, read from its text (for the layout and packaging tests)."""

from __future__ import annotations

import ast
import pathlib
from typing import Set


def imported_names(path: pathlib.Path) -> Set[str]:
    """Every module an `import` in the file names (also inside functions), and for `from m
    import x` also `m.x` (x may be a module)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names}
    return names
