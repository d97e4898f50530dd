"""MemoryTimeline in JupyterLab, as a person sees it: the rows on screen, the page height, the labels.

``tests/browser/test_explorers_in_browser.py`` checks that the page's bokeh data
equals the kernel's. That missed what a user hit: BokehJS held the "by padding
waste" rows while the table on screen still showed the rows by size (a header
click had sorted the table in the browser, and BokehJS re-applies that sort to
every new data). These tests read the DOM instead:

- the text of the table rows on screen follows the "by size" / "by padding waste"
  toggle, also after a click on a column header;
- one slider move (the user's: "max ids / partition" one step up) adds no output,
  no warning (in the kernel, in the verdict) and does not grow the page;
- every control label is shown whole (not cut with an ellipsis).
"""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.requires_widgets]

SETUP = "from scwork.widgets import MemoryTimeline\n\nex = MemoryTimeline.demo()\nex"

#: JS: the rows of the bokeh DataTables under ``root`` that are on screen, top to bottom:
#: [[cell text, ...], ...]; rows outside their grid's viewport are left out.
_JS_VISIBLE_TABLE_ROWS = """
(root) => {
  const rows = [];
  const walk = (node) => {
    for (const el of node.querySelectorAll("*")) {
      if (el.classList.contains("slick-viewport")) {
        const view = el.getBoundingClientRect();
        for (const row of el.querySelectorAll(".slick-row")) {
          const r = row.getBoundingClientRect();
          if (r.height <= 0 || r.bottom <= view.top || r.top >= view.bottom) continue;
          if (getComputedStyle(row).visibility === "hidden") continue;
          rows.push({top: r.top, cells: [...row.querySelectorAll(".slick-cell")].map((c) => c.textContent.trim())});
        }
      }
      if (el.shadowRoot) walk(el.shadowRoot);
    }
  };
  walk(root);
  rows.sort((a, b) => a.top - b.top);
  return rows.map((r) => r.cells);
}
"""

#: JS: the centre of the DataTable header cell titled ``title`` ({x, y}), or null.
_JS_HEADER_CENTRE = """
([root, title]) => {
  let hit = null;
  const walk = (node) => {
    for (const el of node.querySelectorAll("*")) {
      if (el.classList.contains("slick-header-column") && el.textContent.trim() === title) hit = el;
      if (el.shadowRoot) walk(el.shadowRoot);
    }
  };
  walk(root);
  if (hit === null) return null;
  hit.scrollIntoView({block: "center"});
  const r = hit.getBoundingClientRect();
  return {x: r.left + r.width / 2, y: r.top + r.height / 2};
}
"""

#: JS: text under ``root``, inside bokeh's shadow roots too (what a person reads).
_JS_TEXT = """
(root) => {
  const walk = (node) => {
    let text = node.textContent || "";
    for (const el of node.querySelectorAll("*")) if (el.shadowRoot) text += " " + walk(el.shadowRoot);
    return text;
  };
  return walk(root);
}
"""

#: JS: ipywidgets labels under ``root`` whose text does not fit their box (cut by CSS).
_JS_CUT_LABELS = """
(root) => [...root.querySelectorAll(".widget-label, .widget-label-basic, .widget-checkbox label")]
  .filter((el) => el.offsetParent !== null && el.textContent.trim() !== "")
  .filter((el) => el.scrollWidth > el.clientWidth + 1)
  .map((el) => `${el.textContent.trim()} (${el.scrollWidth} px of text in ${el.clientWidth} px)`)
"""

#: Kernel code: record every Python warning and every log record of WARNING and above.
_KERNEL_SPY = """
import logging as _logging
import warnings as _warnings

_seen = []
_warnings.simplefilter("always")
_warnings.showwarning = lambda message, category, *args, **kwargs: _seen.append(f"{category.__name__}: {message}")


class _Spy(_logging.Handler):
    def emit(self, record):
        _seen.append(f"log {record.name} {record.levelname}: {record.getMessage()}")


_logging.getLogger().addHandler(_Spy(level=_logging.WARNING))
"""


def _open_demo(lab):
    lab.open_notebook(lab.write_notebook("explorers/memory_timeline_seen.ipynb", [SETUP]))
    lab.run_all()
    assert lab.kernel_json("ex.error") == ""
    lab.wait_for_figures("ex", ("hbm", "lifetimes", "spmem"))
    lab.wait_for_sources("ex", ("live_at_peak",), "initial render")
    lab.settle()
    return lab.output()


def _rows_on_screen(output) -> list[list[str]]:
    return output.evaluate(_JS_VISIBLE_TABLE_ROWS)


def _expected_rows(lab) -> list[list[str]]:
    """The kernel's rows (rank and buffer name), in the order the engine sorted them."""
    data = lab.kernel_json("{k: list(map(str, ex.sources['live_at_peak'].data[k])) for k in ('rank', 'buffer')}")
    return [[rank, buffer] for rank, buffer in zip(data["rank"], data["buffer"])]


def _wait_rows(lab, output, expected, what):
    def check():
        shown = [row[:2] for row in _rows_on_screen(output)]
        if shown == expected:
            return []
        return [f"rows on screen {json.dumps(shown[:4])}..., expected {json.dumps(expected[:4])}..."]

    lab.wait_for(check, what)


def test_live_at_peak_rows_on_screen_follow_the_order(lab):
    output = _open_demo(lab)
    by_size = _expected_rows(lab)
    assert len(by_size) == 25
    _wait_rows(lab, output, by_size, "the table to show the rows by size")
    first = _rows_on_screen(output)
    assert first[0][1] == "table user_id"  # the largest buffer, ranked 1

    # What the user may do first: click a column header, as in any table. The table must not
    # sort itself in the browser (the order is the toggle's).
    header = output.evaluate(f"(root) => ({_JS_HEADER_CENTRE})([root, 'MiB'])")
    assert header is not None, "no 'MiB' column header on screen"
    lab.page.mouse.click(header["x"], header["y"])
    lab.page.wait_for_timeout(300)
    assert [row[:2] for row in _rows_on_screen(output)] == by_size, "a header click re-sorted the table"

    lab.toggle_button("by padding waste").click()
    lab.wait_kernel("ex.sort_by", "waste_bytes")
    by_waste = _expected_rows(lab)
    assert [b for _, b in by_waste] == lab.kernel_json(
        "[iv.name for iv in ex.report.timeline.live_at_peak(sort_by='waste_bytes')[:25]]")
    assert by_waste != by_size
    _wait_rows(lab, output, by_waste, "the table to show the rows by padding waste")
    shown = _rows_on_screen(output)
    assert shown != first
    assert shown[0][1] == "table user_bias"  # the billion-row bias table of width 1, padded to 8
    waste_mib = [float(row[4].replace(",", "")) for row in shown]
    assert waste_mib == sorted(waste_mib, reverse=True), "padding column on screen is not largest first"

    lab.toggle_button("by size").click()
    lab.wait_kernel("ex.sort_by", "bytes")
    _wait_rows(lab, output, by_size, "the table to show the rows by size again")
    lab.settle()
    lab.console.assert_clean()


def test_slider_move_adds_nothing_and_keeps_the_page_height(lab):
    output = _open_demo(lab)
    outputs_before = lab.page.locator(".jp-Notebook .jp-OutputArea-output").count()
    height_before = output.evaluate("(el) => el.getBoundingClientRect().height")
    lab.kernel(_KERNEL_SPY)

    # The user's move: "max ids / partition" one step up from 0 (each stack's own limits).
    lab.press_slider("max ids / partition", "ArrowRight")
    lab.wait_kernel("ex.max_ids_per_partition", 8)
    assert lab.kernel_json("ex.error") == ""
    lab.wait_for_sources("ex", ("hbm_segments", "live_at_peak", "spmem_bars"), "max ids 8")
    lab.settle()
    text = output.evaluate(_JS_TEXT)
    assert "max ids / unique ids" in text  # the SPMEM detail is drawn
    assert "[warning]" not in text, "the verdict shows warnings after one slider move"
    assert lab.kernel_json("_seen") == [], "warnings or log records in the kernel after one slider move"
    assert lab.kernel_json("[f.code for f in ex.report.diagnoses if f.severity == 'warning']") == []

    assert lab.page.locator(".jp-Notebook .jp-OutputArea-output").count() == outputs_before
    height_after = output.evaluate("(el) => el.getBoundingClientRect().height")
    assert height_after <= height_before + 1, f"page grew from {height_before} to {height_after} px"

    # A setting with many findings (every stack over SPMEM) scrolls the verdict, not the page.
    lab.kernel("ex.max_ids_per_partition = ex.controls['max_ids_per_partition'].max")
    lab.wait_kernel("ex.report.spmem_fits", False)
    lab.wait_for_sources("ex", ("spmem_bars",), "max ids at the slider's maximum")
    lab.settle()
    height_many = output.evaluate("(el) => el.getBoundingClientRect().height")
    assert height_many <= height_before + 1, f"page grew from {height_before} to {height_many} px"
    assert lab.kernel_json("_seen") == []
    lab.console.assert_clean()


def test_every_control_label_is_readable(lab):
    output = _open_demo(lab)
    cut = output.evaluate(_JS_CUT_LABELS)
    assert cut == [], f"control labels cut: {cut}"
    text = output.evaluate(_JS_TEXT)
    for label in ("batch size", "serialized tables", "prefetch depth", "max ids / partition",
                  "max unique ids / partition", "stage gather operands in HBM", "engine's fix"):
        assert label in text
    lab.console.assert_clean()
