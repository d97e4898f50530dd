"""The shape of the house: modules depend one way, the engine never imports the widgets,
and the map in CONTRIBUTING.md names every module (and only modules that exist).

Imports are read from the source (module level and inside functions alike, since a
function-level import is still a dependency); ``from package import name`` counts as
a dependency on the module that defines ``name``, following the package's
re-exports, so the normal "package re-exports its submodules" pattern is not a cycle.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
PACKAGES = (("scwork", "scwork"), ("widgets", "scwork.widgets"))
CONTRIBUTING = ROOT / "CONTRIBUTING.md"


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


def map_key(path: Path) -> str:
    """How CONTRIBUTING.md's map names a module: its path under ``scwork/`` (or from ``widgets/``), no ``.py``."""
    relative = path.relative_to(ROOT)
    if relative.parts[0] == "scwork":
        relative = relative.relative_to("scwork")
    return relative.with_suffix("").as_posix()


def names_in_map(text: str) -> set[str]:
    """Every backticked module path of the map section of CONTRIBUTING.md."""
    start = text.index("## The map")
    end = text.find("\n## ", start + 1)
    section = text[start:] if end < 0 else text[start:end]
    return set(re.findall(r"`([A-Za-z_](?:[\w/]*\w)?)`", section))


def test_the_map_names_every_module():
    named = names_in_map(CONTRIBUTING.read_text(encoding="utf-8"))
    missing = sorted(map_key(path) for path in MODULES.values() if map_key(path) not in named)
    assert not missing, f"CONTRIBUTING.md's map does not name these modules (add each to its step): {missing}"


def test_the_map_names_only_modules_that_exist():
    keys = {map_key(path) for path in MODULES.values()}
    named = names_in_map(CONTRIBUTING.read_text(encoding="utf-8"))
    # Backticked names with a slash, or known top-level names, must be modules; the map
    # also quotes function names such as `plan` or `advise`, which have no slash.
    stale = sorted(n for n in named if "/" in n and n not in keys)
    assert not stale, f"CONTRIBUTING.md's map names modules that do not exist: {stale}"


def test_map_keys_and_the_map_reader():
    assert map_key(ROOT / "scwork" / "sharding" / "batch.py") == "sharding/batch"
    assert map_key(ROOT / "widgets" / "_zoom.py") == "widgets/_zoom"
    assert names_in_map("x `a/b`\n## The map\n`c/d` and `e`\n## Next\n`f/g`") == {"c/d", "e"}


def first_line_problem(path: Path) -> str | None:
    """Why the first docstring line of a module does not name its idea in one short sentence."""
    doc = ast.get_docstring(_TREES[next(m for m, p in MODULES.items() if p == path)], clean=False)
    if not doc:
        return "no module docstring"
    first = doc.split("\n", 1)[0]
    if len(first) + 3 >= 100:            # with the opening quotes, as the line is read
        return f"first line is {len(first) + 3} characters (under 100, please)"
    rest = doc.split("\n", 1)[1] if "\n" in doc else ""
    if rest and rest.strip() and not rest.startswith("\n"):
        return "the first sentence runs on to the next line (leave a blank line after it)"
    return None


def test_every_module_names_its_idea_in_a_first_line_under_100_characters():
    problems = {map_key(path): first_line_problem(path) for path in MODULES.values()}
    wrong = {k: v for k, v in problems.items() if v}
    assert not wrong, wrong


# Lines of code of a function, its docstring left out.
MAX_FUNCTION_LINES = 120
MAX_LINE_CHARACTERS = 120


def _is_numba_kernel(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether a decorator's name contains "jit": such kernels stay whole so numba compiles one loop nest."""
    return any("jit" in ast.unparse(decorator) for decorator in node.decorator_list)


def _code_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines of a function without its docstring: numpydoc text and examples are not steps to split."""
    lines = node.end_lineno - node.lineno + 1
    first = node.body[0]
    if len(node.body) > 1 and isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
            and isinstance(first.value.value, str):
        lines -= first.end_lineno - first.lineno + 1
    return lines


def long_functions(tree: ast.Module, where: str, limit: int = MAX_FUNCTION_LINES) -> dict[str, int]:
    """``{"where:Qualified.name": lines}`` for each function over ``limit`` lines that is no numba kernel."""
    found: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = prefix + child.name
                if not isinstance(child, ast.ClassDef) and not _is_numba_kernel(child):
                    lines = _code_lines(child)
                    if lines > limit:
                        found[f"{where}:{name}"] = lines
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


def _where(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_no_function_outside_numba_kernels_is_over_120_lines():
    found: dict[str, int] = {}
    for name, path in MODULES.items():
        found.update(long_functions(_TREES[name], _where(path)))
    assert not found, f"split these into named steps (at most {MAX_FUNCTION_LINES} lines each): {found}"


def test_the_long_function_finder_skips_kernels_and_names_methods():
    body = "\n".join(["    x = 1"] * 5)
    source = f"class A:\n    def m(self):\n    {body.replace(chr(10), chr(10) + '    ')}\n" \
             f"@jit\ndef k():\n{body}\n" \
             f"@numba.njit(cache=True)\ndef k2():\n{body}\n" \
             f"def f():\n{body}\n" \
             f"def short():\n    return 1\n"
    assert long_functions(ast.parse(source), "m.py", limit=4) == {"m.py:A.m": 6, "m.py:f": 6}


def test_no_line_of_the_engine_or_widgets_is_over_120_characters():
    long_lines = [
        f"{_where(path)}:{number}"
        for path in MODULES.values()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if len(line) > MAX_LINE_CHARACTERS
    ]
    assert not long_lines, f"wrap these lines (at most {MAX_LINE_CHARACTERS} characters): {long_lines}"
