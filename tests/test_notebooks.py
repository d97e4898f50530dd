"""Every notebook runs top to bottom, with small parameters (SCWORK_SMALL=1)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))


def test_there_is_a_tour_and_a_layout_notebook():
    names = {p.name for p in NOTEBOOKS}
    assert {"00_tour.ipynb", "01_layouts.ipynb"} <= names


def test_tour_links_every_other_notebook():
    nbformat = pytest.importorskip("nbformat")
    tour = nbformat.read(NOTEBOOKS[0], as_version=4)
    text = "\n".join(cell.source for cell in tour.cells)
    for path in NOTEBOOKS[1:]:
        assert path.name in text, f"the tour does not link {path.name}"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_top_to_bottom(path, monkeypatch, tmp_path):
    """Every notebook runs, and saving the executed notebook as ``scwork lab``'s Jupyter
    server does writes back exactly the committed file (git stays clean)."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipywidgets")
    notebook = nbformat.read(path, as_version=4)
    # A notebook that reads other libraries' files names them in its metadata; without
    # them (e.g. jax-tpu-embedding on Python < 3.12) it is skipped with the reason.
    for module in notebook.metadata.get("scwork", {}).get("requires", []):
        pytest.importorskip(module, reason=f"{path.name} needs {module} (pip install -e '.[interop]', Python >= 3.12)")
    monkeypatch.setenv("SCWORK_SMALL", "1")
    monkeypatch.setenv("SCWORK_PROGRESS", "0")
    client = nbclient.NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    client.execute()
    errors = [
        output for cell in notebook.cells if cell.cell_type == "code"
        for output in cell.get("outputs", []) if output.get("output_type") == "error"
    ]
    assert not errors
    assert os.environ["SCWORK_SMALL"] == "1"
    filemanager = pytest.importorskip("jupyter_server.services.contents.filemanager")
    from scwork.notebook_hygiene import PRE_SAVE_HOOK

    manager = filemanager.FileContentsManager(root_dir=str(tmp_path), pre_save_hook=PRE_SAVE_HOOK)
    manager.save({"type": "notebook", "format": "json", "content": dict(notebook)}, path.name)
    assert (tmp_path / path.name).read_bytes() == path.read_bytes(), (
        f"saving the executed {path.name} would change it in git")


@pytest.mark.slow
def test_byom_notebook_stops_with_its_reason_without_jax_tpu_embedding():
    """Notebook 06 on a Python without jax-tpu-embedding (3.11, the README's install): its
    first cell stops with one line saying what it needs, not a ModuleNotFoundError traceback."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    path = next(p for p in NOTEBOOKS if p.name.startswith("06_"))
    notebook = nbformat.read(path, as_version=4)
    first = next(cell for cell in notebook.cells if cell.cell_type == "code")
    # The library hidden as if not installed (find_spec answers None for it).
    hide = nbformat.v4.new_code_cell("import sys\nsys.modules['jax_tpu_embedding'] = None")
    notebook.cells = [hide, first]
    client = nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3", allow_errors=True)
    client.execute()
    [error] = [o for o in notebook.cells[1].outputs if o.output_type == "error"]
    assert error.traceback == [error.evalue]  # the reason alone, no traceback
    assert "needs jax-tpu-embedding" in error.evalue and "Python >= 3.12" in error.evalue
    assert "[interop]" in error.evalue
    assert "ModuleNotFoundError" not in str(notebook.cells[1].outputs)
    metadata = notebook.metadata.get("scwork", {}).get("requires", [])
    assert "jax_tpu_embedding" in metadata  # the test suite skips the whole notebook on such a Python
