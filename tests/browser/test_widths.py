"""Explorers laid out to the width they get: nothing clipped or covered at 900, 1200 and 1600 px.

JupyterLab's output area is as wide as the notebook panel leaves it: 968 px at 1400 x 900
with the file browser open, about 1500 px on a large screen. The explorers put their
panels beside the charts when there is room and below them when there is not
(:func:`scwork.widgets._panes.hbox` wraps; texts are never wider than their box).

``test_explorers_fit_every_width`` runs one notebook with every explorer (and a
PipelineTimeline with a measured run beside the model, the view of notebook 06), then,
for each output width, pins every explorer's output area to that width and checks what
a person would see:

- every piece (text pane, control, bokeh view, and inside the bokeh views every
  figure, table and text) lies inside the output area;
- no two pieces overlap (a panel covering a chart, a toolbar under a table);
- no text is cut: every text pane shows its whole width (``scrollWidth <= clientWidth``).
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.requires_widgets]

WIDTHS = (900, 1200, 1600)

#: One cell per explorer: (variable, setup). Small parameters, as the other browser tests.
CELLS = (
    ("layout", "from scwork.widgets import LayoutExplorer\n"
               "layout = LayoutExplorer(text='bf16[16,256]{1,0:T(8,128)(2,1)}')\nlayout"),
    ("skew", "from scwork.widgets import LoadSkewExplorer\n"
             "skew = LoadSkewExplorer.demo(batch_size=512, num_steps=2)\nskew"),
    ("memory", "from scwork.widgets import MemoryTimeline\nmemory = MemoryTimeline.demo()\nmemory"),
    ("stepper", "from scwork.collectives import Network\nfrom scwork.widgets import AllReduceStepper\n"
                "stepper = AllReduceStepper(Network.ring(8), ('pincer', 'rotated_pincer'))\nstepper"),
    ("pipeline", "from scwork.widgets import PipelineTimeline\n"
                 "pipeline = PipelineTimeline.demo(batch_size=1024)\npipeline"),
    ("measured", "from scwork.pipeline import read_trace, to_chrome_trace\n"
                 "measured = PipelineTimeline(pipeline.model, measured=read_trace(to_chrome_trace(pipeline.model, "
                 "schedule='sequential')))\nmeasured"),
)

#: JS: pin the output areas of the explorer cells to ``width`` pixels (as a narrower or
#: wider notebook panel would make them).
_JS_SET_WIDTH = """
(width) => {
  let style = document.getElementById("scwork-width-test");
  if (!style) { style = document.createElement("style"); style.id = "scwork-width-test"; document.head.append(style); }
  style.textContent = `.jp-Notebook .jp-CodeCell .jp-OutputArea-output { width: ${width}px !important;
    max-width: ${width}px !important; min-width: 0 !important; flex: 0 0 ${width}px !important; }`;
  window.dispatchEvent(new Event("resize"));
}
"""

#: JS: what a person sees of one output: the pieces and their boxes, and the problems.
_JS_PROBLEMS = """
(output) => {
  const area = output.getBoundingClientRect();
  const problems = [];
  const pieces = [];
  const name = (el) => (el.className && typeof el.className === "string" ? el.className.split(" ")[0] : el.tagName)
                        + (el.textContent ? ` "${el.textContent.trim().slice(0, 30)}"` : "");
  const visible = (r) => r.width > 0.5 && r.height > 0.5;
  const add = (el, kind) => { const r = el.getBoundingClientRect(); if (visible(r)) pieces.push({el, r, kind}); };
  for (const el of output.querySelectorAll(".scwork-text")) add(el, "text");
  for (const el of output.querySelectorAll(".widget-inline-hbox, .widget-toggle-buttons, .widget-button, .widget-checkbox"))
    add(el, "control");
  // Inside bokeh's shadow roots: figures, tables, texts of each view.
  const walk = (root) => {
    for (const el of root.querySelectorAll("*")) {
      const cls = typeof el.className === "string" ? el.className : "";
      if (/\\bbk-(Figure|Plot|DataTable|Div)\\b/.test(cls)) add(el, "bokeh");
      if (el.shadowRoot) walk(el.shadowRoot);
    }
  };
  walk(output);
  // A piece inside a box that scrolls sideways is seen through that box (a chart wider
  // than the output scrolls in its own box): its visible part is what counts.
  const scroller = (el) => {
    for (let node = el.parentElement ?? el.getRootNode().host; node && node !== output;
         node = node.parentElement ?? node.getRootNode().host) {
      if (/(auto|scroll)/.test(getComputedStyle(node).overflowX)) return node;
    }
    return null;
  };
  for (const piece of pieces) {
    const box = scroller(piece.el);
    if (box == null) continue;
    const b = box.getBoundingClientRect();
    const left = Math.max(piece.r.left, b.left), right = Math.min(piece.r.right, b.right);
    piece.r = {left, right, top: piece.r.top, bottom: piece.r.bottom, width: right - left, height: piece.r.height};
    if (b.left < area.left - 1 || b.right > area.right + 1)
      problems.push(`the scrolling box of ${name(piece.el)} spans x ${Math.round(b.left - area.left)}..${Math.round(b.right - area.left)}`);
  }
  for (const {el, r} of pieces) {
    if (r.width <= 0.5) continue;
    if (r.left < area.left - 1 || r.right > area.right + 1)
      problems.push(`${name(el)} spans x ${Math.round(r.left - area.left)}..${Math.round(r.right - area.left)} of an output ${Math.round(area.width)} px wide`);
  }
  for (let i = 0; i < pieces.length; i++) {
    for (let j = i + 1; j < pieces.length; j++) {
      const a = pieces[i], b = pieces[j];
      if (a.el.contains(b.el) || b.el.contains(a.el)) continue;
      if (a.kind === "bokeh" && b.kind === "bokeh") {
        // Bokeh's own nesting crosses shadow roots: a figure inside a layout's Div host.
        const root = (el) => el.getRootNode();
        if (root(a.el) !== root(b.el) && (root(a.el).host?.contains(b.el) || root(b.el).host?.contains(a.el))) continue;
      }
      if (a.r.width <= 0.5 || b.r.width <= 0.5) continue;
      const w = Math.min(a.r.right, b.r.right) - Math.max(a.r.left, b.r.left);
      const h = Math.min(a.r.bottom, b.r.bottom) - Math.max(a.r.top, b.r.top);
      if (w > 2 && h > 2) problems.push(`${name(a.el)} and ${name(b.el)} overlap by ${Math.round(w)} x ${Math.round(h)} px`);
    }
  }
  for (const {el} of pieces.filter((p) => p.kind === "text")) {
    if (el.scrollWidth > el.clientWidth + 1)
      problems.push(`${name(el)} is cut: ${el.scrollWidth} px of text in ${el.clientWidth} px`);
  }
  return {problems, pieces: pieces.length};
}
"""


def test_explorers_fit_every_width(lab):
    notebook = lab.write_notebook("widths.ipynb", [setup for _, setup in CELLS])
    lab.open_notebook(notebook)
    lab.run_all()
    for variable, _ in CELLS:
        assert lab.kernel_json(f"{variable}.error") == "", f"{variable} reports an error"
    failures = []
    for width in WIDTHS:
        lab.page.evaluate(_JS_SET_WIDTH, width)
        lab.page.wait_for_timeout(1500)   # BokehJS lays the views out again after a resize
        lab.settle()
        for index, (variable, _) in enumerate(CELLS):
            output = lab.output(index)
            output.scroll_into_view_if_needed()
            seen = output.evaluate(_JS_PROBLEMS)
            assert seen["pieces"] >= 3, f"{variable} at {width} px: only {seen['pieces']} pieces found"
            failures += [f"{variable} at {width} px: {problem}" for problem in seen["problems"]]
    assert not failures, "clipped or covered:\n  " + "\n  ".join(failures)
    lab.console.assert_clean()
