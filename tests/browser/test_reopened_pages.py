"""Explorers in pages that meet a kernel that is already running: re-opened, second, restarted.

BokehJS lives in the page, not in the kernel. JupyterLab keeps a notebook's kernel
running when its page closes, and a reloaded page shows the notebook without outputs:
people re-open it and "Run All" on the same kernel. Each new page must then get
BokehJS again (``scwork.widgets._display.ensure_bokehjs``), or every explorer shows
"Could not create a view for model id ..." and a "Click to show javascript error" box.

``test_reopened_page_and_restart`` runs the layouts notebook (six explorers' worth of
bokeh views) in one page, closes the page without shutting the kernel down, opens
the notebook in a new page (on the same kernel) and runs it all again; opens a second
page on that kernel beside it and runs it there too; then restarts the kernel from
that page and runs it once more. Every time: no cell error, a clean console, no
widget error box, and as many bokeh figures drawn with data as the first run drew.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.requires_widgets]

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
NOTEBOOK = "notebooks/01_layouts.ipynb"

#: JS: the bokeh figures drawn in the page (connected, finished, non-zero size) and how
#: many of them draw data; null when the page has no BokehJS.
_JS_DRAWN = """
() => {
  if (typeof Bokeh === "undefined") return null;
  const drawn = [...Bokeh.index.query((v) => v.model.type === "Figure")]
    .filter((v) => v.el?.isConnected && v.has_finished() && v.bbox && v.bbox.width > 0 && v.bbox.height > 0);
  const with_data = drawn.filter((v) => v.model.renderers.some(
    (r) => r.type === "GlyphRenderer" && (r.data_source.get_length() ?? 0) > 0));
  return {drawn: drawn.length, with_data: with_data.length};
}
"""

#: JS: the texts of the error boxes JupyterLab and ipywidgets show in place of an output.
_JS_ERROR_BOXES = """
() => [...document.querySelectorAll(".jp-OutputArea-output")]
  .map((el) => el.innerText || "")
  .filter((text) => text.includes("Click to show javascript error") || text.includes("Error displaying widget")
                    || text.includes("Could not create a view"))
"""


def _clear_outputs(lab) -> None:
    """Clear every output and execution count, so that ``run_all`` waits for the new run."""
    lab.page.evaluate("() => window.jupyterapp.commands.execute('notebook:clear-all-cell-outputs')")
    lab.page.wait_for_function(
        "() => [...window.jupyterapp.shell.currentWidget.content.widgets]"
        ".every((c) => c.model.type !== 'code' || c.model.executionCount === null)")


def _run_and_check(lab, expected: int | None, what: str) -> int:
    """Run All; wait until ``expected`` figures (or, if None, at least one) draw with data; a clean page."""
    _clear_outputs(lab)
    lab.run_all()

    def drawn():
        state = lab.page.evaluate(_JS_DRAWN)
        if state is None:
            return ["window.Bokeh is undefined: this page never got BokehJS"]
        if expected is None:
            return [] if state["with_data"] > 0 else ["no figure drawn with data"]
        if state["with_data"] < expected:
            return [f"{state['with_data']} of {expected} figures drawn with data"]
        return []

    lab.wait_for(drawn, f"the explorers' figures ({what})")
    lab.settle()
    assert lab.page.evaluate(_JS_ERROR_BOXES) == [], f"{what}: error boxes in place of outputs"
    lab.console.assert_clean()
    assert lab.kernel_json("explorer.error") == "", f"{what}: the explorer reports an error"
    return lab.page.evaluate(_JS_DRAWN)["with_data"]


def test_reopened_page_and_restart(lab_server, lab_pages):
    shutil.copytree(NOTEBOOKS, lab_server.root / "notebooks", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    kernel_of = "() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.id"
    # 1. The first page starts the kernel and runs everything.
    first = lab_pages()
    first.open_notebook(NOTEBOOK)
    kernel_id = first.page.evaluate(kernel_of)
    figures = _run_and_check(first, None, "first page")
    # 2. Closing the page (JupyterLab's default) leaves the kernel running.
    lab_pages.close(first)
    assert [s["kernel"]["id"] for s in lab_server.api("GET", "/api/sessions")] == [kernel_id]

    # 3. The notebook opened again meets the same kernel; Run All draws everything.
    again = lab_pages()
    again.open_notebook(NOTEBOOK)
    assert again.page.evaluate(kernel_of) == kernel_id
    _run_and_check(again, figures, "re-opened page on the running kernel")

    # 4. A second page on the same kernel, beside the first one.
    second = lab_pages()
    second.open_notebook(NOTEBOOK)
    assert second.page.evaluate(kernel_of) == kernel_id
    _run_and_check(second, figures, "second page on one kernel")
    again.console.assert_clean()

    # 5. A kernel restart under an open page (which has BokehJS already).
    second.page.evaluate(
        "async () => { await window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.restart(); }")
    second.page.wait_for_function(
        "() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status === 'idle'")
    _run_and_check(second, figures, "page after a kernel restart")
