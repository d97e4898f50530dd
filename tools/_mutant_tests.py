"""The test command of one mutant: run only the tests that execute the mutated lines.

``tools/mutation.py`` runs this in a module's work copy (``.mutation/<module>/``), in
two steps:

``map MODULE TEST...``
    Run the module's test files once, unmutated, recording with ``sys.monitoring``
    which lines of ``MODULE`` every test executes (setup, call and teardown; lines run
    while a class-, module- or session-scoped fixture is set up count for every test
    that uses it; caches of ``scwork`` functions are cleared before each test so a
    cached result hides no line). Lines run outside any test (imports, collection,
    module constants) are recorded apart. Writes ``mutant_tests.json`` beside a
    pristine copy of the module, ``mutant_pristine.py``, and fails if a test fails.

``run``
    The test command cosmic-ray runs for each mutant: compare the mutated module with
    the pristine copy, widen each changed line to its statement (a compound
    statement: its header only), and run ``pytest -x`` on the tests that execute one
    of those lines, fastest first. A statement that runs at import time (a module
    constant, a default argument, a decorator) runs every test of the module's files.
    A statement no test executes is a survivor without running anything: no test
    could kill it, a coverage gap.

Why this gives the full run's verdict: a mutation changes behaviour only when its
statement executes, so a test that never executes it passes against the mutant as it
passes against the original (the map is taken with the kernels as plain Python, as the
mutants run). Checked by ``python tools/mutation.py MODULE --verify N``, which re-runs
N mutants of a finished session with the module's whole test files and compares
verdicts: on ``scwork/sharding/_reference.py`` 40 of 40 agreed (see CONTRIBUTING.md
for the timing). What it cannot see: a test that depends on an earlier test's side
effect (none should), and lines run in a subprocess a test starts.
"""

from __future__ import annotations

import ast
import difflib
import json
import os
import signal
import sys
import time
from pathlib import Path

MAP = "mutant_tests.json"
PRISTINE = "mutant_pristine.py"
SOCKET = "mutant_tests.sock"
#: What the fork server imports once, so a mutant's pytest starts without them (never scwork). Forking
#: after these is safe with one BLAS thread (OPENBLAS_NUM_THREADS=1, set by tools/mutation.py); pandas
#: brings pyarrow, whose one idle thread has fork handlers. --verify checks the verdicts anyway.
PRELOAD = ["pytest", "numpy", "pandas", "xarray", "scipy", "numba", "hypothesis", "_pytest.python",
           "_pytest.doctest"]
PYTEST_ARGS = ["-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "--no-header",
               "-o", "addopts=--import-mode=importlib --benchmark-disable"]


def _hookimpl(**kwargs):
    from pluggy import HookimplMarker          # what pytest.hookimpl is, without importing pytest

    return HookimplMarker("pytest")(**kwargs)


class _LineRecorder:
    """A pytest plugin recording which lines of one file each test executes."""

    def __init__(self, target: Path) -> None:
        self.target = str(target.resolve())
        self.outside: set[int] = set()        # lines run outside any test
        self.per_test: dict[str, set[int]] = {}
        self.per_fixture: dict[int, set[int]] = {}
        self.durations: dict[str, float] = {}
        self.items = []
        self.failed: set[str] = set()
        self.current = self.outside
        mon = sys.monitoring
        self.tool = mon.COVERAGE_ID
        mon.use_tool_id(self.tool, "mutant_tests")
        mon.register_callback(self.tool, mon.events.LINE, self._line)
        mon.set_events(self.tool, mon.events.LINE)

    def _line(self, code, line):
        if code.co_filename != self.target:
            return sys.monitoring.DISABLE
        self.current.add(line)
        return sys.monitoring.DISABLE            # seen in this context; re-armed on a switch

    def _switch(self, lines: set[int]) -> None:
        self.current = lines
        sys.monitoring.restart_events()

    def close(self) -> None:
        sys.monitoring.set_events(self.tool, 0)
        sys.monitoring.free_tool_id(self.tool)

    # pytest hooks
    def pytest_collection_modifyitems(self, items):
        self.items = list(items)

    @_hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item):
        _clear_caches()
        self._switch(self.per_test.setdefault(item.nodeid, set()))
        self.durations[item.nodeid] = time.perf_counter()

    @_hookimpl(tryfirst=True)
    def pytest_runtest_call(self, item):
        self._switch(self.per_test.setdefault(item.nodeid, set()))

    @_hookimpl(tryfirst=True)
    def pytest_runtest_teardown(self, item, nextitem):
        self._switch(self.per_test.setdefault(item.nodeid, set()))

    def pytest_runtest_logreport(self, report):
        if report.failed:
            self.failed.add(report.nodeid)

    def pytest_runtest_logfinish(self, nodeid, location):
        self.durations[nodeid] = time.perf_counter() - self.durations.get(nodeid, time.perf_counter())
        self._switch(self.outside)


def _fixture_hooks(recorder: _LineRecorder):
    """``pytest_fixture_setup`` as a hook wrapper, so the context switches back after the fixture ran."""

    class Wrap:
        @_hookimpl(wrapper=True)
        def pytest_fixture_setup(self, fixturedef, request):
            if fixturedef.scope == "function":
                return (yield)
            previous = recorder.current
            recorder._switch(recorder.per_fixture.setdefault(id(fixturedef), set()))
            try:
                return (yield)
            finally:
                recorder._switch(previous)

    return Wrap()


def _clear_caches() -> None:
    """Empty the ``functools`` caches of every loaded scwork module, so no test skips a line another ran."""
    for name, module in list(sys.modules.items()):
        if not (name == "scwork" or name.startswith("scwork.")) or module is None:
            continue
        for value in list(vars(module).values()):
            clear = getattr(value, "cache_clear", None)
            if callable(clear) and getattr(value, "__module__", None) == name:
                clear()


def build_map(module: str, tests: list[str], leave_out_failing: bool = False) -> int:
    """The line map; ``leave_out_failing``: a test failing on the unmutated module is left out, not an error.

    ``--recheck`` of a module changed since its run maps the module as it was mutated
    against the current tests; a test written for the change fails there and can tell
    no mutant apart, so it is left out (and named).
    """
    import pytest

    args = [a for a in PYTEST_ARGS if a != "-x"] if leave_out_failing else PYTEST_ARGS
    recorder = _LineRecorder(Path(module))
    try:
        code = pytest.main([*args, *tests], plugins=[recorder, _fixture_hooks(recorder)])
    finally:
        recorder.close()
    if code != 0 and not (leave_out_failing and code == 1):
        print(f"mutant_tests: the unmutated tests of {module} fail (pytest exit {code})", file=sys.stderr)
        return int(code)
    for nodeid in sorted(recorder.failed):
        print(f"mutant_tests: left out, fails on the unmutated module: {nodeid}")
    recorder.items = [item for item in recorder.items if item.nodeid not in recorder.failed]
    lines: dict[int, list[int]] = {}
    order = sorted(range(len(recorder.items)),
                   key=lambda i: recorder.durations.get(recorder.items[i].nodeid, 0.0))
    node_ids = [recorder.items[i].nodeid for i in order]
    for index, i in enumerate(order):
        item = recorder.items[i]
        covered = set(recorder.per_test.get(item.nodeid, ()))
        for defs in getattr(item, "_fixtureinfo").name2fixturedefs.values():
            for fixturedef in defs:
                covered |= recorder.per_fixture.get(id(fixturedef), set())
        for line in covered:
            lines.setdefault(line, []).append(index)
    Path(MAP).write_text(json.dumps({
        "module": module, "tests": tests, "node_ids": node_ids,
        "seconds": [round(recorder.durations.get(n, 0.0), 4) for n in node_ids],
        "outside": sorted(recorder.outside), "lines": {str(k): v for k, v in sorted(lines.items())},
    }))
    Path(PRISTINE).write_text(Path(module).read_text())
    print(f"mutant_tests: {len(node_ids)} tests, {len(lines)} lines of {module} executed by a test, "
          f"{len(recorder.outside)} outside tests")
    return 0


def changed_lines(pristine: str, mutated: str) -> set[int]:
    """Lines (1-based, of the pristine text) the mutation replaced or removed, or the line an insertion follows."""
    a, b = pristine.splitlines(), mutated.splitlines()
    out: set[int] = set()
    for tag, i1, i2, _, _ in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        out.update(range(i1 + 1, i2 + 1) if i2 > i1 else {max(i1, 1)})
    return out


def statement_lines(tree: ast.AST, line: int) -> range:
    """The lines of the innermost statement holding ``line``; a compound statement's header only."""
    best: ast.stmt | None = None
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and node.lineno <= line <= (node.end_lineno or node.lineno):
            if best is None or node.lineno >= best.lineno and (node.end_lineno or 0) <= (best.end_lineno or 0):
                best = node
    if best is None:
        return range(line, line + 1)
    start = min([best.lineno] + [d.lineno for d in getattr(best, "decorator_list", [])])
    end = best.end_lineno or best.lineno
    bodies = [getattr(best, f) for f in ("body", "orelse", "finalbody", "handlers", "cases")
              if isinstance(getattr(best, f, None), list) and getattr(best, f)]
    if bodies:
        end = min(b[0].lineno for b in bodies) - 1
        end = max(end, best.lineno)
    return range(start, end + 1)


def select(map_data: dict, pristine: str, mutated: str) -> list[str] | None:
    """Node ids to run for this mutant, fastest first; ``None``: every test of the module's files."""
    tree = ast.parse(pristine)
    wanted: set[int] = set()
    for line in changed_lines(pristine, mutated):
        wanted.update(statement_lines(tree, line))
    outside = set(map_data["outside"])
    if wanted & outside:
        return None
    indices: set[int] = set()
    for line in wanted:
        indices.update(map_data["lines"].get(str(line), ()))
    return [map_data["node_ids"][i] for i in sorted(indices)]


def run_mutant() -> int:
    map_data = json.loads(Path(MAP).read_text())
    module = map_data["module"]
    chosen = select(map_data, Path(PRISTINE).read_text(), Path(module).read_text())
    if chosen is None:
        targets, what = map_data["tests"], "every test (the mutated statement runs at import)"
        seconds = sum(map_data["seconds"])
    elif not chosen:
        print("mutant_tests: no test executes the mutated statement: survived, not run")
        return 0
    else:
        targets, what = chosen, f"{len(chosen)} test(s) executing the mutated statement"
        index = {n: i for i, n in enumerate(map_data["node_ids"])}
        seconds = sum(map_data["seconds"][index[n]] for n in chosen)
    # A mutant that loops forever is killed, as cosmic-ray's own timeout would, but after
    # ten times what its tests took unmutated (plus the start-up) instead of a fixed limit.
    signal.alarm(int(60 + 10 * seconds))
    print(f"mutant_tests: running {what}, at most {int(60 + 10 * seconds)} s", flush=True)
    import pytest

    return int(pytest.main([*PYTEST_ARGS, *targets]))


def serve() -> int:
    """Fork server: import the heavy third-party modules once, fork a fresh child per mutant.

    A mutant's own test process then only imports scwork (mutated) and the test files.
    The child is killed when the client goes away (cosmic-ray's timeout kills the
    client's process group, which the forked child is not in).
    """
    import importlib
    import select as select_
    import socket
    import warnings

    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    assert not any(m == "scwork" or m.startswith("scwork.") for m in sys.modules), "the server must not import scwork"
    path = Path(SOCKET)
    path.unlink(missing_ok=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    children: set[int] = set()
    try:
        while True:
            conn, _ = server.accept()
            with conn:
                if conn.recv(16) != b"run":
                    continue
                with warnings.catch_warnings():            # pyarrow's idle thread: see PRELOAD
                    warnings.simplefilter("ignore", DeprecationWarning)
                    pid = os.fork()
                if pid == 0:                                   # the child: one mutant's tests
                    server.close()
                    os.setsid()
                    out = os.open("mutant_tests.out", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
                    os.dup2(out, 1)
                    os.dup2(out, 2)
                    code = 1
                    try:
                        code = run_mutant()
                    finally:
                        sys.stdout.flush()
                        os._exit(code)
                children.add(pid)
                while True:
                    done, status = os.waitpid(pid, os.WNOHANG)
                    if done:
                        conn.sendall(str(os.waitstatus_to_exitcode(status)).encode())
                        break
                    readable, _, _ = select_.select([conn], [], [], 0.05)
                    if readable and not conn.recv(16):         # the client is gone: timed out
                        os.killpg(pid, signal.SIGKILL)
                        os.waitpid(pid, 0)
                        break
                children.discard(pid)
    finally:
        for pid in children:                                   # stopped mid-mutant
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        path.unlink(missing_ok=True)


def client() -> int:
    """``run`` through the fork server when one listens here, else in this process."""
    import socket

    if Path(SOCKET).exists():
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(SOCKET)
        except OSError:
            conn.close()
        else:
            with conn:
                conn.sendall(b"run")
                answer = conn.recv(16)
            if answer:
                print(Path("mutant_tests.out").read_text(errors="replace")[-4000:])
                return int(answer)
            return 1
    return run_mutant()


def main(argv: list[str]) -> int:
    if argv[:1] == ["map"] and len(argv) >= 3:
        return build_map(argv[1], argv[2:])
    if argv[:1] == ["remap"] and len(argv) >= 3:
        return build_map(argv[1], argv[2:], leave_out_failing=True)
    if argv == ["run"]:
        return client()
    if argv == ["serve"]:
        return serve()
    print("usage: _mutant_tests.py map MODULE TEST... | run | serve", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
