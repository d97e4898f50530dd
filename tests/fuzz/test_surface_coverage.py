"""Structural fuzz coverage: every public callable and every CLI subcommand has a fuzz surface,
or a stated reason it needs none.

The public callables are found, not listed: every subpackage of ``scwork`` (walked
with :mod:`pkgutil`, so a package added later, e.g. a ``scwork.plan``, is picked up)
and the modules of :data:`TOP_LEVEL_MODULES`, through their ``__all__`` (submodules an
``__all__`` names, as ``scwork.interop``'s, are walked too). A name re-exported in
several places is one callable; any of its public names may declare it. Exceptions
are left out (they take no user data). The CLI subcommands come from
``scwork.cli.build_parser()``.

A fuzz module declares what it drives in a module-level ``SURFACES`` dict: public name
(``"scwork.layout.parse"``, or ``"scwork <command>"``) -> the label of the
:func:`scwork.testing.check_surface` cases that drive it. A declaration counts only when
the label is one the module really uses (a string, or an f-string whose pattern
matches it) and the callable's own name appears in the module outside the dict, or,
for a callable the cases reach through another one (an algorithm builder through
``build(name)``, a config class through ``parse_config``), when the value is a
``(label, "reached through ...")`` pair saying how.

A callable with no surface must be in :data:`NO_SURFACE` with the reason it needs
none. The test fails naming every callable that has neither.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import scwork

HERE = Path(__file__).resolve().parent

#: Top-level modules (not packages) whose ``__all__`` is checked too.
TOP_LEVEL_MODULES = ("scwork.summary", "scwork.config")
#: Subpackages that are not engine input surfaces.
SKIPPED_PACKAGES = {
    "scwork.widgets": "the Jupyter layer: it holds no model logic and passes controls to engine objects "
                      "(tests/widgets, tests/browser)",
}

_RESULT = "a result type: scwork builds it from inputs checked by the surface of {0}; users read it"
_RECORD = "a plain record of a reader's output ({0}); its fields come from parsed, checked text"

#: Public callables without a fuzz surface of their own, and why none is needed.
NO_SURFACE: dict[str, str] = {
    # result and record types
    "scwork.collectives.Execution": _RESULT.format("scwork.collectives.execute"),
    "scwork.collectives.Transfer": _RESULT.format("scwork.collectives.build (a Schedule's transfers)"),
    "scwork.datasets.SyntheticData": _RESULT.format("scwork.datasets.synthetic"),
    "scwork.interop.xla_dump.Allocation": _RECORD.format("read_xla_dump"),
    "scwork.interop.xla_dump.BufferValue": _RECORD.format("read_xla_dump"),
    "scwork.interop.xla_dump.HloInstruction": _RECORD.format("read_xla_dump"),
    "scwork.interop.xla_dump.PaddingCheck": _RESULT.format("parse_oom_message (OomReport.checks)"),
    "scwork.layout.view.ViewGeometry": _RESULT.format("scwork.layout.view.view_window"),
    "scwork.layout.npu.NpuStrides": _RESULT.format("scwork.layout.npu.local_layout"),
    "scwork.memory.Event": _RESULT.format("scwork.memory.plan (its timeline)"),
    "scwork.memory.Interval": _RESULT.format("scwork.memory.plan (its timeline)"),
    "scwork.memory.Finding": _RESULT.format("scwork.memory.plan (its findings)"),
    "scwork.memory.Fix": _RESULT.format("scwork.memory.plan (its findings)"),
    "scwork.memory.Timeline": _RESULT.format("scwork.memory.plan"),
    "scwork.pipeline.Interval": _RESULT.format("scwork.pipeline.step_model"),
    "scwork.pipeline.Timeline": _RESULT.format("scwork.pipeline.step_model"),
    "scwork.pipeline.MeasuredTrace": _RESULT.format("scwork.pipeline.read_trace"),
    "scwork.pipeline.StepModel": _RESULT.format("scwork.pipeline.step_model"),
    "scwork.sharding.CsrBuffers": _RESULT.format("scwork.sharding.preprocess"),
    "scwork.sharding.PreprocessResult": _RESULT.format("scwork.sharding.preprocess"),
    "scwork.sharding.DatasetStats": _RESULT.format("scwork.sharding.stats_over_dataset"),
    "scwork.sharding.MinibatchCounts": _RESULT.format("scwork.sharding.compute_stats"),
    "scwork.sharding.Stack": _RESULT.format("scwork.sharding.plan_stacking"),
    "scwork.sharding.StackingPlan": _RESULT.format("scwork.sharding.plan_stacking"),
    "scwork.sharding.TableInStack": _RESULT.format("scwork.sharding.plan_stacking; hand-built ones check "
                                                   "num_partitions and reduce shard_rotation mod P"),
    "scwork.sharding.sok.OwnerGradients": _RESULT.format("scwork.sharding.sok.backward"),
    "scwork.sharding.MiniBatchPlan": _RESULT.format("scwork.sharding.minibatch"),
    "scwork.plan.PlanCandidate": _RESULT.format("scwork.plan.search"),
    "scwork.plan.PlanSearchResult": _RESULT.format("scwork.plan.search"),
    "scwork.advisor.Advice": _RESULT.format("scwork.advisor.advise"),
    "scwork.advisor.Finding": _RESULT.format("scwork.advisor.advise"),
    "scwork.sharding.TunedLimits": _RESULT.format("scwork.sharding.tune_limits"),
    "scwork.sharding.release_buffers": "takes no arguments (frees the engine's cached scratch buffers)",
    "scwork.hardware.TpuChip": "catalog entries: built from scwork's own catalog; user changes go through "
                               "scwork.hardware.override",
    "scwork.hardware.NpuChip": "catalog entries: built from scwork's own catalog",
    "scwork.pipeline.Units": "a constant table of unit names and scales; takes nothing",
}

#: Callables that take user data but have no fuzz surface yet: a known gap, not a reason. Each must
#: get a surface (then leave this table); the test lists them so the gap stays visible.
KNOWN_GAPS: dict[str, str] = {}


def _packages() -> list[str]:
    names = [f"scwork.{m.name}" for m in pkgutil.iter_modules(scwork.__path__) if m.ispkg]
    return [n for n in names if n not in SKIPPED_PACKAGES] + list(TOP_LEVEL_MODULES)


def public_callables() -> dict[int, list[str]]:
    """``id(callable) -> [public names]`` over every package's (and named submodule's) ``__all__``."""
    found: dict[int, list[str]] = {}
    keep = _KEEP       # holds the objects so their ids stay theirs

    def walk(module_name: str, seen: set[str]) -> None:
        if module_name in seen:
            return
        seen.add(module_name)
        module = importlib.import_module(module_name)
        for attr in getattr(module, "__all__", ()):
            obj = getattr(module, attr)
            if inspect.ismodule(obj):
                walk(obj.__name__, seen)
            elif callable(obj) and not (inspect.isclass(obj) and issubclass(obj, BaseException)):
                keep.append(obj)
                found.setdefault(id(obj), []).append(f"{module_name}.{attr}")

    seen: set[str] = set()
    for package in _packages():
        walk(package, seen)
    return found


_KEEP: list = []


def cli_commands() -> list[str]:
    """``"scwork <command>"`` for every subcommand of the argparse parser."""
    import argparse

    from scwork.cli import build_parser

    parser = build_parser()
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return sorted(f"scwork {name}" for action in actions for name in action.choices)


def _label_patterns(tree: ast.AST, skip: ast.AST | None) -> list[re.Pattern]:
    """Every string and f-string of a module (outside ``skip``) as a regex a label must match."""
    skipped = {id(n) for n in ast.walk(skip)} if skip is not None else set()
    patterns = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            patterns.append(re.compile(re.escape(node.value)))
        elif isinstance(node, ast.JoinedStr):
            parts = [re.escape(v.value) if isinstance(v, ast.Constant) else r".+" for v in node.values]
            patterns.append(re.compile("".join(parts)))
            for v in node.values:
                skipped.update(id(n) for n in ast.walk(v))
    return patterns


def _names_used(tree: ast.AST, skip: ast.AST | None) -> set[str]:
    skipped = {id(n) for n in ast.walk(skip)} if skip is not None else set()
    used = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Name):
            used.add(node.id)
        elif isinstance(node, ast.Attribute):
            used.add(node.attr)
        elif isinstance(node, ast.alias):
            used.add(node.asname or node.name.rsplit(".", 1)[-1])
            used.add(node.name.rsplit(".", 1)[-1])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            used.update(re.findall(r"\w+", node.value))
    return used


def declared_surfaces() -> dict[str, list[tuple[str, str, bool, bool]]]:
    """Public name -> ``[(fuzz module, label, label used there, name referenced there)]``."""
    out: dict[str, list] = {}
    for path in sorted(HERE.glob("test_fuzz_*.py")):
        tree = ast.parse(path.read_text(), str(path))
        node = next((n for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                     and any(isinstance(t, ast.Name) and t.id == "SURFACES"
                             for t in (n.targets if isinstance(n, ast.Assign) else [n.target]))), None)
        if node is None:
            continue
        surfaces = ast.literal_eval(node.value)
        patterns = _label_patterns(tree, node)
        used = _names_used(tree, node)
        for name, value in surfaces.items():
            label, via = value if isinstance(value, tuple) else (value, "")
            short = name.split()[-1].rsplit(".", 1)[-1]
            out.setdefault(name, []).append((path.name, label, any(p.fullmatch(label) for p in patterns),
                                             short in used or via.startswith("reached through ")))
    return out


def coverage_problems() -> list[str]:
    """One line per public callable or subcommand without a surface or a reason (and per stale entry)."""
    callables = public_callables()
    declared = declared_surfaces()
    public = {n for names in callables.values() for n in names}
    problems = []
    for names in sorted(callables.values()):
        reasons = [n for n in names if n in NO_SURFACE or n in KNOWN_GAPS]
        good = [(n, d) for n in names for d in declared.get(n, ()) if d[2] and d[3]]
        if good or reasons:
            continue
        broken = [(n, d) for n in names for d in declared.get(n, ())]
        if broken:
            for n, (module, label, label_used, referenced) in broken:
                problems.append(f"{n}: {module} declares surface {label!r} but "
                                + ("never uses that label" if not label_used else f"never refers to "
                                                                                     f"{n.rsplit('.', 1)[-1]}"))
        else:
            problems.append(f"{names[0]}: no fuzz surface in tests/fuzz (declare it in a test_fuzz_*.py module's "
                            "SURFACES) and no reason in NO_SURFACE"
                            + (f" (also public as {', '.join(names[1:])})" if len(names) > 1 else ""))
    for command in cli_commands():
        if not any(d[2] and d[3] for d in declared.get(command, ())):
            problems.append(f"{command}: the CLI subcommand has no fuzz surface (declare {command!r} in "
                            "tests/fuzz/test_fuzz_cli.py's SURFACES)")
    # Declarations and reasons must name things that exist (a renamed callable leaves a stale entry).
    commands = set(cli_commands())
    for name in sorted(set(declared) | set(NO_SURFACE) | set(KNOWN_GAPS)):
        if name not in public and name not in commands:
            problems.append(f"{name}: declared or listed, but not a public callable or CLI subcommand")
    return problems


def test_every_public_callable_and_subcommand_has_a_surface_or_a_reason():
    problems = coverage_problems()
    assert not problems, "fuzz coverage:\n" + "\n".join(problems)


def test_the_walk_finds_packages_added_later(monkeypatch, tmp_path):
    """A new subpackage (e.g. scwork.plan) and its public callables are picked up without listing them."""
    package = tmp_path / "scwork_extra" / "newthing"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("__all__ = ['search']\n\ndef search(text):\n    return text\n")
    monkeypatch.setattr(scwork, "__path__", [*scwork.__path__, str(tmp_path / "scwork_extra")])
    import sys

    monkeypatch.delitem(sys.modules, "scwork.newthing", raising=False)
    names = {n for names in public_callables().values() for n in names}
    assert "scwork.newthing.search" in names
    problems = coverage_problems()
    assert [p for p in problems if p.startswith("scwork.newthing.search: no fuzz surface")], problems
