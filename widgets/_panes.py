"""An explorer's view as ipywidgets boxes of small pieces: text panes and separate bokeh views.

Why not one bokeh layout: BokehJS lays out its whole document again, synchronously,
for every text or size change it applies (a ``Div`` text, a figure's frame size),
measuring every view of the document in the page each time. One explorer update
changes several texts and sizes, so with every caption a ``Div`` and every figure in
one document a control change cost the page 100-400 ms of layout alone. Here:

- texts (captions, summaries, statuses, legends) are :class:`TextPane` widgets,
  plain HTML that the browser lays out without BokehJS;
- figures are shown as separate views
  (:func:`scwork.widgets._display.figure_view`), one per group of
  figures that must share a document (linked ranges, a shared selection), so a
  size change re-lays out only its own small document;
- :func:`export_layout` turns the same boxes back into one bokeh layout for the
  standalone HTML exports (``to_html``), texts as ``Div``\\ s.
"""

from __future__ import annotations

import re

import ipywidgets

__all__ = ["TextPane", "hbox", "vbox", "export_layout", "pixels"]


class TextPane(ipywidgets.HTML):
    """A block of HTML text beside the plots, ``width`` pixels wide at most (an ipywidgets ``HTML``).

    Never wider than the box it is in (``max-width``: all of it but the widget's 2 px
    margins): in a narrow output the text wraps to the width it gets instead of being cut.

    ``text`` is the HTML shown (the same name as a bokeh ``Div``'s, so drawing code
    reads the same); ``height`` with ``scroll=True`` gives a fixed-height box that
    scrolls. Setting ``text`` to the value it has sends nothing to the page. The
    widget's ``value`` is ``text`` in a block with the normal line height (JupyterLab
    gives HTML widgets the 28 px line height of a control row).
    """

    def __init__(self, text: str = "", width: int | None = None, *, height: int | None = None,
                 scroll: bool = False, **kwargs):
        layout = ipywidgets.Layout(width=None if width is None else f"{int(width)}px", max_width="calc(100% - 4px)",
                                   height=None if height is None else f"{int(height)}px",
                                   overflow="auto" if scroll else None, flex="0 1 auto")
        self._text = ""
        super().__init__(value="", layout=layout, **kwargs)
        self.add_class("scwork-text")
        self.text = text

    @property
    def text(self) -> str:
        return self._text

    @text.setter
    def text(self, value: str) -> None:
        self._text = value
        self.value = f"<div style='line-height:normal'>{value}</div>" if value else ""


def vbox(children, **layout) -> ipywidgets.VBox:
    """Children stacked top to bottom, each at its own size (no stretching), never wider than the box holding it."""
    layout = {"max_width": "100%", **layout}
    return ipywidgets.VBox(list(children), layout=ipywidgets.Layout(align_items="flex-start", **layout))


def hbox(children, **layout) -> ipywidgets.HBox:
    """Children side by side, top-aligned, each at its own size; those that do not fit wrap below.

    An explorer's panels (summaries, legends, tables) sit beside its charts in a wide
    output and go below them in a narrow one (JupyterLab with the file browser open, a
    laptop screen), instead of covering the charts or being cut at the output's edge.
    The children keep their sizes (``flex: 0 0 auto``); the gap keeps them apart.
    """
    layout = {"flex_flow": "row wrap", "grid_gap": "4px 12px", "max_width": "100%", **layout}
    box = ipywidgets.HBox(list(children), layout=ipywidgets.Layout(align_items="flex-start", **layout))
    for child in box.children:
        if getattr(child, "layout", None) is not None and child.layout.flex is None:
            child.layout.flex = "0 0 auto"
    return box


def pixels(length: str | None) -> int | None:
    """``"640px"`` -> 640; None (or any other CSS length) -> None."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)px\s*", length or "")
    return None if match is None else round(float(match.group(1)))


def _hidden(widget) -> bool:
    layout = getattr(widget, "layout", None)
    return layout is not None and (layout.display == "none" or layout.visibility == "hidden")


def export_layout(widget):
    """The bokeh layout that shows what ``widget`` (boxes of panes and bokeh views) shows.

    VBoxes become bokeh columns, HBoxes rows, :class:`TextPane`\\ s ``Div``\\ s of the same
    text and width, wrapped bokeh views their own bokeh models; hidden pieces and
    anything else (controls) are left out. For the standalone exports: the result
    refers to the live bokeh models, which stay in their documents; export it with
    :func:`~scwork.widgets._display.export_html` (which copies them into one document
    for the file). Returns None when nothing is shown.
    """
    from bokeh.layouts import column, row
    from bokeh.models import Div
    from jupyter_bokeh import BokehModel

    def convert(item):
        if _hidden(item):
            return None
        if isinstance(item, TextPane):
            if not item.text:
                return None
            width, height = pixels(item.layout.width), pixels(item.layout.height)
            styles = {"overflow-y": "auto"} if item.layout.overflow == "auto" else {}
            return Div(text=item.text, width=width, height=height, styles=styles)
        if isinstance(item, BokehModel):
            return item._model
        if isinstance(item, ipywidgets.Box):
            parts = [part for part in map(convert, item.children) if part is not None]
            if not parts:
                return None
            if len(parts) == 1:
                return parts[0]
            return row(parts) if isinstance(item, ipywidgets.HBox) else column(parts)
        return None

    return convert(widget)
