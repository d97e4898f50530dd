"""The pure-Python fallback: every kernel test passes with NUMBA_DISABLE_JIT=1."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
# Files that compare numba kernels with their numpy references, or pin them by hand.
KERNEL_TESTS = sorted(
    str(p) for p in [*TESTS.rglob("test_kernels.py"), TESTS / "sharding" / "test_minibatch.py",
                TESTS / "sharding" / "test_threads.py", TESTS / "sharding" / "test_split_kernels.py",
                TESTS / "collectives" / "test_fused.py",
                TESTS / "sharding" / "test_naive_kernels.py", TESTS / "sharding" / "test_minibatch_golden.py",
                TESTS / "sharding" / "test_minibatch_kernels_pinned.py", TESTS / "sharding" / "test_stats_kernels.py",
                TESTS / "sharding" / "test_kernels_by_hand.py", TESTS / "sharding" / "test_task_queue.py",
                TESTS / "test_rounding.py"] if p.exists()
)


def _kernel_tests_without_jit(job):
    env = dict(os.environ, NUMBA_DISABLE_JIT="1", HYPOTHESIS_PROFILE="default")
    return job.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *KERNEL_TESTS],
                   env=env, capture_output=True, text=True, cwd=TESTS.parent, stdin=subprocess.DEVNULL)


# Minutes of one core: started when collection ends, beside the rest of the suite.
@pytest.mark.slow
@pytest.mark.skipif(not KERNEL_TESTS, reason="no kernel tests")
@pytest.mark.started_early(work=_kernel_tests_without_jit)
def test_kernel_tests_pass_without_jit(started_early):
    result = started_early.result()
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " passed" in result.stdout.splitlines()[-1], result.stdout[-2000:]
