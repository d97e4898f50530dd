"""Binder (repo2docker) gets what it needs from ``binder/``, and the tour runs there.

repo2docker reads ``binder/runtime.txt`` (Python version), installs
``binder/requirements.txt`` and runs ``binder/postBuild`` from the repository root.
``test_binder_environment_runs_the_tour`` does the same in a fresh virtual
environment, from a clean copy of the repository (the files git tracks or would
track: no caches, no build products, no egg-info), then executes
``notebooks/00_tour.ipynb`` with that environment's own kernel. It reuses pip's
download cache (``SCWORK_PIP_CACHE=1``; see postBuild) and takes a few minutes, which
run beside the rest of the suite (``started_early``, tests/conftest.py).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BINDER = ROOT / "binder"
TOUR = "notebooks/00_tour.ipynb"
#: The launch link the README carries: JupyterLab on the tour.
BINDER_URL = "https://mybinder.org/v2/gh/{owner_repo}/HEAD?labpath=notebooks%2F00_tour.ipynb"


def test_readme_launches_the_tour_on_binder():
    """The README says how to open the tour on Binder from wherever the repository is
    hosted; it publishes no link to a repository that may not exist."""
    readme = (ROOT / "README.md").read_text()
    assert BINDER_URL.format(owner_repo="<owner>/<repository>").replace("/gh/", "/<host>/") in readme
    assert "mybinder.org/v2/gh/scwork" not in readme
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "github.com/scwork/scwork" not in str(project.get("urls", {}))
    assert (ROOT / TOUR).is_file()


def _clean_copy(destination: Path) -> Path:
    """The files git tracks or would track (not ignored), copied from the working tree."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT, check=True, capture_output=True).stdout.decode().split("\0")
    except (OSError, subprocess.CalledProcessError):
        listed = None
    if listed is None:  # not a git checkout (e.g. an sdist): copy without caches
        shutil.copytree(ROOT, destination, ignore=shutil.ignore_patterns(
            ".git", "__pycache__", "*.egg-info", "build", "dist", ".pytest_cache", ".hypothesis",
            ".benchmarks", ".venv*", "*.nbi", "*.nbc"))
        return destination
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():  # listed files deleted in the working tree are skipped
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return destination


def _clean_environment(venv: Path, home: Path) -> dict[str, str]:
    """The current environment minus anything that would leak another Python into the venv."""
    env = {k: v for k, v in os.environ.items()
           if k not in {"PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "VIRTUAL_ENV",
                        "CONDA_PREFIX", "JUPYTER_PATH", "JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR",
                        "PIP_NO_CACHE_DIR", "PIP_USER", "PIP_PREFIX", "PIP_TARGET", "NUMBA_CACHE_DIR"}}
    env.update(
        PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        VIRTUAL_ENV=str(venv),
        # Kernelspecs, config and runtime files of the developer stay out of sight.
        JUPYTER_DATA_DIR=str(home / "jupyter-data"),
        JUPYTER_CONFIG_DIR=str(home / "jupyter-config"),
        JUPYTER_RUNTIME_DIR=str(home / "jupyter-runtime"),
        IPYTHONDIR=str(home / "ipython"),
        PYTHONNOUSERSITE="1",
        SCWORK_PIP_CACHE="1",
        SCWORK_PROGRESS="0",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
    )
    return env


def _run(job, command: list[str], *, cwd: Path, env: dict[str, str], log: Path, timeout: float) -> None:
    with open(log, "ab") as out:
        out.write(f"\n$ {' '.join(command)}\n".encode())
        out.flush()
        result = job.run(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                         stdin=subprocess.DEVNULL, timeout=timeout)
    if result.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        pytest.fail(f"{' '.join(command)} exited with {result.returncode}:\n{tail}", pytrace=False)


#: Executed by the venv's Python: runs the tour with the venv's kernel, prints a JSON report.
_RUN_TOUR = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    import nbclient, nbformat

    path, kernel = Path(sys.argv[1]), sys.argv[2]
    notebook = nbformat.read(path, as_version=4)
    notebook.cells.append(nbformat.v4.new_code_cell("import sys; print('KERNEL_PREFIX=' + sys.prefix)"))
    nbclient.NotebookClient(notebook, timeout=600, kernel_name=kernel, allow_errors=True,
                            resources={"metadata": {"path": str(path.parent)}}).execute()
    errors, stdout = [], ""
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                errors.append(f"{output['ename']}: {output['evalue']}")
            elif output.get("output_type") == "stream" and output.get("name") == "stdout":
                stdout += output.get("text", "")
    print("REPORT=" + json.dumps({"errors": errors, "stdout": stdout}))
""")


def _binder_environment_runs_the_tour(job):
    runtime = (BINDER / "runtime.txt").read_text().strip()
    here = f"python-{sys.version_info.major}.{sys.version_info.minor}"
    if here != runtime:
        pytest.skip(f"binder/runtime.txt asks for {runtime}; this is {here}")
    tmp_path = job.tmp
    repo = _clean_copy(tmp_path / "repo")
    venv = tmp_path / "venv"
    log = tmp_path / "binder.log"
    env = _clean_environment(venv, tmp_path / "home")
    python = str(venv / "bin" / "python")

    _run(job, [sys.executable, "-m", "venv", str(venv)], cwd=tmp_path, env=env, log=log, timeout=300)
    # What repo2docker does: requirements.txt, then postBuild from the repository root.
    _run(job, [python, "-m", "pip", "install", "-r", "binder/requirements.txt"], cwd=repo, env=env, log=log,
         timeout=900)
    _run(job, ["bash", "binder/postBuild"], cwd=repo, env=env, log=log, timeout=1200)
    # JupyterLab of that environment has the widget and bokeh extensions (prebuilt, from pip).
    extensions = job.run([str(venv / "bin" / "jupyter"), "labextension", "list"], cwd=repo, env=env,
                         capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    listing = extensions.stdout + extensions.stderr
    for extension in ("@jupyter-widgets/jupyterlab-manager", "@bokeh/jupyter_bokeh"):
        line = next((l for l in listing.splitlines() if extension in l), "")
        assert "enabled" in line and "OK" in line, f"{extension} missing or broken:\n{listing}"
    # The environment's own kernel, under a name no other installation uses.
    _run(job, [python, "-m", "ipykernel", "install", "--prefix", str(venv), "--name", "scwork-binder"],
         cwd=repo, env=env, log=log, timeout=120)
    script = tmp_path / "run_tour.py"
    script.write_text(_RUN_TOUR)
    result = job.run([python, str(script), str(repo / TOUR), "scwork-binder"], cwd=repo, env=env,
                     capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, f"running the tour failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    report = json.loads(result.stdout.split("REPORT=", 1)[1])
    where = job.run([python, "-c", "import scwork; print(scwork.__file__)"], cwd=tmp_path, env=env,
                    capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert where.returncode == 0, where.stderr[-2000:]
    return {"report": report, "venv": venv, "repo": repo, "scwork_file": Path(where.stdout.strip()),
            "numba_cache": list((repo / "scwork").rglob("*.nbi"))}


# Minutes of pip and a kernel: started when collection ends, beside the rest of the suite.
@pytest.mark.slow
@pytest.mark.started_early(work=_binder_environment_runs_the_tour)
def test_binder_environment_runs_the_tour(started_early):
    outcome = started_early.result()
    report, venv, repo = outcome["report"], outcome["venv"], outcome["repo"]
    assert not report["errors"], f"{TOUR} raised in the Binder environment: {report['errors']}"
    assert f"KERNEL_PREFIX={venv}" in report["stdout"], "the tour did not run on the Binder environment's kernel"
    # scwork came from the copy, editable, as on Binder; numba's cache was filled there.
    assert outcome["scwork_file"].resolve().is_relative_to(repo.resolve()), outcome["scwork_file"]
    assert outcome["numba_cache"], "postBuild did not fill numba's cache next to the sources"
