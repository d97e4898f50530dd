"""The shape of the house: modules depend one way, and none grows past 1,000 lines.

Imports are read from the source (module level and inside functions alike, since a
function-level import is still a dependency); ``from package import name`` counts as
a dependency on the module that defines ``name``, following the package's
re-exports, so the normal "package re-exports its submodules" pattern is not a cycle.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = (("scwork", "scwork"), ("widgets", "scwork.widgets"))
MAX_LINES = 1000


def _modules() -> dict[str, Path]:
    mods = {}
    for folder, package in PACKAGES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = [package, *path.relative_to(ROOT / folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join(parts)] = path
    return mods


MODULES = _modules()
_TREES = {name: ast.parse(path.read_text(encoding="utf-8")) for name, path in MODULES.items()}


def _known(name: str) -> str | None:
    """The longest prefix of a dotted name that is one of our modules."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _absolute(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        base = base.rpartition(".")[0]
    return base + ("." + node.module if node.module else "")


def _defining(module: str, name: str, depth: int = 0) -> str | None:
    """The module that defines ``name`` imported from ``module`` (following re-exports)."""
    full = f"{module}.{name}"
    if full in MODULES:
        return full
    owner = _known(module)
    if owner is None or MODULES[owner].name != "__init__.py" or depth > 8:
        return owner
    for node in _TREES[owner].body:
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    return _defining(_absolute(owner, node), alias.name, depth + 1)
    return owner


def import_graph() -> dict[str, set[str]]:
    graph = {}
    for module, tree in _TREES.items():
        deps = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                deps.update(filter(None, (_known(alias.name) for alias in node.names)))
            elif isinstance(node, ast.ImportFrom):
                source = _absolute(module, node)
                deps.update(filter(None, (_defining(source, alias.name) for alias in node.names)))
        deps.discard(module)
        graph[module] = deps
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph) + 100))
    try:
        for v in sorted(graph):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return found


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_engine_never_imports_the_widgets():
    graph = import_graph()
    engine = [m for m in graph if not m.startswith("scwork.widgets")]
    assert {m: sorted(d for d in graph[m] if d.startswith("scwork.widgets")) for m in engine
            if any(d.startswith("scwork.widgets") for d in graph[m])} == {}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_module_is_under_1000_lines(module):
    lines = MODULES[module].read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_LINES, f"{MODULES[module].relative_to(ROOT)} has {lines} lines; split it along its seams"
