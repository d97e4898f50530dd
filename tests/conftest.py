"""Shared test configuration.

Hypothesis runs with a modest example budget by default (the CI machine has two
cores); ``HYPOTHESIS_PROFILE=thorough`` raises it for local deep runs.
Notebook and packaging tests are marked ``slow``; they still run in CI.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "default", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "thorough", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# Progress bars and browser opening must never happen in tests.
os.environ.setdefault("SCWORK_PROGRESS", "0")


def pytest_addoption(parser):
    group = parser.getgroup("scwork")
    group.addoption(
        "--oracle-examples", type=int, default=None,
        help="hypothesis examples per oracle test (tests/oracle); default 300 in total "
             "spread over the tests, see scwork.testing.oracle_examples",
    )
    group.addoption(
        "--fuzz-examples", type=int, default=None,
        help="generated cases per fuzz surface (tests/fuzz); e.g. 10000 with -m fuzz",
    )


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "started_early(work=f): f(job) runs on a thread from the end of collection; "
                   "the test waits for it with the started_early fixture (tests/conftest.py)")
    # Test modules read these when they are imported (hypothesis settings are fixed at
    # decoration time), so they travel as environment variables set before collection.
    for option, variable in (("oracle_examples", "SCWORK_ORACLE_EXAMPLES"),
                             ("fuzz_examples", "SCWORK_FUZZ_EXAMPLES")):
        value = config.getoption(option)
        if value is not None:
            os.environ[variable] = str(value)


def pytest_terminal_summary(terminalreporter):
    from scwork.testing import fuzz_counts

    counts = fuzz_counts()
    if counts:
        terminalreporter.section("fuzz cases per surface")
        for surface, outcome in sorted(counts.items()):
            terminalreporter.write_line(
                f"{surface}: {outcome['cases']} cases, {outcome['typed_errors']} typed errors, "
                f"{outcome['untyped']} untyped, {outcome['hangs']} hangs, "
                f"{outcome['wrong']} silently wrong")


# --------------------------------------------------------------------------------------
# Tests that wait minutes on subprocesses start them when collection ends
# --------------------------------------------------------------------------------------
# Two tests spend most of their time waiting on other processes: the kernel tests run
# again without numba (about 3 minutes of one core) and a Binder environment built by
# pip that then runs the tour (about 3 minutes). Run in their turn, they add those
# minutes to the suite's wall time while the second core idles. A test marked
# ``@pytest.mark.started_early(work=work)`` has ``work(job)`` run on a thread of its own as
# soon as collection ends, beside the rest of the suite; the test asks for the
# ``started_early`` fixture (the job) and calls its ``result()``, which waits for ``work``
# and hands over what it returned, or raises what it raised: a failed assertion,
# ``pytest.fail`` or ``pytest.skip`` inside ``work`` reports as the test's own.
# ``job.tmp`` is a directory of the test's own and ``job.run`` is ``subprocess.run``
# whose processes are killed if the session ends first (``-x``, Ctrl-C), so that
# nothing outlives pytest.

class _EarlyJob:
    def __init__(self, work, name: str):
        self.work = work
        self.tmp = Path(tempfile.mkdtemp(prefix=f"scwork-{name[:40]}-"))
        self._processes: list[subprocess.Popen] = []
        self._lock = threading.Lock()
        self._cancelled = False
        self._outcome: tuple[bool, object] | None = None
        self._thread = threading.Thread(target=self._main, name=f"started_early:{name}", daemon=True)

    def start(self) -> "_EarlyJob":
        self._thread.start()
        return self

    def _main(self) -> None:
        try:
            self._outcome = (True, self.work(self))
        except BaseException as error:  # noqa: BLE001 - handed to the test, which raises it
            self._outcome = (False, error)

    def run(self, command, *, timeout: float | None = None, input=None, capture_output: bool = False,
            **popen) -> subprocess.CompletedProcess:
        """``subprocess.run``, with the process registered so that :meth:`cancel` can kill it."""
        if capture_output:
            popen.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        with self._lock:
            if self._cancelled:
                raise RuntimeError("the test session ended before this test's work did")
            process = subprocess.Popen(command, **popen)
            self._processes.append(process)
        try:
            stdout, stderr = process.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            raise
        finally:
            with self._lock:
                self._processes.remove(process)
        return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)

    def result(self):
        self._thread.join()
        ok, value = self._outcome
        if ok:
            return value
        raise value

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            for process in self._processes:
                process.kill()
        self._thread.join(timeout=30)
        shutil.rmtree(self.tmp, ignore_errors=True)


_EARLY_JOBS: dict[str, _EarlyJob] = {}


def _early_job(item) -> _EarlyJob | None:
    marker = item.get_closest_marker("started_early")
    if marker is None or item.get_closest_marker("skip") is not None \
            or any(m.args and m.args[0] is True for m in item.iter_markers("skipif")):
        return None
    if item.nodeid not in _EARLY_JOBS:
        _EARLY_JOBS[item.nodeid] = _EarlyJob(marker.kwargs["work"], item.name).start()
    return _EARLY_JOBS[item.nodeid]


def pytest_collection_finish(session):
    # After deselection (-k, -m): only the tests that will run start their work.
    if session.config.getoption("collectonly"):
        return
    for item in session.items:
        _early_job(item)


def pytest_sessionfinish(session):
    for job in _EARLY_JOBS.values():
        job.cancel()
    _EARLY_JOBS.clear()


@pytest.fixture
def started_early(request) -> _EarlyJob:
    """The test's ``started_early`` job; its ``result()`` waits for the work (see above)."""
    job = _early_job(request.node)
    if job is None:
        raise pytest.UsageError("the started_early fixture needs @pytest.mark.started_early(work=...)")
    return job
