"""The explorers' views as boxes of text panes and bokeh views, and their export as one bokeh layout."""

from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("ipywidgets")
pytest.importorskip("bokeh")
pytest.importorskip("jupyter_bokeh")

import ipywidgets  # noqa: E402
from bokeh.layouts import row  # noqa: E402
from bokeh.models import Column, Div, Range1d, Row  # noqa: E402
from bokeh.plotting import figure  # noqa: E402

from scwork.widgets import _bokeh  # noqa: E402
from scwork.widgets._display import figure_view  # noqa: E402
from scwork.widgets._panes import TextPane, export_layout, hbox, pixels, vbox  # noqa: E402

pytestmark = pytest.mark.requires_widgets


def _figure(title):
    fig = figure(width=200, height=150, title=title)
    fig.scatter([0, 1], [1, 0])
    return fig


def test_text_pane_reads_like_a_div_and_sets_its_box():
    pane = TextPane("<b>a</b>", width=640, height=120, scroll=True)
    assert pane.text == "<b>a</b>" and "<b>a</b>" in pane.value and "line-height:normal" in pane.value
    pane.text = "<i>b</i>"
    assert pane.text == "<i>b</i>" and "<i>b</i>" in pane.value and "<b>" not in pane.value
    pane.text = ""
    assert pane.value == ""
    assert (pane.layout.width, pane.layout.height, pane.layout.overflow) == ("640px", "120px", "auto")
    assert TextPane().layout.width is None


@pytest.mark.parametrize("length, expected", [("640px", 640), (" 12.6px ", 13), (None, None), ("50%", None),
                                              ("auto", None), ("", None)])
def test_pixels(length, expected):
    assert pixels(length) == expected


def test_export_layout_mirrors_the_boxes_and_skips_controls_and_hidden_parts():
    left, right = _figure("left"), _figure("right")
    shared = Range1d(0, 1)
    left.x_range = right.x_range = shared  # linked: one bokeh view for both
    graphs = _bokeh.wrap(row(left, right))
    timeline = _figure("timeline")
    hidden = TextPane("not shown", width=100)
    hidden.layout.display = "none"
    view = vbox([
        TextPane("<h3>header</h3>", width=400),
        hbox([TextPane("left caption", width=200), TextPane("right caption", width=200), hidden]),
        graphs,
        ipywidgets.IntSlider(),  # a control: not part of the picture
        TextPane(""),  # nothing to show
        _bokeh.wrap(timeline),
    ])
    layout = export_layout(view)
    assert isinstance(layout, Column)
    header, captions, graphs_row, timeline_model = layout.children
    assert isinstance(header, Div) and header.text == "<h3>header</h3>" and header.width == 400
    assert isinstance(captions, Row) and [d.text for d in captions.children] == ["left caption", "right caption"]
    assert graphs_row is graphs._model and timeline_model is timeline
    # The live models stay in their own documents.
    assert left.document is graphs._document and timeline.document is not left.document


def test_export_of_views_from_several_documents_is_one_standalone_file(tmp_path):
    first, second = _figure("first plot"), _figure("second plot")
    view = vbox([TextPane("<p>between the plots</p>", width=300), _bokeh.wrap(first), _bokeh.wrap(second)])
    documents = (first.document, second.document)
    path = _bokeh.export_html(export_layout(view), tmp_path / "view.html", title="two documents")
    html = path.read_text(encoding="utf-8")
    assert "<title>two documents</title>" in html and re.search(r"<script[^>]*\bsrc=", html) is None
    docs_json = json.loads(re.search(r'<script type="application/json" id="[^"]+">\s*(.*?)\s*</script>',
                                     html, re.S).group(1))
    [doc] = docs_json.values()
    texts = json.dumps(doc)
    assert "first plot" in texts and "second plot" in texts and "between the plots" in texts
    # Exporting did not move the live models out of their documents.
    assert (first.document, second.document) == documents


def test_figure_view_does_not_sync_ranges_back_but_keeps_selections_and_events():
    fig = _figure("zoomable")
    fig.on_event("rangesupdate", lambda event: None)
    widget = figure_view(fig)
    source = fig.renderers[0].data_source
    assert not fig.x_range.syncable and not fig.y_range.syncable and not fig.syncable
    assert source.selected.syncable  # a person's selection is still sent to Python
    assert widget._model is fig


def test_boxes_wrap_and_nothing_is_wider_than_its_box():
    """Narrow outputs: panels wrap below the charts, texts wrap, wide charts scroll in their box
    (the browser test tests/browser/test_widths.py checks what the page then shows)."""
    fig = figure(width=900, height=200)
    fig.line([0, 1], [0, 1])
    chart = figure_view(fig)
    assert chart.layout.max_width == "100%" and chart.layout.overflow == "auto hidden"
    panel = TextPane("<b>summary</b>", width=410)
    assert panel.layout.width == "410px" and panel.layout.max_width == "calc(100% - 4px)"
    box = hbox([vbox([chart]), panel])
    assert box.layout.flex_flow == "row wrap"          # the panel goes below when it does not fit
    assert box.layout.max_width == "100%"
    # Children keep their sizes (they wrap instead of being squeezed under each other)...
    assert box.children[0].layout.flex == "0 0 auto"
    # ... except what sets its own (a text pane may shrink to the line and wrap its text).
    assert panel.layout.flex == "0 1 auto"
    assert vbox([panel]).layout.max_width == "100%"
    # The layouts survive export (the boxes become bokeh rows and columns as before).
    exported = export_layout(box)
    assert isinstance(exported, Row) and exported.children[1].width == 410
