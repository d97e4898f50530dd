"""On-demand mutation testing of the engine with cosmic-ray, module by module.

Not part of the pytest run. Run it from the repository root, with the Python that has
cosmic-ray (3.12 or newer: the line map uses ``sys.monitoring``)::

    nice -n 10 python tools/mutation.py --jobs 1                 # every module below, in turn
    nice -n 10 python tools/mutation.py scwork/sharding/minibatch.py
    python tools/mutation.py --report --survivors                # scores of finished runs
    python tools/mutation.py scwork/sharding/limits.py --recheck # survivors against the current tests
    python tools/mutation.py scwork/sharding/limits.py --resume  # go on with a stopped run
    python tools/mutation.py scwork/sharding/limits.py --verify 6
    nice -n 10 python tools/mutation.py --jobs 1 --since HEAD~3 scwork/sharding/limits.py

Each module is mutated in its own copy of the working tree (under
``.mutation/<module>/``, git-ignored), so the checkout is never touched and two
modules can run at once (``--jobs``). The copy's tests import the copy's ``scwork``
(``PYTHONPATH``), which works beside an editable install because the editable
finder comes after the path finder. Kernels run as plain Python
(``NUMBA_DISABLE_JIT=1``): a mutated kernel would otherwise be compiled again for
every mutant, and the pure-Python kernels are tested anyway (``tests/test_nojit.py``).

A mutant runs only the tests that execute the statement it changed, through a fork
server that has numpy, pandas, xarray and pytest imported (``tools/_mutant_tests.py``
says how, and why the verdict is the one the whole test files would give;
``--verify N`` checks that on N mutants of a finished run and times both).

Mutants that no test can kill because they change nothing observable (equivalent
mutants) are listed in ``tools/mutation_equivalents.toml`` with the reason; the score
of a module is ``killed / (mutants - equivalent - incompetent)``. A survivor that is
not listed there is a missing test.

``--since REV`` mutates only the lines changed since the git revision ``REV``: the
lines that ``git diff REV -- <module>`` adds or modifies in the working tree (the new
side's line numbers). After ``cosmic-ray init`` every mutant whose location (its first
to last line) touches none of them is marked skipped in the session, with the output
``not changed since <rev>``; it is not run and not counted, and the report names the
module ``<module> (since <rev>)``, so the score is that of the changed lines only.
A ``--resume`` or ``--recheck`` keeps the session's choice.

Why cosmic-ray and not mutmut 3: mutmut 3 does not mutate decorated functions, and
every numba kernel is decorated (``@jit``); cosmic-ray edits the file itself.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / ".mutation"
EQUIVALENTS = Path(__file__).resolve().parent / "mutation_equivalents.toml"

#: Module -> the test files that pin it. Kept small: every mutant runs them.
MODULES: dict[str, list[str]] = {
    "scwork/_rounding.py": ["tests/test_rounding.py"],
    "scwork/sharding/column_id.py": ["tests/test_rounding.py", "tests/sharding/test_minibatch_golden.py"],
    "scwork/layout/tiles.py": ["tests/layout/test_shape.py", "tests/layout/test_kernels.py", "tests/layout/test_parse.py",
                               "tests/layout/test_bad_inputs.py", "tests/layout/test_tiles_pinned.py"],
    "scwork/layout/_parser.py": ["tests/layout/test_parse.py", "tests/layout/test_sparse_levels.py",
                                 "tests/layout/test_parser_pinned.py"],
    "scwork/layout/_kernels.py": ["tests/layout/test_kernels_pinned.py", "tests/layout/test_kernels.py"],
    "scwork/layout/_addressing.py": ["tests/layout/test_addressing_pinned.py", "tests/layout/test_kernels_pinned.py",
                                     "tests/layout/test_shape.py", "tests/layout/test_fuzz_regressions.py"],
    "scwork/layout/embedding.py": ["tests/layout/test_embedding.py", "tests/layout/test_bad_inputs.py",
                                   "tests/layout/test_fuzz_regressions.py", "tests/layout/test_embedding_pinned.py"],
    "scwork/layout/npu.py": ["tests/layout/test_npu.py", "tests/layout/test_bad_inputs.py",
                             "tests/layout/test_fuzz_regressions.py", "tests/layout/test_npu_pinned.py"],
    "scwork/sharding/stacking.py": ["tests/sharding/test_stacking.py", "tests/sharding/test_preprocess.py",
                                    "tests/sharding/test_minibatch_golden.py", "tests/plan/test_config_stacks.py",
                                    "tests/oracle/test_plan_oracle.py", "tests/sharding/test_stacking_pinned.py"],
    "scwork/sharding/_naive_kernels.py": ["tests/sharding/test_naive_kernels.py"],
    "scwork/sharding/_stats_kernels.py": ["tests/sharding/test_stats_kernels.py"],
    "scwork/sharding/_reference.py": ["tests/sharding/test_kernels.py", "tests/sharding/test_preprocess.py",
                                      "tests/sharding/test_reference_by_hand.py"],
    "scwork/sharding/_minibatch_kernels.py": ["tests/sharding/test_minibatch_golden.py",
                                              "tests/sharding/test_minibatch.py",
                                              "tests/sharding/test_minibatch_kernels_pinned.py"],
    "scwork/sharding/minibatch.py": ["tests/sharding/test_minibatch_golden.py", "tests/sharding/test_minibatch.py",
                                     "tests/sharding/test_minibatch_pinned.py", "tests/oracle/test_minibatch_oracle.py"],
    # The engine's own kernels: each is compared with _reference.py in test_kernels.py and
    # test_split_kernels.py; the by-hand and boundary files pin values neither computed.
    "scwork/sharding/_kernels.py": ["tests/sharding/test_kernels.py", "tests/sharding/test_preprocess.py",
                                    "tests/sharding/test_reference_by_hand.py",
                                    "tests/sharding/test_limit_boundaries.py", "tests/sharding/test_split_kernels.py",
                                    "tests/sharding/test_kernels_pinned.py", "tests/sharding/test_kernels_by_hand.py"],
    "scwork/sharding/_split_kernels.py": ["tests/sharding/test_split_kernels.py", "tests/sharding/test_kernels.py",
                                          "tests/sharding/test_split_kernels_pinned.py",
                                          "tests/sharding/test_slice_pairs_table.py"],
    "scwork/sharding/limits.py": ["tests/sharding/test_limits.py", "tests/sharding/test_limit_boundaries.py",
                                  "tests/sharding/test_limits_by_hand.py"],
    "scwork/sharding/_fdo_csv.py": ["tests/interop/test_fdo_csv.py"],
    "scwork/memory/_hbm_numbers.py": ["tests/memory/test_hbm.py", "tests/memory/test_csr_rounding.py",
                                      "tests/memory/test_hbm_event_times.py", "tests/memory/test_hbm_intervals_by_hand.py",
                                      "tests/memory/test_hbm_int64_guards.py"],
    "scwork/memory/_spmem_numbers.py": ["tests/memory/test_spmem.py", "tests/memory/test_csr_rounding.py"],
    "scwork/collectives/cost.py": ["tests/collectives/test_cost.py", "tests/collectives/test_compact.py",
                                   "tests/collectives/test_fuzz_regressions.py",
                                   "tests/collectives/test_cost_by_hand.py"],
    "scwork/collectives/schedule.py": ["tests/collectives/test_algorithms.py", "tests/collectives/test_properties.py",
                                       "tests/collectives/test_compact.py", "tests/collectives/test_chunk_bounds.py",
                                       "tests/collectives/test_execute.py", "tests/collectives/test_execute_fast.py",
                                       "tests/collectives/test_cost.py",
                                       "tests/collectives/test_fused.py", "tests/collectives/test_fuzz_regressions.py",
                                       "tests/collectives/test_network.py",
                                       "tests/collectives/test_schedule_by_hand.py"],
    "scwork/pipeline/phase_costs.py": ["tests/pipeline/test_model.py", "tests/pipeline/test_phase_costs_pinned.py",
                                       "tests/pipeline/test_phase_costs_by_hand.py",
                                       "tests/pipeline/test_phase_costs_ici_stages.py"],
    "scwork/pipeline/timeline.py": ["tests/pipeline/test_timeline.py", "tests/pipeline/test_timeline_first_steps.py",
                                    "tests/pipeline/test_timeline_pinned.py"],
    "scwork/advisor/_context.py": ["tests/test_advisor_whatifs.py", "tests/test_advisor.py",
                                   "tests/test_advisor_context.py"],
    "scwork/advisor/_limit_checks.py": ["tests/test_advisor_whatifs.py", "tests/test_advisor.py",
                                        "tests/test_advisor_limit_checks.py"],
    "scwork/advisor/_memory_checks.py": ["tests/test_advisor_whatifs.py", "tests/test_advisor.py",
                                         "tests/test_advisor_memory_checks.py"],
    "scwork/advisor/_time_checks.py": ["tests/test_advisor_whatifs.py", "tests/test_advisor.py",
                                       "tests/test_advisor_time_checks.py"],
    "scwork/advisor/findings.py": ["tests/test_advisor_findings.py", "tests/test_advisor.py"],
    "scwork/interop/profile.py": ["tests/interop/test_profile.py", "tests/interop/test_zero_length_events.py",
                                  "tests/interop/test_profile_edges.py"],
    "scwork/pipeline/trace.py": ["tests/pipeline/test_trace.py", "tests/interop/test_zero_length_events.py",
                                 "tests/pipeline/test_fuzz_regressions.py", "tests/interop/test_profile_edges.py",
                                 "tests/pipeline/test_trace_pinned.py"],
    # The interop readers. The Keras-RS and jax-tpu-embedding files compare with the libraries
    # themselves (the `oracle` extra); the pinned files hold values worked out by hand.
    "scwork/interop/keras_rs.py": ["tests/interop/test_keras_rs_pinned.py", "tests/interop/test_keras_rs.py"],
    "scwork/interop/_pbtxt.py": ["tests/interop/test_pbtxt_pinned.py", "tests/interop/test_read_embedding_spec_paths.py",
                                 "tests/interop/test_jax_tpu_embedding.py"],
    "scwork/interop/_xla_text.py": ["tests/interop/test_xla_text_pinned.py", "tests/interop/test_xla_dump.py"],
    "scwork/interop/xla_dump.py": ["tests/interop/test_xla_dump_pinned.py", "tests/interop/test_xla_dump.py"],
    "scwork/interop/jax_tpu_embedding.py": ["tests/interop/test_jax_tpu_embedding_pinned.py",
                                            "tests/interop/test_jax_tpu_embedding.py",
                                            "tests/interop/test_read_embedding_spec_paths.py",
                                            "tests/interop/test_keras_rs.py"],
}

#: Operators left out: they mostly make mutants no test could tell apart (replacing
#: ``+`` by a bit operator on small counts, renaming variables, dropping ``@jit``,
#: which only turns the kernel into the pure Python it is tested as anyway).
EXCLUDED_OPERATORS = [
    r"core/ReplaceBinaryOperator_.*_(Pow|RShift|LShift|BitOr|BitAnd|BitXor)",
    r"core/ReplaceBinaryOperator_(Pow|RShift|LShift|BitOr|BitAnd|BitXor)_.*",
    r"core/ReplaceBinaryOperator_(Add|Sub)_(Div|FloorDiv|Mod)",
    r"core/ReplaceBinaryOperator_(Mul|Div|FloorDiv|Mod)_(Mod|Div)",
    r"core/ReplaceComparisonOperator_.*_(Is|IsNot)",
    r"core/ReplaceComparisonOperator_(Is|IsNot)_.*",
    r"core/ReplaceUnaryOperator_.*Invert.*",
    r"core/ReplaceUnaryOperator_UAdd_.*",
    r"core/ExceptionReplacer",
    r"core/RemoveDecorator",
    r"core/VariableReplacer",
    r"core/VariableInserter",
]


def _slug(module: str) -> str:
    return module.replace("/", "_").removesuffix(".py")


#: What ``--since`` writes as the output of the mutants it skips (the revision follows).
UNCHANGED = "not changed since "

_HUNK = re.compile(r"@@ -\d+(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def changed_lines(diff: str) -> set[int]:
    """The new-side line numbers of the lines a unified diff adds or modifies.

    A modified line is a removed line and an added one: its number is the added
    one's. Lines only removed leave no number (no mutant can be on them).

    >>> sorted(changed_lines("@@ -3,2 +3,3 @@\\n a\\n-b\\n+B\\n+c\\n"))
    [4, 5]
    """
    lines: set[int] = set()
    new = old_left = new_left = 0
    for line in diff.splitlines():
        hunk = _HUNK.match(line)
        if hunk:
            old_left, new, new_left = (int(hunk[1] or 1), int(hunk[2]), int(hunk[3] or 1))
        elif not (old_left or new_left) or line.startswith("\\"):
            continue                                  # file headers; "\ No newline at end of file"
        elif line.startswith("+"):
            lines.add(new)
            new, new_left = new + 1, new_left - 1
        elif line.startswith("-"):
            old_left -= 1
        else:                                         # a context line
            new, old_left, new_left = new + 1, old_left - 1, new_left - 1
    return lines


def _since(module: str, rev: str) -> tuple[str, set[int]]:
    """``rev`` as a short commit hash, and the lines of ``module`` changed since it in the working tree."""
    try:
        short = subprocess.run(["git", "rev-parse", "--short", "--verify", f"{rev}^{{commit}}"], cwd=ROOT,
                               check=True, capture_output=True, text=True).stdout.strip()
    except subprocess.CalledProcessError:
        raise SystemExit(f"--since {rev}: not a git revision of {ROOT}") from None
    diff = subprocess.run(["git", "diff", "-U0", short, "--", module], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout
    return short, changed_lines(diff)


def _skip_unchanged(session: Path, rev: str, lines: set[int]) -> None:
    """Mark skipped the pending mutants of ``session`` that touch none of ``lines``."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    with use_db(str(session), WorkDB.Mode.open) as db:
        skipped = [item.job_id for item in db.pending_work_items
                   if not any(lines.intersection(range(m.start_pos[0], m.end_pos[0] + 1)) for m in item.mutations)]
        db.set_multiple_results(skipped, WorkResult(worker_outcome=WorkerOutcome.SKIPPED, output=UNCHANGED + rev))


def _copy_tree(dest: Path) -> None:
    """Copy the tracked and untracked-but-not-ignored files of the checkout to ``dest``."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                           capture_output=True).stdout.decode().split("\0")
    if dest.exists():
        shutil.rmtree(dest)
    for rel in filter(None, files):
        src = ROOT / rel
        if not src.is_file():
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)


def _config(module: str, timeout: float) -> str:
    # Each mutant runs only the tests that execute the mutated statement (tools/_mutant_tests.py).
    command = f"{sys.executable} tools/_mutant_tests.py run"
    excluded = ",\n    ".join(f'"{p}"' for p in EXCLUDED_OPERATORS)
    return (f'[cosmic-ray]\nmodule-path = "{module}"\ntimeout = {timeout}\nexcluded-modules = []\n'
            f'test-command = "{command}"\n\n[cosmic-ray.distributor]\nname = "local"\n\n'
            f'[cosmic-ray.filters.operators-filter]\nexclude-operators = [\n    {excluded},\n]\n')


def _env(work: Path) -> dict[str, str]:
    return dict(os.environ, NUMBA_DISABLE_JIT="1", PYTHONPATH=str(work), PYTHONDONTWRITEBYTECODE="1",
                OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")


@contextlib.contextmanager
def _fork_server(work: Path):
    """tools/_mutant_tests.py's fork server in ``work`` while the mutants run (numpy, pandas... imported once)."""
    server = subprocess.Popen([sys.executable, "tools/_mutant_tests.py", "serve"], cwd=work, env=_env(work),
                              stdout=subprocess.DEVNULL, stderr=open(work / "serve.log", "w"))
    try:
        for _ in range(600):
            if (work / "mutant_tests.sock").exists() or server.poll() is not None:
                break
            time.sleep(0.1)
        yield
    finally:
        server.terminate()
        server.wait()


def _full_command(module: str) -> list[str]:
    """The module's whole test files, as every mutant ran them before tools/_mutant_tests.py."""
    return [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "--no-header",
            "-o", "addopts=--import-mode=importlib --benchmark-disable", *MODULES[module]]


def _script(name: str) -> str:
    """A console script of the cosmic-ray install: beside this Python, else on PATH.

    A venv made with ``--system-site-packages`` sees cosmic-ray's package but not its
    scripts, which sit beside the base interpreter.
    """
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        raise SystemExit(f"{name} is not beside {sys.executable} nor on PATH: pip install -e '.[test]' "
                         "(cosmic-ray is part of the test extra)")
    return found


def _apply(work: Path, module: str, pristine: str, mutation) -> None:
    (work / module).write_text(pristine)
    subprocess.run([_script("cosmic-ray"), "apply", module, mutation.operator_name,
                    str(mutation.occurrence)], cwd=work, env=_env(work), check=True, capture_output=True)


def _killed(command: list[str], work: Path, timeout: float) -> bool:
    try:
        return subprocess.run(command, cwd=work, env=_env(work), capture_output=True, timeout=timeout).returncode != 0
    except subprocess.TimeoutExpired:
        return True


def run_module(module: str, timeout: float, resume: bool = False, since: str | None = None) -> str:
    tests = MODULES[module]
    changed = None if since is None or resume else _since(module, since)
    work = WORK / _slug(module)
    resume = resume and (work / "session.sqlite").exists() and (work / "mutant_tests.json").exists()
    if resume:                         # a stopped run: its work copy, session and map as they were
        shutil.copytree(ROOT / "tools", work / "tools", dirs_exist_ok=True)
        (work / module).write_text((work / "mutant_pristine.py").read_text())
    else:
        _copy_tree(work)
    (work / "cr.toml").write_text(_config(module, timeout))
    env = _env(work)
    log = open(work / "cr.log", "a" if resume else "w")

    def step(*args: str) -> None:
        subprocess.run(list(args), cwd=work, env=env, check=True, stdout=log, stderr=subprocess.STDOUT)

    if not resume:
        step(sys.executable, "tools/_mutant_tests.py", "map", module, *tests)
        step(_script("cosmic-ray"), "init", "cr.toml", "session.sqlite")
        step(_script("cr-filter-operators"), "session.sqlite", "cr.toml")
        if changed is not None:
            _skip_unchanged(work / "session.sqlite", *changed)
        step(_script("cosmic-ray"), "--verbosity", "ERROR", "baseline", "cr.toml")
    with _fork_server(work):
        step(_script("cosmic-ray"), "exec", "cr.toml", "session.sqlite")
    shutil.copy2(work / "session.sqlite", WORK / f"{_slug(module)}.sqlite")
    return module


def recheck(module: str, timeout: float) -> int:
    """Run every survivor of ``module``'s last run again against the checkout's current tests.

    Survivors listed in ``mutation_equivalents.toml`` are left out (they cannot be killed).

    For killing survivors without a whole new run: the work copy gets the current
    tests (and test data), each surviving mutation is applied alone with ``cosmic-ray
    apply`` and the module's tests run; a mutant they now kill is recorded as killed.
    Returns how many were killed.
    """
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome, WorkResult

    work = WORK / _slug(module)
    path = WORK / f"{_slug(module)}.sqlite"
    if not path.exists():
        raise SystemExit(f"{module}: no finished run to recheck ({path} missing)")
    shutil.copytree(ROOT / "tests", work / "tests", dirs_exist_ok=True)
    shutil.copytree(ROOT / "tools", work / "tools", dirs_exist_ok=True)
    # The module as it was mutated (the session's mutations and line numbers are of that text),
    # even if the checkout changed it since.
    pristine = _mutated_source(module)
    (work / module).write_text(pristine)
    # The map again, with the tests added since the run (those failing on that text left out).
    remap = subprocess.run([sys.executable, "tools/_mutant_tests.py", "remap", module, *MODULES[module]], cwd=work,
                           env=_env(work), check=True, capture_output=True, text=True)
    for line in remap.stdout.splitlines():
        if "left out" in line:
            print(line, flush=True)
    command = [sys.executable, "tools/_mutant_tests.py", "run"]
    equivalents = _equivalents().get(module, [])
    killed = 0
    with use_db(str(path), WorkDB.Mode.open) as db, _fork_server(work):
        done = {item.job_id: result for item, result in db.completed_work_items}
        for item in db.work_items:
            result = done.get(item.job_id)
            if result is None or result.worker_outcome == WorkerOutcome.SKIPPED \
                    or result.test_outcome != TestOutcome.SURVIVED:
                continue
            mutation = item.mutations[0]
            if any(_is(e, (mutation.operator_name, _source_line(module, mutation.start_pos[0])), result)
                   for e in equivalents):
                continue                  # listed as equivalent, with the reason: no test can kill it
            _apply(work, module, pristine, item.mutations[0])
            try:
                failed = _killed(command, work, timeout)
            finally:
                (work / module).write_text(pristine)
            if failed:
                killed += 1
                db.set_result(item.job_id, WorkResult(worker_outcome=WorkerOutcome.NORMAL,
                                                      test_outcome=TestOutcome.KILLED, diff=result.diff,
                                                      output="killed on recheck"))
    return killed


def verify(module: str, count: int, timeout: float) -> int:
    """Re-run ``count`` judged mutants of ``module`` with its whole test files; compare with the selected tests.

    Takes the mutants spread evenly over the session, survivors first (a wrong
    "survived" is the costly mistake), runs each against the whole test files (the
    command every mutant ran before ``tools/_mutant_tests.py``) and against the
    selection, and prints both verdicts and times. Returns how many disagree.
    """
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome

    work = WORK / _slug(module)
    path = WORK / f"{_slug(module)}.sqlite"
    if not path.exists():
        path = work / "session.sqlite"
    if not (work / "mutant_tests.json").exists() or not path.exists():
        raise SystemExit(f"{module}: run it first (no session or map under {work})")
    pristine = _mutated_source(module)
    with use_db(str(path), WorkDB.Mode.open) as db:
        done = {item.job_id: result for item, result in db.completed_work_items}
        judged = [(item, done[item.job_id]) for item in db.work_items if item.job_id in done
                  and done[item.job_id].worker_outcome != WorkerOutcome.SKIPPED]
    survivors = [j for j in judged if j[1].test_outcome == TestOutcome.SURVIVED]
    others = [j for j in judged if j[1].test_outcome != TestOutcome.SURVIVED]
    pick = survivors[:: max(1, len(survivors) // max(1, count // 2))][: count // 2]
    pick += others[:: max(1, len(others) // max(1, count - len(pick)))][: count - len(pick)]
    disagree, times = 0, {"selected": 0.0, "full": 0.0}
    with _fork_server(work):
        for item, _ in pick:
            mutation = item.mutations[0]
            verdicts = {}
            _apply(work, module, pristine, mutation)
            try:
                for name, command in (("selected", [sys.executable, "tools/_mutant_tests.py", "run"]),
                                      ("full", _full_command(module))):
                    start = time.perf_counter()
                    verdicts[name] = _killed(command, work, timeout)
                    times[name] += time.perf_counter() - start
            finally:
                (work / module).write_text(pristine)
            same = verdicts["selected"] == verdicts["full"]
            disagree += not same
            print(f"{'same' if same else 'DIFFERENT'}: line {mutation.start_pos[0]} {mutation.operator_name} "
                  f"#{mutation.occurrence}: selected {'killed' if verdicts['selected'] else 'survived'}, "
                  f"full {'killed' if verdicts['full'] else 'survived'}", flush=True)
    n = max(1, len(pick))
    print(f"{module}: {len(pick) - disagree} of {len(pick)} verdicts agree; seconds per mutant: "
          f"whole test files {times['full'] / n:.2f}, selected tests {times['selected'] / n:.2f}")
    return disagree


def _equivalents() -> dict[str, list[dict]]:
    if not EQUIVALENTS.exists():
        return {}
    return tomllib.loads(EQUIVALENTS.read_text()).get("module", {})


def _mutated_source(module: str) -> str:
    """The module's text as its last run mutated it (the work copy's pristine copy), else the checkout's."""
    saved = WORK / _slug(module) / "mutant_pristine.py"
    return saved.read_text() if saved.exists() else (ROOT / module).read_text()


def _source_line(module: str, line: int) -> str:
    lines = _mutated_source(module).splitlines()
    return lines[line - 1].strip() if 0 < line <= len(lines) else ""


def _mutated_line(diff: str | None) -> str:
    """The line a mutant wrote (the '+' line of its diff), stripped."""
    for line in (diff or "").splitlines():
        if line.startswith("+") and not line.startswith("+++"):
            return line[1:].strip()
    return ""


def _is(entry: dict, key: tuple[str, str], result) -> bool:
    """Whether an entry of mutation_equivalents.toml names this mutant (``mutated``: the new line, optional)."""
    if (entry["operator"], entry["line"].strip()) != key:
        return False
    return "mutated" not in entry or entry["mutated"].strip() == _mutated_line(result.diff)


def score(module: str, show_survivors: bool = True) -> dict | None:
    """Killed, survived, equivalent and incompetent mutants of ``module``'s last run."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome

    path = WORK / f"{_slug(module)}.sqlite"
    if not path.exists():                         # a run still going: its live session
        path = WORK / _slug(module) / "session.sqlite"
    if not path.exists():
        return None
    entries = _equivalents().get(module, [])
    counts = {"mutants": 0, "killed": 0, "survived": 0, "equivalent": 0, "incompetent": 0, "pending": 0,
              "filtered": 0, "unchanged": 0, "since": None}
    survivors = []
    with use_db(str(path), WorkDB.Mode.open) as db:
        done = {item.job_id: result for item, result in db.completed_work_items}
        for item in db.work_items:
            result = done.get(item.job_id)
            if result is not None and result.worker_outcome == WorkerOutcome.SKIPPED:
                if (result.output or "").startswith(UNCHANGED):     # a --since run: a line not changed
                    counts["unchanged"] += 1
                    counts["since"] = result.output.removeprefix(UNCHANGED)
                else:
                    counts["filtered"] += 1           # an operator left out (EXCLUDED_OPERATORS)
                continue
            counts["mutants"] += 1
            mutation = item.mutations[0]
            key = (mutation.operator_name, _source_line(module, mutation.start_pos[0]))
            if result is None:
                counts["pending"] += 1
            elif result.test_outcome == TestOutcome.KILLED:
                counts["killed"] += 1
            elif result.test_outcome == TestOutcome.INCOMPETENT:
                counts["incompetent"] += 1
            elif any(_is(e, key, result) for e in entries):   # only survivors can be equivalent
                counts["equivalent"] += 1
            else:
                counts["survived"] += 1
                survivors.append((mutation.start_pos[0], mutation.operator_name, _mutated_line(result.diff)))
    judged = counts["killed"] + counts["survived"]
    counts["score"] = counts["killed"] / judged if judged else float("nan")
    counts["interval"] = wilson_interval(counts["killed"], judged)
    if show_survivors:
        for line, op, text in sorted(survivors):
            print(f"  survived {module}:{line} {op.removeprefix('core/')}: {text}")
    return counts


def wilson_interval(killed: int, judged: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of the kill rate of a module from ``judged`` of its mutants.

    What a partial run says about the whole module: cosmic-ray runs the pending
    mutants in random order (``WorkDB.pending_work_items`` orders by ``random()``),
    so the ones judged so far are a uniform sample of the module's mutants. Sampling
    is without replacement from a finite set, which only narrows the true interval.

    >>> [round(100 * x, 1) for x in wilson_interval(95, 100)]
    [88.8, 97.8]
    >>> wilson_interval(0, 0)
    (0.0, 1.0)
    """
    if judged == 0:
        return 0.0, 1.0
    p = killed / judged
    centre = (p + z * z / (2 * judged)) / (1 + z * z / judged)
    half = z / (1 + z * z / judged) * (p * (1 - p) / judged + z * z / (4 * judged * judged)) ** 0.5
    return max(0.0, centre - half), min(1.0, centre + half)


def report(modules: list[str]) -> None:
    print("| module | mutants | killed | survived | equivalent | incompetent | pending | score |")
    print("|---|---|---|---|---|---|---|---|")
    for module in modules:
        c = score(module, show_survivors=False)
        if c is None:
            continue
        since = f" (since {c['since']})" if c["since"] else ""     # the score is the changed lines' only
        print(f"| `{module}`{since} | {c['mutants']} | {c['killed']} | {c['survived']} | {c['equivalent']} | "
              f"{c['incompetent']} | {c['pending']} | {100 * c['score']:.1f}%"
              # A stopped run judged a random sample: the interval is what it says of the rest.
              + (f" (95% interval {100 * c['interval'][0]:.1f}-{100 * c['interval'][1]:.1f}%)" if c["pending"] else "")
              + " |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", help=f"modules to mutate (default: all {len(MODULES)})")
    parser.add_argument("--jobs", type=int, default=2, help="modules mutated at once (default 2)")
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="seconds one mutant's tests may take at most (each mutant also stops at ten "
                             "times its tests' unmutated time plus a minute, see tools/_mutant_tests.py)")
    parser.add_argument("--report", action="store_true", help="only print the scores of finished runs")
    parser.add_argument("--survivors", action="store_true", help="with --report: list every survivor")
    parser.add_argument("--verify", type=int, metavar="N", default=0,
                        help="re-run N judged mutants with the whole test files and compare verdicts")
    parser.add_argument("--resume", action="store_true",
                        help="go on with a stopped run's pending mutants instead of starting afresh")
    parser.add_argument("--since", metavar="REV",
                        help="mutate only the lines changed since the git revision REV (git diff REV, working "
                             "tree); the other mutants are skipped, not counted")
    parser.add_argument("--recheck", action="store_true",
                        help="run the survivors of finished runs again against the current tests")
    args = parser.parse_args(argv)
    unknown = [m for m in args.modules if m not in MODULES]
    if unknown:
        parser.error(f"not in tools/mutation.py's MODULES: {', '.join(unknown)}; known: {', '.join(MODULES)}")
    modules = args.modules or list(MODULES)
    if args.verify:
        return int(any([verify(module, args.verify, args.timeout) for module in modules]))
    if args.recheck:
        for module in modules:
            if (WORK / f"{_slug(module)}.sqlite").exists():
                print(f"{module}: {recheck(module, args.timeout)} survivor(s) now killed", flush=True)
        report(modules)
        return 0
    if args.report:
        if args.survivors:
            for module in modules:
                score(module)
        report(modules)
        return 0
    WORK.mkdir(exist_ok=True)
    def one(module: str) -> str | None:
        try:
            return run_module(module, args.timeout, args.resume, args.since)
        except subprocess.CalledProcessError as error:   # e.g. its tests fail unmutated: see its cr.log
            print(f"failed: {module}: {error}; see {WORK / _slug(module) / 'cr.log'}", flush=True)
            return None

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for done in pool.map(one, modules):
            if done is not None:
                print(f"done: {done}", flush=True)
                score(done)
    report(modules)
    return 0


if __name__ == "__main__":
    sys.exit(main())
