"""Running and saving scwork's notebooks leaves the repository clean (scwork.notebook_hygiene)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from scwork.notebook_hygiene import PRE_SAVE_HOOK, strip_outputs, wants_stripping

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))


def _executed_model(path: Path) -> dict:
    """The committed notebook as a server would hold it after "Run All" in a session."""
    notebook = json.loads(path.read_text())
    notebook["metadata"]["kernelspec"]["display_name"] = "Python 3"  # another install's name
    notebook["metadata"]["language_info"] = {
        "codemirror_mode": {"name": "ipython", "version": 3}, "file_extension": ".py",
        "mimetype": "text/x-python", "name": "python", "version": "3.13.0"}
    notebook["metadata"]["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    for count, cell in enumerate(notebook["cells"], start=1):
        if cell["cell_type"] == "code":
            cell["execution_count"] = count
            cell["metadata"]["scrolled"] = True
            cell["metadata"]["execution"] = {"iopub.status.idle": "2026-01-01T00:00:00Z"}
            cell["outputs"] = [{"output_type": "display_data", "metadata": {},
                                "data": {"text/html": "<script>" + "x" * 10_000 + "</script>"}}]
    return {"type": "notebook", "format": "json", "content": notebook}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_every_notebook_opts_in(path):
    assert wants_stripping(json.loads(path.read_text())), (
        f"{path.name} lacks metadata.scwork.strip_outputs_on_save: running it would dirty git")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_saving_an_executed_notebook_through_jupyter_server_writes_the_committed_bytes(path, tmp_path):
    """The real Jupyter contents manager, configured as ``scwork lab`` configures it."""
    filemanager = pytest.importorskip("jupyter_server.services.contents.filemanager")
    manager = filemanager.FileContentsManager(root_dir=str(tmp_path), pre_save_hook=PRE_SAVE_HOOK)
    manager.save(_executed_model(path), path.name)
    assert (tmp_path / path.name).read_bytes() == path.read_bytes()


def test_notebooks_that_do_not_opt_in_keep_their_outputs():
    model = _executed_model(NOTEBOOKS[0])
    del model["content"]["metadata"]["scwork"]
    before = copy.deepcopy(model)
    strip_outputs(model)
    assert model == before


@pytest.mark.parametrize("model", [None, {"type": "file", "content": "x"}, {"type": "notebook"},
                                   {"type": "notebook", "content": {"metadata": {"scwork": True}}}])
def test_other_models_are_left_alone(model):
    before = copy.deepcopy(model)
    strip_outputs(model)
    assert model == before
