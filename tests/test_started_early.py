"""The ``started_early`` mark of tests/conftest.py: work started when collection ends.

Run on a small suite of its own (this conftest copied beside it) in a subprocess: what
the work returns reaches the test, what it raises is the test's outcome, and a session
that stops first kills the work's processes instead of waiting for them.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parent

SUITE = textwrap.dedent('''
    import sys, time
    import pytest

    def _returns(job):
        started = time.monotonic()
        out = job.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True, text=True, timeout=60)
        (job.tmp / "marker").write_text("x")
        return started, out.stdout.strip(), job.tmp

    def _fails(job):
        assert 1 + 1 == 3, "the work's own assertion"

    def _skips(job):
        pytest.skip("nothing to do here")

    def _sleeps(job):
        job.run([sys.executable, "-c", "import time; time.sleep(600)  # scwork-started-early-probe"],
                timeout=900)

    @pytest.mark.started_early(work=_returns)
    def test_a_returns(started_early):
        started, printed, tmp = started_early.result()
        assert printed == "42" and (tmp / "marker").read_text() == "x"
        print(f"STARTED_BEFORE_TEST={time.monotonic() - started:.3f}")

    @pytest.mark.started_early(work=_fails)
    def test_b_fails(started_early):
        started_early.result()

    @pytest.mark.started_early(work=_skips)
    def test_c_skips(started_early):
        started_early.result()

    @pytest.mark.started_early(work=_sleeps)
    def test_d_sleeps(started_early):
        started_early.result()

    @pytest.mark.skipif(True, reason="skipped before it starts")
    @pytest.mark.started_early(work=_sleeps)
    def test_e_never_starts(started_early):
        started_early.result()
''')


def _suite(tmp_path: Path) -> Path:
    shutil.copy(TESTS / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_suite.py").write_text(SUITE)
    return tmp_path


def _pytest(where: Path, *args: str) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", "-s", *args],
                            cwd=where, capture_output=True, text=True, timeout=150)
    return result, time.monotonic() - started


def test_outcomes_of_the_work_are_the_tests_outcomes(tmp_path):
    result, _ = _pytest(_suite(tmp_path), "-k", "not sleeps")
    out = result.stdout
    assert "1 failed, 1 passed, 2 skipped" in out, out[-3000:]
    assert "the work's own assertion" in out and "test_b_fails" in out
    assert "nothing to do here" in out and "skipped before it starts" in out
    # the work began at collection, before its test ran
    assert "STARTED_BEFORE_TEST=" in out


def test_a_stopped_session_kills_the_works_processes(tmp_path):
    # -x stops at test_b_fails; test_d_sleeps' process (600 s) must not keep the session alive
    result, seconds = _pytest(_suite(tmp_path), "-x")
    assert "1 failed, 1 passed" in result.stdout, result.stdout[-3000:]
    assert seconds < 120, f"the session waited {seconds:.0f} s for work nobody needs"
    leftover = subprocess.run(["pgrep", "-f", "scwork-started-early-probe"], capture_output=True, text=True)
    assert leftover.stdout.strip() == "", "the work's process outlived the session"
