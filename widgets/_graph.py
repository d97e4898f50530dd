"""Node-link graphs with arrows, generic enough for any network drawing.

:class:`NodeLinkGraph`: nodes in groups, links, and the arrows of the current step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from bokeh.models import Arrow, ColumnDataSource, HoverTool, Range1d, VeeHead
from bokeh.plotting import figure

from scwork.widgets._cells import _as_column

__all__ = ["arrow_segments", "fit_equal_aspect", "NodeLinkGraph"]


def arrow_segments(x0, y0, x1, y1, *, offset: float = 0.0, trim_start: float = 0.0,
                   trim_end: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Arrow end points shifted sideways and shortened at both ends.

    Parameters
    ----------
    x0, y0, x1, y1 : array_like of float
        Start and end of every arrow (e.g. the centres of two nodes).
    offset : float or array_like
        Shift to the right of the direction of travel. With the same offset, the
        arrows ``a -> b`` and ``b -> a`` of a full-duplex link are drawn side by side
        instead of on top of each other.
    trim_start, trim_end : float or array_like
        Length cut off at the start and at the end (e.g. the node radius, so the
        arrow head is not hidden under the node). Arrows never flip: at most 45%
        of the length is trimmed from each end.

    Returns
    -------
    tuple of 4 numpy.ndarray
        ``x0, y0, x1, y1`` of the drawn arrows.
    """
    x0, y0, x1, y1 = (np.asarray(a, dtype=float) for a in (x0, y0, x1, y1))
    dx, dy = x1 - x0, y1 - y0
    length = np.hypot(dx, dy)
    safe = np.where(length > 0, length, 1.0)
    ux, uy = dx / safe, dy / safe
    # Right-hand normal of the direction (x, y) -> (y, -x).
    nx, ny = uy, -ux
    offset = np.asarray(offset, dtype=float)
    cut0 = np.minimum(np.asarray(trim_start, dtype=float), 0.45 * length)
    cut1 = np.minimum(np.asarray(trim_end, dtype=float), 0.45 * length)
    return (x0 + ux * cut0 + nx * offset, y0 + uy * cut0 + ny * offset,
            x1 - ux * cut1 + nx * offset, y1 - uy * cut1 + ny * offset)


def fit_equal_aspect(xs: np.ndarray, ys: np.ndarray, *, pad: float = 0.5, max_width: int = 560,
                     max_height: int = 480, min_height: int = 120, min_width: int = 160,
                     frame: tuple[int, int] | None = None) -> tuple[tuple[float, float, float, float], int, int]:
    """Ranges and frame size that show every point with one data unit = same pixels on x and y.

    Returns ``((x_start, x_end, y_start, y_end), frame_width, frame_height)``. The frame is
    as large as fits in ``max_width`` x ``max_height``; a flat drawing gets extra vertical
    range instead of a frame thinner than ``min_height`` (and a tall one extra
    horizontal range), so circles stay circles and arrow heads point the right way.

    With ``frame=(width, height)`` the frame is that size instead (at least the one
    computed, so nothing is cut off): the drawing keeps the scale it has in the
    computed frame, centred, and the ranges grow to fill the rest.
    """
    xs = np.asarray(xs, dtype=float)
    ys = np.asarray(ys, dtype=float)
    if xs.size == 0:
        xs, ys = np.zeros(1), np.zeros(1)
    x_lo, x_hi = float(xs.min()) - pad, float(xs.max()) + pad
    y_lo, y_hi = float(ys.min()) - pad, float(ys.max()) + pad
    width, height = x_hi - x_lo, y_hi - y_lo
    scale = min(max_width / width, max_height / height)  # pixels per data unit
    frame_w = max(int(round(width * scale)), min_width)
    frame_h = max(int(round(height * scale)), min_height)
    if frame is not None:
        frame_w, frame_h = max(int(frame[0]), frame_w), max(int(frame[1]), frame_h)
    # Grow the short side's range so both axes keep the same pixels per unit.
    x_mid, y_mid = (x_lo + x_hi) / 2, (y_lo + y_hi) / 2
    half_w, half_h = frame_w / scale / 2, frame_h / scale / 2
    return (x_mid - half_w, x_mid + half_w, y_mid - half_h, y_mid + half_h), frame_w, frame_h


class NodeLinkGraph:
    """Nodes (optionally inside group boxes), links, arrows and small per-node bars.

    One bokeh figure, updated in place: :meth:`set_graph` draws a new network, and
    :meth:`set_arrows`, :meth:`set_bars`, :meth:`update_nodes` change what happens on
    it (e.g. the transfers of one step), sending only data to the browser.

    Parameters
    ----------
    title : str
    node_value_names, arrow_value_names : sequence of str
        Extra columns shown in the node and arrow hovers.
    value_formats : mapping of str to str, optional
        Hover number formats per column name, e.g. ``{"complete": "{0%}"}``.
    x_range, y_range : bokeh Range1d, optional
        Shared ranges (two graphs of the same network then pan and zoom together).
    max_width, max_height : int
        Largest frame in pixels (see :func:`fit_equal_aspect`).
    head_size : int
        Arrow head size in pixels.

    Attributes
    ----------
    figure : bokeh.plotting.figure
    nodes : ColumnDataSource
        ``x, y, radius, fill_color, line_color, label`` and the node value columns.
    groups : ColumnDataSource
        ``x, y, width, height``: boxes drawn behind the nodes (e.g. chips holding cores).
    links : ColumnDataSource
        ``x0, y0, x1, y1, color, dash``: the network's links, drawn under everything.
    arrows : ColumnDataSource
        ``x0, y0, x1, y1, color, dash, width`` and the arrow value columns.
    bars : ColumnDataSource
        ``x, y, width, height, color``: small rectangles (e.g. a stacked bar per node).
    notes : ColumnDataSource
        ``x, y, text``: free text on the drawing (e.g. the name of a slice).
    """

    #: Drawings that fill less than this share of ``max_height`` get a lower frame (see :meth:`fit`).
    FLAT_HEIGHT = 0.75

    _NODE_COLUMNS = ("x", "y", "radius", "fill_color", "line_color", "label")
    _ARROW_COLUMNS = ("x0", "y0", "x1", "y1", "color", "dash", "width")

    def __init__(self, *, title: str = "", node_value_names: Sequence[str] = (),
                 arrow_value_names: Sequence[str] = (), value_formats: Mapping[str, str] | None = None,
                 x_range=None, y_range=None, max_width: int = 560, max_height: int = 480,
                 head_size: int = 9):
        self.node_value_names = tuple(node_value_names)
        self.arrow_value_names = tuple(arrow_value_names)
        self.max_width = int(max_width)
        self.max_height = int(max_height)
        self.nodes = ColumnDataSource({k: [] for k in (*self._NODE_COLUMNS, *self.node_value_names)})
        self.groups = ColumnDataSource({k: [] for k in ("x", "y", "width", "height")})
        self.links = ColumnDataSource({k: [] for k in ("x0", "y0", "x1", "y1", "color", "dash")})
        self.arrows = ColumnDataSource({k: [] for k in (*self._ARROW_COLUMNS, *self.arrow_value_names)})
        self.bars = ColumnDataSource({k: [] for k in ("x", "y", "width", "height", "color")})
        self.notes = ColumnDataSource({k: [] for k in ("x", "y", "text")})
        self.figure = figure(
            title=title, x_range=x_range or Range1d(-1, 1), y_range=y_range or Range1d(-1, 1),
            frame_width=self.max_width, frame_height=self.max_height,
            tools="pan,wheel_zoom,box_zoom,reset,save", toolbar_location="right",
        )
        fig = self.figure
        fig.axis.visible = False
        fig.grid.visible = False
        fig.background_fill_color = "#fcfcfc"
        fig.rect(x="x", y="y", width="width", height="height", source=self.groups,
                 fill_color="#eeeeee", line_color="#bbbbbb")
        fig.segment(x0="x0", y0="y0", x1="x1", y1="y1", source=self.links,
                    line_color="color", line_dash="dash", line_width=1.5)
        self.node_renderer = fig.circle(
            x="x", y="y", radius="radius", source=self.nodes, fill_color="fill_color",
            line_color="line_color", line_width=1.2)
        fig.rect(x="x", y="y", width="width", height="height", source=self.bars,
                 fill_color="color", line_color=None)
        self.label_renderer = fig.text(
            x="x", y="y", text="label", source=self.nodes, text_align="center",
            text_baseline="middle", text_font_size="10px", text_color="#202020")
        self.arrow_renderer = fig.segment(
            x0="x0", y0="y0", x1="x1", y1="y1", source=self.arrows, line_color="color",
            line_dash="dash", line_width="width", line_cap="round")
        # Heads only: the shaft is the segment above (which the hover can pick).
        self.heads = Arrow(
            source=self.arrows, x_start="x0", y_start="y0", x_end="x1", y_end="y1",
            line_alpha=0.0, start=None,
            end=VeeHead(size=head_size, fill_color={"field": "color"}, line_color={"field": "color"}))
        fig.add_layout(self.heads)
        fig.text(x="x", y="y", text="text", source=self.notes, text_align="left",
                 text_baseline="bottom", text_font_size="11px", text_color="#555555")
        formats = dict(value_formats or {})

        def tooltip(name):
            return (name, f"@{{{name}}}{formats.get(name, '')}")

        fig.add_tools(HoverTool(renderers=[self.node_renderer], tooltips=[
            ("node", "@label"), *[tooltip(n) for n in self.node_value_names]]))
        if self.arrow_value_names:
            fig.add_tools(HoverTool(renderers=[self.arrow_renderer], line_policy="interp",
                                    tooltips=[tooltip(n) for n in self.arrow_value_names]))

    @staticmethod
    def _columns(data: Mapping[str, Any], required: Sequence[str], optional: Mapping[str, Any],
                 what: str) -> dict[str, Any]:
        data = dict(data)
        n = len(next(iter(data.values()))) if data else 0
        for name, default in optional.items():
            data.setdefault(name, [default] * n)
        missing = [name for name in required if name not in data]
        if missing:
            raise ValueError(f"{what} data lacks columns {missing}")
        lengths = {name: len(values) for name, values in data.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"{what} columns have different lengths: {lengths}")
        return {name: _as_column(values) for name, values in data.items()}

    def set_graph(self, nodes: Mapping[str, Any], links: Mapping[str, Any],
                  groups: Mapping[str, Any] | None = None, *, notes: Mapping[str, Any] | None = None,
                  show_labels: bool = True, extent: tuple[np.ndarray, np.ndarray] | None = None,
                  pad: float = 0.5) -> None:
        """Draw a new network and fit the view to it.

        Parameters
        ----------
        nodes : mapping of str to array
            ``x, y, radius`` (``fill_color``, ``line_color``, ``label`` optional) and
            every node value column.
        links : mapping of str to array
            ``x0, y0, x1, y1`` (``color``, ``dash`` optional).
        groups : mapping of str to array, optional
            ``x, y, width, height`` boxes.
        notes : mapping of str to array, optional
            ``x, y, text``: text drawn with its bottom-left corner at ``(x, y)``.
        show_labels : bool
            Draw the node labels (turn off for crowded graphs; the hover shows them).
        extent : (xs, ys), optional
            Extra points that must stay in view (e.g. arrow stubs); the nodes, links
            and groups are always included.
        pad : float
            Margin around everything, in data units.
        """
        node_data = self._columns(nodes, ("x", "y", "radius", *self.node_value_names),
                                  {"fill_color": "#ffffff", "line_color": "#444444", "label": ""},
                                  "node")
        link_data = self._columns(links, ("x0", "y0", "x1", "y1"),
                                  {"color": "#9a9a9a", "dash": "solid"}, "link")
        group_data = self._columns(groups or {"x": [], "y": [], "width": [], "height": []},
                                   ("x", "y", "width", "height"), {}, "group")
        self.nodes.data = node_data
        self.links.data = link_data
        self.groups.data = group_data
        self.notes.data = self._columns(notes or {"x": [], "y": [], "text": []},
                                        ("x", "y", "text"), {}, "note")
        self.arrows.data = {k: [] for k in (*self._ARROW_COLUMNS, *self.arrow_value_names)}
        self.bars.data = {k: [] for k in ("x", "y", "width", "height", "color")}
        self.label_renderer.visible = bool(show_labels)
        x = np.asarray(node_data["x"], dtype=float)
        y = np.asarray(node_data["y"], dtype=float)
        r = np.asarray(node_data["radius"], dtype=float)
        gx = np.asarray(group_data["x"], dtype=float)
        gy = np.asarray(group_data["y"], dtype=float)
        gw = np.asarray(group_data["width"], dtype=float) / 2
        gh = np.asarray(group_data["height"], dtype=float) / 2
        xs = [x - r, x + r, gx - gw, gx + gw, link_data["x0"], link_data["x1"]]
        ys = [y - r, y + r, gy - gh, gy + gh, link_data["y0"], link_data["y1"]]
        if extent is not None:
            xs.append(np.asarray(extent[0], dtype=float))
            ys.append(np.asarray(extent[1], dtype=float))
        self.fit(np.concatenate([np.asarray(a, dtype=float).ravel() for a in xs]),
                 np.concatenate([np.asarray(a, dtype=float).ravel() for a in ys]), pad=pad)

    def fit(self, xs: np.ndarray, ys: np.ndarray, *, pad: float = 0.5) -> None:
        """Set ranges and frame size so that every point shows, at equal x/y scale.

        The frame is ``max_width`` wide, and ``max_height`` high unless the drawing is
        flat (it would fill less than :attr:`FLAT_HEIGHT` of that height): then as high
        as it needs. The drawing is as large as in a frame fitted to it (same pixels
        per data unit), centred; the ranges take the rest of the frame. A new network
        of about the same shape then changes only ranges and data: BokehJS lays the
        whole view out again (both drawings and every box around them) for each
        frame size it gets, and the page below the drawings would move.
        """
        _, width, height = fit_equal_aspect(xs, ys, pad=pad, max_width=self.max_width,
                                            max_height=self.max_height)
        frame_height = self.max_height if height >= self.FLAT_HEIGHT * self.max_height else height
        (x0, x1, y0, y1), width, height = fit_equal_aspect(
            xs, ys, pad=pad, max_width=self.max_width, max_height=self.max_height,
            frame=(self.max_width, frame_height))
        fig = self.figure
        fig.x_range.start, fig.x_range.end = x0, x1
        fig.y_range.start, fig.y_range.end = y0, y1
        fig.frame_width, fig.frame_height = width, height

    def set_arrows(self, data: Mapping[str, Any]) -> None:
        """Replace the arrows (``x0, y0, x1, y1``; ``color``, ``dash``, ``width`` optional)."""
        self.arrows.data = self._columns(data, ("x0", "y0", "x1", "y1", *self.arrow_value_names),
                                         {"color": "#333333", "dash": "solid", "width": 2.0},
                                         "arrow")

    def set_links(self, data: Mapping[str, Any]) -> None:
        """Replace the links (``x0, y0, x1, y1``; ``color``, ``dash`` optional), keeping the view.

        Unlike :meth:`set_graph`, the ranges stay: e.g. a filter that hides some links
        must not move the nodes on screen.
        """
        self.links.data = self._columns(data, ("x0", "y0", "x1", "y1"),
                                        {"color": "#9a9a9a", "dash": "solid"}, "link")

    def set_bars(self, data: Mapping[str, Any]) -> None:
        """Replace the small rectangles (``x, y, width, height, color``)."""
        self.bars.data = self._columns(data, ("x", "y", "width", "height", "color"), {}, "bar")

    def update_nodes(self, **columns: Any) -> None:
        """Replace some node columns (same length as the nodes), e.g. ``fill_color``."""
        n = len(self.nodes.data["x"])
        for name, values in columns.items():
            if len(values) != n:
                raise ValueError(f"node column {name!r} has {len(values)} values for {n} nodes")
        self.nodes.data.update({name: _as_column(values) for name, values in columns.items()})
