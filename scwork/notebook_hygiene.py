"""Keep scwork's own notebooks clean in git after they are run and saved.

A notebook that ran the explorers holds megabytes of outputs (BokehJS, widget
state, figures). Saved as it is, every "Run All" rewrites the file in the
repository. Notebooks that opt in through their metadata::

    "metadata": {"scwork": {"strip_outputs_on_save": true}, ...}

are saved without outputs, execution counts, widget state or the kernel's
language details, so the saved file is byte for byte what the repository holds and
``git status`` stays clean. All notebooks in ``notebooks/`` opt in; a user's own
notebooks are left alone unless they add the same metadata.

The Jupyter server calls :func:`strip_outputs` before it writes a file (its
``ContentsManager.pre_save_hook``). ``scwork lab`` passes it on the command line; the
Binder image installs ``jupyter-config/jupyter_server_config.d/scwork.json`` into its
environment's Jupyter config; a server started by hand gets it with
``jupyter lab --ContentsManager.pre_save_hook=scwork.notebook_hygiene.strip_outputs``
or by copying that file into a folder of ``jupyter --paths`` (config). This module imports
nothing from Jupyter: it edits the JSON model.

Examples
--------
>>> model = {"type": "notebook", "content": {
...     "metadata": {"scwork": {"strip_outputs_on_save": True},
...                  "language_info": {"name": "python", "version": "3.13.0"}},
...     "cells": [{"cell_type": "code", "execution_count": 3, "metadata": {"scrolled": True},
...                "outputs": [{"output_type": "stream", "name": "stdout", "text": "hi"}],
...                "source": "print('hi')"}]}}
>>> strip_outputs(model)
>>> model["content"]["cells"][0]["outputs"], model["content"]["cells"][0]["execution_count"]
([], None)
>>> model["content"]["metadata"]["language_info"]
{'name': 'python'}
"""

from __future__ import annotations

from typing import Any

__all__ = ["strip_outputs", "wants_stripping", "PRE_SAVE_HOOK", "PYTHON3_KERNELSPEC"]

#: The import string a Jupyter server is configured with.
PRE_SAVE_HOOK = "scwork.notebook_hygiene.strip_outputs"

#: The kernelspec scwork's notebooks are saved with (ipykernel's default Python kernel).
PYTHON3_KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}

# Cell metadata JupyterLab writes while a person works (scroll state, collapsed
# outputs, timings); none of it belongs in the repository.
_TRANSIENT_CELL_METADATA = ("scrolled", "collapsed", "execution", "jupyter", "ExecuteTime")


def wants_stripping(notebook: dict[str, Any]) -> bool:
    """True when the notebook's metadata opts in (``scwork.strip_outputs_on_save``)."""
    metadata = notebook.get("metadata") or {}
    scwork_metadata = metadata.get("scwork") or {}
    return isinstance(scwork_metadata, dict) and scwork_metadata.get("strip_outputs_on_save") is True


def strip_outputs(model: dict[str, Any], **_: Any) -> None:
    """Jupyter ``pre_save_hook``: strip an opted-in notebook model in place.

    Clears every code cell's outputs and execution count, the cells' transient
    metadata and the notebook's widget state, and reduces ``language_info`` to the
    language name (the kernel's version would differ from machine to machine).
    Anything that is not an opted-in notebook is left untouched.
    """
    if not isinstance(model, dict) or model.get("type") != "notebook":
        return
    notebook = model.get("content")
    if not isinstance(notebook, dict) or not wants_stripping(notebook):
        return
    metadata = notebook["metadata"]
    metadata.pop("widgets", None)
    language = metadata.get("language_info")
    if isinstance(language, dict) and "name" in language:
        metadata["language_info"] = {"name": language["name"]}
    kernelspec = metadata.get("kernelspec")
    if isinstance(kernelspec, dict) and kernelspec.get("name") == "python3":
        # Each Jupyter install names the same kernel its own way ("Python 3",
        # "Python 3 (ipykernel)"): save the one name the repository holds.
        metadata["kernelspec"] = dict(PYTHON3_KERNELSPEC)
    for cell in notebook.get("cells") or []:
        if not isinstance(cell, dict):
            continue
        cell_metadata = cell.get("metadata")
        if isinstance(cell_metadata, dict):
            for key in _TRANSIENT_CELL_METADATA:
                cell_metadata.pop(key, None)
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
        elif "attachments" in cell and not cell["attachments"]:
            cell.pop("attachments")
