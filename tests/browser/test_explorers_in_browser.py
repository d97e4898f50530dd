"""Every explorer in a real browser: JupyterLab + Chromium, and its offline HTML export.

For each explorer, ``test_explorer_in_jupyterlab``:

1. writes a one-cell notebook (small parameters) under the server root, opens it in
   JupyterLab and runs it with JupyterLab's own "Run All Cells" command;
2. waits until the explorer's bokeh figures are drawn (a connected BokehJS view per
   figure, finished, non-zero size, with glyph renderers) and until the plot data in
   the page equals the kernel's (row counts and per-column sums of every
   ColumnDataSource named in ``sources``);
3. saves a screenshot of the explorer to ``docs/screenshots/<module>.png``;
4. changes controls *in the browser* (keyboard on sliders, typing in text boxes,
   clicks on toggles, checkboxes and menus), checks that the kernel's trait followed,
   that the explorer reports no error, and that the page's plot data changed to the
   kernel's new data;
5. checks that the browser console logged no error (see
   ``conftest.BENIGN_CONSOLE_ERRORS``).

``test_export_opens_offline`` builds the same explorer in this process, writes
``to_html`` and opens the file in Chromium with every non-``file:`` request blocked:
no console error, no network request, figures drawn, data equal to Python's.

``test_notebook_in_jupyterlab`` runs every notebook of ``notebooks/`` in JupyterLab
(``SCWORK_SMALL=1``): no cell error, a clean console, every figure drawn with data.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.requires_widgets]


@dataclass(frozen=True)
class Explorer:
    name: str                       # class in scwork.widgets
    screenshot: str                 # docs/screenshots/<screenshot>.png (the widget's module name)
    setup: str                      # builds `ex` with small parameters (one notebook cell)
    figures: tuple[str, ...]        # ex.figures drawn initially
    sources: tuple[str, ...]        # ex.sources whose browser copy must equal the kernel's
    interact: Callable              # (lab) -> None: changes controls in the browser, asserts


def _changed(lab, names, before, what):
    """Wait until the page shows the kernel's current data for ``names``; it must differ from ``before``."""
    after = lab.wait_for_sources("ex", names, what)
    assert after != before, f"{what}: the kernel's plot data did not change"
    return after


def _no_error(lab):
    assert lab.kernel_json("ex.error") == ""


# -- interactions ---------------------------------------------------------------------------


#: JS: all text of the page, inside bokeh's (nested) shadow roots too: what a person reads.
_JS_PAGE_TEXT = """
() => {
  const walk = (root) => {
    let text = root.textContent || "";
    for (const el of root.querySelectorAll("*")) if (el.shadowRoot) text += " " + walk(el.shadowRoot);
    return text;
  };
  return walk(document.body);
}
"""


def _layout_explorer(lab):
    names = ("grid_cells", "strip_cells")
    before = lab.wait_for_sources("ex", names, "initial layout")
    # Type a new layout into the text box, key by key (each keystroke reaches the
    # kernel: the half-typed texts are invalid and must not break anything), then Enter.
    box = lab.control("text", "Layout").locator("input")
    box.click()
    box.press("Control+a")
    box.press_sequentially("f32[3,5]{1,0:T(2,2)}", delay=15)
    box.press("Enter")
    lab.wait_kernel("ex.text", "f32[3,5]{1,0:T(2,2)}")
    _no_error(lab)
    after = _changed(lab, names, before, "typing a layout")
    assert after["grid_cells"]["length"] == 4 * 6  # f32[3,5] padded to the (2, 2) tiles
    # A layout of 16.7 M cells draws too (zoomable overview), and the page says so.
    box.click()
    box.press("Control+a")
    box.fill("bf16[4096,4096]{1,0:T(8,128)(2,1)}")
    box.press("Enter")
    lab.wait_kernel("ex.text", "bf16[4096,4096]{1,0:T(8,128)(2,1)}")
    _no_error(lab)
    lab.wait_for(lambda: [] if "16,777,216 cells" in lab.page.evaluate(_JS_PAGE_TEXT)
                 else ["the caption of the 4096 x 4096 layout"], "the large layout's caption")
    # Dragging the large layout (the pan tool) reaches the kernel as a RangesUpdate event
    # (the figure and its ranges are not synced back, events are), which redraws the
    # window now in view.
    whole = lab.kernel_json("list(ex._grid.visible_window())")
    lab.kernel("ex._grid_view.add_class('scwork-test-grid')")
    canvas = lab.page.locator(".scwork-test-grid canvas").first
    canvas.wait_for(timeout=60_000)
    box = canvas.bounding_box()
    x, y = box["x"] + box["width"] * 0.4, box["y"] + box["height"] * 0.5
    lab.page.mouse.move(x, y)
    lab.page.mouse.down()
    lab.page.mouse.move(x - box["width"] * 0.25, y, steps=8)
    lab.page.mouse.up()
    lab.wait_for(lambda: [] if lab.kernel_json("list(ex._grid.visible_window())")[2] > whole[2]
                 else [f"the kernel's window is still {whole}"], "the panned window in the kernel")
    _no_error(lab)
    # A toggle: the NPU mode draws the lane map.
    lab.toggle_button("Sophgo NPU local memory").click()
    lab.wait_kernel("ex.mode", "npu")
    _no_error(lab)
    lab.wait_for_figures("ex", ["lanes"])
    lanes = lab.wait_for_sources("ex", ["lane_cells"], "NPU mode")
    assert lanes["lane_cells"]["length"] > 0


def _load_skew(lab):
    names = ("ids_bars", "ids_max", "heatmap")
    before = lab.wait_for_sources("ex", names, "step 0")
    lab.press_slider("step", "ArrowRight")
    lab.wait_kernel("ex.step", 1)
    _no_error(lab)
    after = _changed(lab, names, before, "step slider")
    lab.toggle_button("by table").click()
    lab.wait_kernel("ex.split_by", "table")
    _no_error(lab)
    _changed(lab, ("ids_bars",), {"ids_bars": after["ids_bars"]}, "bars by table")
    lab.page.get_by_label("allow id dropping").check()
    lab.wait_kernel("ex.allow_id_dropping", True)
    _no_error(lab)


def _memory_timeline(lab):
    names = ("hbm_segments", "hbm_peak", "live_at_peak")
    before = lab.wait_for_sources("ex", names, "initial plan")
    start = lab.kernel_json("ex.num_serialized_tables")
    lab.press_slider("serialized tables", "ArrowRight")
    lab.wait_kernel("ex.num_serialized_tables", start + 1)
    _no_error(lab)
    _changed(lab, names, before, "serialized tables slider")
    before = lab.wait_for_sources("ex", ("hbm_segments",), "program order")
    lab.toggle_button("modelled time").click()
    lab.wait_kernel("ex.x_axis", "time")
    _changed(lab, ("hbm_segments",), before, "x axis toggle")


def _allreduce_stepper(lab):
    names = ("arrows_left", "arrows_right", "timeline_highlight")
    before = lab.wait_for_sources("ex", names, "step 0")
    lab.press_slider("step", "ArrowRight")
    lab.wait_kernel("ex.step", 1)
    after = _changed(lab, names, before, "step slider")
    assert after["arrows_left"]["length"] == 2  # pincer, step 1: A -> H and B -> C ([md-allreduce])
    before = lab.wait_for_sources("ex", ("timeline",), "pincer on the left")
    lab.control("dropdown", "left").locator("select").select_option(label="single path (chain there and back)")
    lab.wait_kernel("ex.algorithm_left", "single_path")
    _no_error(lab)
    _changed(lab, ("timeline",), before, "left algorithm menu")


def _pipeline_timeline(lab):
    names = ("sequential", "pipelined", "pipelined_stages")
    before = lab.wait_for_sources("ex", names, "32 host threads")
    # Both schedules are always drawn; the checkbox switches the one the summary and
    # the advisor report.
    lab.page.get_by_label(re.compile(r"^pipelining")).uncheck()
    lab.wait_kernel("ex.pipelining", False)
    lab.wait_kernel("ex.summary['pipelining']", False)
    _no_error(lab)
    threads = lab.kernel_json("ex.host_threads")
    lab.press_slider("host threads", "ArrowLeft")
    lab.wait_kernel("ex.host_threads", threads - 1)
    _no_error(lab)
    _changed(lab, names, before, "host threads slider")


def _plan_explorer(lab):
    before = lab.wait_for_sources("ex", ("points", "front"), "initial constraints")
    cap = lab.kernel_json("round(float(ex.result.dataset['peak_hbm_bytes'].median()) / 2**30, 4)")
    box = lab.control("text", "HBM cap GiB (0: none)").locator("input")
    box.fill(str(cap))
    box.press("Enter")
    lab.wait_kernel("round(ex.max_peak_hbm_gib, 4)", cap)
    _no_error(lab)
    _changed(lab, ("points",), {"points": before["points"]}, "HBM cap")
    lab.page.get_by_label("must fit SPMEM and HBM").uncheck()
    lab.wait_kernel("ex.fits_memory", False)
    _no_error(lab)


EXPLORERS = [
    Explorer(
        "LayoutExplorer", "layout_explorer",
        "from scwork.widgets import LayoutExplorer\n\n"
        "ex = LayoutExplorer(text='bf16[4,8]{1,0:T(2,4)(2,1)}')\nex",
        figures=("grid", "strip"), sources=("grid_cells", "strip_cells"), interact=_layout_explorer),
    Explorer(
        "LoadSkewExplorer", "load_skew",
        "from scwork.widgets import LoadSkewExplorer\n\n"
        "ex = LoadSkewExplorer.demo(batch_size=512, num_steps=2)\nex",
        figures=("ids", "unique_ids", "heatmap"), sources=("ids_bars", "unique_bars", "heatmap"),
        interact=_load_skew),
    Explorer(
        "MemoryTimeline", "memory_timeline",
        "from scwork.widgets import MemoryTimeline\n\n"
        "ex = MemoryTimeline.demo()\nex",
        figures=("hbm", "lifetimes", "spmem"), sources=("hbm_segments", "live_at_peak", "spmem_bars"),
        interact=_memory_timeline),
    Explorer(
        "AllReduceStepper", "allreduce_stepper",
        "from scwork.collectives import Network\nfrom scwork.widgets import AllReduceStepper\n\n"
        "ex = AllReduceStepper(Network.ring(8), ('pincer', 'rotated_pincer'))\nex",
        figures=("topology_left", "topology_right", "utilisation_left", "utilisation_right", "timeline"),
        sources=("nodes_left", "links_left", "nodes_right", "timeline"), interact=_allreduce_stepper),
    Explorer(
        "PipelineTimeline", "pipeline_timeline",
        "from scwork.widgets import PipelineTimeline\n\n"
        "ex = PipelineTimeline.demo(batch_size=1024)\nex",
        figures=("sequential", "pipelined"), sources=("sequential", "pipelined", "sequential_parts"),
        interact=_pipeline_timeline),
    Explorer(
        "PlanExplorer", "plan_explorer",
        "from scwork.widgets import PlanExplorer\n\n"
        "ex = PlanExplorer.demo()\nex",
        figures=("scatter",), sources=("points", "front", "marked"), interact=_plan_explorer),
]


def _require(explorer: Explorer) -> None:
    pytest.importorskip("ipywidgets")
    import scwork.widgets

    assert explorer.name in scwork.widgets.__all__, f"{explorer.name} is not exported by scwork.widgets"


@pytest.mark.parametrize("explorer", EXPLORERS, ids=[e.name for e in EXPLORERS])
def test_explorer_in_jupyterlab(explorer, lab):
    _require(explorer)
    notebook = lab.write_notebook(f"explorers/{explorer.screenshot}.ipynb", [explorer.setup])
    lab.open_notebook(notebook)
    lab.run_all()
    _no_error(lab)
    lab.wait_for_figures("ex", explorer.figures)
    lab.wait_for_sources("ex", explorer.sources, "initial render")
    lab.screenshot(explorer.screenshot)
    explorer.interact(lab)
    lab.settle()
    lab.console.assert_clean()


@pytest.mark.parametrize("explorer", EXPLORERS, ids=[e.name for e in EXPLORERS])
def test_export_opens_offline(explorer, offline_page, tmp_path, monkeypatch):
    _require(explorer)
    monkeypatch.setenv("SCWORK_SMALL", "1")
    namespace: dict = {}
    # The notebook cell's own code, so the export shows what the JupyterLab test shows.
    exec(compile(explorer.setup, f"<{explorer.name} setup>", "exec"), namespace)  # noqa: S102
    ex = namespace["ex"]
    path = ex.to_html(tmp_path / f"{explorer.screenshot}.html")
    offline_page.open(path)
    offline_page.wait_for_figures({name: ex.figures[name].id for name in explorer.figures})
    problems = offline_page.source_problems({name: ex.sources[name] for name in explorer.sources})
    assert not problems, f"{path.name}: " + "; ".join(problems)
    assert not offline_page.blocked, f"{path.name} tried to reach the network: {offline_page.blocked}"
    offline_page.console.assert_clean()


#: JS: connected bokeh figures drawn with data: [{title, width, height, rows}] (rows: the
#: largest data source among the figure's glyph renderers).
_JS_DRAWN_FIGURES = """
() => typeof Bokeh === "undefined" ? null : [...Bokeh.index.query((v) => v.model.type === "Figure")]
  .filter((v) => v.el?.isConnected && v.has_finished() && v.bbox && v.bbox.width > 0 && v.bbox.height > 0)
  .map((v) => ({
    title: v.model.title?.text ?? "",
    rows: Math.max(0, ...v.model.renderers.filter((r) => r.type === "GlyphRenderer")
                                         .map((r) => r.data_source.get_length() ?? 0)),
  }))
"""


NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_in_jupyterlab(path, lab):
    """Every notebook runs top to bottom in JupyterLab (SCWORK_SMALL=1) with a clean console,
    and every bokeh figure it shows is drawn with data. 00_tour is what ``scwork lab`` and
    Binder open first."""
    shutil.copytree(path.parent, lab.server.root / "notebooks", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    lab.open_notebook(f"notebooks/{path.name}")
    lab.run_all()
    text = path.read_text()
    if "scwork.widgets" in text or "bokeh" in text:

        def drawn_with_data():
            drawn = lab.page.evaluate(_JS_DRAWN_FIGURES)
            if drawn is None:
                return ["window.Bokeh is undefined: BokehJS was never loaded in this page"]
            return [] if drawn else ["no bokeh figure drawn"]

        lab.wait_for(drawn_with_data, f"{path.name}'s figures to draw")
        lab.settle()
        drawn = lab.page.evaluate(_JS_DRAWN_FIGURES)
        empty = [f["title"] or "(untitled)" for f in drawn if f["rows"] == 0]
        assert not empty, f"figures drawn without data: {empty}"
    # Saving after "Run All" must write back the committed bytes: git stays clean.
    saved = lab.server.root / "notebooks" / path.name
    before = saved.stat().st_mtime_ns
    lab.page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
    lab.wait_for(lambda: [] if saved.stat().st_mtime_ns != before else ["not saved yet"],
                 f"{path.name} to be saved")
    assert saved.read_bytes() == path.read_bytes(), (
        f"saving {path.name} in JupyterLab changed it ({saved.stat().st_size} bytes "
        f"instead of {path.stat().st_size}): running the notebooks would dirty git")
    lab.console.assert_clean()
