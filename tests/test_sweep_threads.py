"""benchmarks/sweep_threads.sh: its steps, their prefixes, DEADLINE and ARCHIVE, with a stand-in Python.

The sweep is what a session runs on a lent many-core machine with a fixed time, once;
a mistake in it costs that machine. The stand-in records each step's arguments, the
library's thread setting and the CPUs it may use, so the script's plumbing is checked
here in a second, without the benchmarks.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "sweep_threads.sh"

STAND_IN = r"""#!/usr/bin/env bash
# the kernel-module list the warmup asks for; else: record the call
case "$*" in
    *KERNEL_MODULES*) echo "mod.a mod.b"; exit 0 ;;
esac
echo "args: $*"
echo "jte threads: ${SPARSECORE_INPUT_PREPROCESSING_THREADS:-unset}"
echo "cpus: $(grep Cpus_allowed_list /proc/self/status | cut -f2)"
"""

needs_tools = pytest.mark.skipif(
    shutil.which("taskset") is None or shutil.which("timeout") is None or not hasattr(os, "sched_getaffinity")
    or not {0, 1} <= os.sched_getaffinity(0),
    reason="needs taskset and timeout (util-linux, coreutils) and CPUs 0 and 1")

STEPS = ["warmup", "large", "standard", "twocores", "twocores-large", "paths", "dataset", "queue", "gate", "trace"]


def _sweep(tmp_path: Path, **env) -> Path:
    """Run the sweep with the stand-in; on CPU 0 alone, so that a step's own ``taskset`` shows."""
    python = tmp_path / "python"
    python.write_text(STAND_IN)
    python.chmod(0o755)
    out = tmp_path / "out"
    run_env = {**os.environ, "PYTHON": str(python), "THREADS": "1,2", "REPEATS": "5", **env}
    subprocess.run(["taskset", "-c", "0", "bash", str(SCRIPT), str(out)], env=run_env, check=True, capture_output=True,
                   stdin=subprocess.DEVNULL, timeout=60)
    return out


@needs_tools
def test_every_step_runs_with_its_prefix_and_the_archive_holds_the_logs(tmp_path):
    archive = tmp_path / "sweep.tgz"
    out = _sweep(tmp_path, ARCHIVE=str(archive))
    steps = (out / "steps.txt").read_text().splitlines()
    assert steps[0].startswith("warmup-parallel")
    assert [line.split()[0] for line in steps[1:]] == STEPS
    assert all(" rc=0 " in line for line in steps[1:])
    for module in ("mod.a", "mod.b"):                 # each kernel module compiled by a process of its own
        assert "importlib.import_module('%s').warmup()" % module in (out / f"warmup-{module}.txt").read_text()
    large = (out / "large.txt").read_text()
    assert "--large --threads 1,2 --repeats 5" in large and "jte threads: unset" in large and "cpus: 0\n" in large
    two = (out / "twocores.txt").read_text()
    assert "--jte-only --repeats 5" in two and "jte threads: 2" in two and "cpus: 0-1" in two
    assert "--large --jte-only" in (out / "twocores-large.txt").read_text()
    assert "--trace --paths --threads 2" in (out / "trace.txt").read_text()
    assert "bench_task_queue.py --gate --paths --threads 1,2" in (out / "gate.txt").read_text()
    with tarfile.open(archive) as tar:                # rewritten after the last step: every log
        names = {Path(n).name for n in tar.getnames()}
    assert {f"{step}.txt" for step in STEPS} | {"steps.txt", "machine.txt"} <= names


@needs_tools
def test_a_spent_deadline_skips_the_steps_and_says_so(tmp_path):
    out = _sweep(tmp_path, DEADLINE="10")
    steps = (out / "steps.txt").read_text().splitlines()[1:]
    assert [line.split()[0] for line in steps] == STEPS
    assert all("skipped:" in line and "DEADLINE=10" in line for line in steps)
    assert not (out / "large.txt").exists()
