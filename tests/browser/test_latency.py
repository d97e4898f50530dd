"""Latency of every explorer control in the browser: from the change to the settled plot.

A benchmark, not a pass/fail test: it runs only with ``SCWORK_LATENCY=1`` (see
``benchmarks/bench_browser_latency.py``, which sets it and prints the table). Each
explorer is built on its notebook's default data (not the small test parameters);
every control in ``ex.controls`` is changed in the page as a person would (click,
key press, menu choice, typing + Enter) and the time is taken in the page, from just
before the action until the kernel has handled it (busy, then idle) and every BokehJS
view has finished rendering. Each control is measured ``SCWORK_LATENCY_REPEATS`` times
(default 3) and the median is written to ``$SCWORK_LATENCY_OUT`` (JSON).
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.browser, pytest.mark.slow, pytest.mark.requires_widgets,
    pytest.mark.skipif(os.environ.get("SCWORK_LATENCY") != "1",
                       reason="latency benchmark: run python benchmarks/bench_browser_latency.py"),
]

#: Each explorer as its notebook builds it by default (full size, not SCWORK_SMALL).
SETUPS = {
    "LayoutExplorer": "from scwork.widgets import LayoutExplorer\nex = LayoutExplorer()\nex",
    "LoadSkewExplorer": "from scwork.widgets import LoadSkewExplorer\nex = LoadSkewExplorer.demo()\nex",
    "MemoryTimeline": "from scwork.widgets import MemoryTimeline\nex = MemoryTimeline.demo()\nex",
    "AllReduceStepper": ("from scwork.collectives import Network\nfrom scwork.widgets import AllReduceStepper\n"
                         "ex = AllReduceStepper(Network.torus((8, 8)))\nex"),
    "PipelineTimeline": "from scwork.widgets import PipelineTimeline\nex = PipelineTimeline.demo()\nex",
}

# JS: arm a listener on the notebook's kernel status, then take the start time.
_JS_ARM = """
() => {
  const kernel = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
  const state = window.__scworkLatency = {busy: false, idleAt: null};
  if (!window.__scworkLatencyHooked) {
    window.__scworkLatencyHooked = true;
    kernel.statusChanged.connect((_, status) => {
      const s = window.__scworkLatency;
      if (status === "busy") s.busy = true;
      if (status === "idle" && s.busy && s.idleAt === null) s.idleAt = performance.now();
    });
  }
  return performance.now();
}
"""

# JS: the time the change settled (kernel handled it, every connected view drawn), or null.
_JS_SETTLED = """
() => {
  const s = window.__scworkLatency;
  if (!s || s.idleAt === null || typeof Bokeh === "undefined") return null;
  const views = [...Bokeh.index].filter((v) => v.el?.isConnected);
  return views.every((v) => v.has_finished()) ? performance.now() : null;
}
"""

# Python, in the kernel: what each control is, and a change to make to it.
_KERNEL_CONTROLS = """
import ipywidgets as _w
def _control_plan(ex):
    plan = []
    for name, c in ex.controls.items():
        if not isinstance(c, _w.Widget) or getattr(c, "disabled", False):
            continue
        layout = getattr(c, "layout", None)
        if layout is not None and layout.display == "none":
            continue
        kind = type(c).__name__
        entry = {"name": name, "kind": kind, "description": getattr(c, "description", "")}
        if isinstance(c, _w.ToggleButtons):
            labels = list(c._options_labels)
            current = labels[c.index] if c.index is not None else None
            entry["labels"] = [l for l in labels if l != current][:1]
        elif isinstance(c, (_w.Dropdown,)):
            labels = list(c._options_labels)
            current = labels[c.index] if c.index is not None else None
            entry["labels"] = [l for l in labels if l != current][:1]
        elif isinstance(c, (_w.IntSlider, _w.FloatSlider, _w.SelectionSlider)):
            entry["key"] = "ArrowRight"
        elif isinstance(c, (_w.Checkbox, _w.ToggleButton)):
            pass
        elif isinstance(c, (_w.IntText, _w.BoundedIntText)):
            entry["text"] = str(c.value + 1)
        else:
            continue
        plan.append(entry)
    return plan
"""


def _act(lab, entry) -> None:
    kind, label = entry["kind"], entry["description"]
    page = lab.page
    if kind == "ToggleButtons":
        lab.toggle_button(entry["labels"][0]).first.click()
    elif kind == "Dropdown":
        lab.control("dropdown", label).locator("select").select_option(label=entry["labels"][0])
    elif kind in ("IntSlider", "FloatSlider", "SelectionSlider"):
        lab.press_slider(label, entry["key"])
    elif kind == "Checkbox":
        lab.control("checkbox", label).locator("input").click()
    elif kind == "ToggleButton":
        page.locator("button.widget-toggle-button", has_text=label).first.click()
    elif kind in ("IntText", "BoundedIntText"):
        box = lab.control("text", label).locator("input")
        box.fill(entry["text"])
        box.press("Enter")


def _measure(lab, entry) -> float:
    lab.settle()
    start = lab.page.evaluate(_JS_ARM)
    _act(lab, entry)
    handle = lab.page.wait_for_function(_JS_SETTLED, timeout=30_000)
    return (handle.json_value() - start) / 1000.0


@pytest.mark.parametrize("explorer", list(SETUPS))
def test_control_latency(explorer, lab):
    repeats = int(os.environ.get("SCWORK_LATENCY_REPEATS", "3"))
    notebook = lab.write_notebook(f"latency/{explorer}.ipynb", [SETUPS[explorer]])
    lab.open_notebook(notebook)
    lab.run_all()
    lab.settle()
    lab.kernel(_KERNEL_CONTROLS)
    plan = lab.kernel_json("_control_plan(ex)")
    results = {}
    for entry in plan:
        times = []
        for _ in range(repeats):
            try:
                times.append(_measure(lab, entry))
            except Exception as err:  # noqa: BLE001 - a control that cannot be driven is reported, not fatal
                results[entry["name"]] = {"error": f"{type(err).__name__}: {err}"[:300]}
                break
        else:
            results[entry["name"]] = {"kind": entry["kind"], "median_s": statistics.median(times),
                                      "max_s": max(times), "repeats": repeats}
    out = os.environ.get("SCWORK_LATENCY_OUT")
    if out:
        path = Path(out)
        data = json.loads(path.read_text()) if path.exists() else {}
        data[explorer] = results
        path.write_text(json.dumps(data, indent=1, sort_keys=True))
    assert results, f"{explorer}: no control could be measured"
    lab.console.assert_clean()
